"""What a user gets on this CPU: training speed in plain Python and as the command runs it.

`keras-capsules` selects TensorFlow's pooling CPU allocator before TensorFlow
starts (`keras_capsules.use_pooled_cpu_allocator`); a user who trains in plain
Python (`import applications; model.fit(...)`) gets TensorFlow's defaults. This
script measures both, in one run, for the two models whose speed the Results
page reports:

* "capsnet": `CapsNetMNIST` training at `--batch` (`capsnet_mnist.py --only train`);
* "convs": its two convolutions alone, trained the same way (`--only convs_only`),
  the floor for CapsNet's cost;
* "em": `MatrixCapsNetNORB` A=64, B=8, C=D=16, batch 32
  (`matrix_capsnet_norb.py --only small`).

Each runs in its own process twice: "plain", with TensorFlow's default
allocator (`TF_CPU_ALLOCATOR_USE_BFC=false`, which is what TensorFlow does when
the variable is unset), and "cli", with the pool (`true`). Everything else is
inherited from this process's environment, `TF_ENABLE_ONEDNN_OPTS` included.
`--repeats N` runs the six measurements N times, alternating, and reports medians.
CapsNet and its convolutions run one step per call of the compiled step (the
applications compile 32), so that a run of a few dozen steps keeps a warm-up
apart from the timed steps; at batch 100 a step takes a second or more, and
Keras's work around each call is a small share of it.

The report names the CPU class (AVX-512 or AVX2) and whether TensorFlow runs
its oneDNN kernels: it does by default only on CPUs with VNNI or newer
extensions, so most AVX2 machines, and AVX-512 ones without VNNI, take a
different path, and figures from the two classes do not compare. The targets
are the AVX2 class's: `meets_targets` is null on another class.
`page_fault_mb_per_step` is the memory faulted in per training step (minor
page faults times the page size): memory the allocator returns to the system
and takes back at every step. Unlike the speeds it does not depend on what
else the machine runs.

    python benchmarks/cpu_defaults.py --repeats 3 > cpu_defaults.json
    python benchmarks/cpu_defaults.py --steps 2 --em-steps 1 --warmup 1 --batch 8  # smoke test
"""

import argparse
import json
import os
import statistics
import sys

from _child import cpu_class
from _child import cpu_model
from _child import run_command

HERE = os.path.dirname(os.path.abspath(__file__))
MODES = {"plain": "false", "cli": "true"}  # TF_CPU_ALLOCATOR_USE_BFC
MODELS = ("capsnet", "convs", "em")
TARGETS = {  # for the AVX2 class, 2 cores
    "capsnet_ratio_to_convs": 0.9,  # plain Python, at least
    "em_images_per_s": 45.0,  # plain Python, at least
    "cli_over_plain": 1.05,  # at most, for each model
}


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=100, help="CapsNetMNIST's batch size (100)")
    p.add_argument("--steps", type=int, default=30, help="timed CapsNet batches (30)")
    p.add_argument("--em-steps", type=int, default=10, help="timed EM batches (10)")
    p.add_argument("--warmup", type=int, default=3, help="untimed batches first (3)")
    p.add_argument("--repeats", type=int, default=1, help="alternated runs; medians (1)")
    return p.parse_args(argv)


def command(model, args):
    """The argv of one measurement: the model's own benchmark script, one measurement."""
    if model == "em":
        script, only = "matrix_capsnet_norb.py", "small"
        sizes = ["--steps", str(args.em_steps), "--warmup", str(args.warmup)]
    else:
        script, only = "capsnet_mnist.py", ("train" if model == "capsnet" else "convs_only")
        sizes = ["--batch", str(args.batch), "--steps", str(args.steps)]
        sizes += ["--warmup", str(args.warmup), "--steps-per-execution", "1"]
    return [sys.executable, os.path.join(HERE, script), "--only", only, *sizes]


def main(argv=None):
    args = parse_args(argv)
    runs = {mode: {model: [] for model in MODELS} for mode in MODES}
    for repeat in range(max(args.repeats, 1)):
        for model in MODELS:
            for mode, use_bfc in MODES.items():
                log(f"== {model}, {mode}, repeat {repeat + 1} of {max(args.repeats, 1)} ==")
                env = dict(os.environ, TF_CPU_ALLOCATOR_USE_BFC=use_bfc)
                runs[mode][model].append(run_command(command(model, args), model, env))

    def median(mode, model, key):
        return statistics.median(r[key] for r in runs[mode][model])

    report = {
        "cpu_class": cpu_class(),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "backend": os.environ.get("KERAS_BACKEND", "tensorflow"),
        "onednn": runs["plain"]["capsnet"][0].get("onednn"),
        "capsnet_batch": args.batch,
        "repeats": max(args.repeats, 1),
    }
    for mode in MODES:
        ratios = [
            c["images_per_s"] / v["images_per_s"]
            for c, v in zip(runs[mode]["capsnet"], runs[mode]["convs"])
        ]
        report[mode] = {
            **{f"{m}_images_per_s": median(mode, m, "images_per_s") for m in MODELS},
            "capsnet_ratio_to_convs": statistics.median(ratios),
            **{
                f"{m}_page_fault_mb_per_step": median(mode, m, "page_fault_mb_per_step")
                for m in MODELS
            },
            **{f"{m}_peak_rss_mb": max(r["peak_rss_mb"] for r in runs[mode][m]) for m in MODELS},
        }
        if len(ratios) > 1:
            report[mode]["runs_images_per_s"] = {
                m: [r["images_per_s"] for r in runs[mode][m]] for m in MODELS
            }
    report["cli_over_plain"] = {
        m: report["cli"][f"{m}_images_per_s"] / report["plain"][f"{m}_images_per_s"]
        for m in ("capsnet", "em")
    }
    report["targets"] = TARGETS
    report["meets_targets"] = (
        report["plain"]["capsnet_ratio_to_convs"] >= TARGETS["capsnet_ratio_to_convs"]
        and report["plain"]["em_images_per_s"] >= TARGETS["em_images_per_s"]
        and max(report["cli_over_plain"].values()) <= TARGETS["cli_over_plain"]
        if report["cpu_class"] == "AVX2"
        else None
    )
    print(json.dumps(report, indent=2), flush=True)


if __name__ == "__main__":
    main()

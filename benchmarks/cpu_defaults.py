"""What a user gets on this CPU: training speed with the default allocator choice and without.

Importing `keras_capsules` (and so `applications`, or the `keras-capsules`
command) selects TensorFlow's pooling CPU allocator before TensorFlow starts
(`keras_capsules.use_pooled_cpu_allocator`) where TensorFlow will run without
oneDNN, unless `TF_CPU_ALLOCATOR_USE_BFC` is set. This script measures, in one
run, the two models whose speed the Results page reports:

* "capsnet": `CapsNetMNIST` training at `--batch` (`capsnet_mnist.py --only train`);
* "convs": its two convolutions alone, trained the same way (`--only convs_only`),
  the floor for CapsNet's cost;
* "em": `MatrixCapsNetNORB` A=64, B=8, C=D=16, batch 32
  (`matrix_capsnet_norb.py --only small`).

Each runs in its own process three times: "plain", as plain Python gets it
(the variable unset, so the import chooses), "pooled", with the pool asked for
(`TF_CPU_ALLOCATOR_USE_BFC=true`), and "tensorflow_default", with TensorFlow's
own allocator (`TF_CPU_ALLOCATOR_USE_BFC=false`, the way out). `--onednn
both` (the default) runs all nine with TensorFlow's oneDNN kernels off
(`TF_ENABLE_ONEDNN_OPTS=0`, the path of most AVX2 CPUs) and again with them
on (`=1`), so that a kernel slow on one path shows on either machine class;
each path has its report in `onednn_paths` (`--onednn inherit` keeps the
environment's setting). `--repeats N` runs the measurements N times,
alternating, and reports medians. CapsNet and its convolutions run one
step per call of the compiled step, so that a run of a few dozen steps keeps a
warm-up apart from the timed steps; at batch 100 a step takes a second or more,
and Keras's work around each call is a small share of it.

The report names the CPU class (AVX-512 or AVX2) and whether TensorFlow runs
its oneDNN kernels: it does by default only on CPUs with VNNI or newer
extensions, so most AVX2 machines, and AVX-512 ones without VNNI, take a
different path, and figures from the two classes do not compare. Each class
has its target (`targets`): on AVX2, EM at 45 images/s or more in plain Python;
on AVX-512, plain Python no slower than TensorFlow's default and fewer than 50
MB faulted per step for either model. `page_fault_mb_per_step` is the memory
faulted in per training step (minor page faults times the page size): memory
the allocator returns to the system and takes back at every step. Unlike the
speeds it does not depend on what else the machine runs.

    python benchmarks/cpu_defaults.py --repeats 3 > cpu_defaults.json
    python benchmarks/cpu_defaults.py --steps 2 --em-steps 1 --warmup 1 --batch 8  # smoke test
"""

import argparse
import json
import os
import statistics
import sys

from _child import add_onednn_argument
from _child import cpu_class
from _child import cpu_model
from _child import onednn_paths
from _child import run_command

HERE = os.path.dirname(os.path.abspath(__file__))
MODES = {"plain": None, "pooled": "true", "tensorflow_default": "false"}  # the variable
MODELS = ("capsnet", "convs", "em")
TARGETS = {
    "AVX2": {"em_images_per_s": 45.0},  # plain Python, at least, 2 cores
    "AVX-512": {"plain_over_tensorflow_default": 0.95, "page_fault_mb_per_step": 50.0},
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
    add_onednn_argument(p)
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
    paths = onednn_paths(args.onednn)
    runs = {path: {mode: {model: [] for model in MODELS} for mode in MODES} for path in paths}
    for repeat in range(max(args.repeats, 1)):
        for path, environment in paths.items():
            for model in MODELS:
                for mode, use_bfc in MODES.items():
                    log(
                        f"== {model}, {mode}, {path}, "
                        f"repeat {repeat + 1} of {max(args.repeats, 1)} =="
                    )
                    env = dict(environment)
                    env.pop("TF_CPU_ALLOCATOR_USE_BFC", None)
                    if use_bfc is not None:
                        env["TF_CPU_ALLOCATOR_USE_BFC"] = use_bfc
                    found = run_command(command(model, args), model, env)
                    runs[path][mode][model].append(found)
    report = {
        "cpu_class": cpu_class(),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "backend": os.environ.get("KERAS_BACKEND", "tensorflow"),
        "capsnet_batch": args.batch,
        "repeats": max(args.repeats, 1),
        "onednn_paths": {path: path_report(by_mode) for path, by_mode in runs.items()},
    }
    print(json.dumps(report, indent=2), flush=True)


def path_report(runs):
    """The report of one oneDNN path's runs, `{mode: {model: [result, ...]}}`."""

    def median(mode, model, key):
        return statistics.median(r[key] for r in runs[mode][model])

    report = {"onednn": runs["plain"]["capsnet"][0].get("onednn")}
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
    for mode in ("plain", "pooled"):
        report[f"{mode}_over_tensorflow_default"] = {
            m: report[mode][f"{m}_images_per_s"] / report["tensorflow_default"][f"{m}_images_per_s"]
            for m in ("capsnet", "em")
        }
    report["targets"] = TARGETS.get(cpu_class())
    report["meets_targets"] = meets_targets(report, cpu_class())
    return report


def meets_targets(report, machine):
    """Whether plain Python meets the targets of CPU class `machine`; `None` for another class."""
    plain = report["plain"]
    if machine == "AVX2":
        return plain["em_images_per_s"] >= TARGETS["AVX2"]["em_images_per_s"]
    if machine == "AVX-512":
        targets = TARGETS["AVX-512"]
        return min(report["plain_over_tensorflow_default"].values()) >= targets[
            "plain_over_tensorflow_default"
        ] and all(
            plain[f"{m}_page_fault_mb_per_step"] < targets["page_fault_mb_per_step"]
            for m in ("capsnet", "em")
        )
    return None


if __name__ == "__main__":
    main()

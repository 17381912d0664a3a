"""Benchmark training throughput at small and large batches against `steps_per_execution`.

At a small batch (EfficientCapsNet trains at 16) a training step computes
little, and the work Keras does on the host around each call of the compiled
step (callbacks, logs, the data iterator) takes a large share of it. Keras's
`compile(steps_per_execution=N)` runs N steps per call, in one compiled loop
on TensorFlow and one Python loop of compiled steps on JAX; each step computes
the same thing. This script measures the applications' training throughput
for each model, batch size and `steps_per_execution` given, each measurement
in its own process, on in-memory random uint8 images with integer labels.

Throughput is images per second over the timed steps, measured by
`capsnet_mnist.py`'s callback from the end of the call that finishes the
`--warmup` steps (tracing and compilation included before it) to the end of
the last one. The step counts
are rounded up to whole calls. `default` in `--steps-per-execution` stands for
the value the model compiles itself with on the running backend; PyTorch runs
one step per call.

Prints a single JSON object on stdout; progress goes to stderr.

Full size (the numbers to report):

    python benchmarks/steps_per_execution.py
    KERAS_BACKEND=jax python benchmarks/steps_per_execution.py

Smoke test:

    python benchmarks/steps_per_execution.py --models efficient_capsnet --batches 4 \
        --steps-per-execution 1,2 --steps 4 --warmup 2
"""

import argparse
import json
import os
import resource
import statistics
import sys

from _child import run_alternating
from capsnet_mnist import _timer_callback

MODELS = ("efficient_capsnet", "capsnet_mnist")


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def _ints(text):
    return [int(v) for v in text.split(",") if v]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--models",
        default=",".join(MODELS),
        help=f"comma-separated models among {', '.join(MODELS)} (both)",
    )
    p.add_argument("--batches", default="16,100", help="comma-separated batch sizes (16,100)")
    p.add_argument(
        "--steps-per-execution",
        default="1,default",
        help="comma-separated values; 'default' is the applications' default (1,default)",
    )
    p.add_argument("--steps", type=int, default=300, help="timed training steps (300)")
    p.add_argument(
        "--warmup", type=int, default=20, help="untimed steps first, tracing included (20)"
    )
    p.add_argument("--repeats", type=int, default=1, help="measurements of each setting (1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", default=None, help="MODEL:BATCH:STEPS_PER_EXECUTION, in this process")
    return p.parse_args(argv)


# ---------------------------------------------------------------------------
# Child: one measurement.


def _round_up(n, k):
    return -(-n // k) * k


def run_one(args):
    import keras
    import numpy as np

    import applications
    from keras_capsules._compile import compile_again

    model_name, batch, spe = args.only.split(":")
    batch = int(batch)
    keras.utils.set_random_seed(args.seed)
    model = (
        applications.EfficientCapsNet()
        if model_name == "efficient_capsnet"
        else applications.CapsNetMNIST()
    )
    default = model.steps_per_execution
    spe = default if spe == "default" else int(spe)
    if spe != default:
        compile_again(model, steps_per_execution=spe)
    warmup = _round_up(max(args.warmup, 1), spe)
    steps = _round_up(max(args.steps, 1), spe)
    n = batch * (warmup + steps)
    rng = np.random.default_rng(args.seed)
    x = rng.integers(0, 256, size=(n, 28, 28, 1), dtype=np.uint8)
    y = rng.integers(0, 10, size=(n,), dtype=np.int64)
    timer = _timer_callback()(warmup)
    log(
        f"[{args.only}] {model.name}: {warmup} warm-up + {steps} timed steps of {batch}, "
        f"{spe} per call"
    )
    model.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0, callbacks=[timer])
    images_per_s = timer.images_per_s(batch)
    result = {
        "model": model_name,
        "batch": batch,
        "steps_per_execution": spe,
        "is_default": spe == default,
        "images_per_s": round(images_per_s, 1),
        "timed_steps": timer.timed_batches,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
    }
    log(f"[{args.only}] {images_per_s:.1f} images/s")
    print(json.dumps(result), flush=True)


# ---------------------------------------------------------------------------
# Parent: every setting, alternating, and the speedups over one step per call.


def main(argv=None):
    args = parse_args(argv)
    if args.only:
        run_one(args)
        return
    settings = [
        f"{model}:{batch}:{spe}"
        for model in args.models.split(",")
        for batch in _ints(args.batches)
        for spe in args.steps_per_execution.split(",")
    ]
    runs = run_alternating(os.path.abspath(__file__), args, settings, args.repeats)
    rows = []
    for results in runs.values():
        first = results[0]
        rows.append(
            {
                "model": first["model"],
                "batch": first["batch"],
                "steps_per_execution": first["steps_per_execution"],
                "is_default": first["is_default"],
                "images_per_s": statistics.median(r["images_per_s"] for r in results),
                "all_images_per_s": [r["images_per_s"] for r in results],
                "peak_rss_mb": max(r["peak_rss_mb"] for r in results),
            }
        )
    for row in rows:
        base = next(
            (
                r
                for r in rows
                if (r["model"], r["batch"]) == (row["model"], row["batch"])
                and r["steps_per_execution"] == 1
            ),
            None,
        )
        if base is not None:
            row["speedup_over_1"] = round(row["images_per_s"] / base["images_per_s"], 3)
    report = {
        "backend": os.environ["KERAS_BACKEND"],
        "steps": args.steps,
        "warmup": args.warmup,
        "repeats": max(args.repeats, 1),
        "results": rows,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

"""Benchmark training and prediction speed against `steps_per_execution`.

At a small batch (EfficientCapsNet trains at 16) a training step computes
little, and the work Keras does on the host around each call of the compiled
step (callbacks, logs, the data iterator) takes a large share of it. Keras's
`compile(steps_per_execution=N)` runs N steps per call, in one compiled loop
on TensorFlow and one Python loop of compiled steps on JAX; each step computes
the same thing. This script measures the applications' training throughput
for each model, batch size and `steps_per_execution` given, and the time of
`predict` on 8, 100 and 10,000 images (`--predict-sizes`, at Keras's default
batch of 32), each measurement in its own process, on in-memory random uint8
images with integer labels.

Throughput is images per second over the timed steps, measured by
`capsnet_mnist.py`'s callback from the end of the call that finishes the
`--warmup` steps (tracing and compilation included before it) to the end of
the last one. The step counts
are rounded up to whole calls. `predict` is timed twice per size: its first
call (tracing included, what a script that predicts once waits for) and the
median of `--predict-repeats` calls after it. PyTorch runs one step per call.

Prints a single JSON object on stdout; progress goes to stderr.

Full size (the numbers to report):

    python benchmarks/steps_per_execution.py
    KERAS_BACKEND=jax python benchmarks/steps_per_execution.py

Smoke test:

    python benchmarks/steps_per_execution.py --models efficient_capsnet --batches 4 \
        --steps-per-execution 1,2 --steps 4 --warmup 2 --predict-sizes 8,40
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
        default="1,32",
        help="comma-separated values (1,32)",
    )
    p.add_argument(
        "--predict-sizes",
        default="8,100,10000",
        help="comma-separated numbers of images per predict call; empty for none (8,100,10000)",
    )
    p.add_argument(
        "--predict-repeats", type=int, default=3, help="timed predict calls after the first (3)"
    )
    p.add_argument("--steps", type=int, default=300, help="timed training steps (300)")
    p.add_argument(
        "--warmup", type=int, default=20, help="untimed steps first, tracing included (20)"
    )
    p.add_argument("--repeats", type=int, default=1, help="measurements of each setting (1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--only",
        default=None,
        help="MODEL:BATCH:STEPS_PER_EXECUTION (training) or MODEL:predict:STEPS_PER_EXECUTION, "
        "in this process",
    )
    return p.parse_args(argv)


# ---------------------------------------------------------------------------
# Child: one measurement.


def _round_up(n, k):
    return -(-n // k) * k


def _model(model_name, spe, seed):
    import keras

    import applications
    from keras_capsules._compile import compile_again

    keras.utils.set_random_seed(seed)
    model = (
        applications.EfficientCapsNet()
        if model_name == "efficient_capsnet"
        else applications.CapsNetMNIST()
    )
    default = model.steps_per_execution
    if spe != default:
        compile_again(model, steps_per_execution=spe)
    return model, default


def run_predict(args, model_name, spe):
    """Seconds of `predict`'s first call and of the calls after it, for each size."""
    import time

    import numpy as np

    model, default = _model(model_name, spe, args.seed)
    sizes = _ints(args.predict_sizes)
    rng = np.random.default_rng(args.seed)
    x = rng.integers(0, 256, size=(max(sizes), 28, 28, 1), dtype=np.uint8)
    rows = []
    for n in sizes:
        times = []
        for _ in range(1 + max(args.predict_repeats, 1)):
            start = time.perf_counter()
            model.predict(x[:n], verbose=0)
            times.append(time.perf_counter() - start)
        rows.append(
            {
                "images": n,
                "first_call_s": round(times[0], 4),
                "s": round(statistics.median(times[1:]), 4),
                "images_per_s": round(n / statistics.median(times[1:]), 1),
            }
        )
        log(f"[{args.only}] {n} images: first call {times[0]:.3f} s, then {rows[-1]['s']:.3f} s")
    result = {
        "model": model_name,
        "mode": "predict",
        "steps_per_execution": spe,
        "is_default": spe == default,
        "predict": rows,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
    }
    print(json.dumps(result), flush=True)


def run_one(args):
    import numpy as np

    model_name, batch, spe = args.only.split(":")
    spe = int(spe)
    if batch == "predict":
        run_predict(args, model_name, spe)
        return
    batch = int(batch)
    model, default = _model(model_name, spe, args.seed)
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
        "mode": "train",
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
    batches = [str(b) for b in _ints(args.batches)]
    if _ints(args.predict_sizes):
        batches.append("predict")
    settings = [
        f"{model}:{batch}:{spe}"
        for model in args.models.split(",")
        for batch in batches
        for spe in _ints(args.steps_per_execution)
    ]
    runs = run_alternating(os.path.abspath(__file__), args, settings, args.repeats)
    rows, predictions = [], []
    for results in runs.values():
        first = results[0]
        if first["mode"] == "predict":
            predictions.append(_predict_row(results))
            continue
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
        "predict": predictions,
    }
    print(json.dumps(report, indent=2))


def _predict_row(results):
    """One model and `steps_per_execution`'s predict times: medians over the repeats."""
    first = results[0]
    return {
        "model": first["model"],
        "steps_per_execution": first["steps_per_execution"],
        "is_default": first["is_default"],
        "sizes": [
            {
                "images": row["images"],
                "first_call_s": statistics.median(r["predict"][i]["first_call_s"] for r in results),
                "s": statistics.median(r["predict"][i]["s"] for r in results),
            }
            for i, row in enumerate(first["predict"])
        ],
    }


if __name__ == "__main__":
    main()

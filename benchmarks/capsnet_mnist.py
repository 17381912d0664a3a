"""Benchmark CapsNetMNIST training and inference throughput against its convolutions alone.

Three measurements, each in its own subprocess (so that the peak resident set
size, `ru_maxrss`, is per measurement):

* "train": `CapsNetMNIST().fit` (margin + reconstruction loss, Adam, as the
  model compiles itself) on in-memory random uint8 images `(28, 28, 1)` with
  integer labels;
* "inference": `CapsNetMNIST().predict` on the same kind of images;
* "convs_only": a model of just the two convolutions of CapsNet (Conv1, 256
  9x9 ReLU, then the PrimaryCaps convolution, 256 9x9 stride 2) followed by
  Flatten, Dense(10) and sparse categorical cross-entropy from logits, trained
  with `fit` the same way. This is the floor for CapsNet's training cost: the
  capsule layers, routing, decoder and losses should add little to it.

Throughput is images per second over `--steps` batches, timed by a callback
from the end of the `--warmup`-th batch (the first batches include tracing and
compilation) to the end of the last batch. Both models run
`--steps-per-execution` steps per call of their compiled step (by default 1,
as CapsNetMNIST compiles itself); both step counts are rounded up to
whole calls. `--precision mixed_bfloat16` sets
the global Keras dtype policy before either model is built.

Prints a single JSON object on stdout; progress goes to stderr.

Full size (the numbers to report):

    KERAS_BACKEND=tensorflow python benchmarks/capsnet_mnist.py --batch 100 --steps 50
    KERAS_BACKEND=tensorflow python benchmarks/capsnet_mnist.py --batch 100 --steps 50 \
        --precision mixed_bfloat16

Smoke test:

    KERAS_BACKEND=tensorflow python benchmarks/capsnet_mnist.py --batch 8 --steps 2 --warmup 1
"""

import argparse
import json
import os
import resource
import statistics
import sys
import time

from _child import onednn_enabled
from _child import run_alternating

MEASUREMENTS = ("train", "inference", "convs_only")


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=100, help="batch size (100)")
    p.add_argument("--steps", type=int, default=50, help="timed training batches (50)")
    p.add_argument(
        "--inference-steps",
        type=int,
        default=None,
        help="timed predict batches (default: --steps)",
    )
    p.add_argument(
        "--warmup",
        type=int,
        default=5,
        help="untimed batches first, tracing/compilation included (5, at least 1)",
    )
    p.add_argument(
        "--precision",
        choices=("float32", "mixed_bfloat16"),
        default="float32",
        help="global Keras dtype policy set before building the models (float32)",
    )
    p.add_argument(
        "--steps-per-execution",
        type=int,
        default=None,
        help="steps per call of the compiled step, for both models (default: the one "
        "CapsNetMNIST compiles itself with); the step counts are rounded up to whole calls",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="run the three measurements this many times, alternating, and report the "
        "median of each and of the per-repeat training/convolutions ratios (1)",
    )
    p.add_argument(
        "--only",
        choices=MEASUREMENTS,
        default=None,
        help="run one measurement in this process (used by the parent run)",
    )
    return p.parse_args(argv)


# ---------------------------------------------------------------------------
# Child: one measurement.


def _timer_callback():
    import keras
    import numpy as np

    class BatchTimer(keras.callbacks.Callback):
        """Wall time from the end of the call ending at batch `warmup - 1` to the last call's end.

        With `steps_per_execution=N` Keras calls the hooks once per N batches,
        with the call's first and last batch.
        """

        def __init__(self, warmup):
            super().__init__()
            self.warmup = warmup
            self.start = None
            self.end = None
            self.timed_batches = 0
            self._begin = 0
            self._faults = None

        def _begin_call(self, batch):
            self._begin = batch

        def _mark(self, batch, logs):
            # Materialise the step's results, so that an asynchronous device has finished it.
            if logs:
                keras.tree.map_structure(np.asarray, logs)
            now = time.perf_counter()
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            if batch == self.warmup - 1:
                self.start = now
                self._faults = [faults, faults]
            elif self.start is not None:
                self.end = now
                self._faults[1] = faults
                self.timed_batches += batch - self._begin + 1

        def on_train_batch_begin(self, batch, logs=None):
            self._begin_call(batch)

        def on_predict_batch_begin(self, batch, logs=None):
            self._begin_call(batch)

        def on_train_batch_end(self, batch, logs=None):
            self._mark(batch, logs)

        def on_predict_batch_end(self, batch, logs=None):
            self._mark(batch, logs)

        def images_per_s(self, batch_size):
            if self.end is None or self.timed_batches == 0:
                raise RuntimeError("no batch was timed: is --steps at least 1?")
            return self.timed_batches * batch_size / (self.end - self.start)

        def page_fault_mb_per_step(self):
            """MB of memory faulted in per timed batch: minor page faults times the page size.

            Memory that the allocator returns to the system and takes back at every
            step shows here; it does not depend on the machine's load.
            """
            if self._faults is None or self.timed_batches == 0:
                raise RuntimeError("no batch was timed: is --steps at least 1?")
            pages = self._faults[1] - self._faults[0]
            return pages * resource.getpagesize() / 2**20 / self.timed_batches

    return BatchTimer


def build_convs_only(steps_per_execution):
    """The two convolutions of CapsNet + a trivial classifier and loss, compiled like CapsNet."""
    import keras

    import applications

    images = keras.Input(shape=(28, 28, 1), name="images")
    x = keras.layers.Rescaling(1.0 / 255.0, name="rescaling")(images)
    x = keras.layers.Conv2D(
        256, 9, activation="relu", kernel_initializer="he_normal", name="conv1"
    )(x)
    # PrimaryCapsule's convolution: 32 types x 8D = 256 filters, 9x9, stride 2, no activation.
    x = keras.layers.Conv2D(
        256, 9, strides=2, kernel_initializer="lecun_normal", name="primary_conv"
    )(x)
    x = keras.layers.Flatten(name="flatten")(x)
    logits = keras.layers.Dense(10, dtype="float32", name="logits")(x)
    model = keras.Model(images, logits, name="convs_only")
    model.compile(
        optimizer=applications.CapsNet.RECIPE.optimizer(),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        steps_per_execution=steps_per_execution,
    )
    return model


def _device():
    import keras

    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        gpus = tf.config.list_physical_devices("GPU")
        if gpus:
            details = tf.config.experimental.get_device_details(gpus[0])
            return details.get("device_name", gpus[0].name)
    elif keras.backend.backend() == "jax":
        import jax

        return str(jax.devices()[0])
    return "cpu"


def _peak_gpu_mb():
    import keras

    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        if tf.config.list_physical_devices("GPU"):
            return tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20
    return None


def _round_up(n, k):
    return -(-n // k) * k


def run_one(args):
    import keras
    import numpy as np

    keras.mixed_precision.set_global_policy(args.precision)
    keras.utils.set_random_seed(args.seed)
    from keras_capsules._compile import compile_again

    per_call = args.steps_per_execution or 1
    warmup = _round_up(max(args.warmup, 1), per_call)
    steps = args.steps if args.only != "inference" else (args.inference_steps or args.steps)
    steps = _round_up(steps, per_call)
    n = args.batch * (warmup + steps)
    rng = np.random.default_rng(args.seed)
    x = rng.integers(0, 256, size=(n, 28, 28, 1), dtype=np.uint8)
    y = rng.integers(0, 10, size=(n,), dtype=np.int64)

    if args.only == "convs_only":
        model = build_convs_only(per_call)
    else:
        from applications import CapsNetMNIST

        model = CapsNetMNIST()
        if model.steps_per_execution != per_call:
            compile_again(model, steps_per_execution=per_call)
    timer = _timer_callback()(warmup)
    log(
        f"[{args.only}] {model.name}: {model.count_params():,} parameters, "
        f"{warmup} warm-up + {steps} timed batches of {args.batch}, policy {args.precision}"
    )
    if args.only == "inference":
        model.predict(x, batch_size=args.batch, verbose=0, callbacks=[timer])
    else:
        model.fit(
            x, y, batch_size=args.batch, epochs=1, shuffle=False, verbose=0, callbacks=[timer]
        )
    result = {
        "measurement": args.only,
        "images_per_s": timer.images_per_s(args.batch),
        "timed_batches": timer.timed_batches,
        "page_fault_mb_per_step": timer.page_fault_mb_per_step(),
        "steps_per_execution": per_call,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "jit_compile": bool(model.jit_compile),
        "device": _device(),
        "onednn": onednn_enabled(),
    }
    gpu = _peak_gpu_mb()
    if gpu is not None:
        result["peak_gpu_mb"] = gpu
    log(f"[{args.only}] {result['images_per_s']:.1f} images/s")
    print(json.dumps(result), flush=True)


# ---------------------------------------------------------------------------
# Parent: run the three measurements and report.


def main(argv=None):
    args = parse_args(argv)
    if args.only:
        run_one(args)
        return

    runs = run_alternating(os.path.abspath(__file__), args, MEASUREMENTS, args.repeats)
    results = {only: runs[only][0] for only in MEASUREMENTS}
    images_per_s = {only: [r["images_per_s"] for r in runs[only]] for only in MEASUREMENTS}
    ratios = [t / c for t, c in zip(images_per_s["train"], images_per_s["convs_only"])]
    train = statistics.median(images_per_s["train"])
    convs = statistics.median(images_per_s["convs_only"])
    report = {
        "backend": os.environ["KERAS_BACKEND"],
        "precision": args.precision,
        "batch": args.batch,
        "steps": args.steps,
        "inference_steps": args.inference_steps or args.steps,
        "warmup": max(args.warmup, 1),
        "steps_per_execution": results["train"]["steps_per_execution"],
        "device": results["train"]["device"],
        "jit_compile": {k: v["jit_compile"] for k, v in results.items()},
        "train_images_per_s": train,
        "inference_images_per_s": statistics.median(images_per_s["inference"]),
        "convs_only_train_images_per_s": convs,
        "ratio_to_convs": statistics.median(ratios),
        "target_ratio_to_convs": 0.85,
        "peak_rss_mb": {k: max(r["peak_rss_mb"] for r in v) for k, v in runs.items()},
        "page_fault_mb_per_step": {
            k: statistics.median(r["page_fault_mb_per_step"] for r in v) for k, v in runs.items()
        },
        "onednn": results["train"]["onednn"],
    }
    if len(ratios) > 1:
        report["repeats"] = len(ratios)
        report["ratios_to_convs"] = ratios
        report["runs_images_per_s"] = images_per_s
    if all("peak_gpu_mb" in v for v in results.values()):
        report["peak_gpu_mb"] = {k: v["peak_gpu_mb"] for k, v in results.items()}
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()

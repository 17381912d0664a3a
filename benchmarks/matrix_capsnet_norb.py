"""Benchmark MatrixCapsNetNORB training: throughput, peak memory, and where a step's time goes.

Measurements, each in its own subprocess (so that the peak resident set size,
`ru_maxrss`, is per measurement), all on random float32 `(32, 32, 2)` inputs
with 5 classes, 3 EM iterations, `fit` with the model's own loss and optimizer:

* "small": A=64, B=8, C=D=16 (68,754 parameters) at batch 32;
* "large": A=B=C=D=32 (317,194 parameters) at batch 16;
* "large64": A=B=C=D=32 at batch 64 (memory: it must train within 12 GB);
* "profile": forward + backward time of each layer of the model given by
  `--profile-model` (small or large) at its batch, alone, in a compiled
  function: the split of a step's time.

Throughput is images per second over `--steps` batches after `--warmup`
untimed ones. Prints a single JSON object on stdout; progress goes to stderr.

    KERAS_BACKEND=tensorflow python benchmarks/matrix_capsnet_norb.py --steps 10
    KERAS_BACKEND=tensorflow python benchmarks/matrix_capsnet_norb.py --steps 1 --warmup 1 \
        --only small   # smoke test
"""

import argparse
import json
import os
import resource
import sys
import time

from _child import onednn_enabled
from _child import run_child
from capsnet_mnist import _device
from capsnet_mnist import _timer_callback

CONFIGS = {
    "small": (dict(A=64, B=8, C=16, D=16), 32),
    "large": (dict(A=32, B=32, C=32, D=32), 16),
    "large64": (dict(A=32, B=32, C=32, D=32), 64),
}
TARGETS = {  # images/s at least, peak RSS at most (MB)
    "small": (100.0, 1.5 * 1024),
    "large": (12.0, 4 * 1024),
    "large64": (None, 12 * 1024),
}
MEASUREMENTS = ("small", "large", "large64", "profile")


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=10, help="timed training batches (10)")
    p.add_argument("--warmup", type=int, default=2, help="untimed batches first (2, at least 1)")
    p.add_argument("--iterations", type=int, default=3, help="EM iterations (3)")
    p.add_argument("--profile-model", choices=("small", "large"), default="small")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", choices=MEASUREMENTS, default=None, help="run one measurement")
    return p.parse_args(argv)


def _peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _rss_mb():
    """The resident set size now (Linux), or None."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError):
        return None


def run_fit(args):
    import keras
    import numpy as np

    from applications import MatrixCapsNetNORB
    from keras_capsules._compile import compile_again

    keras.utils.set_random_seed(args.seed)
    config, batch = CONFIGS[args.only]
    warmup = max(args.warmup, 1)
    n = batch * (warmup + args.steps)
    rng = np.random.default_rng(args.seed)
    x = rng.normal(size=(n, 32, 32, 2)).astype("float32")
    y = rng.integers(0, 5, size=(n,))
    model = MatrixCapsNetNORB(**config, iterations=args.iterations)
    # One step per call, so that the timer sees each step; at these batches a step
    # is bound by its computation, not by Keras's work between calls.
    compile_again(model, steps_per_execution=1)
    # What the process holds before training: the backend and whatever it
    # imports besides (TensorFlow imports JAX, pandas and SciPy when they are
    # installed, about 300 MB), the model and the data.
    before_fit = _rss_mb()
    timer = _timer_callback()(warmup)
    log(f"[{args.only}] {config}, batch {batch}: {warmup} warm-up + {args.steps} timed batches")
    model.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0, callbacks=[timer])
    return {
        "measurement": args.only,
        "config": config,
        "batch": batch,
        "images_per_s": timer.images_per_s(batch),
        "timed_batches": timer.timed_batches,
        "page_fault_mb_per_step": timer.page_fault_mb_per_step(),
        "peak_rss_mb": _peak_rss_mb(),
        "rss_before_fit_mb": before_fit,
        "device": _device(),
        "onednn": onednn_enabled(),
    }


def run_profile(args):
    """Forward + backward seconds of each layer alone, on the inputs it sees in the model."""
    import keras
    import numpy as np

    from applications import MatrixCapsNetNORB
    from keras_capsules._compile import compile_again

    config, batch = CONFIGS[args.profile_model]
    model = MatrixCapsNetNORB(**config, iterations=args.iterations)
    # One step per call, so that the timer sees each step; at these batches a step
    # is bound by its computation, not by Keras's work between calls.
    compile_again(model, steps_per_execution=1)
    rng = np.random.default_rng(args.seed)
    x = rng.normal(size=(batch, 32, 32, 2)).astype("float32")
    names = ["conv1", "primary_caps", "conv_caps1", "conv_caps2"]  # the backbone's
    layers = [model.backbone.get_layer(n) for n in names] + [model.get_layer("class_caps")]
    names.append("class_caps")
    # The inputs are standardised (a converter without a scale): the backbone takes them unscaled.
    probe = keras.Model(model.backbone.input, [layer.input for layer in layers[:-1]])
    inputs = [*probe(x), keras.Model(model.input, layers[-1].input)(x)]
    seconds = {}
    for name, layer, layer_input in zip(names, layers, inputs):
        step = _gradient_step(layer, layer_input)
        step()  # trace and warm up
        start = time.perf_counter()
        for _ in range(args.steps):
            step()
        seconds[name] = (time.perf_counter() - start) / args.steps
        log(f"[profile] {name}: {seconds[name] * 1000:.0f} ms forward + backward")
    total = sum(seconds.values())
    return {
        "measurement": "profile",
        "config": config,
        "batch": batch,
        "layer_ms": {k: round(v * 1000, 1) for k, v in seconds.items()},
        "layer_share": {k: round(v / total, 3) for k, v in seconds.items()},
        "peak_rss_mb": _peak_rss_mb(),
        "device": _device(),
    }


def _gradient_step(layer, layer_input):
    """A compiled function: gradients of the layer's summed outputs w.r.t. input and weights."""
    import keras

    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        def loss():
            return sum(tf.reduce_sum(t) for t in tf.nest.flatten(layer(layer_input)))

        @tf.function
        def step():
            with tf.GradientTape() as tape:
                tape.watch(tf.nest.flatten(layer_input))
                value = loss()
            return tape.gradient(value, tf.nest.flatten(layer_input) + layer.trainable_variables)

        return lambda: [g.numpy() for g in step()]
    if backend == "jax":
        import jax

        weights = [v.value for v in layer.trainable_variables]

        def loss(weights, inputs):
            outputs, _ = layer.stateless_call(weights, [], inputs)
            return sum(jax.numpy.sum(t) for t in jax.tree_util.tree_leaves(outputs))

        grad = jax.jit(jax.grad(loss, argnums=(0, 1)))
        return lambda: jax.block_until_ready(grad(weights, layer_input))
    raise NotImplementedError(f"profile on {backend}")


def main(argv=None):
    args = parse_args(argv)
    if args.only:
        result = run_profile(args) if args.only == "profile" else run_fit(args)
        if "images_per_s" in result:
            log(
                f"[{args.only}] {result['images_per_s']:.1f} images/s, "
                f"{result['peak_rss_mb']:.0f} MB peak RSS"
            )
        print(json.dumps(result), flush=True)
        return
    report = {
        "backend": os.environ["KERAS_BACKEND"],
        "iterations": args.iterations,
        "steps": args.steps,
        "warmup": max(args.warmup, 1),
    }
    for only in MEASUREMENTS:
        log(f"== {only} ==")
        result = run_child(os.path.abspath(__file__), args, only)
        if only in TARGETS:
            speed, memory = TARGETS[only]
            result["meets_target"] = (speed is None or result["images_per_s"] >= speed) and (
                result["peak_rss_mb"] <= memory
            )
            result["target"] = {"images_per_s": speed, "peak_rss_mb": memory}
        report[only] = result
    print(json.dumps(report, indent=2), flush=True)


if __name__ == "__main__":
    main()

"""Benchmark `CapsuleLayer` (votes + dynamic routing) against a tiled baseline.

Times forward + backward (the gradient of `sum(outputs ** 2)` with respect to
the transformation matrices) of the paper's DigitCaps layer, inputs
`(batch, 1152, 8)` -> 10 capsules of 16D with 3 routing iterations, inside a
`tf.function`, for:

* "ours": `keras_capsules.layers.CapsuleLayer`;
* "baseline": the straightforward implementation found in most public Keras
  code (e.g. XifengGuo/CapsNet-Keras): the inputs are tiled to
  `(batch, 10, 1152, 1, 8)`, `W` is expanded and tiled to
  `(batch, 10, 1152, 8, 16)`, the votes are one batched matmul of the two, and
  routing uses elementwise products and `sum` reductions with a softmax over
  the output capsules. `--baseline-votes map_fn` builds the votes with a
  `map_fn` over the batch instead (the CapsNet-Keras way).

Each implementation is timed in its own subprocess, so the peak resident set
size (`ru_maxrss`) of each is its own. The parent process then checks, on one
set of weights and inputs, that both give the same outputs and gradients.

Prints a single JSON object on stdout; progress goes to stderr.

Full size (the numbers to report):

    KERAS_BACKEND=tensorflow python benchmarks/capsule_layer.py --batch 100 --steps 50

Smoke test:

    KERAS_BACKEND=tensorflow python benchmarks/capsule_layer.py --batch 8 --steps 2 --warmup 1
"""

import argparse
import json
import os
import resource
import statistics
import sys
import time

from _child import run_alternating


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=100, help="batch size (100)")
    p.add_argument("--num-inputs", type=int, default=1152, help="input capsules (1152)")
    p.add_argument("--input-dim", type=int, default=8, help="input capsule dimensions (8)")
    p.add_argument("--num-capsules", type=int, default=10, help="output capsules (10)")
    p.add_argument("--capsule-dim", type=int, default=16, help="output capsule dimensions (16)")
    p.add_argument("--iterations", type=int, default=3, help="routing iterations (3)")
    p.add_argument("--steps", type=int, default=50, help="timed steps (50)")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first (5)")
    p.add_argument(
        "--jit-compile",
        choices=("auto", "true", "false"),
        default="auto",
        help="XLA for the tf.function; 'auto' (default) = on if a GPU is visible, as "
        "Keras' fit does",
    )
    p.add_argument(
        "--baseline-votes",
        choices=("tiled_matmul", "map_fn"),
        default="tiled_matmul",
        help="how the baseline builds its votes (tiled_matmul)",
    )
    p.add_argument(
        "--check-batch",
        type=int,
        default=None,
        help="batch size of the ours-vs-baseline equality check (default: min(batch, 16))",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="time both implementations this many times, alternating, and report the "
        "medians and the median of the per-repeat speedups (1)",
    )
    p.add_argument(
        "--only",
        choices=("ours", "baseline"),
        default=None,
        help="time one implementation in this process (used by the parent run)",
    )
    return p.parse_args(argv)


# ---------------------------------------------------------------------------
# Shared set-up (imports TensorFlow lazily so the parent stays light until the
# timing subprocesses have finished).


def _require_tensorflow():
    import keras

    if keras.backend.backend() != "tensorflow":
        sys.exit(
            "benchmarks/capsule_layer.py times a tf.function: run it with "
            f"KERAS_BACKEND=tensorflow (got {keras.backend.backend()!r})."
        )
    import tensorflow as tf

    return tf


def _jit(args, tf):
    if args.jit_compile == "auto":
        return bool(tf.config.list_physical_devices("GPU"))
    return args.jit_compile == "true"


def _data(args, batch):
    """The same kernel and inputs (numpy) for both implementations, from the seed."""
    import numpy as np

    rng = np.random.default_rng(args.seed)
    outputs = args.num_capsules * args.capsule_dim
    # CapsuleLayer's layout: kernel[i, d, j * capsule_dim + k] = W[j, i, d, k].
    kernel = rng.normal(0.0, 0.05, (args.num_inputs, args.input_dim, outputs)).astype("float32")
    # Squashed random capsules, like PrimaryCapsule outputs (length < 1).
    u = rng.normal(0.0, 1.0, (batch, args.num_inputs, args.input_dim)).astype("float32")
    sq = np.sum(u * u, axis=-1, keepdims=True)
    inputs = (u * sq / (1.0 + sq) / np.sqrt(sq + 1e-7)).astype("float32")
    return kernel, inputs


def _kernel_to_w(kernel, args):
    """CapsuleLayer kernel (I, D, J*K) -> baseline W (J, I, D, K)."""
    import numpy as np

    w = kernel.reshape(args.num_inputs, args.input_dim, args.num_capsules, args.capsule_dim)
    return np.ascontiguousarray(w.transpose(2, 0, 1, 3))


def _w_to_kernel(w, args):
    """Baseline W (J, I, D, K) -> CapsuleLayer kernel layout (I, D, J*K)."""
    import numpy as np

    w = np.asarray(w).transpose(1, 2, 0, 3)
    return w.reshape(args.num_inputs, args.input_dim, args.num_capsules * args.capsule_dim)


def build_ours(args, kernel):
    from keras_capsules.layers import CapsuleLayer

    layer = CapsuleLayer(
        args.num_capsules, args.capsule_dim, iterations=args.iterations, name="ours"
    )
    layer.build((None, args.num_inputs, args.input_dim))
    layer.kernel.assign(kernel)
    return layer, layer.kernel


def make_baseline_layer_class():
    import keras
    from keras import ops

    class TiledCapsuleLayer(keras.layers.Layer):
        """DigitCaps the way most public Keras code writes it (tiled inputs and W).

        `W` has shape `(num_capsules, num_inputs, input_dim, capsule_dim)`.
        """

        def __init__(self, num_capsules, capsule_dim, routings=3, votes="tiled_matmul", **kw):
            super().__init__(**kw)
            self.num_capsules = num_capsules
            self.capsule_dim = capsule_dim
            self.routings = routings
            self.votes_mode = votes

        def build(self, input_shape):
            _, num_inputs, input_dim = input_shape
            self.W = self.add_weight(
                name="W",
                shape=(self.num_capsules, num_inputs, input_dim, self.capsule_dim),
                initializer=keras.initializers.RandomNormal(stddev=0.05),
            )

        @staticmethod
        def squash(s, axis=-1):
            squared_norm = ops.sum(ops.square(s), axis=axis, keepdims=True)
            scale = squared_norm / (1.0 + squared_norm) / ops.sqrt(squared_norm + 1e-7)
            return scale * s

        def call(self, inputs):
            batch = ops.shape(inputs)[0]
            if self.votes_mode == "map_fn":
                # CapsNet-Keras: tile the inputs over the output capsules, then map a
                # per-example product with W over the batch.
                inputs_tiled = ops.tile(ops.expand_dims(inputs, 1), [1, self.num_capsules, 1, 1])
                w = self.W
                u_hat = ops.map(
                    lambda x: ops.squeeze(ops.matmul(ops.expand_dims(x, 2), w), 2),
                    inputs_tiled,
                )  # (batch, J, I, K)
            else:
                # (batch, I, D) -> (batch, J, I, 1, D)
                inputs_tiled = ops.tile(
                    ops.expand_dims(ops.expand_dims(inputs, 1), 3),
                    [1, self.num_capsules, 1, 1, 1],
                )
                # (J, I, D, K) -> (batch, J, I, D, K)
                w_tiled = ops.tile(ops.expand_dims(self.W, 0), [batch, 1, 1, 1, 1])
                u_hat = ops.squeeze(ops.matmul(inputs_tiled, w_tiled), 3)  # (batch, J, I, K)

            # Routing by agreement; logits b over (batch, J, I), softmax over outputs J.
            b = ops.zeros_like(u_hat[..., 0])
            for i in range(self.routings):
                c = ops.softmax(b, axis=1)
                s = ops.sum(ops.expand_dims(c, -1) * u_hat, axis=2)  # (batch, J, K)
                v = self.squash(s)
                if i < self.routings - 1:
                    b = b + ops.sum(u_hat * ops.expand_dims(v, 2), axis=-1)
            return v

    return TiledCapsuleLayer


def build_baseline(args, kernel):
    cls = make_baseline_layer_class()
    layer = cls(
        args.num_capsules,
        args.capsule_dim,
        routings=args.iterations,
        votes=args.baseline_votes,
        name="baseline",
    )
    layer.build((None, args.num_inputs, args.input_dim))
    layer.W.assign(_kernel_to_w(kernel, args))
    return layer, layer.W


def make_step(tf, layer, variable, jit):
    @tf.function(jit_compile=jit)
    def step(x):
        with tf.GradientTape() as tape:
            y = layer(x)
            loss = tf.reduce_sum(tf.square(y))
        grad = tape.gradient(loss, variable.value)
        return y, loss, grad

    return step


# ---------------------------------------------------------------------------
# Child: time one implementation.


def run_one(args):
    tf = _require_tensorflow()
    jit = _jit(args, tf)
    kernel, inputs = _data(args, args.batch)
    build = build_ours if args.only == "ours" else build_baseline
    layer, variable = build(args, kernel)
    step = make_step(tf, layer, variable, jit)
    x = tf.constant(inputs)

    log(f"[{args.only}] warm-up: {args.warmup} step(s), batch {args.batch}, jit_compile={jit}")
    for _ in range(max(args.warmup, 1)):
        _, loss, grad = step(x)
        loss.numpy()
    log(f"[{args.only}] timing {args.steps} step(s)")
    start = time.perf_counter()
    for _ in range(args.steps):
        _, loss, grad = step(x)
        loss.numpy()
    grad.numpy()
    elapsed = time.perf_counter() - start
    ms = 1000.0 * elapsed / args.steps
    result = {
        "impl": args.only,
        "ms_per_step": ms,
        "images_per_s": args.batch * 1000.0 / ms,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "jit_compile": jit,
    }
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        result["peak_gpu_mb"] = tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20
    log(f"[{args.only}] {ms:.2f} ms/step")
    print(json.dumps(result), flush=True)


# ---------------------------------------------------------------------------
# Parent: spawn the two timings, check equality, print the report.


def check_equal(args):
    """Max abs differences of outputs and kernel gradients, ours vs baseline."""
    import numpy as np

    tf = _require_tensorflow()
    jit = _jit(args, tf)
    batch = args.check_batch or min(args.batch, 16)
    kernel, inputs = _data(args, batch)
    x = tf.constant(inputs)
    ours, ours_var = build_ours(args, kernel)
    base, base_var = build_baseline(args, kernel)
    y_ours, _, g_ours = make_step(tf, ours, ours_var, jit)(x)
    y_base, _, g_base = make_step(tf, base, base_var, jit)(x)
    g_base = _w_to_kernel(g_base.numpy(), args)
    return {
        "check_batch": batch,
        "max_abs_diff": float(np.max(np.abs(y_ours.numpy() - y_base.numpy()))),
        "max_abs_output": float(np.max(np.abs(y_ours.numpy()))),
        "max_abs_grad_diff": float(np.max(np.abs(g_ours.numpy() - g_base))),
        "max_abs_grad": float(np.max(np.abs(g_ours.numpy()))),
    }


def main(argv=None):
    args = parse_args(argv)
    if os.environ["KERAS_BACKEND"] != "tensorflow":
        sys.exit(
            "benchmarks/capsule_layer.py times a tf.function: run it with "
            f"KERAS_BACKEND=tensorflow (got {os.environ['KERAS_BACKEND']!r})."
        )
    if args.only:
        run_one(args)
        return

    log(f"== timing ours (CapsuleLayer) and the baseline ({args.baseline_votes}) ==")
    runs = run_alternating(os.path.abspath(__file__), args, ("ours", "baseline"), args.repeats)
    ours_runs, base_runs = runs["ours"], runs["baseline"]
    repeats = len(ours_runs)
    ours, base = ours_runs[0], base_runs[0]
    ours_ms = [r["ms_per_step"] for r in ours_runs]
    base_ms = [r["ms_per_step"] for r in base_runs]
    speedups = [b / o for o, b in zip(ours_ms, base_ms)]
    log("== checking ours == baseline ==")
    check = check_equal(args)

    report = {
        "backend": "tensorflow",
        "batch": args.batch,
        "steps": args.steps,
        "warmup": args.warmup,
        "shape": {
            "inputs": [args.batch, args.num_inputs, args.input_dim],
            "outputs": [args.batch, args.num_capsules, args.capsule_dim],
            "iterations": args.iterations,
        },
        "jit_compile": ours["jit_compile"],
        "baseline_votes": args.baseline_votes,
        "ours_ms_per_step": statistics.median(ours_ms),
        "ours_images_per_s": args.batch * 1000.0 / statistics.median(ours_ms),
        "baseline_ms_per_step": statistics.median(base_ms),
        "baseline_images_per_s": args.batch * 1000.0 / statistics.median(base_ms),
        "speedup": statistics.median(speedups),
        "target_speedup": 5.0,
        "peak_rss_mb": {
            "ours": max(r["peak_rss_mb"] for r in ours_runs),
            "baseline": max(r["peak_rss_mb"] for r in base_runs),
        },
        **check,
    }
    if repeats > 1:
        report["repeats"] = repeats
        report["speedups"] = speedups
        report["runs_ms_per_step"] = {"ours": ours_ms, "baseline": base_ms}
    if "peak_gpu_mb" in ours:
        report["peak_gpu_mb"] = {"ours": ours["peak_gpu_mb"], "baseline": base["peak_gpu_mb"]}
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()

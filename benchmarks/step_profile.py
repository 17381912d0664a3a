"""Where a training step's time goes: TensorFlow's profile of `fit`, per layer and per op.

Trains one model with `fit` under TensorFlow's profiler and sums the time of
every op it ran, grouped by the model layer the op belongs to (its forward
ops, and its gradient's, which TensorFlow names after it), by the optimizer
and by the rest ("other": losses, metrics, the reconstruction decoder that
the capsule classifiers run in their loss, and the gradients that routing
writes outside a layer's scope). The figures are op time summed over
TensorFlow's threads, per step: on 2 cores they add up to about twice the
step's wall time. They say what share of a step each part takes; other
work on the machine stretches every op about alike, so the shares move much
less than a wall-clock figure does (an idle machine is still the place to
measure them).

* `capsnet`: `CapsNetMNIST`, batch `--batch`;
* `convs`: its two convolutions alone (`capsnet_mnist.py`'s `convs_only`);
* `em`: `MatrixCapsNetNORB` A=64, B=8, C=D=16, batch 32.
* `efficient_capsnet`: `EfficientCapsNet` on 28x28 images, batch `--batch` (16 is the paper's).

`TF_CPU_ALLOCATOR_USE_BFC` and `TF_ENABLE_ONEDNN_OPTS` come from the
environment (`_child.py` defaults the allocator to the pool). TensorFlow's
Eigen kernels, the path an AVX2 CPU takes by default, run on any x86 CPU with
`TF_ENABLE_ONEDNN_OPTS=0`; the report says which path ran. TensorFlow only.

    TF_ENABLE_ONEDNN_OPTS=0 python benchmarks/step_profile.py --model capsnet
    python benchmarks/step_profile.py --model em --steps 4
    python benchmarks/step_profile.py --model capsnet --batch 8 --steps 2  # smoke test
"""

import argparse
import collections
import glob
import json
import os
import sys
import tempfile

from _child import cpu_class
from _child import onednn_enabled

MODELS = ("capsnet", "convs", "em", "efficient_capsnet")


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=MODELS, default="capsnet", help="what to train (capsnet)")
    p.add_argument("--batch", type=int, default=100, help="capsnet and convs batch size (100)")
    p.add_argument("--steps", type=int, default=8, help="profiled steps (8)")
    p.add_argument("--top", type=int, default=25, help="ops listed, costliest first (25)")
    return p.parse_args(argv)


def build(name, batch, steps):
    """The model, compiled with one step per call, and `steps` batches of random data."""
    import numpy as np

    from keras_capsules._compile import compile_again

    rng = np.random.default_rng(0)
    if name == "em":
        from matrix_capsnet_norb import CONFIGS

        from applications import MatrixCapsNetNORB

        config, batch = CONFIGS["small"]
        model = MatrixCapsNetNORB(**config)
        x = rng.normal(size=(batch * steps, 32, 32, 2)).astype("float32")
        y = rng.integers(0, 5, size=(batch * steps,))
    elif name == "efficient_capsnet":
        from applications import EfficientCapsNet

        model = EfficientCapsNet()
        x = rng.integers(0, 256, size=(batch * steps, 28, 28, 1), dtype=np.uint8)
        y = rng.integers(0, 10, size=(batch * steps,))
    else:
        from capsnet_mnist import build_convs_only

        from applications import CapsNetMNIST

        model = build_convs_only(1) if name == "convs" else CapsNetMNIST()
        x = rng.integers(0, 256, size=(batch * steps, 28, 28, 1), dtype=np.uint8)
        y = rng.integers(0, 10, size=(batch * steps,))
    compile_again(model, steps_per_execution=1)
    return model, batch, x, y


def op_times(logdir, model_name, optimizer_name):
    """`{(group, "forward" | "gradient" | "update", op type): [total ms, count]}`."""
    try:
        from tensorflow.tsl.profiler.protobuf import xplane_pb2
    except ImportError as error:
        raise SystemExit(f"this TensorFlow has no profiler protobuf to read: {error}") from None
    (path,) = glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)
    space = xplane_pb2.XSpace()
    with open(path, "rb") as f:
        space.ParseFromString(f.read())
    totals = collections.defaultdict(lambda: [0.0, 0])
    for plane in space.planes:
        for line in plane.lines:
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                if ":" not in name or "/" not in name:
                    continue  # not an op of the graph (executor and thread-pool events)
                scope, op = name.rsplit(":", 1)
                parts = scope.split("/")
                owner = next((i for i, p in enumerate(parts) if p.startswith(model_name)), None)
                if owner is not None and owner + 1 < len(parts):
                    group = parts[owner + 1]
                else:
                    group = "optimizer" if optimizer_name in parts else "other"
                group = group.rsplit("_", 1)[0] if group[-1].isdigit() else group
                if group == "optimizer":
                    kind = "update"
                else:
                    kind = "gradient" if "gradient_tape" in parts else "forward"
                totals[(group, kind, op)][0] += event.duration_ps / 1e9
                totals[(group, kind, op)][1] += 1
    return totals


def _pooled():
    """Whether a pooling allocator serves TensorFlow's CPU memory (BFC, or oneDNN's own).

    Only a pool keeps the statistics `get_memory_info` reads; TensorFlow's
    default CPU allocator raises `ValueError`.
    """
    import tensorflow as tf

    try:
        tf.config.experimental.get_memory_info("CPU:0")
    except ValueError:
        return False
    return True


def main(argv=None):
    args = parse_args(argv)
    if os.environ.get("KERAS_BACKEND") != "tensorflow":
        raise SystemExit(
            "step_profile.py reads TensorFlow's profiler: set KERAS_BACKEND=tensorflow"
        )
    import tensorflow as tf

    model, batch, x, y = build(args.model, args.batch, args.steps)
    log(f"[{args.model}] warm-up epoch of {args.steps} steps, batch {batch}")
    model.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0)
    with tempfile.TemporaryDirectory() as logdir:
        log(f"[{args.model}] profiled epoch of {args.steps} steps")
        tf.profiler.experimental.start(logdir)
        model.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0)
        tf.profiler.experimental.stop()
        totals = op_times(logdir, model.name, model.optimizer.name)
    total = sum(ms for ms, _ in totals.values())
    groups = collections.Counter()
    for (group, _, _), (ms, _) in totals.items():
        groups[group] += ms
    top = sorted(totals.items(), key=lambda item: -item[1][0])[: args.top]
    report = {
        "model": args.model,
        "batch": batch,
        "steps": args.steps,
        "cpu_class": cpu_class(),
        "onednn": onednn_enabled(),
        "allocator": "pool" if _pooled() else "default",
        "op_ms_per_step": round(total / args.steps, 1),
        "groups_ms_per_step": {g: round(ms / args.steps, 1) for g, ms in groups.most_common()},
        "groups_share": {g: round(ms / total, 3) for g, ms in groups.most_common()},
        "top_ops": [
            {
                "group": group,
                "pass": kind,
                "op": op,
                "ms_per_step": round(ms / args.steps, 1),
                "per_step": round(count / args.steps, 1),
            }
            for (group, kind, op), (ms, count) in top
        ],
    }
    print(json.dumps(report, indent=2), flush=True)


if __name__ == "__main__":
    main()

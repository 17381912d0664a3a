"""How fast does CapsNetMNIST learn for a given initial scale of the routing weights W?

Builds the paper's CapsNetMNIST (default compile), draws `CapsuleLayer`'s W
from N(0, std) for each `--stds` value, trains `--steps` batches of 100 from
`mnist.training_pipeline` (shifts of up to 2 px, seed 0) and evaluates on the
10,000 test images. Each value runs in its own process. Prints one JSON
object; progress goes to stderr.

The default std is 0.05. On the 2-core development CPU, 100 steps gave 94.06%
(std 0.03), 94.04% (0.05), 90.96% (0.15) and 10.28% (0.5); a Glorot-sized
0.005 gave 91.71%:

    KERAS_BACKEND=tensorflow python benchmarks/init_scale.py --stds 0.03,0.05,0.15,0.5

Smoke test:

    KERAS_BACKEND=tensorflow python benchmarks/init_scale.py --stds 0.05 --steps 2
"""

import argparse
import json
import subprocess
import sys
import time

import _child  # noqa: F401  (puts the repository root on sys.path, defaults the backend)
from _training import log


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--stds", default="0.03,0.05,0.15", help="comma-separated stds of W")
    p.add_argument("--steps", type=int, default=100, help="training batches of 100 (100)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", type=float, default=None, help="run one std in this process")
    args = p.parse_args(argv)
    try:
        args.stds = [float(v) for v in args.stds.split(",")]
    except ValueError:
        p.error(f"--stds takes comma-separated numbers, got {args.stds!r}")
    if args.steps < 1 or any(std <= 0 for std in args.stds):
        p.error("--steps and every std must be positive")
    return args


def run_one(std, steps, seed):
    import keras
    import numpy as np

    import applications
    from keras_capsules.datasets import mnist
    from keras_capsules.layers import CapsuleLayer

    keras.utils.set_random_seed(seed)
    (x_train, y_train), (x_test, y_test) = mnist.load_data()
    model = applications.CapsNetMNIST()
    layer = next(layer for layer in model.layers if isinstance(layer, CapsuleLayer))
    rng = np.random.default_rng(seed)
    layer.kernel.assign(rng.normal(0.0, std, layer.kernel.shape).astype("float32"))
    train = mnist.training_pipeline(x_train, y_train, batch_size=100, seed=seed).take(steps)
    start = time.perf_counter()
    model.fit(train, epochs=1, verbose=0)
    seconds = time.perf_counter() - start
    probabilities = model.predict(x_test, batch_size=200, verbose=0)
    accuracy = float(np.mean(np.argmax(probabilities, axis=-1) == y_test))
    return {"std": std, "test_accuracy": round(accuracy, 4), "train_seconds": round(seconds, 1)}


def main(argv=None):
    args = parse_args(argv)
    if args.only is not None:
        print(json.dumps(run_one(args.only, args.steps, args.seed)), flush=True)
        return
    results = []
    for std in args.stds:
        log(f"std {std}: {args.steps} steps")
        argv = [sys.executable, __file__, "--only", str(std), "--steps", str(args.steps)]
        argv += ["--seed", str(args.seed)]
        out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
        results.append(json.loads(out.strip().splitlines()[-1]))
        log(results[-1])
    print(json.dumps({"steps": args.steps, "batch": 100, "seed": args.seed, "runs": results}))


if __name__ == "__main__":
    main()

"""Mixed precision: test accuracy and training speed of each dtype policy after the same budget.

Trains CapsNetMNIST with `keras-capsules train capsnet` once per dtype
policy (`float32`, `mixed_bfloat16`, `mixed_float16`), each in its own process,
with the same seed, data (the first `--train-size` MNIST training images, the
paper's shifts), batch and epochs, and evaluates each on the 10,000 test
images. Reports per policy the test accuracy, its difference to float32 in
percentage points, training images/s and the speed ratio to float32, from the
runs' `metrics.json`. The issue's target: accuracy within 0.1 points.

Prints one JSON object on stdout; the runs' progress goes to stderr.

    python experiments/mixed_precision.py --train-size 60000 --epochs 1   # the paper model
    python experiments/mixed_precision.py --train-size 500 --test-size 500 \\
        --conv-filters 16 --primary-capsule-types 4                            # smoke test
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import _training  # noqa: F401  (repository root on sys.path, TensorFlow backend by default)

POLICIES = ("float32", "mixed_bfloat16", "mixed_float16")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--train-size", type=int, default=60000)
    p.add_argument("--test-size", type=int, default=10000)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=100)
    p.add_argument("--conv-filters", type=int, default=256)
    p.add_argument("--primary-capsule-types", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--policies", nargs="+", choices=POLICIES, default=list(POLICIES))
    args = p.parse_args(argv)

    results = {}
    workdir = tempfile.mkdtemp(prefix="mixed-precision-")
    for policy in args.policies:
        output = os.path.join(workdir, policy)
        command = [sys.executable, "-m", "keras_capsules.cli", "train", "capsnet"]
        command += ["--output", output, "--precision", policy, "--verbose", "2"]
        for name in ("train_size", "test_size", "epochs", "batch_size", "seed"):
            command += ["--" + name.replace("_", "-"), str(getattr(args, name))]
        command += ["--conv-filters", str(args.conv_filters)]
        command += ["--primary-capsule-types", str(args.primary_capsule_types)]
        print(" ".join(command), file=sys.stderr, flush=True)
        subprocess.run(command, check=True, stdout=sys.stderr)
        with open(os.path.join(output, "metrics.json")) as f:
            metrics = json.load(f)
        images = metrics["train_images"] * metrics["epochs"]
        results[policy] = {
            "test_accuracy": metrics["test_accuracy"],
            "train_seconds": metrics["train_seconds_this_session"],
            "train_images_per_s": round(images / metrics["train_seconds_this_session"], 1),
            "nonfinite_loss_steps": metrics["nonfinite_loss_steps"],
        }
    if "float32" in results:
        base = results["float32"]
        for result in results.values():
            result["accuracy_points_vs_float32"] = round(
                100 * (result["test_accuracy"] - base["test_accuracy"]), 2
            )
            result["speed_vs_float32"] = round(
                result["train_images_per_s"] / base["train_images_per_s"], 3
            )
    print(json.dumps({"benchmark": "mixed_precision", "args": vars(args), "results": results}))


if __name__ == "__main__":
    main()

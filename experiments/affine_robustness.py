"""Affine robustness (Sabour et al. 2017, section 5.2): CapsNet and the baseline CNN side by side.

The paper's protocol with the data we have: both models train on expanded
MNIST (each training digit at a random position on a 40x40 black canvas, a
new position every epoch, no other augmentation) and are tested on

* the expanded MNIST test set (`affine.expand(x_test, seed=1)`), and
* an affNIST-style test set: the MNIST test digits under random affine
  transformations in affNIST's ranges (`affine.affnist_test_set(..., seed=2)`).

CapsNet trains first, for `--minutes`. The CNN then trains until its accuracy
on a held-out validation set (the last `--val-size` training digits, expanded
with seed 3, never trained on) reaches CapsNet's, checked every
`--check-every` steps, or until `--cnn-minutes` pass: "a CNN trained to a
similar expanded-MNIST accuracy". The interesting number is then the gap on
the affNIST-style set (the paper: CapsNet 79%, CNN 66%, both about 99.2% on
expanded MNIST after full training).

Defaults: a reduced CapsNet (Conv1 64 filters, 16 primary capsule types) and
a reduced baseline CNN (64, 64, 32 channels, FC 328 and 192, dropout), with
2x2 max pooling after each convolution, so that each learns within a CPU
budget. `--full` gives both models the paper's sizes (CapsNet Conv1 256 and
32 types; CNN 256, 256, 128 channels).

Prints a single JSON object on stdout; progress goes to stderr.

    KERAS_BACKEND=tensorflow python experiments/affine_robustness.py --minutes 15 --cnn-minutes 15

Smoke test:

    KERAS_BACKEND=tensorflow python experiments/affine_robustness.py --max-steps 2 --test-size 200
"""

import argparse
import json
import os
import time

from _training import budget_callback
from _training import device
from _training import log


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=15.0, help="CapsNet training budget (15)")
    p.add_argument("--cnn-minutes", type=float, default=15.0, help="CNN budget at most (15)")
    p.add_argument("--max-steps", type=int, default=None, help="stop each model after N steps")
    p.add_argument("--batch", type=int, default=100, help="batch size (100)")
    p.add_argument("--full", action="store_true", help="the paper's sizes for both models")
    p.add_argument("--conv-filters", type=int, default=64, help="CapsNet Conv1 (64; paper 256)")
    p.add_argument(
        "--primary-capsule-types", type=int, default=16, help="CapsNet types (16; paper 32)"
    )
    p.add_argument(
        "--cnn-filters", default="64,64,32", help="CNN conv channels (64,64,32; paper 256,256,128)"
    )
    p.add_argument(
        "--cnn-pooling",
        choices=("max", "none"),
        default="max",
        help="2x2 max pooling after each CNN convolution (max), or none as the paper's MNIST CNN",
    )
    p.add_argument(
        "--cnn-target",
        type=float,
        default=None,
        help="skip CapsNet and train the CNN to this validation accuracy (e.g. from a CapsNet run)",
    )
    p.add_argument("--val-size", type=int, default=5000, help="held-out training digits (5000)")
    p.add_argument("--check-every", type=int, default=100, help="CNN steps between checks")
    p.add_argument("--check-size", type=int, default=2000, help="validation digits per check")
    p.add_argument("--test-size", type=int, default=10000, help="test digits (10000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--save-dir", default=None, help="write capsnet.keras and cnn.keras here")
    args = p.parse_args(argv)
    if args.full:
        args.conv_filters, args.primary_capsule_types = 256, 32
        args.cnn_filters = "256,256,128"
    try:
        args.cnn_filters = tuple(int(v) for v in args.cnn_filters.split(","))
    except ValueError:
        p.error(f"--cnn-filters takes comma-separated integers, got {args.cnn_filters!r}")
    if args.check_every < 1:
        p.error("--check-every must be a positive integer")
    if args.save_dir:
        os.makedirs(args.save_dir, exist_ok=True)
    if not 1 <= args.test_size <= 10000:
        p.error("--test-size must be in [1, 10000]")
    if not 1 <= args.check_size <= args.val_size < 60000:
        p.error("need 1 <= --check-size <= --val-size < 60000")
    return args


def accuracy(model, images, labels):
    import numpy as np

    from keras_capsules.serving import ServingSpec

    outputs = model.predict(images[..., None], batch_size=200, verbose=0)
    probabilities = ServingSpec.of(model).heads(outputs)[0]
    return float(np.mean(np.argmax(probabilities, axis=-1) == labels))


def match_callback(model_check, target, every):
    """Stop `fit` once `model_check()` (validation accuracy) reaches `target`."""
    import keras

    from keras_capsules._steps import steps_run

    class Match(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.steps = 0
            self.checks = []
            self._begin = 0

        def on_train_batch_begin(self, batch, logs=None):
            self._begin = batch

        def on_train_batch_end(self, batch, logs=None):
            before = self.steps
            self.steps += steps_run(self, self._begin, batch)
            if self.steps // every == before // every:
                return
            value = model_check()
            self.checks.append((self.steps, round(value, 4)))
            log(f"CNN step {self.steps}: validation accuracy {value:.4f} (target {target:.4f})")
            if value >= target:
                self.model.stop_training = True

    return Match()


def train_and_test(name, model, train, minutes, max_steps, evaluate, callbacks=()):
    budget = budget_callback(minutes * 60.0, max_steps)
    log(f"{name}: {model.count_params():,} parameters, budget {minutes} min")
    model.fit(train, epochs=1000, verbose=0, callbacks=[budget, *callbacks])
    log(f"{name}: trained {budget.steps} steps in {budget.seconds:.0f} s; evaluating")
    start = time.perf_counter()
    result = {
        "parameters": model.count_params(),
        "steps": budget.steps,
        "train_seconds": round(budget.seconds, 1),
        **{key: round(value, 4) for key, value in evaluate(model).items()},
    }
    result["eval_seconds"] = round(time.perf_counter() - start, 1)
    log(f"{name}: {result}")
    return result


def main(argv=None):
    args = parse_args(argv)
    import keras

    import applications
    from keras_capsules.datasets import affine
    from keras_capsules.datasets import mnist

    keras.utils.set_random_seed(args.seed)
    (x_train, y_train), (x_test, y_test) = mnist.load_data()
    x_fit, y_fit = x_train[: -args.val_size], y_train[: -args.val_size]
    x_val, _ = affine.expand(x_train[-args.val_size :], seed=3)
    y_val = y_train[-args.val_size :]
    n = args.test_size
    expanded_test, _ = affine.expand(x_test[:n], seed=1)
    affnist = affine.affnist_test_set(x_test[:n], y_test[:n], seed=2)

    def evaluate(model):
        return {
            "val_expanded_accuracy": accuracy(model, x_val, y_val),
            "test_expanded_accuracy": accuracy(model, expanded_test, y_test[:n]),
            "test_affnist_accuracy": accuracy(model, affnist["images"], y_test[:n]),
        }

    def stream(seed):
        return affine.training_pipeline(x_fit, y_fit, batch_size=args.batch, seed=seed)

    capsnet = capsnet_result = None
    if args.cnn_target is None:
        capsnet = applications.CapsNet(
            input_shape=(40, 40, 1),
            conv_filters=args.conv_filters,
            primary_capsule_types=args.primary_capsule_types,
        )
        capsnet_result = train_and_test(
            "CapsNet", capsnet, stream(args.seed), args.minutes, args.max_steps, evaluate
        )
        capsnet_result.update(
            conv_filters=args.conv_filters, primary_capsule_types=args.primary_capsule_types
        )

    keras.utils.set_random_seed(args.seed)
    pooling = None if args.cnn_pooling == "none" else "max"
    cnn = applications.BaselineCNN(
        input_shape=(40, 40, 1), filters=args.cnn_filters, pooling=pooling
    )
    target = args.cnn_target or capsnet_result["val_expanded_accuracy"]
    match = match_callback(
        lambda: accuracy(cnn, x_val[: args.check_size], y_val[: args.check_size]),
        target,
        args.check_every,
    )
    cnn_result = train_and_test(
        "BaselineCNN", cnn, stream(args.seed), args.cnn_minutes, args.max_steps, evaluate, [match]
    )
    cnn_result.update(
        filters=list(args.cnn_filters),
        pooling=args.cnn_pooling,
        target=target,
        validation_checks=match.checks,
    )

    report = {
        "backend": os.environ.get("KERAS_BACKEND", keras.backend.backend()),
        "device": device(),
        "batch": args.batch,
        "train_digits": len(x_fit),
        "val_digits": args.val_size,
        "test_digits": n,
        "affnist_ranges": affine.AFFNIST_RANGES,
        "capsnet": capsnet_result,
        "cnn": cnn_result,
        "affnist_gap_points": None
        if capsnet_result is None
        else round(
            100 * (capsnet_result["test_affnist_accuracy"] - cnn_result["test_affnist_accuracy"]),
            2,
        ),
        "seed": args.seed,
    }
    if args.save_dir:
        if capsnet is not None:
            capsnet.save(os.path.join(args.save_dir, "capsnet.keras"))
        cnn.save(os.path.join(args.save_dir, "cnn.keras"))
        report["saved"] = args.save_dir
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()

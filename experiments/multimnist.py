"""Train CapsNetMultiMNIST for a wall-clock budget and report its MultiMNIST test accuracy.

A sanity check that MultiMNIST learning works, not a reproduction of the
paper's 5.2% error (the paper trains on 60M pairs). The model trains with its
own compile (Adam, margin loss on both labels plus each digit's reconstruction
from its own capsule) on `multimnist.training_pipeline(..., as_dict=True)`
from the MNIST training split, until `--minutes` have passed (or
`--max-steps`). It is then evaluated on the first `--test-pairs` examples of
`multimnist.test_set(x_test, y_test, pairs_per_digit=1, seed=1)`: an example is
correct when the two longest capsules are exactly its two labels.

Prints a single JSON object on stdout; progress goes to stderr.

Reduced model, about 5 minutes (the default):

    KERAS_BACKEND=tensorflow python experiments/multimnist.py --minutes 5

The paper's model (Conv1 256, 32 primary capsule types, 11.36M parameters),
on a GPU, for as long as you can give it:

    KERAS_BACKEND=tensorflow python experiments/multimnist.py --full --minutes 600 \\
        --test-pairs 10000

Then draw figure 5 of the paper from the saved model:

    KERAS_BACKEND=tensorflow python experiments/multimnist.py --save runs/mm.keras
    keras-capsules figures runs/mm.keras --kind multimnist --count 8

Smoke test:

    KERAS_BACKEND=tensorflow python experiments/multimnist.py --max-steps 2 --test-pairs 100
"""

import argparse
import dataclasses
import json
import os
import time

from _training import budget_callback
from _training import device
from _training import log


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=5.0, help="training budget (5)")
    p.add_argument("--max-steps", type=int, default=None, help="stop after this many steps")
    p.add_argument("--batch", type=int, default=64, help="batch size (64)")
    p.add_argument(
        "--full",
        action="store_true",
        help="the paper's sizes: --conv-filters 256 --primary-capsule-types 32",
    )
    p.add_argument("--conv-filters", type=int, default=64, help="Conv1 filters (64; paper 256)")
    p.add_argument(
        "--primary-capsule-types", type=int, default=16, help="primary capsule types (16; paper 32)"
    )
    p.add_argument("--iterations", type=int, default=3, help="routing iterations (3)")
    p.add_argument("--learning-rate", type=float, default=1e-3, help="initial Adam rate (1e-3)")
    p.add_argument(
        "--pairs-per-digit",
        type=int,
        default=1000,
        help="length of the training stream, pairs per MNIST digit (1000, the paper)",
    )
    p.add_argument("--test-pairs", type=int, default=2000, help="test examples (2000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--save", default=None, help="write the trained model here (.keras), for `figures`"
    )
    p.add_argument("--log-every", type=int, default=100, help="steps between progress lines")
    args = p.parse_args(argv)
    if args.save:
        os.makedirs(os.path.dirname(os.path.abspath(args.save)), exist_ok=True)
    if args.full:
        args.conv_filters, args.primary_capsule_types = 256, 32
    if not 1 <= args.test_pairs <= 10000:
        p.error("--test-pairs must be in [1, 10000]")
    return args


def main(argv=None):
    args = parse_args(argv)
    import keras
    import numpy as np

    import applications
    from keras_capsules.datasets import mnist
    from keras_capsules.datasets import multimnist

    keras.utils.set_random_seed(args.seed)
    (x_train, y_train), (x_test, y_test) = mnist.load_data()
    train = multimnist.training_pipeline(
        x_train,
        y_train,
        batch_size=args.batch,
        pairs_per_digit=args.pairs_per_digit,
        seed=args.seed,
        as_dict=True,
        drop_remainder=True,
    )
    test = multimnist.test_set(x_test, y_test, pairs_per_digit=1, seed=1)
    test = {k: test[k][: args.test_pairs] for k in ("images", "labels", "digits")}

    model = applications.CapsNetMultiMNIST(
        conv_filters=args.conv_filters,
        primary_capsule_types=args.primary_capsule_types,
        iterations=args.iterations,
        compile=False,
    )
    recipe = dataclasses.replace(model.RECIPE, learning_rate=args.learning_rate)
    model.compile(optimizer=recipe.optimizer())
    log(
        f"{model.name}: {model.count_params():,} parameters, conv_filters={args.conv_filters}, "
        f"primary_capsule_types={args.primary_capsule_types}, batch {args.batch}, "
        f"budget {args.minutes} min, backend {keras.backend.backend()}"
    )
    budget = budget_callback(args.minutes * 60.0, args.max_steps, args.log_every)
    history = model.fit(train, epochs=1, verbose=0, callbacks=[budget]).history
    log(f"trained {budget.steps} steps in {budget.seconds:.0f} s; evaluating")

    start = time.perf_counter()
    results = model.evaluate(test, batch_size=100, verbose=0, return_dict=True)
    probabilities = model.predict(test["images"], batch_size=100, verbose=0)["probabilities"]
    eval_seconds = time.perf_counter() - start
    top_two = np.sort(np.argsort(-probabilities, axis=1)[:, :2], axis=1)
    labels = np.sort(test["labels"], axis=1)
    both = float(np.mean(np.all(top_two == labels, axis=1)))
    digits_found = float(np.mean([len(set(t) & set(lab)) for t, lab in zip(top_two, labels)]) / 2)

    report = {
        "backend": os.environ.get("KERAS_BACKEND", keras.backend.backend()),
        "device": device(),
        "parameters": model.count_params(),
        "conv_filters": args.conv_filters,
        "primary_capsule_types": args.primary_capsule_types,
        "iterations": args.iterations,
        "batch": args.batch,
        "steps": budget.steps,
        "train_examples": budget.steps * args.batch,
        "train_seconds": round(budget.seconds, 1),
        "train_images_per_s": round(budget.steps * args.batch / max(budget.seconds, 1e-9), 1),
        "train_last": {k: round(float(v[-1]), 4) for k, v in history.items()},
        "test_pairs": args.test_pairs,
        "test_multimnist_accuracy": round(float(results["multimnist_accuracy"]), 4),
        "test_multimnist_accuracy_numpy": round(both, 4),
        "test_error_percent": round(100 * (1 - both), 2),
        "test_digits_found": round(digits_found, 4),
        "test_margin_loss": round(float(results["margin_loss"]), 4),
        "test_reconstruction_loss": round(float(results["reconstruction_loss"]), 4),
        "eval_seconds": round(eval_seconds, 1),
        "seed": args.seed,
    }
    if args.save:
        model.save(args.save)
        report["saved"] = args.save
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()

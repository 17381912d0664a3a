"""A hyperparameter search on MNIST against the paper's defaults.

Runs a keras-tuner search (`keras_capsules.tuning.create_tuner`, Hyperband by
default) of `CapsNetHyperModel` (or `MatrixCapsNetHyperModel`) on the first
`--train-size` MNIST training images, holding out the last
`--validation-split` of them for the objective (`val_accuracy`). Then two
models are trained from scratch on all `--train-size` images for
`--final-epochs` epochs with the same seed: the best configuration found, and
the paper's defaults (every searched hyperparameter at its default; values
given with `--fixed` apply to both). Both are evaluated on the first
`--test-size` MNIST test images.

Prints a single JSON object on stdout: the best hyperparameters and their
validation accuracy in the search, the test accuracy of both models, their
parameter counts and training times, and the wall time. Progress (keras-tuner's
trial tables, Keras's progress lines) goes to stderr.

Full run (about an hour on 2 CPU cores; resumes if `--output` holds an
interrupted search):

    KERAS_BACKEND=tensorflow python experiments/tuning.py --output runs/bench-tune > tuning.json

Smoke test (under a minute; the numbers mean nothing):

    KERAS_BACKEND=tensorflow python experiments/tuning.py --smoke
"""

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time

import _training  # noqa: F401  (repository root on sys.path, TensorFlow backend by default)

SMOKE = {
    "train_size": 300,
    "test_size": 200,
    "max_trials": 2,
    "max_epochs": 1,
    "final_epochs": 1,
    "batch_size": 50,
    "fixed": [
        "conv_filters=8",
        "primary_capsule_types=2",
        "primary_capsule_dim=4",
        "capsule_dim=4",
        "A=4",
        "B=2",
        "C=2",
        "D=2",
        "iterations=1",
    ],
}


def _fixed_value(text):
    """A `--fixed` VALUE: a number, true or false, else the text itself."""
    lowered = text.strip().lower()
    try:
        return json.loads(lowered if lowered in ("true", "false") else text)
    except ValueError:
        return text


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=("capsnet", "matrix-capsnet"), default=None)
    p.add_argument("--tuner", choices=("hyperband", "random", "bayesian"), default="hyperband")
    p.add_argument("--max-trials", type=int, default=10, help="most trials (10)")
    p.add_argument("--max-epochs", type=int, default=3, help="most epochs of a trial (3)")
    p.add_argument("--final-epochs", type=int, default=None, help="default: --max-epochs")
    p.add_argument("--train-size", type=int, default=6000, help="first N training images")
    p.add_argument("--validation-split", type=float, default=0.1, help="of --train-size")
    p.add_argument("--test-size", type=int, default=10000, help="first N test images")
    p.add_argument("--batch-size", type=int, default=None, help="the hypermodel's (100, 32)")
    p.add_argument("--fixed", action="append", default=None, metavar="NAME=VALUE")
    p.add_argument("--output", default=None, help="search folder (default: a temporary one)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--smoke", action="store_true", help="tiny sizes: a run under a minute")
    args = p.parse_args(argv)
    args.model = args.model or "capsnet"
    if args.smoke:
        for name, value in SMOKE.items():
            if name == "fixed" and args.fixed is None:
                args.fixed = value
            elif name != "fixed" and getattr(args, name) == p.get_default(name):
                setattr(args, name, value)
    args.fixed = args.fixed or []
    args.final_epochs = args.final_epochs or args.max_epochs
    return args


def main(argv=None):
    args = parse_args(argv)
    start = time.time()
    with contextlib.redirect_stdout(sys.stderr):
        result = run(args)
    result["wall_seconds"] = round(time.time() - start, 1)
    print(json.dumps(result, indent=2))


def run(args):
    import keras
    import keras_tuner as kt

    from applications import CapsNetHyperModel
    from applications import MatrixCapsNetHyperModel
    from keras_capsules.datasets import mnist
    from keras_capsules.tuning import best_trials_table
    from keras_capsules.tuning import create_tuner

    if args.model == "capsnet":
        hypermodel = CapsNetHyperModel(input_shape=(28, 28, 1), num_classes=10)
    else:
        hypermodel = MatrixCapsNetHyperModel(
            input_shape=(28, 28, 1), num_classes=10, scale=1.0 / 255.0
        )
    space = [hp.name for hp in hypermodel.search_space().space]
    fixed = kt.HyperParameters()
    for assignment in args.fixed:
        name, _, value = assignment.partition("=")
        if name in space:  # the smoke sizes name both models' hyperparameters
            fixed.Fixed(name, _fixed_value(value))
    batch_size = args.batch_size or hypermodel.batch_size

    (x_train, y_train), (x_test, y_test) = mnist.load_data()
    x_train, y_train = x_train[: args.train_size], y_train[: args.train_size]
    x_test, y_test = x_test[: args.test_size, ..., None], y_test[: args.test_size]

    directory = args.output or tempfile.mkdtemp(prefix="tuning-bench-")
    keras.utils.set_random_seed(args.seed)
    tuner = create_tuner(
        hypermodel,
        args.tuner,
        max_trials=args.max_trials,
        max_epochs=args.max_epochs,
        directory=directory,
        seed=args.seed,
        hyperparameters=fixed if fixed.space else None,
    )
    log(f"Searching in {os.path.join(directory, 'search')}")
    search_start = time.time()
    tuner.search(
        x_train,
        y_train,
        validation_split=args.validation_split,
        batch_size=batch_size,
        seed=args.seed,
        verbose=2,
    )
    search_seconds = time.time() - search_start
    log(best_trials_table(tuner))
    best_trial = tuner.oracle.get_best_trials(1)[0]

    defaults = kt.HyperParameters()
    for name, value in fixed.values.items():
        defaults.Fixed(name, value)
    hypermodel.declare_hyperparameters(defaults)  # unfixed names keep their defaults

    def train_and_test(hp, label):
        keras.utils.set_random_seed(args.seed)
        model = hypermodel.build(hp)
        log(f"Training {label} for {args.final_epochs} epochs on {len(x_train)} images")
        began = time.time()
        hypermodel.fit(
            hp,
            model,
            x_train,
            y_train,
            epochs=args.final_epochs,
            batch_size=batch_size,
            seed=args.seed,
            verbose=2,
        )
        seconds = time.time() - began
        results = model.evaluate(x_test, y_test, batch_size=batch_size, verbose=0, return_dict=True)
        return {
            "hyperparameters": {k: v for k, v in hp.values.items() if not k.startswith("tuner/")},
            "params": int(model.count_params()),
            "train_seconds": round(seconds, 1),
            "test_accuracy": float(results["accuracy"]),
        }

    best = train_and_test(best_trial.hyperparameters, "the best configuration")
    best["val_accuracy_in_search"] = float(best_trial.score)
    best["trial"] = best_trial.trial_id
    paper = train_and_test(defaults, "the paper's defaults")
    return {
        "model": args.model,
        "tuner": args.tuner,
        "backend": keras.backend.backend(),
        "train_images": int(len(x_train)),
        "validation_split": args.validation_split,
        "test_images": int(len(x_test)),
        "max_trials": args.max_trials,
        "max_epochs": args.max_epochs,
        "final_epochs": args.final_epochs,
        "batch_size": batch_size,
        "trials": len(tuner.oracle.trials),
        "search_seconds_this_session": round(search_seconds, 1),
        "best": best,
        "paper_defaults": paper,
    }


if __name__ == "__main__":
    main()

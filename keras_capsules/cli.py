"""The `keras-capsules` command: train, evaluate, export and serve capsule networks.

    keras-capsules train capsnet-mnist --epochs 1 --output runs/mnist
    keras-capsules train matrix-capsnet-mnist --epochs 1 --output runs/em-mnist
    keras-capsules train matrix-capsnet-norb --data-dir ~/smallnorb --output runs/norb
    keras-capsules evaluate runs/mnist/model.keras
    keras-capsules export runs/mnist/model.keras models/capsnet
    keras-capsules serve models/capsnet --port 8501
    keras-capsules tune capsnet-mnist --tuner hyperband --max-trials 20 --output runs/tune
    keras-capsules figures runs/mnist/model.keras --output figures
    keras-capsules explore runs/mnist/model.keras

`train` shows Keras's progress bar, keeps a backup of the run after every
epoch (`OUTPUT/backup`) and resumes from it when started again with the same
`--output` after an interruption, saves `OUTPUT/model.keras` after every
epoch, and ends by printing the test accuracy and writing it, with the
timings, to `OUTPUT/metrics.json`. Every file is written under a temporary
name and renamed into place. `OUTPUT/run.json` records the run's options: a
rerun with more `--epochs` continues a finished run, and a rerun with other
options is refused unless `--fresh` starts a new run in the folder.

The matrix capsule models (EM routing) train with the spread loss, whose
margin `SpreadMarginSchedule` raises from 0.2 to 0.9 over the run:
`matrix-capsnet-mnist` on MNIST (28x28, 10 classes), `matrix-capsnet-norb`
on smallNORB read from `--data-dir` (the official files).
"""

import argparse
import contextlib
import json
import os
import shutil
import sys
import time
import zipfile

from keras_capsules._atomic import check_writable
from keras_capsules._atomic import replacing
from keras_capsules._atomic import write_json

MODELS = ("capsnet-mnist", "matrix-capsnet-mnist", "matrix-capsnet-norb")
MATRIX_MODELS = ("matrix-capsnet-mnist", "matrix-capsnet-norb")


def _tempering(text):
    """`--tempering`: one positive number, or several separated by commas."""
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        values = []
    if not values or not all(0 < v < float("inf") for v in values):
        raise argparse.ArgumentTypeError(
            f"must be a positive number or positive numbers separated by commas: {text!r}"
        )
    return values[0] if len(values) == 1 else values


def _build_parser():
    parser = argparse.ArgumentParser(
        prog="keras-capsules", description="Train, evaluate, export and serve capsule networks."
    )
    commands = parser.add_subparsers(dest="command", required=True)

    train = commands.add_parser("train", help="train a prebuilt model on its data set")
    train.add_argument("model", choices=MODELS)
    train.add_argument("--epochs", type=int, default=1)
    train.add_argument(
        "--batch-size", type=int, default=None, help="100 for capsnet-mnist, 32 for the EM models"
    )
    train.add_argument("--output", default="runs/mnist", help="folder for checkpoints and metrics")
    train.add_argument(
        "--data-dir",
        type=_data_dir,
        default=None,
        help="folder of the MNIST IDX or smallNORB .mat files",
    )
    train.add_argument("--max-shift", type=int, default=2, help="augmentation shift in pixels")
    train.add_argument("--train-size", type=int, default=None, help="use the first N images")
    train.add_argument("--test-size", type=int, default=None, help="evaluate on the first N")
    train.add_argument("--routings", type=int, default=3, help="routing iterations")
    train.add_argument("--conv-filters", type=int, default=256, help="capsnet-mnist: Conv1")
    train.add_argument("--primary-capsules", type=int, default=32, help="capsnet-mnist")
    for letter, default in zip("ABCD", (32, 32, 32, 32)):
        train.add_argument(
            f"-{letter}", type=int, default=default, help=f"EM models: {letter} of the paper"
        )
    train.add_argument(
        "--inverse-temperature", type=float, default=None, help="EM models: final lambda"
    )
    train.add_argument(
        "--variance-epsilon", type=float, default=None, help="EM models: variance floor (1e-4)"
    )
    train.add_argument(
        "--tempering",
        type=_tempering,
        default=None,
        help="EM models: E-step exponent tau, R ~ (a p)^tau, one number or one per E-step "
        "separated by commas (0.1; 1 is the paper's E-step)",
    )
    train.add_argument(
        "--normalization",
        choices=("types_and_positions", "positions"),
        default="types_and_positions",
        help="EM models: how a convolutional capsule layer shares a child's R: over types and "
        "positions (the paper's text) or per type over positions (the authors' code)",
    )
    train.add_argument(
        "--inverse-temperature-schedule",
        choices=("rescaled", "authors"),
        default="rescaled",
        help="EM models: lambda rescaled to end at --inverse-temperature, or the authors' "
        "0.01 (1 - 0.95^(t+1))",
    )
    train.add_argument(
        "--learning-rate", type=float, default=None, help="1e-3 (capsnet-mnist), 3e-3 (EM)"
    )
    train.add_argument("--seed", type=int, default=None)
    train.add_argument(
        "--precision",
        choices=("float32", "mixed_float16", "mixed_bfloat16"),
        default="float32",
        help="Keras dtype policy; routing runs in float32 inside (float32)",
    )
    train.add_argument(
        "--distribute",
        action="store_true",
        help="data-parallel over every device: tf.distribute (TensorFlow), "
        "keras.distribution.DataParallel (JAX); TF_CONFIG selects multi-worker",
    )
    train.add_argument("--verbose", type=int, default=1, choices=(0, 1, 2))
    train.add_argument(
        "--fresh",
        action="store_true",
        help="start a new run in --output, deleting the run there (model, backup, history)",
    )

    evaluate = commands.add_parser(
        "evaluate", help="evaluate a saved .keras model on MNIST or smallNORB"
    )
    evaluate.add_argument("model_path")
    evaluate.add_argument("--data-dir", type=_data_dir, default=None)
    evaluate.add_argument("--batch-size", type=int, default=32)
    evaluate.add_argument("--test-size", type=int, default=None)

    export = commands.add_parser(
        "export", help="export a saved .keras model as a versioned SavedModel for serving"
    )
    export.add_argument("model_path")
    export.add_argument("output_dir", help="base directory; the model goes to OUTPUT_DIR/<version>")
    export.add_argument(
        "--version", type=int, default=None, help="version number (default: the next one)"
    )
    export.add_argument(
        "--output-kind",
        choices=("probabilities", "logits"),
        default="probabilities",
        help="what the model's class scores are; logits are served as their softmax",
    )

    serve = commands.add_parser(
        "serve", help="serve an exported model with TF Serving's REST API (KServe)"
    )
    serve.add_argument("model_dir", help="directory written by `export` (highest version served)")
    serve.add_argument("--port", type=int, default=8501)
    serve.add_argument(
        "--host", default="127.0.0.1", help="interface to bind (0.0.0.0 exposes the server)"
    )
    serve.add_argument("--model-name", default=None, help="name in the URLs (default: folder)")
    serve.add_argument("--max-batch-size", type=int, default=256)
    serve.add_argument(
        "--max-request-bytes", type=int, default=16 * 1024 * 1024, help="larger bodies get a 413"
    )
    serve.add_argument(
        "--request-timeout",
        type=float,
        default=10.0,
        help="seconds a request may take to arrive before its connection is closed (10)",
    )
    serve.add_argument(
        "--max-connections", type=int, default=4096, help="beyond this, requests get a 503"
    )
    figures = commands.add_parser(
        "figures", help="draw the paper's figures for a trained model as PNG files"
    )
    figures.add_argument("model_path", help="a .keras file, e.g. runs/mnist/model.keras")
    figures.add_argument(
        "--kind",
        choices=("reconstructions", "dimensions", "multimnist", "routing", "all"),
        default="all",
        help="which figure; all draws every one that fits the model",
    )
    figures.add_argument("--output", default="figures", help="folder for the PNG files")
    figures.add_argument("--count", type=int, default=8, help="images in the grids")
    figures.add_argument("--index", type=int, default=0, help="first test image to draw")
    figures.add_argument(
        "--dims", default=None, help="--kind dimensions: the rows, e.g. 0,3,7 (all)"
    )
    figures.add_argument(
        "--steps",
        default=None,
        help="tweaks, e.g. --steps=-0.1,0,0.1 (the paper: -0.25 to 0.25 by 0.05)",
    )
    figures.add_argument("--reduce", choices=("mean", "sum"), default="mean", help="routing")
    figures.add_argument("--dpi", type=int, default=100)
    figures.add_argument(
        "--data-dir", type=_data_dir, default=None, help="folder of the MNIST IDX files"
    )
    figures.add_argument("--seed", type=int, default=1, help="MultiMNIST / canvas test seed")
    figures.add_argument("--overlay", choices=("sum", "max"), default="sum", help="MultiMNIST")

    explore = commands.add_parser(
        "explore",
        help="serve the capsule explorer: pick or draw a digit, perturb its capsule with sliders",
    )
    explore.add_argument("model_path", help="a .keras file with a decoder")
    explore.add_argument("--host", default="127.0.0.1", help="interface (127.0.0.1: this machine)")
    explore.add_argument("--port", type=int, default=7860)
    explore.add_argument("--examples", type=int, default=100, help="test images to pick from")
    explore.add_argument(
        "--data-dir", type=_data_dir, default=None, help="folder of the MNIST IDX files"
    )
    explore.add_argument("--seed", type=int, default=1, help="MultiMNIST / canvas test seed")
    explore.add_argument("--overlay", choices=("sum", "max"), default="sum", help="MultiMNIST")
    explore.add_argument("--open", action="store_true", help="open the page in a browser")

    tune = commands.add_parser(
        "tune", help="search hyperparameters with keras-tuner, on one machine or chief + workers"
    )
    tune.add_argument("model", choices=("capsnet-mnist", "matrix-capsnet-mnist"))
    tune.add_argument("--tuner", choices=("hyperband", "random", "bayesian"), default="hyperband")
    tune.add_argument("--max-trials", type=int, default=10, help="most trials to run")
    tune.add_argument(
        "--max-epochs", type=int, default=3, help="hyperband: most epochs of a trial, else all"
    )
    tune.add_argument("--output", default="runs/tune", help="folder of the search and its results")
    tune.add_argument("--objective", default="val_accuracy", help="metric to optimise")
    tune.add_argument(
        "--data-dir", type=_data_dir, default=None, help="folder of the MNIST IDX files"
    )
    tune.add_argument("--train-size", type=int, default=None, help="use the first N images")
    tune.add_argument("--test-size", type=int, default=None, help="evaluate on the first N")
    tune.add_argument("--validation-split", type=float, default=0.1, help="held out of training")
    tune.add_argument(
        "--batch-size", type=int, default=None, help="100 for capsnet-mnist, 32 for the EM model"
    )
    tune.add_argument(
        "--fixed",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="fix a hyperparameter instead of searching it (repeatable)",
    )
    tune.add_argument("--overwrite", action="store_true", help="start afresh instead of resuming")
    tune.add_argument("--seed", type=int, default=None)
    tune.add_argument("--top", type=int, default=5, help="trials in the final table")
    tune.add_argument(
        "--retrain-epochs", type=int, default=0, help="retrain the best configuration for N epochs"
    )
    tune.add_argument("--export", metavar="DIR", default=None, help="export the best model here")
    role = tune.add_mutually_exclusive_group()
    role.add_argument("--chief", action="store_true", help="run the oracle for remote workers")
    role.add_argument("--worker", metavar="ID", default=None, help="run trials for the chief")
    tune.add_argument(
        "--oracle", metavar="HOST:PORT", default=None, help="the chief's address (127.0.0.1:8000)"
    )
    tune.add_argument("--max-retries", type=int, default=1, help="reruns of a crashed trial")
    tune.add_argument(
        "--lease-seconds", type=float, default=120.0, help="chief: give up a silent worker's trial"
    )
    tune.add_argument(
        "--heartbeat-seconds", type=float, default=10.0, help="worker: seconds between heartbeats"
    )
    tune.add_argument("--verbose", type=int, default=1, choices=(0, 1, 2))
    return parser


def _data_dir(value):
    """argparse type of `--data-dir`: an existing folder that holds files."""
    path = os.path.expanduser(value)
    if not os.path.isdir(path):
        raise argparse.ArgumentTypeError(f"{value} is not a folder")
    if not any(entry.is_file() for entry in os.scandir(path)):
        raise argparse.ArgumentTypeError(f"the folder {value} holds no files")
    return path


def _positive(parser, name, value):
    if value is not None and value < 1:
        parser.error(f"--{name.replace('_', '-')} must be a positive integer, got {value}")


def _load_model(path):
    import keras

    import applications  # noqa: F401  (registers the application classes)

    if not os.path.exists(path):
        raise SystemExit(f"keras-capsules: no model at {path}")
    if path.endswith(".keras") and not zipfile.is_zipfile(path):
        raise SystemExit(
            f"keras-capsules: {path} is not a .keras archive (a zip file): "
            "it is truncated or corrupt, or another format"
        )
    try:
        return keras.saving.load_model(path)
    except (OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile) as error:
        raise SystemExit(f"keras-capsules: cannot load the model at {path}: {error}") from None


def _build_model(args):
    import applications
    from keras_capsules import routing

    if args.model == "capsnet-mnist":
        return applications.CapsNetMNIST(
            routings=args.routings,
            conv_filters=args.conv_filters,
            primary_capsules=args.primary_capsules,
            learning_rate=args.learning_rate or 1e-3,
        )
    mnist = args.model == "matrix-capsnet-mnist"
    return applications.MatrixCapsNetNORB(
        A=args.A,
        B=args.B,
        C=args.C,
        D=args.D,
        iterations=args.routings,
        input_shape=(28, 28, 1) if mnist else (32, 32, 2),
        num_classes=10 if mnist else 5,
        rescale=1.0 / 255.0 if mnist else None,
        inverse_temperature=args.inverse_temperature or routing.INVERSE_TEMPERATURE,
        variance_epsilon=args.variance_epsilon or routing.VARIANCE_EPSILON,
        tempering=routing.TEMPERING if args.tempering is None else args.tempering,
        normalization=args.normalization,
        inverse_temperature_schedule=args.inverse_temperature_schedule,
        learning_rate=args.learning_rate or 3e-3,
    )


def _datasets(args, batch_size):
    """`(train_dataset, (x_test, y_test) or test_dataset, train_count, test_count)`.

    A folder that cannot be read, or holds no training or test images, ends the
    command with one line that says so.
    """
    try:
        return _read_datasets(args, batch_size)
    except ValueError as error:
        raise SystemExit(f"keras-capsules {args.command}: {error}") from None


def _check_not_empty(args, x_train, x_test):
    for images, split in ((x_train, "training"), (x_test, "test")):
        if len(images) == 0:
            raise ValueError(f"{args.data_dir or 'the data'} holds no {split} images")


def _read_datasets(args, batch_size):
    if args.model == "matrix-capsnet-norb":
        from keras_capsules.datasets import smallnorb

        (x_train, y_train, _), (x_test, y_test, _) = smallnorb.load_data(args.data_dir)
        x_train, y_train = x_train[: args.train_size], y_train[: args.train_size]
        x_test, y_test = x_test[: args.test_size], y_test[: args.test_size]
        _check_not_empty(args, x_train, x_test)
        train_ds = smallnorb.training_pipeline(x_train, y_train, batch_size, seed=args.seed)
        test_ds = smallnorb.test_pipeline(x_test, y_test, batch_size)
        return train_ds, test_ds, len(x_train), len(x_test)
    from keras_capsules.datasets import mnist

    (x_train, y_train), (x_test, y_test) = mnist.load_data(args.data_dir)
    x_train, y_train = x_train[: args.train_size], y_train[: args.train_size]
    x_test, y_test = x_test[: args.test_size], y_test[: args.test_size]
    _check_not_empty(args, x_train, x_test)
    train_ds = mnist.training_pipeline(
        x_train, y_train, batch_size=batch_size, max_shift=args.max_shift, seed=args.seed
    )
    return train_ds, (x_test[..., None], y_test), len(x_train), len(x_test)


def _finite_loss_counter():
    import keras
    import numpy as np

    class FiniteLossCounter(keras.callbacks.Callback):
        """Counts the training steps and those whose loss was NaN or infinite."""

        def __init__(self):
            super().__init__()
            self.steps = 0
            self.nonfinite = 0

        def on_train_batch_end(self, batch, logs=None):
            self.steps += 1
            if logs and "loss" in logs and not np.isfinite(float(logs["loss"])):
                self.nonfinite += 1

    return FiniteLossCounter()


def _history_keeper(history_path):
    import keras

    class HistoryKeeper(keras.callbacks.Callback):
        """Keeps `history.csv` to the epochs whose training the weights contain.

        `CSVLogger` writes an epoch's row before `BackupAndRestore` saves
        that epoch, so a run killed between the two has a row for an epoch it
        trains again when it resumes. At the first epoch of a run, the rows
        from that epoch on are dropped (the file is cut in place: `CSVLogger`
        holds it open for appending).
        """

        def __init__(self):
            super().__init__()
            self.started = False

        def on_epoch_begin(self, epoch, logs=None):
            if self.started:
                return
            self.started = True
            if epoch > 0:
                print(
                    f"Resumed at epoch {epoch + 1}: the backup holds epochs 1-{epoch}", flush=True
                )
            if not os.path.exists(history_path):
                return
            with open(history_path, "r+", newline="") as f:
                lines = f.readlines()
                kept = lines[:1] + [line for line in lines[1:] if _row_epoch(line) < epoch]
                if len(kept) < len(lines):
                    f.seek(0)
                    f.writelines(kept)
                    f.truncate()

    return HistoryKeeper()


def _row_epoch(line):
    try:
        return int(line.split(",", 1)[0])
    except ValueError:  # not a row of CSVLogger's
        return -1


def _model_saver(path):
    import keras

    class ModelSaver(keras.callbacks.Callback):
        """Saves the model to `path` after every epoch, atomically."""

        def on_epoch_end(self, epoch, logs=None):
            with replacing(path) as temporary:
                self.model.save(temporary)

    return ModelSaver()


def _usable_backup(backup_dir):
    """Make `backup_dir` loadable, from its `.bkp` copy if need be, or set it aside.

    Keras's `BackupAndRestore` keeps the previous epoch's weights and metadata
    as `.bkp` files; a run killed while writing the latest ones leaves them
    empty or truncated, and Keras then fails at every resume. Returns whether a
    usable backup is in place.
    """
    if not os.path.isdir(backup_dir):
        return False
    weights = os.path.join(backup_dir, "latest.weights.h5")
    metadata = os.path.join(backup_dir, "training_metadata.json")
    if _readable_backup(weights, metadata):
        return True
    if _readable_backup(weights + ".bkp", metadata + ".bkp"):
        print(f"The latest backup in {backup_dir} is unreadable: using the one before", flush=True)
        shutil.copyfile(weights + ".bkp", weights)
        shutil.copyfile(metadata + ".bkp", metadata)
        return True
    aside = f"{backup_dir}.unreadable-{time.strftime('%Y%m%d-%H%M%S')}"
    os.replace(backup_dir, aside)
    print(f"The backup in {backup_dir} is unreadable (moved to {aside}): starting over", flush=True)
    return False


def _readable_backup(weights, metadata):
    import h5py

    try:
        with open(metadata) as f:
            epoch = json.load(f)["epoch"]
        with h5py.File(weights, "r"):
            pass
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return isinstance(epoch, int) and epoch >= 0


def _fit_and_evaluate(args, model, dataset, test, train_count, batch_size, initial_epoch=0):
    import keras

    from keras_capsules.callbacks import SpreadMarginSchedule

    history_path = os.path.join(args.output, "history.csv")
    backup_dir = os.path.join(args.output, "backup")
    if _usable_backup(backup_dir):
        print(f"Resuming the interrupted run from {backup_dir}", flush=True)
    # At the end of an epoch callbacks run in this order: the history row is
    # written before the backup, so a killed run never lacks the row of an
    # epoch its backup holds; `_history_keeper` drops a row the backup lacks.
    # The backup is deleted by `train`, once the model and metrics are on disk.
    callbacks = [
        keras.callbacks.CSVLogger(history_path, append=True),
        _history_keeper(history_path),
        keras.callbacks.BackupAndRestore(
            backup_dir, double_checkpoint=True, delete_checkpoint=False
        ),
        _model_saver(os.path.join(args.output, "model.keras")),
    ]
    if args.model in MATRIX_MODELS:
        steps = args.epochs * -(-train_count // batch_size)
        callbacks.append(SpreadMarginSchedule(0.2, 0.9, steps=steps))
    counter = _finite_loss_counter()
    callbacks.append(counter)
    start = time.time()
    model.fit(
        dataset,
        epochs=args.epochs,
        initial_epoch=initial_epoch,
        callbacks=callbacks,
        verbose=args.verbose,
        shuffle=False,
    )
    train_seconds = time.time() - start  # `_model_saver` saved model.keras each epoch

    start = time.time()
    if isinstance(test, tuple):
        results = model.evaluate(*test, batch_size=batch_size, verbose=0, return_dict=True)
    else:
        results = model.evaluate(test, verbose=0, return_dict=True)
    return results, train_seconds, time.time() - start, counter


# Options that do not change what a run trains: they may differ between the
# sessions of one run.
_SESSION_OPTIONS = ("command", "epochs", "output", "verbose", "data_dir", "test_size", "fresh")
_RUN_FILES = ("backup", "model.keras", "metrics.json", "history.csv", "run.json")


def _run_config(args):
    options = {k: v for k, v in sorted(vars(args).items()) if k not in _SESSION_OPTIONS}
    return json.loads(json.dumps(options))  # as run.json will hold them (tuples as lists)


def _previous_run(args):
    """How this run relates to what `args.output` holds: the epochs it has finished.

    Returns 0 for a new run (or an interrupted one, which its backup resumes)
    and the number of epochs of a finished run, which `train` continues.
    Refuses, naming the options, a folder whose run was trained with other
    settings, unless `--fresh` clears it first.
    """
    config_path = os.path.join(args.output, "run.json")
    config = _run_config(args)
    if args.fresh:
        for name in _RUN_FILES:
            path = os.path.join(args.output, name)
            if os.path.isdir(path):
                shutil.rmtree(path)
            elif os.path.exists(path):
                os.remove(path)
    recorded = None
    if os.path.exists(config_path):
        try:
            with open(config_path) as f:
                recorded = json.load(f)["options"]
        except (OSError, ValueError, KeyError, TypeError):
            recorded = None
    if recorded is not None and recorded != config:
        differing = sorted(
            k for k in set(config) | set(recorded) if config.get(k) != recorded.get(k)
        )
        changes = ", ".join(
            f"--{k.replace('_', '-')} {recorded.get(k)!r} -> {config.get(k)!r}" for k in differing
        )
        raise SystemExit(
            f"keras-capsules train: {args.output} holds a run trained with other options "
            f"({changes}). Rerun with the recorded options to continue it, choose another "
            "--output, or pass --fresh to start a new run there (its files are deleted)."
        )
    metrics_path = os.path.join(args.output, "metrics.json")
    model_path = os.path.join(args.output, "model.keras")
    if os.path.isdir(os.path.join(args.output, "backup")) or not os.path.exists(model_path):
        return 0
    try:
        with open(metrics_path) as f:
            return int(json.load(f)["epochs"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def train(args):
    import keras

    batch_size = args.batch_size or (100 if args.model == "capsnet-mnist" else 32)
    os.makedirs(args.output, exist_ok=True)
    check_writable(args.output)  # before training, not after it
    finished = _previous_run(args)
    if finished and args.epochs <= finished:
        print(
            f"The run in {args.output} has finished {finished} epoch(s); nothing to train. "
            f"Pass --epochs above {finished} to continue it, or --fresh to start over."
        )
        return 0
    if args.seed is not None:
        keras.utils.set_random_seed(args.seed)
    dataset, test, train_count, test_count = _datasets(args, batch_size)
    write_json(os.path.join(args.output, "run.json"), {"options": _run_config(args)})
    previous_policy = keras.mixed_precision.dtype_policy()
    keras.mixed_precision.set_dtype_policy(args.precision)
    scope = contextlib.nullcontext()
    if args.distribute:
        from keras_capsules.distribute import data_parallel

        scope = data_parallel()
    try:
        with scope as engine:
            replicas = 1
            if engine is not None:
                replicas = getattr(engine, "num_replicas_in_sync", None) or int(
                    engine.device_mesh.devices.size
                )
                print(f"Data-parallel training over {replicas} device(s)", flush=True)
            if finished:
                print(f"Continuing the finished run from epoch {finished + 1}", flush=True)
                model = _load_model(os.path.join(args.output, "model.keras"))
            else:
                model = _build_model(args)
            results, train_seconds, test_seconds, counter = _fit_and_evaluate(
                args, model, dataset, test, train_count, batch_size, initial_epoch=finished
            )
    finally:
        keras.mixed_precision.set_dtype_policy(previous_policy)
    metrics = {
        "model": args.model,
        "epochs": args.epochs,
        "train_images": int(train_count),
        "test_images": int(test_count),
        "batch_size": batch_size,
        "backend": keras.backend.backend(),
        "precision": args.precision,
        "replicas": replicas,
        "train_seconds_this_session": round(train_seconds, 1),
        "test_seconds": round(test_seconds, 1),
        "test_accuracy": float(results["accuracy"]),
        "test_loss": float(results["loss"]),
        "train_steps_this_session": counter.steps,
        "nonfinite_loss_steps": counter.nonfinite,
    }
    write_json(os.path.join(args.output, "metrics.json"), metrics)
    # Only now is the backup redundant: model.keras and metrics.json are on disk.
    shutil.rmtree(os.path.join(args.output, "backup"), ignore_errors=True)
    if counter.nonfinite:
        print(
            f"Warning: {counter.nonfinite} of {counter.steps} training steps had a NaN or "
            "infinite loss (nonfinite_loss_steps in metrics.json)",
            flush=True,
        )
    print(f"Test accuracy: {metrics['test_accuracy']:.4f} ({test_count} images)")
    print(
        f"Model: {os.path.join(args.output, 'model.keras')}; metrics: "
        f"{os.path.join(args.output, 'metrics.json')}"
    )
    return 0


def evaluate(args):
    model = _load_model(args.model_path)
    norb = model.input_shape[-1] == 2  # a stereo pair: smallNORB
    try:
        if norb:
            from keras_capsules.datasets import smallnorb

            _, (x_test, y_test, _) = smallnorb.load_data(args.data_dir)
        else:
            from keras_capsules.datasets import mnist

            _, (x_test, y_test) = mnist.load_data(args.data_dir)
    except ValueError as error:
        raise SystemExit(f"keras-capsules evaluate: {error}") from None
    x_test, y_test = x_test[: args.test_size], y_test[: args.test_size]
    if len(x_test) == 0:
        raise SystemExit(
            f"keras-capsules evaluate: {args.data_dir or 'the data'} holds no test images"
        )
    if norb:
        test = smallnorb.test_pipeline(x_test, y_test, args.batch_size)
        results = model.evaluate(test, return_dict=True)
    else:
        x_test = x_test[..., None]
        results = model.evaluate(x_test, y_test, batch_size=args.batch_size, return_dict=True)
    print(json.dumps({k: float(v) for k, v in results.items()}, indent=2))
    print(f"Test accuracy: {results['accuracy']:.4f} ({len(x_test)} images)")
    return 0


def export(args):
    from keras_capsules.serving import export_saved_model

    model = _load_model(args.model_path)
    try:
        export_saved_model(
            model, args.output_dir, version=args.version, output_kind=args.output_kind
        )
    except (FileExistsError, RuntimeError, ValueError) as error:
        raise SystemExit(f"keras-capsules export: {error}") from None
    return 0


def serve(args):
    from keras_capsules.serving import serve as run_server

    try:
        run_server(
            args.model_dir,
            port=args.port,
            host=args.host,
            model_name=args.model_name,
            max_batch_size=args.max_batch_size,
            max_request_bytes=args.max_request_bytes,
            request_timeout=args.request_timeout,
            max_connections=args.max_connections,
        )
    except (FileNotFoundError, ValueError, ImportError) as error:
        raise SystemExit(f"keras-capsules serve: {error}") from None
    return 0


def figures(args):
    from keras_capsules.visualization import _command

    return _command.run(args)


def explore(args):
    from keras_capsules.visualization import _command

    return _command.explore(args)


def tune(args):
    from keras_capsules.tuning import _command

    return _command.run(args)


def main(argv=None):
    parser = _build_parser()
    args = parser.parse_args(argv)
    positive = ("epochs", "batch_size", "train_size", "test_size", "routings", "A", "B", "C", "D")
    for name in positive + (
        "version",
        "max_batch_size",
        "max_request_bytes",
        "max_connections",
        "count",
        "dpi",
        "examples",
    ):
        _positive(parser, name, getattr(args, name, None))
    commands = {
        "train": train,
        "evaluate": evaluate,
        "export": export,
        "serve": serve,
        "figures": figures,
        "explore": explore,
        "tune": tune,
    }
    return commands[args.command](args)


if __name__ == "__main__":
    sys.exit(main())

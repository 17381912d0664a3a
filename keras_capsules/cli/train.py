"""`keras-capsules train`: train a prebuilt model on its data set.

    keras-capsules train capsnet-mnist --epochs 1 --output runs/mnist
    keras-capsules train matrix-capsnet-mnist --epochs 1 --output runs/em-mnist
    keras-capsules train matrix-capsnet-norb --data-dir ~/smallnorb --output runs/norb
    keras-capsules train efficient-capsnet-mnist --epochs 100 --output runs/efficient

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

`efficient-capsnet-mnist` is `applications.EfficientCapsNet` (self-attention
routing) with the paper's training settings: batches of 16, Adam from a
learning rate of 5e-4 decayed by 0.97 every epoch (of the training set at the
chosen batch size), on MNIST with the random shifts of `capsnet-mnist`
(`--max-shift`). Options of the other models (`--iterations`,
`--conv-filters`, `--primary-capsule-types`, the EM options) do not change it,
as the EM models ignore those of `capsnet-mnist`.
"""

import contextlib
import os
import shutil
import time

from keras_capsules._atomic import check_writable
from keras_capsules._atomic import write_json
from keras_capsules.cli import _training
from keras_capsules.cli._model import load_model
from keras_capsules.cli._types import data_dir
from keras_capsules.cli._types import positive_float
from keras_capsules.cli._types import positive_int
from keras_capsules.cli._types import tempering

MODELS = (
    "capsnet-mnist",
    "matrix-capsnet-mnist",
    "matrix-capsnet-norb",
    "efficient-capsnet-mnist",
)
MATRIX_MODELS = ("matrix-capsnet-mnist", "matrix-capsnet-norb")
BATCH_SIZES = {"capsnet-mnist": 100, "efficient-capsnet-mnist": 16}
"""Default batch sizes; 32 for the EM models."""
LEARNING_RATES = {"capsnet-mnist": 1e-3, "efficient-capsnet-mnist": 5e-4}
"""Default initial learning rates; 3e-3 for the EM models."""


def resolve_defaults(args):
    """Fill the options whose default depends on the model, so `run.json` records values.

    A rerun that passes such a default explicitly (`--batch-size 100`) then
    matches the run that left it out.
    """
    from keras_capsules import routing

    resolved = {
        "batch_size": BATCH_SIZES.get(args.model, 32),
        "learning_rate": LEARNING_RATES.get(args.model, 3e-3),
        "inverse_temperature": routing.INVERSE_TEMPERATURE,
        "variance_epsilon": routing.VARIANCE_EPSILON,
        "tempering": routing.TEMPERING,
    }
    for name, default in resolved.items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    return args


def add_parser(commands):
    """Add the `train` subcommand and its arguments to `commands` (argparse subparsers)."""
    train = commands.add_parser("train", help="train a prebuilt model on its data set")
    train.add_argument(
        "model",
        choices=MODELS,
        help="efficient-capsnet-mnist: applications.EfficientCapsNet with the paper's batch size "
        "(16) and learning rate (5e-4, x0.97 per epoch), on MNIST shifted by up to --max-shift "
        "pixels as capsnet-mnist; it ignores --iterations, --conv-filters, "
        "--primary-capsule-types and the EM options",
    )
    _add_run_options(train.add_argument_group("training run"))
    _add_model_options(train.add_argument_group("model sizes"))
    _add_em_options(train.add_argument_group("EM models (matrix-capsnet-*)"))
    return train


def _add_run_options(group):
    group.add_argument("--epochs", type=positive_int, default=1)
    group.add_argument(
        "--batch-size",
        type=positive_int,
        default=None,
        help="100 for capsnet-mnist, 32 for the EM models, 16 for efficient-capsnet-mnist",
    )
    group.add_argument(
        "--learning-rate",
        type=positive_float,
        default=None,
        help="1e-3 (capsnet-mnist), 3e-3 (EM), 5e-4 (efficient-capsnet-mnist, decayed by 0.97 "
        "per epoch)",
    )
    group.add_argument("--output", default="runs/mnist", help="folder for checkpoints and metrics")
    group.add_argument(
        "--data-dir",
        type=data_dir,
        default=None,
        help="folder of the MNIST IDX or smallNORB .mat files",
    )
    group.add_argument(
        "--max-shift", type=int, default=2, help="MNIST models: augmentation shift in pixels (2)"
    )
    group.add_argument(
        "--train-size", type=positive_int, default=None, help="use the first N images"
    )
    group.add_argument(
        "--test-size", type=positive_int, default=None, help="evaluate on the first N"
    )
    group.add_argument("--seed", type=int, default=None)
    group.add_argument(
        "--precision",
        choices=("float32", "mixed_float16", "mixed_bfloat16"),
        default="float32",
        help="Keras dtype policy; routing runs in float32 inside (float32)",
    )
    group.add_argument(
        "--distribute",
        action="store_true",
        help="data-parallel over every device: tf.distribute (TensorFlow), "
        "keras.distribution.DataParallel (JAX; across processes when "
        "KERAS_DISTRIBUTION_JOB_ADDRESSES is set)",
    )
    group.add_argument(
        "--steps-per-execution",
        type=positive_int,
        default=None,
        help="training steps per call of the compiled step: each computes the same, the "
        "callbacks and the progress bar see every N-th (the model's default: 32, 1 on PyTorch)",
    )
    group.add_argument("--verbose", type=int, default=1, choices=(0, 1, 2))
    group.add_argument(
        "--fresh",
        action="store_true",
        help="start a new run in --output, deleting the run there (model, backup, history)",
    )


def _add_model_options(group):
    group.add_argument(
        "--iterations",
        type=positive_int,
        default=3,
        help="routing iterations (capsnet-mnist, EM models)",
    )
    group.add_argument("--conv-filters", type=int, default=256, help="capsnet-mnist: Conv1")
    group.add_argument(
        "--primary-capsule-types",
        type=int,
        default=32,
        help="capsnet-mnist",
    )


def _add_em_options(group):
    for letter, default in zip("ABCD", (32, 32, 32, 32)):
        group.add_argument(
            f"-{letter}",
            type=positive_int,
            default=default,
            help=f"EM models: {letter} of the paper",
        )
    group.add_argument(
        "--inverse-temperature",
        type=positive_float,
        default=None,
        help="EM models: final lambda (0.01)",
    )
    group.add_argument(
        "--variance-epsilon",
        type=positive_float,
        default=None,
        help="EM models: variance floor (1e-4)",
    )
    group.add_argument(
        "--tempering",
        type=tempering,
        default=None,
        help="EM models: E-step exponent tau, R ~ (a p)^tau, one number or one per E-step "
        "separated by commas (0.1; 1 is the paper's E-step)",
    )
    group.add_argument(
        "--normalization",
        choices=("types_and_positions", "positions"),
        default="types_and_positions",
        help="EM models: how a convolutional capsule layer shares a child's R: over types and "
        "positions (the paper's text) or per type over positions (the authors' code)",
    )
    group.add_argument(
        "--inverse-temperature-schedule",
        choices=("rescaled", "authors"),
        default="rescaled",
        help="EM models: lambda rescaled to end at --inverse-temperature, or the authors' "
        "0.01 (1 - 0.95^(t+1))",
    )


def _build_model(args, steps_per_epoch):
    import applications

    if args.model == "efficient-capsnet-mnist":
        return applications.EfficientCapsNet(
            learning_rate=args.learning_rate,
            decay_steps=steps_per_epoch,  # 0.97 per epoch, as the paper's code
            decay_rate=0.97,
        )
    if args.model == "capsnet-mnist":
        return applications.CapsNetMNIST(
            iterations=args.iterations,
            conv_filters=args.conv_filters,
            primary_capsule_types=args.primary_capsule_types,
            learning_rate=args.learning_rate,
        )
    mnist = args.model == "matrix-capsnet-mnist"
    return applications.MatrixCapsNetNORB(
        A=args.A,
        B=args.B,
        C=args.C,
        D=args.D,
        input_shape=(28, 28, 1) if mnist else (32, 32, 2),
        num_classes=10 if mnist else 5,
        rescale=1.0 / 255.0 if mnist else None,
        normalization=args.normalization,
        learning_rate=args.learning_rate,
        **_em_settings(args).get_config(),
    )


def _em_settings(args):
    """EM routing's settings from the options, checked once: a bad one stops the run unstarted."""
    from keras_capsules.routing._em_settings import EMSettings

    try:
        return EMSettings(
            iterations=args.iterations,
            inverse_temperature=args.inverse_temperature,
            variance_epsilon=args.variance_epsilon,
            tempering=args.tempering,
            inverse_temperature_schedule=args.inverse_temperature_schedule,
        )
    except ValueError as error:
        raise SystemExit(f"keras-capsules {args.command}: {error}") from None


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


def _fit_and_evaluate(args, model, dataset, test, train_count, batch_size, initial_epoch=0):
    from keras_capsules.callbacks import SpreadMarginSchedule

    backup_dir = os.path.join(args.output, "backup")
    if _training.usable_backup(backup_dir):
        print(f"Resuming the interrupted run from {backup_dir}", flush=True)
    callbacks = _training.fit_callbacks(args.output)
    if args.model in MATRIX_MODELS:
        steps = args.epochs * -(-train_count // batch_size)
        callbacks.append(SpreadMarginSchedule(0.2, 0.9, steps=steps))
    counter = _training.finite_loss_counter()
    callbacks.append(counter)
    multi_process = _multi_process(args)
    steps_per_epoch = None
    if multi_process:  # Keras's distribution of the data set loses its length
        dataset, steps_per_epoch = dataset.repeat(), -(-train_count // batch_size)
    start = time.time()
    model.fit(
        dataset,
        steps_per_epoch=steps_per_epoch,
        epochs=args.epochs,
        initial_epoch=initial_epoch,
        callbacks=callbacks,
        verbose=args.verbose,
        shuffle=False,
    )
    train_seconds = time.time() - start  # the model saver saved model.keras each epoch

    start = time.time()
    if isinstance(test, tuple) and multi_process:
        import tensorflow as tf  # Keras's data for processes of one run: a tf.data.Dataset

        test = tf.data.Dataset.from_tensor_slices(test).batch(batch_size)
    if isinstance(test, tuple):
        results = model.evaluate(*test, batch_size=batch_size, verbose=0, return_dict=True)
    else:
        steps = len(test) if multi_process else None  # known before Keras distributes it
        results = model.evaluate(test, steps=steps, verbose=0, return_dict=True)
    return results, train_seconds, time.time() - start, counter


def run(args):
    """Run `keras-capsules train` with parsed arguments; return the exit status."""
    resolve_defaults(args)
    if args.model in MATRIX_MODELS:
        _em_settings(args)
    worker_folder = _worker_folder(args)
    if worker_folder is not None:
        args.output = worker_folder
    os.makedirs(args.output, exist_ok=True)
    check_writable(args.output)  # before training, not after it
    with _training.locked(args.output):  # one run at a time in a folder
        try:
            return _run(args)
        except OSError as error:  # a full disk, a folder gone: one line, the backup kept
            where = error.filename or args.output
            raise SystemExit(
                f"keras-capsules train: cannot write {where}: {error.strerror or error}. "
                "The epochs finished so far are kept: free the space and run the same "
                "command again to resume."
            ) from None


def _multi_process(args):
    """Whether this process trains with others (JAX's multi-process data parallelism)."""
    from keras_capsules import distribute

    return args.distribute and distribute.MULTI_PROCESS_VARIABLE in os.environ


def _worker_folder(args):
    """Where a process other than the chief of a multi-process run keeps its run, or None.

    Every process trains the same replicated model and keeps the files a run
    needs to resume and continue: the chief (process 0) in `--output`, which
    holds the run's model and metrics, and process N in `OUTPUT/.worker-N`.
    TensorFlow's multi-worker training is refused: Keras 3's `fit` cannot run
    `MultiWorkerMirroredStrategy`.
    """
    from keras_capsules import distribute

    if not args.distribute:
        return None
    import keras

    if keras.backend.backend() == "tensorflow" and "TF_CONFIG" in os.environ:
        raise SystemExit(
            "keras-capsules train: --distribute across processes (TF_CONFIG) does not work on "
            "TensorFlow: Keras 3's fit cannot train with MultiWorkerMirroredStrategy (it fails "
            "reducing the first batch and the step's logs across workers; "
            "github.com/tensorflow/tensorflow/issues/72388). Train across processes with "
            "KERAS_BACKEND=jax and KERAS_DISTRIBUTION_JOB_ADDRESSES (docs/data-parallel.md), or "
            "unset TF_CONFIG to train on this machine's devices."
        )
    if distribute.MULTI_PROCESS_VARIABLE not in os.environ:
        return None
    index = distribute.process_index()
    return None if index == 0 else os.path.join(args.output, f".worker-{index}")


def _run(args):
    import keras

    from applications._defaults import compile_again

    _check_steps_per_execution(args)
    batch_size = args.batch_size
    finished = _training.previous_run(args)
    if finished and args.epochs <= finished:
        print(
            f"The run in {args.output} has finished {finished} epoch(s); nothing to train. "
            f"Pass --epochs above {finished} to continue it, or --fresh to start over."
        )
        return 0
    scope = _distribution_scope(args)
    previous_policy = keras.mixed_precision.dtype_policy()
    try:
        with scope as engine:
            if args.seed is not None:
                keras.utils.set_random_seed(args.seed)
            dataset, test, train_count, test_count = _datasets(args, batch_size)
            write_json(
                os.path.join(args.output, "run.json"), {"options": _training.run_config(args)}
            )
            keras.mixed_precision.set_dtype_policy(args.precision)
            replicas = 1
            if engine is not None:
                replicas = getattr(engine, "num_replicas_in_sync", None) or int(
                    engine.device_mesh.devices.size
                )
                print(f"Data-parallel training over {replicas} device(s)", flush=True)
            if finished:
                print(f"Continuing the finished run from epoch {finished + 1}", flush=True)
                model = load_model(os.path.join(args.output, "model.keras"))
            else:
                model = _build_model(args, steps_per_epoch=-(-train_count // batch_size))
            steps_per_execution = 1 if _multi_process(args) else args.steps_per_execution
            if steps_per_execution not in (None, model.steps_per_execution):
                compile_again(model, steps_per_execution=steps_per_execution)
            results, *seconds, counter = _fit_and_evaluate(
                args, model, dataset, test, train_count, batch_size, initial_epoch=finished
            )
    finally:
        keras.mixed_precision.set_dtype_policy(previous_policy)
    _report(args, results, train_count, test_count, batch_size, replicas, counter, seconds)
    return 0


def _check_steps_per_execution(args):
    """Refuse more than one step per call where Keras runs one (PyTorch, several processes)."""
    import keras

    if (args.steps_per_execution or 1) > 1 and keras.backend.backend() == "torch":
        raise SystemExit(
            "keras-capsules train: --steps-per-execution must be 1 on the PyTorch backend, "
            f"whose Keras trainer runs one step per call (got {args.steps_per_execution})"
        )
    if (args.steps_per_execution or 1) > 1 and _multi_process(args):
        raise SystemExit(
            "keras-capsules train: --steps-per-execution must be 1 across processes: each "
            "process runs one step per call there, and Keras would run whole calls past the "
            f"end of an epoch (got {args.steps_per_execution})"
        )


def _distribution_scope(args):
    """`data_parallel()` with `--distribute`, else a scope that does nothing."""
    if not args.distribute:
        return contextlib.nullcontext()
    from keras_capsules.distribute import data_parallel

    # First: TensorFlow configures a multi-worker strategy's collectives only
    # before anything else has started its runtime (the seed, the data sets).
    scope = data_parallel()
    if _multi_process(args):
        print(
            f"Process {os.environ.get('KERAS_DISTRIBUTION_PROCESS_ID', '0')} of "
            f"{os.environ.get('KERAS_DISTRIBUTION_NUM_PROCESSES', '?')}: waiting for the "
            f"others at {os.environ['KERAS_DISTRIBUTION_JOB_ADDRESSES']}",
            flush=True,
        )
    return scope


def _report(args, results, train_count, test_count, batch_size, replicas, counter, seconds):
    """Write `metrics.json`, drop the backup it makes redundant, and say where things are."""
    import keras

    train_seconds, test_seconds = seconds
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

"""`keras-capsules train`: train a capsule network on a data set or on a folder of your images.

    keras-capsules train capsnet --epochs 1 --output runs/mnist
    keras-capsules train matrix-capsnet --epochs 1 --output runs/em-mnist
    keras-capsules train matrix-capsnet --data smallnorb --data-dir ~/smallnorb --output runs/norb
    keras-capsules train efficient-capsnet --data fashion-mnist --epochs 100 --output runs/fashion
    keras-capsules train efficient-capsnet --images photos/ --image-size 64 64 \
        --from-preset efficient_capsnet_mnist --output runs/photos

The model is an architecture of `applications`: `capsnet` (`CapsNet`,
dynamic routing), `efficient-capsnet` (`EfficientCapsNet`, self-attention
routing) or `matrix-capsnet` (`MatrixCapsNet`, EM routing). It trains on
`--data` (MNIST by default, Fashion-MNIST, or smallNORB read from
`--data-dir`), or on `--images DIR`: one subfolder of images per class,
checked file by file with the decoder training uses before anything is
written, then read as checked (`keras_capsules.datasets.image_folder`), with
`--validation-split` of the images held out to measure the accuracy. The class names (the
folder's, or the data set's) are saved with the model. `--from-preset`
starts from a trained preset of the same architecture: the layers that fit
the new images are kept, the class capsules and the decoder are new, and
`--freeze-backbone` trains those alone.

`train` shows Keras's progress bar, keeps a backup of the run after every
epoch (`OUTPUT/backup`) and resumes from it when started again with the same
`--output` after an interruption, saves `OUTPUT/model.keras` after every
epoch, and ends by printing the test accuracy and writing it, with the
timings, to `OUTPUT/metrics.json`. Every file is written under a temporary
name and renamed into place; those a killed run left are removed when the
next starts, and a full disk ends the run with one line, the epochs finished
so far kept. `OUTPUT/run.json` records the run's options: a
rerun with more `--epochs` continues a finished run, and a rerun with other
options is refused unless `--fresh` starts a new run in the folder.

Each architecture trains with its paper's settings, its class's `RECIPE`
(`applications.Recipe`): `capsnet` in batches of 100 with Adam from 1e-3,
MNIST-like data shifted by up to `--max-shift` pixels; `efficient-capsnet`
in batches of 16 with Adam from 5e-4 decayed by 0.97 every epoch;
`matrix-capsnet` in batches of 32 with Adam from 3e-3 and the spread loss,
whose margin `SpreadMarginSchedule` raises from 0.2 to 0.9 over the run.
`--iterations`, `--conv-filters` and `--primary-capsule-types` size
`capsnet`, the EM options `matrix-capsnet`.
"""

import contextlib
import os
import shutil
import time

from keras_capsules._atomic import check_writable
from keras_capsules._atomic import final_path
from keras_capsules._atomic import reason
from keras_capsules._atomic import remove_stale
from keras_capsules._atomic import write_json
from keras_capsules.cli import _training
from keras_capsules.cli._model import load_model
from keras_capsules.cli._types import data_dir
from keras_capsules.cli._types import image_folder_argument
from keras_capsules.cli._types import non_negative_int
from keras_capsules.cli._types import positive_float
from keras_capsules.cli._types import positive_int
from keras_capsules.cli._types import tempering
from keras_capsules.cli._types import unit_fraction

DATA = ("mnist", "fashion-mnist", "smallnorb")


def recipe(args):
    """The `Recipe` of the architecture `args.model` (the catalog's), with `--learning-rate`."""
    import dataclasses

    own = args.catalog.model_class(args.model).RECIPE
    if getattr(args, "learning_rate", None) is None:
        return own
    return dataclasses.replace(own, learning_rate=args.learning_rate)


def resolve_defaults(args):
    """Fill the options whose default depends on the model, so `run.json` records values.

    A rerun that passes such a default explicitly (`--batch-size 100`) then
    matches the run that left it out.
    """
    from keras_capsules import routing

    own = recipe(args)
    resolved = {
        "batch_size": own.batch_size,
        "learning_rate": own.learning_rate,
        "max_shift": own.max_shift,
        "inverse_temperature": routing.INVERSE_TEMPERATURE,
        "variance_epsilon": routing.VARIANCE_EPSILON,
        "tempering": routing.TEMPERING,
    }
    for name, default in resolved.items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    if getattr(args, "images", None) is not None and args.data is not None:
        raise SystemExit(
            f"keras-capsules train: give --images or --data, not both (got --data {args.data})"
        )
    if getattr(args, "images", None) is None and args.data is None:
        args.data = "mnist"
    return args


def add_parser(commands, catalog):
    """Add the `train` subcommand and its arguments to `commands` (argparse subparsers)."""
    train = commands.add_parser(
        "train", help="train a capsule network on a data set or on a folder of your images"
    )
    architectures = catalog.architectures()
    train.add_argument(
        "model",
        choices=tuple(architectures),
        help="; ".join(f"{name}: {text}" for name, text in architectures.items()),
    )
    _add_run_options(train.add_argument_group("training run"))
    _add_image_options(train.add_argument_group("your own images (--images)"))
    _add_model_options(train.add_argument_group("model sizes"))
    _add_em_options(train.add_argument_group("EM routing (matrix-capsnet)"))
    return train


def _add_image_options(group):
    group.add_argument(
        "--images",
        type=image_folder_argument,
        default=None,
        metavar="DIR",
        help="train on a folder with one subfolder of images (PNG, JPEG, BMP, GIF) per class, "
        "instead of --data",
    )
    group.add_argument(
        "--image-size",
        type=positive_int,
        nargs=2,
        default=None,
        metavar=("H", "W"),
        help="resize every image to H x W pixels (default: the commonest size)",
    )
    group.add_argument(
        "--color-mode",
        choices=("grayscale", "rgb"),
        default=None,
        help="default: grayscale when every image is grey, else rgb",
    )
    group.add_argument(
        "--validation-split",
        type=unit_fraction,
        default=0.2,
        help="fraction of the images held out for the accuracy (0.2)",
    )
    group.add_argument(
        "--skip-bad-images",
        action="store_true",
        help="pass over files that cannot be decoded (counted) instead of stopping",
    )
    group.add_argument(
        "--from-preset",
        default=None,
        metavar="NAME",
        help="start from a trained preset of the same architecture (applications.list_presets()"
        " or a preset folder): its layers that fit are kept, the class capsules are new",
    )
    group.add_argument(
        "--freeze-backbone",
        action="store_true",
        help="train the class capsules and decoder alone (model.backbone.trainable = False)",
    )


def _add_run_options(group):
    group.add_argument("--epochs", type=positive_int, default=1)
    group.add_argument(
        "--data",
        choices=DATA,
        default=None,
        help="the data set, when no --images (mnist); smallnorb is read from --data-dir",
    )
    group.add_argument(
        "--batch-size",
        type=positive_int,
        default=None,
        help="default: the architecture's recipe (applications.CapsNet.RECIPE and so on): "
        "100 for capsnet, 16 for efficient-capsnet, 32 for matrix-capsnet",
    )
    group.add_argument(
        "--learning-rate",
        type=positive_float,
        default=None,
        help="Adam's initial learning rate; default: the architecture's recipe, 1e-3 "
        "(capsnet), 5e-4 (efficient-capsnet, decayed by 0.97 per epoch), 3e-3 (matrix-capsnet)",
    )
    group.add_argument("--output", default="runs/mnist", help="folder for checkpoints and metrics")
    group.add_argument(
        "--data-dir",
        type=data_dir,
        default=None,
        help="folder of the MNIST IDX or smallNORB .mat files",
    )
    group.add_argument(
        "--max-shift",
        type=non_negative_int,
        default=None,
        help="MNIST and Fashion-MNIST: augmentation shift in pixels (the recipe's, 2)",
    )
    group.add_argument(
        "--train-size", type=positive_int, default=None, help="use the first N images"
    )
    group.add_argument(
        "--test-size", type=positive_int, default=None, help="evaluate on the first N"
    )
    group.add_argument("--seed", type=non_negative_int, default=None)
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
        "callbacks and the progress bar see every N-th (1; more can pay on a GPU, not on PyTorch)",
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
        help="routing iterations (capsnet, matrix-capsnet)",
    )
    group.add_argument("--conv-filters", type=positive_int, default=256, help="capsnet: Conv1")
    group.add_argument(
        "--primary-capsule-types",
        type=positive_int,
        default=32,
        help="capsnet",
    )


def _add_em_options(group):
    for letter, default in zip("ABCD", (32, 32, 32, 32)):
        group.add_argument(
            f"-{letter}",
            type=positive_int,
            default=default,
            help=f"{letter} of the paper",
        )
    group.add_argument(
        "--inverse-temperature",
        type=positive_float,
        default=None,
        help="final lambda (0.01)",
    )
    group.add_argument(
        "--variance-epsilon",
        type=positive_float,
        default=None,
        help="variance floor (1e-4)",
    )
    group.add_argument(
        "--tempering",
        type=tempering,
        default=None,
        help="E-step exponent tau, R ~ (a p)^tau, one number or one per E-step "
        "separated by commas (0.1; 1 is the paper's E-step)",
    )
    group.add_argument(
        "--normalization",
        choices=("types_and_positions", "positions"),
        default="types_and_positions",
        help="how a convolutional capsule layer shares a child's R: over types and "
        "positions (the paper's text) or per type over positions (the authors' code)",
    )
    group.add_argument(
        "--inverse-temperature-schedule",
        choices=("rescaled", "authors"),
        default="rescaled",
        help="lambda rescaled to end at --inverse-temperature, or the authors' "
        "0.01 (1 - 0.95^(t+1))",
    )


def _build_model(args, steps_per_epoch, spec, sizes):
    """The model `args` ask for, for the data `spec` describes (its shape, classes, scale).

    `sizes` are the architecture's own arguments, `_model_arguments(args)`.
    """
    from keras_capsules.cli._memory import check_fits
    from keras_capsules.layers import ImageConverter

    cls = args.catalog.model_class(args.model)
    arguments = {
        "input_shape": spec["input_shape"],
        "class_names": spec["class_names"],
        "image_converter": ImageConverter(scale=spec["scale"]),
        "compile": False,
    }
    if args.from_preset is not None:
        try:
            model = cls.from_preset(args.from_preset, **arguments)
        except (ValueError, ImportError, OSError) as error:
            raise SystemExit(
                f"keras-capsules train: --from-preset {args.from_preset}: {error}"
            ) from None
        print(
            f"From the preset {args.from_preset}: {', '.join(model.preset_layers) or 'no layer'} "
            "kept",
            flush=True,
        )
    else:
        arguments.update(sizes)
        try:
            check_fits(lambda: cls(**arguments), args.batch_size)
            model = cls(**arguments)
        except ValueError as error:  # the sizes the architecture cannot take, in one line
            sized = " (the images' size: --image-size)" if "`input_shape`" in str(error) else ""
            raise SystemExit(f"keras-capsules train: {error}{sized}") from None
    if args.freeze_backbone:
        model.backbone.trainable = False
    model.compile(optimizer=recipe(args).optimizer(steps_per_epoch))
    return model


def _model_arguments(args):
    """The architecture's arguments the options set, checked once: a bad one stops the run."""
    try:
        return args.catalog.model_arguments(args.model, args)
    except ValueError as error:
        raise SystemExit(f"keras-capsules {args.command}: {error}") from None


def _datasets(args, batch_size, summary=None):
    """`(train_dataset, test, train_count, test_count, spec)`: the data and the model it needs.

    `test` is `(x_test, y_test)` or a test dataset; `spec` holds the model's
    `input_shape`, `class_names` and pixel `scale`, and the data's `fingerprint`
    (`run.json` records it; a resume checks it). A folder that cannot be read,
    or holds no training or test images, ends the command with one line that
    says so. `summary` is `--images`' `FolderSummary`, checked already.
    """
    try:
        if args.images is not None:
            return _image_datasets(args, batch_size, summary)
        return _read_datasets(args, batch_size)
    except ValueError as error:
        raise SystemExit(f"keras-capsules {args.command}: {error}") from None


def _check_not_empty(args, x_train, x_test):
    for images, split in ((x_train, "training"), (x_test, "test")):
        if len(images) == 0:
            raise ValueError(f"{args.data_dir or 'the data'} holds no {split} images")


def check_image_folder(args, min_classes=2):
    """The `image_folder.FolderSummary` of `--images`, checked file by file with a progress bar.

    The folder is listed once; the files listed are those checked, in the
    order training reads them (`image_folder.check_folder`). `min_classes`
    is the fewest class folders accepted (1 for `evaluate`).
    """
    import keras

    from keras_capsules.datasets import image_folder

    listing = image_folder.list_folder(args.images, min_classes=min_classes)
    total = listing.total
    verbose = getattr(args, "verbose", 1)
    progress = None
    if verbose and total:
        print(f"Checking the {total} images in {args.images}", flush=True)
        progress = keras.utils.Progbar(total, verbose=verbose)
    summary = image_folder.check_folder(
        listing,
        image_size=args.image_size,
        color_mode=args.color_mode,
        skip_bad_images=getattr(args, "skip_bad_images", False),
        progress=progress,
    )
    classes = ", ".join(f"{n} ({c})" for n, c in zip(summary.class_names, summary.counts))
    print(
        f"{summary.images} images of {len(summary.class_names)} classes: {classes}; read as "
        f"{summary.image_size[0]}x{summary.image_size[1]} {summary.color_mode}",
        flush=True,
    )
    if summary.skipped:
        print(
            f"Skipped {len(summary.skipped)} file(s) that cannot be decoded, e.g. "
            f"{image_folder.shown(summary.skipped[0])}",
            flush=True,
        )
    return summary


def _image_datasets(args, batch_size, summary):
    from keras_capsules.datasets import image_folder

    held_out = int(args.validation_split * summary.images)
    if held_out == 0 or held_out == summary.images:
        raise ValueError(
            f"--validation-split {args.validation_split} of {summary.images} images leaves "
            "no training or no validation images"
        )
    train_ds, test_ds = image_folder.load_folder(
        summary, batch_size, validation_split=args.validation_split, seed=args.seed
    )
    spec = {
        "input_shape": (*summary.image_size, summary.channels),
        "class_names": summary.class_names,
        "scale": 1.0 / 255.0,
        "fingerprint": summary.fingerprint,
    }
    return train_ds, test_ds, summary.images - held_out, held_out, spec


def _read_datasets(args, batch_size):
    if args.data == "smallnorb":
        from keras_capsules.datasets import smallnorb

        (x_train, y_train, _), (x_test, y_test, _) = smallnorb.load_data(args.data_dir)
        x_train, y_train = x_train[: args.train_size], y_train[: args.train_size]
        x_test, y_test = x_test[: args.test_size], y_test[: args.test_size]
        _check_not_empty(args, x_train, x_test)
        train_ds = smallnorb.training_pipeline(x_train, y_train, batch_size, seed=args.seed)
        test_ds = smallnorb.test_pipeline(x_test, y_test, batch_size)
        spec = {"input_shape": (32, 32, 2), "class_names": smallnorb.CLASS_NAMES, "scale": None}
        spec["fingerprint"] = _training.builtin_fingerprint(
            args.data, smallnorb, len(x_train), len(x_test)
        )
        return train_ds, test_ds, len(x_train), len(x_test), spec
    from keras_capsules import datasets
    from keras_capsules.datasets import mnist

    data = getattr(datasets, args.data.replace("-", "_"))
    (x_train, y_train), (x_test, y_test) = data.load_data(args.data_dir)
    x_train, y_train = x_train[: args.train_size], y_train[: args.train_size]
    x_test, y_test = x_test[: args.test_size], y_test[: args.test_size]
    _check_not_empty(args, x_train, x_test)
    train_ds = mnist.training_pipeline(
        x_train, y_train, batch_size=batch_size, max_shift=args.max_shift, seed=args.seed
    )
    names = getattr(data, "CLASS_NAMES", tuple(str(digit) for digit in range(10)))
    spec = {"input_shape": (28, 28, 1), "class_names": tuple(names), "scale": 1.0 / 255.0}
    spec["fingerprint"] = _training.builtin_fingerprint(args.data, data, len(x_train), len(x_test))
    return train_ds, (x_test[..., None], y_test), len(x_train), len(x_test), spec


def _fit_and_evaluate(args, model, dataset, test, train_count, batch_size, initial_epoch=0):
    backup_dir = os.path.join(args.output, "backup")
    if _training.usable_backup(backup_dir):
        print(f"Resuming the interrupted run from {backup_dir}", flush=True)
    callbacks = _training.fit_callbacks(args.output)
    callbacks.extend(recipe(args).callbacks(args.epochs * -(-train_count // batch_size)))
    counter = _training.finite_loss_counter()
    callbacks.append(counter)
    multi_process = _multi_process(args)
    steps_per_epoch = None
    if multi_process:  # Keras's distribution of the data set loses its length
        dataset, steps_per_epoch = dataset.repeat(), -(-train_count // batch_size)
    start = time.time()
    try:
        model.fit(
            dataset,
            steps_per_epoch=steps_per_epoch,
            epochs=args.epochs,
            initial_epoch=initial_epoch,
            callbacks=callbacks,
            verbose=args.verbose,
            shuffle=False,
        )
    except BaseException:
        _training.close_files(callbacks)
        raise
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
    sizes = _model_arguments(args)
    summary = None
    if args.images is not None:  # every image checked before anything is written
        try:
            summary = check_image_folder(args)
        except ValueError as error:
            raise SystemExit(f"keras-capsules train: {error}") from None
    if args.images is None and args.data != "smallnorb":
        from keras_capsules.datasets import mnist

        if args.max_shift > mnist.largest_shift():
            raise SystemExit(
                f"keras-capsules train: --max-shift must be at most {mnist.largest_shift()}: a "
                f"larger shift can move a digit out of the 28x28 frame (got {args.max_shift})"
            )
    if os.path.exists(args.output) and not os.path.isdir(args.output):
        raise SystemExit(
            f"keras-capsules train: --output {args.output} is a file; name a folder for the run"
        )
    if _multi_process(args):
        from keras_capsules import distribute

        try:
            distribute.check_process_variables(coordinator_port=True)
        except ValueError as error:
            raise SystemExit(f"keras-capsules train: {error}") from None
    worker_folder = _worker_folder(args)
    if worker_folder is not None:
        args.output = worker_folder
    os.makedirs(args.output, exist_ok=True)
    check_writable(args.output)  # before training, not after it
    with _training.locked(args.output):  # one run at a time in a folder
        try:
            _remove_stale(args.output)
            return _run(args, summary, sizes)
        except OSError as error:  # a full disk, a folder gone: one line, the backup kept
            where = final_path(error.filename) if error.filename else args.output
            raise SystemExit(
                f"keras-capsules train: cannot write {where}: {reason(error)}. "
                "The epochs finished so far are kept: free the space and run the same "
                "command again to resume."
            ) from None


def _remove_stale(output):
    """Remove the temporary files a killed run left in `output` and its backup, saying so."""
    removed = [
        os.path.join(folder, name)
        for folder in (output, os.path.join(output, "backup"))
        for name in remove_stale(folder)
    ]
    if removed:
        print(
            f"Removed {len(removed)} temporary file(s) left by a run that ended before "
            f"renaming them: {', '.join(removed)}",
            flush=True,
        )


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


def _run(args, summary, sizes):
    import keras

    from keras_capsules._compile import compile_again

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
            dataset, test, train_count, test_count, spec = _datasets(args, batch_size, summary)
            _training.check_same_data(args, spec["fingerprint"])  # before a resume reads it
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
                model = _build_model(args, -(-train_count // batch_size), spec, sizes)
            steps_per_execution = 1 if _multi_process(args) else args.steps_per_execution
            if steps_per_execution not in (None, model.steps_per_execution):
                compile_again(model, steps_per_execution=steps_per_execution)
            _write_run(args, spec["fingerprint"])  # the model built, the data checked
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


def _write_run(args, fingerprint):
    """Write `OUTPUT/run.json`: the run's options and the fingerprint of its data.

    Written once the model is built and the data checked, so that a command
    that failed before (a bad preset, a bad image) leaves nothing that
    refuses the corrected command.
    """
    write_json(
        os.path.join(args.output, "run.json"),
        {"options": _training.run_config(args), "data": fingerprint},
    )

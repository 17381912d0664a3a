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
The architecture's own options (its sizes, its routing's settings) are
declared by its family, as its class's `OPTIONS`: `keras-capsules train ARCH
--help` lists them beside the options of every run, and another
architecture's option, or an option that needs another (`--image-size`
without `--images`), ends the command in one line.
"""

import os
import shutil
import time

from keras_capsules._atomic import final_path
from keras_capsules._atomic import output_folder
from keras_capsules._atomic import reason
from keras_capsules._atomic import remove_stale
from keras_capsules._atomic import write_json
from keras_capsules._devices import BFLOAT16_CPU_FLAGS
from keras_capsules.cli import _training
from keras_capsules.cli._distribution import check_steps_per_execution
from keras_capsules.cli._distribution import distribution_scope
from keras_capsules.cli._distribution import multi_process
from keras_capsules.cli._distribution import worker_folder
from keras_capsules.cli._model import load_model
from keras_capsules.cli._train_data import check_image_folder
from keras_capsules.cli._train_data import datasets
from keras_capsules.cli._train_options import SHIFTED
from keras_capsules.cli._train_options import VALIDATION_SPLIT
from keras_capsules.cli._train_options import add_architecture_parsers
from keras_capsules.cli._train_options import option_values
from keras_capsules.cli._train_options import unknown_arguments as unknown_arguments
from keras_capsules.cli._train_options import unneeded


def model_class(args):
    """The class `train` builds: the architecture's, or its MultiMNIST network's."""
    data = getattr(args, "data", None)
    cls = args.catalog.model_class(args.model, data)
    if cls is None:
        catalog = args.catalog
        able = [name for name in catalog.architectures() if catalog.model_class(name, data)]
        raise SystemExit(
            f"keras-capsules train {args.model}: --data {data} needs an architecture with a "
            f"network for it: {', '.join(able)}"
        )
    return cls


def recipe(args):
    """The `Recipe` of the class `train` builds (`model_class`), with `--learning-rate`."""
    import dataclasses

    own = model_class(args).RECIPE
    if getattr(args, "learning_rate", None) is None:
        return own
    return dataclasses.replace(own, learning_rate=args.learning_rate)


def resolve_defaults(args):
    """Check which options were given, then fill the defaults, so `run.json` records values.

    An option that does not apply to the run (`--image-size` without
    `--images`) ends the command in one line. The options whose default
    depends on the architecture are then filled from its recipe and its
    declared options, so a rerun that passes such a default explicitly
    (`--batch-size 100`) matches the run that left it out.
    """
    prefix = "keras-capsules train"
    if getattr(args, "images", None) is not None and args.data is not None:
        raise SystemExit(f"{prefix}: give --images or --data, not both (got --data {args.data})")
    problem = unneeded(args)
    if problem is not None:
        raise SystemExit(f"{prefix}: {problem}")
    own = recipe(args)
    resolved = {
        "batch_size": own.batch_size,
        "learning_rate": own.learning_rate,
        "max_shift": own.max_shift,
        "validation_split": VALIDATION_SPLIT,
    }
    for name, default in resolved.items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    if args.precision == "auto":
        args.precision = own.auto_precision()
        print(f"--precision auto: {args.precision} ({_why(args)})", flush=True)
    if getattr(args, "images", None) is None and args.data is None:
        args.data = "mnist"
    return args


def _why(args):
    """Why `--precision auto` chose what it did, in a clause."""
    if args.precision == "mixed_bfloat16":
        return "this CPU computes bfloat16 natively, and the recipe trains faster in it"
    pays = [
        name
        for name in args.catalog.architectures()
        if args.catalog.model_class(name).RECIPE.bfloat16_on_cpu
    ]
    return (
        f"mixed_bfloat16 only for {', '.join(pays)} on TensorFlow, on a CPU with "
        f"{' or '.join(BFLOAT16_CPU_FLAGS)} and no GPU"
    )


def add_parser(commands, catalog):
    """Add the `train` subcommand, one subcommand per architecture with its options.

    Each `train ARCH` takes the options of every run and the architecture's
    own, `catalog.options(ARCH)`: `train ARCH --help` lists those and no
    other architecture's.
    """
    train = commands.add_parser(
        "train",
        help="train a capsule network on a data set or on a folder of your images",
        description="Train a capsule network: keras-capsules train ARCH --help lists the "
        "options of the architecture ARCH.",
    )
    add_architecture_parsers(train, catalog)
    return train


def _build_model(args, steps_per_epoch, spec, sizes):
    """The model `args` ask for, for the data `spec` describes (its shape, classes, scale).

    `sizes` are the architecture's own arguments, `_model_arguments(args)`.
    """
    from keras_capsules.cli._memory import check_fits
    from keras_capsules.layers import ImageConverter

    cls = model_class(args)
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
            classes = len(spec["class_names"]) if spec["class_names"] else 10
            cheaper = args.catalog.cheaper_option(args.model, spec["input_shape"], classes)
            check_fits(lambda: cls(**arguments), args.batch_size, cheaper=cheaper)
            model = cls(**arguments)
        except ValueError as error:  # the sizes the architecture cannot take, in one line
            sized = " (the images' size: --image-size)" if "`input_shape`" in str(error) else ""
            raise SystemExit(f"keras-capsules train: {error}{sized}") from None
    if args.freeze_backbone:
        model.backbone.trainable = False
    model.compile(optimizer=recipe(args).optimizer(steps_per_epoch))
    return model


def _model_arguments(args):
    """The architecture's arguments its options set, checked once: a bad one stops the run."""
    values = option_values(args)
    if args.from_preset is not None:
        return {}
    try:
        return args.catalog.model_arguments(args.model, values)
    except ValueError as error:
        raise SystemExit(f"keras-capsules train: {error}") from None


def _fit_and_evaluate(
    args, model, dataset, test, train_count, batch_size, initial_epoch=0, spec=None
):
    spec = spec or {}
    steps_per_epoch = spec.get("steps_per_epoch")
    # Data streamed across epochs is tested after each: history.csv holds its learning curve.
    validation = test if spec.get("learning_curve") else None
    backup_dir = os.path.join(args.output, "backup")
    if _training.usable_backup(backup_dir):
        print(f"Resuming the interrupted run from {backup_dir}", flush=True)
    callbacks = _training.fit_callbacks(args.output)
    callbacks.extend(recipe(args).callbacks(args.epochs * -(-train_count // batch_size)))
    counter = _training.finite_loss_counter()
    callbacks.append(counter)
    several = multi_process(args)
    if several:  # Keras's distribution of the data set loses its length
        dataset, steps_per_epoch = dataset.repeat(), -(-train_count // batch_size)
    start = time.time()
    try:
        model.fit(
            dataset,
            steps_per_epoch=steps_per_epoch,
            epochs=args.epochs,
            initial_epoch=initial_epoch,
            validation_data=validation,
            callbacks=callbacks,
            verbose=args.verbose,
            shuffle=False,
        )
    except BaseException:
        _training.close_files(callbacks)
        raise
    train_seconds = time.time() - start  # the model saver saved model.keras each epoch

    start = time.time()
    if isinstance(test, tuple) and several:
        import tensorflow as tf  # Keras's data for processes of one run: a tf.data.Dataset

        test = tf.data.Dataset.from_tensor_slices(test).batch(batch_size)
    if isinstance(test, tuple):
        results = model.evaluate(*test, batch_size=batch_size, verbose=0, return_dict=True)
    else:
        steps = len(test) if several else None  # known before Keras distributes it
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
    if args.images is None and args.data in SHIFTED:
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
    if multi_process(args):
        from keras_capsules import distribute

        try:
            distribute.check_process_variables(coordinator_port=True)
        except ValueError as error:
            raise SystemExit(f"keras-capsules train: {error}") from None
    worker = worker_folder(args)
    if worker is not None:
        args.output = worker
    output_folder(args.output, "train")  # made and writable before training, not after it
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


def _run(args, summary, sizes):
    import keras

    from keras_capsules._compile import compile_again

    check_steps_per_execution(args)
    batch_size = args.batch_size
    finished = _training.previous_run(args)
    if finished and args.epochs <= finished:
        print(
            f"The run in {args.output} has finished {finished} epoch(s); nothing to train. "
            f"Pass --epochs above {finished} to continue it, or --fresh to start over."
        )
        return 0
    scope = distribution_scope(args)
    previous_policy = keras.mixed_precision.dtype_policy()
    try:
        with scope as engine:
            if args.seed is not None:
                keras.utils.set_random_seed(args.seed)
            start = finished or _training.backup_epoch(os.path.join(args.output, "backup"))
            dataset, test, train_count, test_count, spec = datasets(
                args, batch_size, summary, initial_epoch=start
            )
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
            steps_per_execution = 1 if multi_process(args) else args.steps_per_execution
            if steps_per_execution not in (None, model.steps_per_execution):
                compile_again(model, steps_per_execution=steps_per_execution)
            _write_run(args, spec["fingerprint"])  # the model built, the data checked
            results, *seconds, counter = _fit_and_evaluate(
                args,
                model,
                dataset,
                test,
                train_count,
                batch_size,
                initial_epoch=finished,
                spec=spec,
            )
    finally:
        keras.mixed_precision.set_dtype_policy(previous_policy)
    accuracy = results[spec.get("metric", "accuracy")]
    counts = (train_count, test_count, batch_size)
    _report(args, accuracy, results, counts, replicas, counter, seconds)
    return 0


def _report(args, accuracy, results, counts, replicas, counter, seconds):
    """Write `metrics.json`, drop the backup it makes redundant, and say where things are."""
    import keras

    train_count, test_count, batch_size = counts
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
        "test_accuracy": float(accuracy),
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
    examples = "pairs: both digits right" if args.data == "multimnist" else "images"
    print(f"Test accuracy: {metrics['test_accuracy']:.4f} ({test_count} {examples})")
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

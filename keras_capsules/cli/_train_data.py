"""The data `train` trains and tests on: a data set, or a folder of your images, checked."""

from keras_capsules.cli import _training


def datasets(args, batch_size, summary=None, initial_epoch=0):
    """`(train_dataset, test, train_count, test_count, spec)`: the data and the model it needs.

    `test` is `(x_test, y_test)` or a test dataset; `spec` holds the model's
    `input_shape`, `class_names` and pixel `scale`, and the data's `fingerprint`
    (`run.json` records it; a resume checks it); for data streamed across
    epochs (MultiMNIST) also `steps_per_epoch`, the name of the accuracy
    `metric` where it is not `"accuracy"`, and `learning_curve`: test after
    every epoch (`history.csv` records it). A folder that cannot be read,
    or holds no training or test images, ends the command with one line that
    says so. `summary` is `--images`' `FolderSummary`, checked already;
    `initial_epoch` is the epoch a resumed run starts at.
    """
    try:
        if args.images is not None:
            return image_datasets(args, batch_size, summary)
        if args.data == "multimnist":
            return multimnist_datasets(args, batch_size, initial_epoch)
        return read_datasets(args, batch_size)
    except ValueError as error:
        raise SystemExit(f"keras-capsules {args.command}: {error}") from None


def check_not_empty(args, x_train, x_test):
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


def image_datasets(args, batch_size, summary):
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


def read_datasets(args, batch_size):
    if args.data == "smallnorb":
        from keras_capsules.datasets import smallnorb

        (x_train, y_train, _), (x_test, y_test, _) = smallnorb.load_data(args.data_dir)
        x_train, y_train = x_train[: args.train_size], y_train[: args.train_size]
        x_test, y_test = x_test[: args.test_size], y_test[: args.test_size]
        check_not_empty(args, x_train, x_test)
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
    check_not_empty(args, x_train, x_test)
    train_ds = mnist.training_pipeline(
        x_train, y_train, batch_size=batch_size, max_shift=args.max_shift, seed=args.seed
    )
    names = data.CLASS_NAMES
    spec = {"input_shape": (28, 28, 1), "class_names": tuple(names), "scale": 1.0 / 255.0}
    spec["fingerprint"] = _training.builtin_fingerprint(args.data, data, len(x_train), len(x_test))
    return train_ds, (x_test[..., None], y_test), len(x_train), len(x_test), spec


def multimnist_test(data_dir=None, test_size=None):
    """The first `test_size` pairs of `multimnist.evaluation_set`: images, labels, digits."""
    from keras_capsules.datasets import multimnist

    test = multimnist.evaluation_set(data_dir)
    return {k: test[k][:test_size] for k in ("images", "labels", "digits")}


def multimnist_datasets(args, batch_size, initial_epoch=0):
    """MultiMNIST pairs made on the fly from the MNIST training digits, and the fixed test set.

    An epoch is one pass over the training digits, each the base digit of one
    pair with a digit of another class (Sabour et al. draw 1,000 passes);
    epoch `e` reads pass `e` of the stream `multimnist.training_pipeline`
    draws from `--seed`, so a resumed run reads on where it stopped.
    """
    import tensorflow as tf

    from keras_capsules.datasets import mnist
    from keras_capsules.datasets import multimnist

    (x_train, y_train), _ = mnist.load_data(args.data_dir)
    x_train, y_train = x_train[: args.train_size], y_train[: args.train_size]
    if len(x_train) == 0:
        raise ValueError(f"{args.data_dir or 'the data'} holds no training images")
    steps_per_epoch = len(x_train) // batch_size
    if steps_per_epoch == 0:
        raise ValueError(
            f"--batch-size {batch_size} is larger than the {len(x_train)} training digits"
        )
    per_epoch = steps_per_epoch * batch_size
    seen = initial_epoch * per_epoch
    passes = -(-args.epochs * per_epoch // len(x_train))
    train_ds = multimnist.training_pipeline(
        x_train,
        y_train,
        batch_size=batch_size,
        pairs_per_digit=passes,
        seed=args.seed or 0,
        as_dict=True,
        drop_remainder=True,
        start=seen,
    ).take((args.epochs - initial_epoch) * steps_per_epoch)
    test = multimnist_test(args.data_dir, args.test_size)
    test_ds = tf.data.Dataset.from_tensor_slices(test).batch(batch_size)
    spec = {
        "input_shape": multimnist.INPUT_SHAPE,
        "class_names": mnist.CLASS_NAMES,
        "scale": 1.0 / 255.0,
        "fingerprint": _training.builtin_fingerprint(
            args.data, mnist, len(x_train), len(test["images"])
        ),
        "steps_per_epoch": steps_per_epoch,
        "metric": "multimnist_accuracy",
        "learning_curve": True,
    }
    return train_ds, test_ds, per_epoch, len(test["images"]), spec

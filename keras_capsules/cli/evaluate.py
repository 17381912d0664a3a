"""`keras-capsules evaluate`: a `.keras` model's or a preset's loss and accuracy on its test set.

    keras-capsules evaluate runs/mnist/model.keras
    keras-capsules evaluate --preset efficient_capsnet_fashion_mnist
    keras-capsules evaluate                # the capsnet_mnist preset
    keras-capsules evaluate runs/photos/model.keras --images photos-test/
    keras-capsules evaluate runs/multimnist/model.keras --data multimnist

A preset is evaluated on the data set it was trained on. A `.keras` model
whose input is a stereo pair (two channels) is evaluated on smallNORB from
`--data-dir`, a MultiMNIST network (two digits per image) on MultiMNIST, any
other on MNIST; `--data` names the data set instead. MultiMNIST is measured
as Sabour et al. measure it, on a fixed test set of 10,000 pairs of MNIST
test digits (one per digit, seeded): a pair is right when its two labels are
the two longest class capsules; the paper's errors are printed beside.
With `--images DIR` (one subfolder of
images per class, named as some or all of the model's classes) the model is
evaluated on those images, resized to its input size, and a table gives each
class's accuracy by name; with some of its classes, the accuracy is over
those classes' images (each label the model's index of its folder's name).
"""

import json

from keras_capsules.cli._model import add_model_arguments
from keras_capsules.cli._model import load_model_or_preset
from keras_capsules.cli._train_options import DATA
from keras_capsules.cli.argument_types import data_dir
from keras_capsules.cli.argument_types import image_folder_argument
from keras_capsules.cli.argument_types import positive_int


def add_parser(commands, catalog):
    """Add the `evaluate` subcommand and its arguments to `commands` (argparse subparsers)."""
    evaluate = commands.add_parser(
        "evaluate", help="evaluate a saved .keras model or a preset on its test set"
    )
    add_model_arguments(evaluate)
    evaluate.add_argument(
        "--data",
        choices=DATA,
        default=None,
        help="the data set (default: the preset's, or the one the model's input implies)",
    )
    evaluate.add_argument("--data-dir", type=data_dir, default=None)
    evaluate.add_argument("--batch-size", type=positive_int, default=32)
    evaluate.add_argument("--test-size", type=positive_int, default=None)
    evaluate.add_argument(
        "--images",
        type=image_folder_argument,
        default=None,
        metavar="DIR",
        help="evaluate on a folder with one subfolder of images per class, named as the "
        "model's classes",
    )
    evaluate.add_argument(
        "--skip-bad-images",
        action="store_true",
        help="pass over files that cannot be decoded (counted) instead of stopping",
    )
    return evaluate


def run(args):
    """Run `keras-capsules evaluate` with parsed arguments; return the exit status."""
    model, data = load_model_or_preset(args, "evaluate")
    if args.images is not None:
        if args.data is not None:
            raise SystemExit("keras-capsules evaluate: give --images or --data, not both")
        return _evaluate_images(model, args)
    data = args.data or data or _implied_data(model)
    try:
        results, accuracy, count = measure(
            model, data, args.data_dir, batch_size=args.batch_size, test_size=args.test_size
        )
    except ValueError as error:
        raise SystemExit(f"keras-capsules evaluate: {error}") from None
    print(json.dumps({k: float(v) for k, v in results.items()}, indent=2))
    if data != "multimnist":
        print(f"Test accuracy: {accuracy:.4f} ({count} images)")
        return 0
    from keras_capsules.datasets import multimnist

    papers = ", ".join(f"{name} {error}%" for name, error in multimnist.PAPER_ERRORS.items())
    print(
        f"MultiMNIST accuracy: {accuracy:.4f} ({count} pairs: both digits are the two longest "
        f"capsules); error {100 * (1 - accuracy):.2f}% (published: {papers})"
    )
    return 0


def measure(model, data, data_dir=None, batch_size=32, test_size=None, verbose="auto"):
    """`(results, accuracy, count)`: `model` evaluated on the test set of `data`.

    The test set `keras-capsules train --data` tests on: the test split of
    `mnist`, `fashion-mnist` or `smallnorb` (read from `data_dir`), or the
    fixed MultiMNIST test set (`_train_data.multimnist_test`), its first
    `test_size` examples if given. `results` are Keras's metrics, `accuracy`
    the data set's measure (`multimnist_accuracy` on MultiMNIST) and `count`
    the examples evaluated. A data set that cannot be read, or a model that
    does not fit it, raises a `ValueError` saying so.
    """
    data = data.replace("_", "-")
    if data == "multimnist":
        return _measure_multimnist(model, data_dir, batch_size, test_size, verbose)
    if data == "smallnorb":
        from keras_capsules.datasets import smallnorb

        _, (x_test, y_test, _) = smallnorb.load_data(data_dir)
    else:
        from keras_capsules import datasets

        _, (x_test, y_test) = getattr(datasets, data.replace("-", "_")).load_data(data_dir)
    x_test, y_test = x_test[:test_size], y_test[:test_size]
    if len(x_test) == 0:
        raise ValueError(f"{data_dir or 'the data'} holds no test images")
    if data == "smallnorb":
        test = smallnorb.test_pipeline(x_test, y_test, batch_size)
        results = model.evaluate(test, return_dict=True, verbose=verbose)
    else:
        results = model.evaluate(
            x_test[..., None], y_test, batch_size=batch_size, return_dict=True, verbose=verbose
        )
    return results, float(results["accuracy"]), len(x_test)


def _implied_data(model):
    """The data set a `.keras` model's input implies: stereo pairs, two digits, or digits."""
    if model.input_shape[-1] == 2:
        return "smallnorb"
    if hasattr(model, "predict_digits"):
        return "multimnist"
    return "mnist"


def _measure_multimnist(model, data_dir, batch_size, test_size, verbose):
    from keras_capsules.cli._train_data import multimnist_test

    if not hasattr(model, "predict_digits"):
        raise ValueError(
            "--data multimnist needs a MultiMNIST network (two digits per image, e.g. "
            f"applications.EfficientCapsNetMultiMNIST); {model.name} is a {type(model).__name__}"
        )
    test = multimnist_test(data_dir, test_size)
    results = model.evaluate(test, batch_size=batch_size, return_dict=True, verbose=verbose)
    return results, float(results["multimnist_accuracy"]), len(test["images"])


def _evaluate_images(model, args):
    """Evaluate `model` on the folder `args.images`; print the accuracy and a table by class."""
    import numpy as np

    from keras_capsules.cli._images import folder_size_and_colour
    from keras_capsules.cli._images import model_classes
    from keras_capsules.cli._train_data import check_image_folder
    from keras_capsules.datasets import image_folder
    from keras_capsules.serving import ServingSpec

    args.image_size, args.color_mode = folder_size_and_colour(model, "evaluate")
    try:
        summary = check_image_folder(args, min_classes=1)  # some of the model's classes will do
    except ValueError as error:
        raise SystemExit(f"keras-capsules evaluate: {error}") from None
    names, order = model_classes(model, summary, "evaluate")
    if len(summary.class_names) < len(names):
        print(
            f"{args.images} holds {len(summary.class_names)} of the model's {len(names)} "
            f"classes: the accuracy is over their images (the model may still answer any of "
            f"its {len(names)} classes)",
            flush=True,
        )
    dataset, _ = image_folder.load_folder(summary, args.batch_size, shuffle=False)
    spec = ServingSpec.of(model)
    scores, labels = [], []
    for images, folder_labels in dataset:
        scores.append(spec.heads(model.predict(np.asarray(images), verbose=0))[0])
        labels.append(np.asarray(folder_labels))
    labels = order[np.concatenate(labels)]
    predicted = np.concatenate(scores).argmax(-1)
    correct = predicted == labels
    print(f"{'class':<24} {'images':>7} {'accuracy':>9}  most often taken for")
    for index in order:
        mine = labels == index
        wrong = predicted[mine & ~correct]
        confused = names[np.bincount(wrong).argmax()] if len(wrong) else "-"
        print(
            f"{names[index][:24]:<24} {int(mine.sum()):>7} {correct[mine].mean():>9.4f}  {confused}"
        )
    print(f"Accuracy: {correct.mean():.4f} ({len(labels)} images)")
    return 0

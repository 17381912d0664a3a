"""The test images `figures` and `explore` draw from: a data set the model was trained on.

With `--images DIR` (one subfolder of images per class, named as the model's
classes), they are those images, resized to the model's input; otherwise the
test set of `--data`, or of the preset's data set, or MNIST's: `mnist` and
`fashion-mnist` (28x28), `multimnist` (pairs of MNIST test digits on 36x36)
or `expanded-mnist` (MNIST test digits placed on a 40x40 canvas,
`affine.expand`). A model whose input is not the data set's is told so.
"""

TEST_SETS = {
    "mnist": (28, 28, 1),
    "fashion-mnist": (28, 28, 1),
    "multimnist": (36, 36, 1),
    "expanded-mnist": (40, 40, 1),
}
"""The data sets `--data` names, and the shape of their images."""


def fail(message, command):
    """End `keras-capsules COMMAND` with `message`."""
    raise SystemExit(f"keras-capsules {command}: {message}")


def test_images(model, args, command, data=None):
    """`(images, labels, pair_labels)`: test images of the model's size and their classes.

    From `--images`, else from the data set `--data` names, else `data` (a
    preset's data set, e.g. `"fashion_mnist"`), else MNIST.
    """
    from keras_capsules import datasets
    from keras_capsules.datasets import affine
    from keras_capsules.datasets import mnist
    from keras_capsules.datasets import multimnist

    if getattr(args, "images", None) is not None:
        return (*folder_images(model, args.images, command), None)
    name = args.data or (data or "mnist").replace("_", "-")
    if name not in TEST_SETS:
        fail(f"no test images of the data set {name!r}: pass --data or --images DIR", command)
    size = tuple(getattr(model, "image_shape", model.input_shape[1:]))
    if size != TEST_SETS[name]:
        fail(
            f"the model takes images of shape {size}, and {name}'s are {TEST_SETS[name]}: "
            f"pass --data ({', '.join(TEST_SETS)}) or --images DIR, a folder of its "
            "classes' images",
            command,
        )
    if name in ("mnist", "fashion-mnist"):
        module = getattr(datasets, name.replace("-", "_"))
        _check_data_classes(model, module, name, command)
        _, (x_test, y_test) = module.load_data(args.data_dir)
        return x_test, y_test, None
    _, (x_test, y_test) = mnist.load_data(args.data_dir)
    if name == "multimnist":
        test = multimnist.test_set(x_test, y_test, seed=args.seed, rule=args.overlay)
        return test["images"], None, test["labels"]
    images, _ = affine.expand(x_test, seed=args.seed)
    return images, y_test, None


def _check_data_classes(model, module, data, command):
    """End the command unless `model` classifies the classes of the data set `data`."""
    names = tuple(module.CLASS_NAMES)
    own = getattr(model, "class_names", None)
    count = getattr(model, "num_classes", None)
    if (own is not None and tuple(own) != names) or (count is not None and count != len(names)):
        shown = ", ".join(own) if own is not None else f"{count} classes"
        fail(
            f"the model's classes ({shown}) are not {data}'s, whose test images it would be "
            "shown: pass --images DIR, a folder of its classes' images",
            command,
        )


def folder_size_and_colour(model, command):
    """`(image_size, color_mode)` of a folder read for `model`; other channels end the command."""
    height, width, channels = model.image_shape
    if channels not in (1, 3):
        fail(f"--images needs a model of grey or RGB images, not {channels} channels", command)
    return (height, width), "grayscale" if channels == 1 else "rgb"


def model_classes(model, summary, command):
    """`(names, order)`: the model's class names and its index of each of the folder's classes.

    The folder may hold some of the model's classes: each folder's label is
    the model's index of its name. A class folder the model has no class for
    ends the command.
    """
    import numpy as np

    from keras_capsules._class_names import class_name

    names = [class_name(model, index) for index in range(model.num_classes)]
    unknown = [name for name in summary.class_names if name not in names]
    if unknown:
        fail(
            f"{summary.directory} has class folders the model does not know: "
            f"{', '.join(unknown[:5])}{' ...' if unknown[5:] else ''}. The model's classes: "
            f"{', '.join(names)}",
            command,
        )
    return names, np.array([names.index(name) for name in summary.class_names])


def folder_images(model, folder, command, limit=2000):
    """`(images, labels)`: up to `limit` images of `folder`'s class subfolders at the model's size.

    The labels are the model's class indices of the folders' names (one
    class folder or more, some or all of the model's classes); a folder the
    model has no class for ends the command.
    """
    import numpy as np

    from keras_capsules.datasets import image_folder

    image_size, color_mode = folder_size_and_colour(model, command)
    try:
        summary = image_folder.check_folder(
            folder, image_size=image_size, color_mode=color_mode, min_classes=1
        )
    except ValueError as error:
        fail(str(error), command)
    _, order = model_classes(model, summary, command)
    dataset, _ = image_folder.load_folder(summary, batch_size=64, seed=0)
    images, labels = [], []
    for x, y in dataset.take(-(-limit // 64)):
        images.append(np.asarray(x))
        labels.append(np.asarray(y))
    images = np.clip(np.concatenate(images)[:limit], 0, 255)
    return images, order[np.concatenate(labels)[:limit]]


def add_test_image_arguments(parser):
    """`--data`, `--data-dir`, `--seed`, `--overlay` and `--images`: the test images."""
    from keras_capsules.cli.argument_types import data_dir
    from keras_capsules.cli.argument_types import image_folder_argument

    parser.add_argument(
        "--data",
        choices=tuple(TEST_SETS),
        default=None,
        help="the test set to draw from (default: the preset's data set, or mnist)",
    )
    parser.add_argument(
        "--data-dir", type=data_dir, default=None, help="folder of the MNIST IDX files"
    )
    parser.add_argument("--seed", type=int, default=1, help="MultiMNIST / canvas test seed")
    parser.add_argument("--overlay", choices=("sum", "max"), default="sum", help="MultiMNIST")
    parser.add_argument(
        "--images",
        type=image_folder_argument,
        default=None,
        metavar="DIR",
        help="draw from a folder with one subfolder of images per class, named as the model's "
        "classes (a model trained with train --images)",
    )

"""The test images `figures` and `explore` draw from, chosen by the model's input size.

28x28 models get the MNIST test set (or their preset's data set, such as
Fashion-MNIST), 36x36 models the MultiMNIST test set, and 40x40 models the
MNIST test digits placed on a 40x40 canvas (`affine.expand`).
"""


def fail(message, command):
    """End `keras-capsules COMMAND` with `message`."""
    raise SystemExit(f"keras-capsules {command}: {message}")


def test_images(model, args, command, data=None):
    """`(images, labels, pair_labels)`: test images of the model's size and their classes.

    `data` names the data set of a 28x28 model (a preset's, e.g. `"fashion_mnist"`);
    MNIST by default.
    """
    from keras_capsules import datasets
    from keras_capsules.datasets import affine
    from keras_capsules.datasets import mnist
    from keras_capsules.datasets import multimnist

    size = tuple(getattr(model, "image_shape", model.input_shape[1:]))
    if size == (28, 28, 1):
        _, (x_test, y_test) = getattr(datasets, data or "mnist").load_data(args.data_dir)
        return x_test, y_test, None
    _, (x_test, y_test) = mnist.load_data(args.data_dir)
    if size == (36, 36, 1):
        test = multimnist.test_set(x_test, y_test, seed=args.seed, rule=args.overlay)
        return test["images"], None, test["labels"]
    if size == (40, 40, 1):
        images, _ = affine.expand(x_test, seed=args.seed)
        return images, y_test, None
    fail(f"no test images for a model of input shape {size}: it needs 28, 36 or 40 px", command)


def add_test_image_arguments(parser):
    """`--data-dir`, `--seed` and `--overlay`: where the test images come from."""
    from keras_capsules.cli._types import data_dir

    parser.add_argument(
        "--data-dir", type=data_dir, default=None, help="folder of the MNIST IDX files"
    )
    parser.add_argument("--seed", type=int, default=1, help="MultiMNIST / canvas test seed")
    parser.add_argument("--overlay", choices=("sum", "max"), default="sum", help="MultiMNIST")

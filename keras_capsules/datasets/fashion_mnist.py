"""Fashion-MNIST, offline: the canonical IDX files shipped with the package, verified by SHA-256.

Fashion-MNIST (Xiao, Rasul and Vollgraf, 2017, Zalando Research) is a drop-in
replacement for MNIST: 28x28 grey images of 10 kinds of clothing
(`CLASS_NAMES`), 60,000 for training and 10,000 for testing, in the same four
IDX files. It is distributed under the MIT licence, Copyright 2017 Zalando SE
(`data/fashion_mnist/LICENSE` in this package).

`load_data()` mirrors `keras.datasets.fashion_mnist.load_data()`, with the same
reader as `mnist.load_data()`: the four files are read from `path` (default:
the copy inside this package) and checked against the SHA-256 of the
decompressed canonical files; a corrupt or truncated file raises a
`ValueError` naming it. When the files are absent, the loader falls back to
TensorFlow Datasets (`tfds.load("fashion_mnist")`), which downloads where a
network exists. The images take `mnist.training_pipeline()` as they are.
"""

import os

from keras_capsules.datasets import _idx_dataset

DEFAULT_PATH = os.path.join(os.path.dirname(__file__), "data", "fashion_mnist")

FILES = {
    "train-images-idx3-ubyte": "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
    "train-labels-idx1-ubyte": "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
    "t10k-images-idx3-ubyte": "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
    "t10k-labels-idx1-ubyte": "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
}
"""SHA-256 of the decompressed canonical files."""

CLASS_NAMES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
"""The name of each label 0-9, as Zalando Research gives them."""

_DATASET = _idx_dataset.IdxDataset(
    title="Fashion-MNIST",
    module="fashion_mnist",
    tfds_name="fashion_mnist",
    default_path=DEFAULT_PATH,
    files=FILES,
)


def _load_tfds():
    return _DATASET.load_tfds()


def load_data(path=None, verify=True):
    """Load Fashion-MNIST as `(x_train, y_train), (x_test, y_test)`.

    Args:
        path: folder holding the four canonical files (`.gz` or
            decompressed). Default: the copy shipped in this package. If
            none of the files is there, TensorFlow Datasets is used.
        verify: check each file against the canonical SHA-256.

    Returns:
        `x_*`: uint8 arrays `(n, 28, 28)` with values in [0, 255];
        `y_*`: uint8 arrays `(n,)` of labels 0-9 (`CLASS_NAMES`). 60,000
        training and 10,000 test examples, 6,000 and 1,000 of each class.

    Raises:
        ValueError: a file is corrupt, truncated, or not the canonical one
            (the message names the file), or only some files are present, or
            none is and TensorFlow Datasets could not load Fashion-MNIST
            either.

    Example:

    >>> from keras_capsules.datasets import fashion_mnist
    >>> (x_train, y_train), (x_test, y_test) = fashion_mnist.load_data()
    >>> x_train.shape, x_test.shape
    ((60000, 28, 28), (10000, 28, 28))
    >>> fashion_mnist.CLASS_NAMES[y_train[0]]
    'Ankle boot'
    """
    return _DATASET.load_data(path, verify, load_tfds=_load_tfds)

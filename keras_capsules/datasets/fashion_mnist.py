"""Fashion-MNIST: the canonical IDX files, verified by SHA-256.

Fashion-MNIST (Xiao, Rasul and Vollgraf, 2017, Zalando Research) is a drop-in
replacement for MNIST: 28x28 grey images of 10 kinds of clothing
(`CLASS_NAMES`), 60,000 for training and 10,000 for testing, in the same four
IDX files. It is distributed under the MIT licence, Copyright 2017 Zalando SE
(`fashion_mnist/LICENSE` in the `keras-capsules-datasets` distribution).

`load_data()` mirrors `keras.datasets.fashion_mnist.load_data()`, with the same
reader as `mnist.load_data()`: the four files are read from `path`, by
default from the `keras-capsules-datasets` distribution, or else from Keras's
cache, where they are downloaded once from `URL`; each is checked against the
SHA-256 of the decompressed canonical files, and a corrupt or truncated file
raises a `ValueError` naming it. The images take `mnist.training_pipeline()`
as they are.
"""

from keras_capsules.datasets import _idx_dataset

URL = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/"
"""Where the canonical `.gz` files are downloaded from when `keras-capsules-datasets` is absent."""

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
    title="Fashion-MNIST", module="fashion_mnist", url=URL, files=FILES
)


def load_data(path=None, verify=True):
    """Load Fashion-MNIST as `(x_train, y_train), (x_test, y_test)`.

    Args:
        path: folder holding the four canonical files (`.gz` or
            decompressed). Default: `keras-capsules-datasets`'s copy, or
            else Keras's cache
            (`$KERAS_HOME/datasets/keras_capsules/fashion_mnist`), where they
            are downloaded once.
        verify: check each file against the canonical SHA-256.

    Returns:
        `x_*`: uint8 arrays `(n, 28, 28)` with values in [0, 255];
        `y_*`: uint8 arrays `(n,)` of labels 0-9 (`CLASS_NAMES`). 60,000
        training and 10,000 test examples, 6,000 and 1,000 of each class.

    Raises:
        ValueError: a file is corrupt, truncated, or not the canonical one
            (the message names the file), or only some files are present, or
            the data sets are not installed and the download failed (the
            message names the distribution to install).

    Example:

    >>> from keras_capsules.datasets import fashion_mnist
    >>> (x_train, y_train), (x_test, y_test) = fashion_mnist.load_data()
    >>> x_train.shape, x_test.shape
    ((60000, 28, 28), (10000, 28, 28))
    >>> fashion_mnist.CLASS_NAMES[y_train[0]]
    'Ankle boot'
    """
    return _DATASET.load_data(path, verify)

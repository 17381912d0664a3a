"""MNIST: the canonical IDX files, verified by SHA-256.

`load_data()` mirrors `keras.datasets.mnist.load_data()`. The four files of
the canonical distribution are read from `path`, by default from the
`keras-capsules-datasets` distribution (installed by the README's commands),
or else from Keras's cache, where they are downloaded once from `URL`; each is
checked against the SHA-256 of the decompressed files published with MNIST,
and a corrupt or truncated file raises a `ValueError` naming it.

`training_pipeline()` is the paper's input pipeline: random shifts of up to
2 pixels in each direction with zero padding, shuffled and batched.
"""

import numpy as np

from keras_capsules._optional import require
from keras_capsules._validation import is_int
from keras_capsules.datasets import _idx_dataset
from keras_capsules.datasets._shift import shifted_windows

URL = "https://storage.googleapis.com/cvdf-datasets/mnist/"
"""Where the canonical `.gz` files are downloaded from when `keras-capsules-datasets` is absent."""

CLASS_NAMES = tuple(str(digit) for digit in range(10))
"""The class names of MNIST, in label order: the digits."""

FILES = {
    "train-images-idx3-ubyte": "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
    "train-labels-idx1-ubyte": "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
    "t10k-images-idx3-ubyte": "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
    "t10k-labels-idx1-ubyte": "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
}
"""SHA-256 of the decompressed canonical files."""

_DATASET = _idx_dataset.IdxDataset(title="MNIST", module="mnist", url=URL, files=FILES)


def load_data(path=None, verify=True):
    """Load MNIST as `(x_train, y_train), (x_test, y_test)`.

    Args:
        path: folder holding the four canonical files (`.gz` or
            decompressed). Default: `keras-capsules-datasets`'s copy, or
            else Keras's cache (`$KERAS_HOME/datasets/keras_capsules/mnist`),
            where they are downloaded once.
        verify: check each file against the canonical SHA-256.

    Returns:
        `x_*`: uint8 arrays `(n, 28, 28)` with values in [0, 255];
        `y_*`: uint8 arrays `(n,)` of digit labels. 60,000 training and
        10,000 test examples.

    Raises:
        ValueError: a file is corrupt, truncated, or not the canonical one
            (the message names the file), or only some files are present, or
            the data sets are not installed and the download failed (the
            message names the distribution to install).

    Example:

    >>> from keras_capsules.datasets import mnist
    >>> (x_train, y_train), (x_test, y_test) = mnist.load_data()
    >>> x_train.shape, x_test.shape
    ((60000, 28, 28), (10000, 28, 28))
    """
    return _DATASET.load_data(path, verify)


def random_shift(images, max_shift=2, seed=None):
    """Shift each image by up to `max_shift` pixels in each direction, zero padded.

    Args:
        images: a `tf.Tensor` of shape `(batch, height, width, channels)`.
        max_shift: largest shift in pixels (2 in the paper).
        seed: optional seed: an integer (for `tf.random.uniform`) or a
            shape `(2,)` integer tensor, then the shifts are stateless
            (`tf.random.stateless_uniform`): the same seed, the same shifts.

    Returns:
        The shifted images, same shape and dtype.
    """
    tf = require("tensorflow", "datasets.mnist.random_shift")

    if max_shift == 0:
        return images
    shape = tf.shape(images)
    if isinstance(seed, int) or seed is None:
        offsets = tf.random.uniform((shape[0], 2), 0, 2 * max_shift + 1, tf.int32, seed=seed)
    else:
        offsets = tf.random.stateless_uniform((shape[0], 2), seed, 0, 2 * max_shift + 1, tf.int32)
    return shifted_windows(images, offsets, (images.shape[1], images.shape[2]), max_shift)


def largest_shift(size=(28, 28)):
    """The largest `max_shift` for images of `size`: a quarter of the shorter side (7 for MNIST).

    MNIST's digits sit in a 20x20 box centred in 28x28, a margin of 4 pixels;
    a shift of up to a quarter of the side moves at most 3 of a digit's 20
    rows or columns out of the frame.

    >>> largest_shift((28, 28))
    7
    """
    return min(size) // 4


def training_pipeline(x, y, batch_size=100, max_shift=2, shuffle=True, seed=None):
    """A `tf.data.Dataset` of `(images, labels)` batches with the paper's augmentation.

    Images come out as float32 `(batch, 28, 28, 1)` with values in [0, 255]
    (what `applications.CapsNetMNIST` takes), each shifted at random by up to
    `max_shift` pixels in each direction with zero padding; a new shift every
    epoch. Works as `fit` input on every Keras backend.

    Args:
        x: images `(n, 28, 28)` or `(n, 28, 28, 1)`.
        y: labels `(n,)` or one-hot `(n, classes)`.
        batch_size: examples per batch (100).
        max_shift: largest shift in pixels (2, as the paper; 0 disables it),
            at most `largest_shift()` (7 for 28x28 images).
        shuffle: reshuffle every epoch.
        seed: optional seed for the shuffle and the shifts.

    Example:

    >>> from keras_capsules.datasets import mnist
    >>> (x, y), _ = mnist.load_data()
    >>> dataset = mnist.training_pipeline(x[:1000], y[:1000], batch_size=100)
    >>> # model.fit(dataset, epochs=1)
    """
    tf = require("tensorflow", "datasets.mnist.training_pipeline")

    x = np.asarray(x)
    if x.ndim == 3:
        x = x[..., None]
    if x.ndim != 4:
        raise ValueError(f"`x` must have shape (n, height, width[, channels]). Received: {x.shape}")
    largest = largest_shift(x.shape[1:3])
    if not is_int(max_shift, numpy=True) or not 0 <= max_shift <= largest:
        raise ValueError(
            f"`max_shift` must be an integer from 0 to {largest}: a larger shift can move a "
            f"digit out of the {x.shape[1]}x{x.shape[2]} frame. Received: max_shift={max_shift!r}"
        )
    if len(x) != len(y):
        raise ValueError(f"`x` and `y` differ in length: {len(x)} and {len(y)}.")
    dataset = tf.data.Dataset.from_tensor_slices((x, np.asarray(y)))
    if shuffle:
        dataset = dataset.shuffle(len(x), seed=seed, reshuffle_each_iteration=True)
    dataset = dataset.batch(batch_size)
    # One stateless seed per batch, drawn anew every epoch (also when `seed` is set).
    seeds = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True).batch(2)
    dataset = tf.data.Dataset.zip((dataset, seeds))
    dataset = dataset.map(
        lambda batch, batch_seed: (
            random_shift(tf.cast(batch[0], tf.float32), max_shift, batch_seed),
            batch[1],
        ),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
    # Batched again, so that the batch is the pipeline's last step: `tf.distribute`
    # and Keras's distribution read the batch size there (same batches, same images).
    batches = -(-len(x) // batch_size)
    dataset = dataset.unbatch().batch(batch_size)
    dataset = dataset.apply(tf.data.experimental.assert_cardinality(batches))
    return dataset.prefetch(tf.data.AUTOTUNE)

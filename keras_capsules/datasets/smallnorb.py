"""smallNORB: a reader of the official NYU files, and the input pipeline of EM routing.

smallNORB (Huang and LeCun, 2005) holds 96x96 grey stereo pairs of 50 toys
in 5 categories, under 6 lightings, 9 elevations and 18 azimuths: 24,300
pairs for training (instances 4, 6, 7, 8, 9) and 24,300 for testing
(instances 0, 1, 2, 3, 5).

`load_data()` reads the six files of the official distribution
(<https://cs.nyu.edu/~ylclab/data/norb-v1.0-small/>), gzipped or not, from a
folder; `read_matrix()` reads any one file of that binary matrix format. A
truncated, oversized or corrupt file raises a `ValueError` naming it. When no
folder is given, or the folder holds none of the files, the loader falls back
to TensorFlow Datasets (`tfds.load("smallnorb")`), which downloads where a
network exists.

`preprocess()`, `training_pipeline()` and `test_pipeline()` follow Hinton,
Sabour and Frosst (2018), "Matrix capsules with EM routing": images are
downsampled to 48x48 and standardized per image; training takes random 32x32
crops with random brightness and contrast, testing the centre 32x32 crop.
"""

import os

import numpy as np

from keras_capsules._optional import require
from keras_capsules.datasets import _files
from keras_capsules.datasets import _norb_format
from keras_capsules.datasets._norb_format import MAGIC
from keras_capsules.datasets._norb_format import read_matrix

__all__ = [
    "CLASS_NAMES",
    "FILES",
    "INFO_COLUMNS",
    "MAGIC",
    "URL",
    "load_data",
    "preprocess",
    "read_matrix",
    "test_pipeline",
    "training_pipeline",
]

URL = "https://cs.nyu.edu/~ylclab/data/norb-v1.0-small/"
"""Home of the official distribution."""

FILES = {
    "train": {
        kind: f"smallnorb-5x46789x9x18x6x2x96x96-training-{kind}.mat"
        for kind in ("dat", "cat", "info")
    },
    "test": {
        kind: f"smallnorb-5x01235x9x18x6x2x96x96-testing-{kind}.mat"
        for kind in ("dat", "cat", "info")
    },
}
"""Names of the official files per split and kind (each may also end in `.gz`)."""

CLASS_NAMES = ("four-legged animal", "human figure", "airplane", "truck", "car")
"""The five categories, in label order."""

INFO_COLUMNS = ("instance", "elevation", "azimuth", "lighting")
"""Columns of the `info` arrays: instance 0-9; elevation 0-8 (30 to 70 degrees in
steps of 5); azimuth 0, 2, ..., 34 (times 10 gives degrees); lighting 0-5."""

_INFO_MAX = (9, 8, 34, 5)

_CHUNK = 512  # stereo pairs read at a time (9.4 MB)


def _load_split(files):
    x = _norb_format.read(files["dat"], _norb_format.check_dat, chunk_rows=_CHUNK)
    y = _norb_format.read(files["cat"], _norb_format.check_cat).astype("int32", copy=False)
    info = _norb_format.read(files["info"], _norb_format.check_info).astype("int32", copy=False)
    if not len(x) == len(y) == len(info):
        raise ValueError(
            "smallNORB files disagree on the number of examples: "
            f"{files['dat']} holds {len(x)}, {files['cat']} {len(y)}, "
            f"{files['info']} {len(info)}."
        )
    if len(y) and (y.min() < 0 or y.max() >= len(CLASS_NAMES)):
        raise ValueError(
            f"smallNORB file {files['cat']} is corrupt: labels range over "
            f"{y.min()}..{y.max()}, expected 0..{len(CLASS_NAMES) - 1}."
        )
    for column, (name, largest) in enumerate(zip(INFO_COLUMNS, _INFO_MAX)):
        values = info[:, column]
        if len(values) and (values.min() < 0 or values.max() > largest):
            raise ValueError(
                f"smallNORB file {files['info']} is corrupt: {name} ranges over "
                f"{values.min()}..{values.max()}, expected 0..{largest}."
            )
    return x, y, info


def _load_tfds():
    tfds = require("tensorflow_datasets", "smallnorb.load_data without a path")

    splits = []
    for split in ("train", "test"):
        data = tfds.as_numpy(tfds.load("smallnorb", split=split, batch_size=-1))
        x = np.empty(data["image"].shape[:3] + (2,), "uint8")
        x[..., 0] = data["image"][..., 0]
        x[..., 1] = data["image2"][..., 0]
        info = np.stack(
            [
                data["instance"],
                data["label_elevation"],
                data["label_azimuth"] * 2,  # TFDS halves the azimuth; undone here.
                data["label_lighting"],
            ],
            axis=1,
        ).astype("int32")
        splits.append((x, data["label_category"].astype("int32"), info))
    return tuple(splits)


def load_data(path=None):
    """Load smallNORB as `(x_train, y_train, info_train), (x_test, y_test, info_test)`.

    The six official files (`FILES`, each `.mat.gz` or `.mat`) are read from
    `path`, and the three files of each split must agree on the number of
    examples. If `path` is `None` or holds none of the six files, TensorFlow
    Datasets (`tfds.load("smallnorb")`) is used instead, which downloads the
    data where a network exists; it gives the same arrays, in another order.

    Args:
        path: folder holding the six files of the official distribution.

    Returns:
        Two tuples of three arrays, 24,300 training and 24,300 test examples.
            `x_*`: uint8 `(n, 96, 96, 2)`, the stereo pair on the last axis
            (channels-last), pixels in [0, 255]. `y_*`: int32 `(n,)`,
            category labels 0-4 (`CLASS_NAMES`). `info_*`: int32 `(n, 4)`,
            instance, elevation, azimuth and lighting (`INFO_COLUMNS`), as in
            the official files.

    Raises:
        ValueError: a file is missing, corrupt or truncated, or the files
            disagree (the message names them); or there are no files and
            TensorFlow Datasets could not load the data either.

    Example:

    With the six official files in `~/data/smallnorb` (not shipped with this
    package):

    >>> from keras_capsules.datasets import smallnorb
    >>> (x_train, y_train, info_train), test = smallnorb.load_data(  # doctest: +SKIP
    ...     "~/data/smallnorb"
    ... )
    >>> x_train.shape, y_train.shape, info_train.shape  # doctest: +SKIP
    ((24300, 96, 96, 2), (24300,), (24300, 4))
    """
    if path is not None:
        path = os.path.expanduser(os.fspath(path))
        found = {
            split: {kind: _files.find(path, name) for kind, name in names.items()}
            for split, names in FILES.items()
        }
        present = [f for names in found.values() for f in names.values() if f is not None]
        if present:
            missing = [
                FILES[split][kind]
                for split, names in found.items()
                for kind, filename in names.items()
                if filename is None
            ]
            if missing:
                raise ValueError(
                    f"smallNORB folder {path} lacks {', '.join(missing)} (.gz or decompressed)."
                )
            return _load_split(found["train"]), _load_split(found["test"])
    try:
        return _load_tfds()
    except Exception as error:
        where = "No folder was given" if path is None else f"Folder {path} holds no smallNORB files"
        raise ValueError(
            f"{where}, and TensorFlow Datasets could not load 'smallnorb' "
            f"({type(error).__name__}: {error}). Download the six files of {URL} "
            "and pass their folder as `path`."
        ) from error


def _preprocess_batch(images):
    """TensorFlow: `(b, h, w, c)` images to float32 `(b, h/2, w/2, c)`, standardized per image."""
    tf = require("tensorflow", "The smallNORB tf.data pipeline")

    images = tf.cast(images, tf.float32)
    images = tf.nn.avg_pool2d(images, ksize=2, strides=2, padding="VALID")
    return tf.image.per_image_standardization(images)


def preprocess(x):
    """Downsample to half size and standardize each image, as EM routing does.

    Each 2x2 block of pixels is averaged (96x96 becomes 48x48), then each
    image, both stereo channels together, is shifted and scaled to zero mean
    and unit variance: `(x - mean) / max(std, 1 / sqrt(x.size))`, as
    `tf.image.per_image_standardization` (the floor only matters for an
    almost uniform image). Standardizing the pair together keeps the
    brightness difference between the two cameras. Works in chunks, so the
    only large allocation is the float32 result (440 MiB for the 24,300
    training pairs).

    Args:
        x: images `(n, height, width, channels)`, height and width even;
            typically uint8 `(n, 96, 96, 2)` from `load_data()`.

    Returns:
        A float32 array `(n, height / 2, width / 2, channels)`.

    Raises:
        ValueError: `x` is not 4-D or its height or width is odd.
    """
    x = np.asarray(x)
    if x.ndim != 4 or x.shape[1] % 2 or x.shape[2] % 2:
        raise ValueError(
            "`x` must have shape (n, height, width, channels) with even height and width. "
            f"Received: {x.shape}"
        )
    out = np.empty((x.shape[0], x.shape[1] // 2, x.shape[2] // 2, x.shape[3]), "float32")
    step = 1024
    for start in range(0, len(x), step):
        out[start : start + step] = _preprocess_batch(x[start : start + step]).numpy()
    return out


def _as_images(x, y, crop, batch_size):
    """Validate pipeline input; return `(x, raw)`, `raw` telling whether to preprocess."""
    x = np.asarray(x)
    y = np.asarray(y)
    if x.ndim != 4:
        raise ValueError(f"`x` must have shape (n, height, width, channels). Received: {x.shape}")
    if x.dtype == np.uint8:
        raw = True
        if x.shape[1] % 2 or x.shape[2] % 2:
            raise ValueError(f"Raw uint8 `x` must have even height and width. Received: {x.shape}")
        size = (x.shape[1] // 2, x.shape[2] // 2)
    elif np.issubdtype(x.dtype, np.floating):
        raw = False
        size = x.shape[1:3]
    else:
        raise ValueError(
            "`x` must be raw uint8 images or preprocessed floating-point images. "
            f"Received dtype: {x.dtype}"
        )
    if len(x) != len(y):
        raise ValueError(f"`x` and `y` differ in length: {len(x)} and {len(y)}.")
    if not isinstance(crop, (int, np.integer)) or not 1 <= crop <= min(size):
        raise ValueError(
            f"`crop` must be an integer from 1 to the image size {tuple(size)}. Received: {crop!r}"
        )
    if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f"`batch_size` must be a positive integer. Received: {batch_size!r}")
    return x, y, raw


def _batches(x, y, raw, batch_size, shuffle, seed):
    """A dataset of `(images, labels)` batches, preprocessed, from the NumPy arrays.

    Shuffles indices and gathers each batch from the arrays in NumPy: the
    arrays are neither copied into TensorFlow (which would double their
    memory) nor into a shuffle buffer.
    """
    tf = require("tensorflow", "The smallNORB tf.data pipeline")

    def take(index):
        return x[index], y[index]

    def gather(index):
        images, labels = tf.numpy_function(
            take, [index], (tf.as_dtype(x.dtype), tf.as_dtype(y.dtype)), stateful=False
        )
        images.set_shape((None,) + x.shape[1:])
        labels.set_shape((None,) + y.shape[1:])
        images = _preprocess_batch(images) if raw else tf.cast(images, tf.float32)
        return images, labels

    indices = tf.data.Dataset.range(len(x))
    if shuffle:
        indices = indices.shuffle(len(x), seed=seed, reshuffle_each_iteration=True)
    return indices.batch(batch_size).map(gather, num_parallel_calls=tf.data.AUTOTUNE)


def training_pipeline(
    x,
    y,
    batch_size=32,
    shuffle=True,
    seed=None,
    crop=32,
    brightness=0.2,
    contrast=(0.5, 1.5),
):
    """A `tf.data.Dataset` of `(images, labels)` training batches, augmented as EM routing.

    Each image is preprocessed (see `preprocess()`) unless it already is, then
    a random `crop` x `crop` patch is cut out (the same place in both stereo
    channels), `delta` is added to it, and its contrast is scaled by `factor`
    about each channel's mean: `(p - mean) * factor + mean`, as
    `tf.image.adjust_contrast`. `delta` is uniform in
    `[-brightness, brightness]` (0.2, in units of the image's standard
    deviation since images are standardized) and `factor` uniform in
    `contrast` (0.5 to 1.5); one draw per image, shared by both channels. The
    paper names these augmentations but not their ranges; these are moderate
    choices. New crops and draws every epoch; with `seed` the sequence of
    epochs is reproducible. Works as `fit` input on every Keras backend.

    The dataset holds no copy of the arrays: it shuffles indices and gathers
    each batch from the NumPy arrays (through `tf.numpy_function`, so it runs
    in the Python process that built it), then preprocesses it on the fly;
    raw uint8 input costs no extra memory, preprocessed input spares the
    per-batch preprocessing.

    Args:
        x: raw uint8 images `(n, 96, 96, 2)` from `load_data()`, preprocessed
            per batch; or floating-point images `(n, 48, 48, 2)` already
            through `preprocess()`, used as they are.
        y: labels `(n,)` (or one-hot `(n, classes)`), passed through.
        batch_size: examples per batch (32).
        shuffle: reshuffle every epoch.
        seed: optional integer seed for the shuffle, the crops and the draws.
        crop: side of the square patch (32, as the paper).
        brightness: largest brightness change (0 disables it).
        contrast: `(lower, upper)` contrast factors (`(1, 1)` or `None`
            disables it).

    Returns:
        A dataset of float32 images `(batch, crop, crop, 2)` and labels.

    Raises:
        ValueError: the arguments are inconsistent (the message says how).

    Example:

    >>> import numpy as np
    >>> from keras_capsules.datasets import smallnorb
    >>> x = np.zeros((64, 96, 96, 2), "uint8")  # smallnorb.load_data(...) in practice
    >>> y = np.zeros(64, "int32")
    >>> train = smallnorb.training_pipeline(x, y, batch_size=32, seed=0)
    >>> images, labels = next(iter(train))  # random 32x32 crops of the 48x48 pairs
    >>> tuple(images.shape), tuple(labels.shape)
    ((32, 32, 32, 2), (32,))
    >>> test = smallnorb.test_pipeline(x, y, batch_size=32)  # centre crops
    >>> # model.fit(train, validation_data=test, epochs=10)
    """
    tf = require("tensorflow", "datasets.smallnorb.training_pipeline")

    x, y, raw = _as_images(x, y, crop, batch_size)
    brightness = float(brightness or 0)
    if brightness < 0:
        raise ValueError(f"`brightness` must be non-negative. Received: {brightness!r}")
    lower, upper = (1.0, 1.0) if contrast is None else contrast
    if not 0 <= lower <= upper:
        raise ValueError(f"`contrast` must be (lower, upper) with 0 <= lower <= upper: {contrast}")
    batches = _batches(x, y, raw, batch_size, shuffle, seed)
    seeds = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True).batch(2)

    def augment(batch_and_labels, pair):
        batch, labels = batch_and_labels
        top_seed, left_seed, brightness_seed, contrast_seed = tf.unstack(
            tf.random.experimental.stateless_split(pair, num=4)
        )
        count = tf.shape(batch)[0]
        height, width = batch.shape[1], batch.shape[2]
        top = tf.random.stateless_uniform(
            (count, 1), top_seed, 0, height - crop + 1, dtype=tf.int32
        )
        left = tf.random.stateless_uniform(
            (count, 1), left_seed, 0, width - crop + 1, dtype=tf.int32
        )
        batch = tf.gather(batch, top + tf.range(crop)[None, :], batch_dims=1)
        batch = tf.gather(batch, left + tf.range(crop)[None, :], axis=2, batch_dims=1)
        if brightness:
            batch += tf.random.stateless_uniform(
                (count, 1, 1, 1), brightness_seed, -brightness, brightness
            )
        if (lower, upper) != (1, 1):
            factor = tf.random.stateless_uniform((count, 1, 1, 1), contrast_seed, lower, upper)
            mean = tf.reduce_mean(batch, axis=(1, 2), keepdims=True)
            batch = (batch - mean) * factor + mean
        return batch, labels

    dataset = tf.data.Dataset.zip((batches, seeds))
    dataset = dataset.map(augment, num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.prefetch(tf.data.AUTOTUNE)


def test_pipeline(x, y, batch_size=32, crop=32):
    """A `tf.data.Dataset` of `(images, labels)` test batches: the centre crop, in order.

    Each image is preprocessed (see `preprocess()`) unless it already is, and
    its centre `crop` x `crop` patch kept (rows and columns 8 to 39 of a 48x48
    image). Deterministic, no augmentation, not shuffled.

    Args:
        x: raw uint8 images `(n, 96, 96, 2)`, or floating-point images
            `(n, 48, 48, 2)` already through `preprocess()`.
        y: labels `(n,)` (or one-hot `(n, classes)`), passed through.
        batch_size: examples per batch (32).
        crop: side of the square patch (32, as the paper).

    Returns:
        A dataset of float32 images `(batch, crop, crop, 2)` and labels.

    Raises:
        ValueError: the arguments are inconsistent (the message says how).
    """
    tf = require("tensorflow", "datasets.smallnorb.test_pipeline")

    x, y, raw = _as_images(x, y, crop, batch_size)
    batches = _batches(x, y, raw, batch_size, False, None)

    def centre(batch, labels):
        top = (batch.shape[1] - crop) // 2
        left = (batch.shape[2] - crop) // 2
        return batch[:, top : top + crop, left : left + crop], labels

    dataset = batches.map(centre, num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.prefetch(tf.data.AUTOTUNE)

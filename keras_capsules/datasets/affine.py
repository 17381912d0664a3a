"""Expanded MNIST and an affNIST-style test set (Sabour et al. 2017, section 5.2).

The paper tests robustness to affine transformations by training on MNIST
digits placed at random on a 40x40 black background, with no other
augmentation, and testing on affNIST, whose test set is the MNIST test digits
under random small affine transformations on a 40x40 canvas (CapsNet 79%,
a CNN 66%, both about 99.2% on the expanded MNIST test set).

- `expand()` places each 28x28 digit at a uniformly random integer position
  on the canvas, with NumPy: fixed arrays, such as the expanded test set.
- `training_pipeline()` does the same on the fly with `tf.data`, a new
  position for every digit every epoch.
- `random_affine()` transforms digits as affNIST does and places them on the
  canvas (bilinear sampling, `keras.ops.image.affine_transform`);
  `affnist_test_set()` applies it to a
  split, e.g. the MNIST test digits.

Every function is deterministic for a given seed. The affine ranges are
those the affNIST page (Tieleman, https://www.cs.toronto.edu/~tijmen/affNIST/)
is widely quoted for; the page itself could not be read from the machines
this project is built on, so check them against it before comparing numbers
with published affNIST results:

| transformation | range, each uniform and independent |
| --- | --- |
| rotation | -20 to +20 degrees |
| shear (horizontal, x += shear * y) | -0.2 to +0.2 |
| horizontal scale | 0.8 to 1.2 |
| vertical scale | 0.8 to 1.2 |
| translation | uniform over the positions keeping the whole transformed digit on the canvas |

This is not affNIST itself (its files are not shipped): the draws differ,
and affNIST's exact order of composition and interpolation are not published
beyond the ranges. For the paper's own test, read affNIST's
`test.mat` and evaluate on it.

Example:

>>> from keras_capsules.datasets import affine, mnist
>>> (x_train, y_train), (x_test, y_test) = mnist.load_data()
>>> train = affine.training_pipeline(x_train, y_train, batch_size=128, seed=0)
>>> expanded_test, _ = affine.expand(x_test, seed=1)
>>> affnist = affine.affnist_test_set(x_test, y_test, seed=2)
>>> expanded_test.shape, affnist["images"].shape
((10000, 40, 40), (10000, 40, 40))
"""

import numpy as np
from keras import ops

from keras_capsules._optional import require
from keras_capsules._validation import is_int
from keras_capsules.datasets._shift import shifted_windows
from keras_capsules.datasets.multimnist import _check_images

CANVAS_SIZE = 40
"""Side of the expanded and affNIST canvases in pixels."""

AFFNIST_RANGES = {
    "rotation": (-20.0, 20.0),
    "shear": (-0.2, 0.2),
    "scale": (0.8, 1.2),
}
"""affNIST's ranges: rotation in degrees, shear factor, scale of each axis."""

_CHUNK = 1000


def _check_seed(seed):
    if not is_int(seed, numpy=True) or seed < 0:
        raise ValueError(f"`seed` must be a non-negative integer. Received: seed={seed!r}")
    return int(seed)


def _check_canvas(canvas_size, x):
    if not is_int(canvas_size, numpy=True) or canvas_size < max(x.shape[1:]):
        raise ValueError(
            "`canvas_size` must be an integer at least the image size "
            f"{max(x.shape[1:])}. Received: canvas_size={canvas_size!r}"
        )
    return int(canvas_size)


def _check_labels(y, n):
    y = np.asarray(y)
    if y.ndim != 1 or len(y) != n:
        raise ValueError(f"`y` must be {n} labels of shape ({n},). Received: y.shape={y.shape}")
    return y


def place(x, offsets, canvas_size=CANVAS_SIZE):
    """Place each image on a black canvas at a given position, with NumPy.

    Args:
        x: uint8 images `(n, height, width)`.
        offsets: integer `(n, 2)`: canvas row and column of each image's
            top-left pixel, in `[0, canvas_size - height]` and
            `[0, canvas_size - width]`.
        canvas_size: side of the canvas (40).

    Returns:
        uint8 `(n, canvas_size, canvas_size)`.
    """
    x = _check_images(x)
    canvas_size = _check_canvas(canvas_size, x)
    n, height, width = x.shape
    offsets = np.asarray(offsets)
    if offsets.shape != (n, 2) or not np.issubdtype(offsets.dtype, np.integer):
        raise ValueError(
            f"`offsets` must be integer of shape ({n}, 2). Received: offsets.shape={offsets.shape}"
        )
    if offsets.min() < 0 or np.any(offsets.max(0) > (canvas_size - height, canvas_size - width)):
        raise ValueError("`offsets` must keep every image on the canvas.")
    canvas = np.zeros((n, canvas_size, canvas_size), np.uint8)
    rows = offsets[:, :1] + np.arange(height)
    cols = offsets[:, 1:] + np.arange(width)
    canvas[np.arange(n)[:, None, None], rows[:, :, None], cols[:, None, :]] = x
    return canvas


def expand(x, seed=0, canvas_size=CANVAS_SIZE):
    """Expanded MNIST as fixed arrays: each digit at a random position on a black canvas.

    Args:
        x: images `(n, 28, 28)` (or `(n, 28, 28, 1)`) in [0, 255].
        seed: non-negative integer seed (0).
        canvas_size: side of the canvas (40, the paper's).

    Returns:
        `(images, offsets)`: uint8 `(n, canvas_size, canvas_size)`, and int64
        `(n, 2)` row and column of each digit's top-left pixel, uniform in
        `[0, canvas_size - 28]` (0 to 12 on the 40x40 canvas).

    Example:

    >>> import numpy as np
    >>> images, offsets = expand(np.full((3, 28, 28), 255, np.uint8), seed=0)
    >>> images.shape, int(images[0].sum() // 255)
    ((3, 40, 40), 784)
    """
    x = _check_images(x)
    seed = _check_seed(seed)
    canvas_size = _check_canvas(canvas_size, x)
    n, height, width = x.shape
    rng = np.random.default_rng(seed)
    offsets = np.stack(
        [
            rng.integers(0, canvas_size - height + 1, size=n),
            rng.integers(0, canvas_size - width + 1, size=n),
        ],
        axis=1,
    )
    return place(x, offsets, canvas_size), offsets


def _place_batch(images, offsets, canvas_size):
    """TensorFlow twin of `place()`: `(b, h, w)` images and `(b, 2)` offsets."""
    pad = (canvas_size - images.shape[1], canvas_size - images.shape[2])
    # Canvas row r shows image row r - offset, which is padded row r - offset + pad.
    return shifted_windows(images, pad - offsets, (canvas_size, canvas_size), pad)


def training_pipeline(x, y, batch_size=100, canvas_size=CANVAS_SIZE, shuffle=True, seed=None):
    """A `tf.data.Dataset` of expanded MNIST `(images, labels)`: new random positions every epoch.

    Each digit is placed at a uniformly random integer position on a black
    `canvas_size` canvas (as `expand()`), drawn anew for every batch of every
    epoch; with `seed`, the sequence of epochs is the same on every run.
    Images come out as float32 `(batch, 40, 40, 1)` in [0, 255], what
    `applications.CapsNet(input_shape=(40, 40, 1))` and
    `applications.BaselineCNN(input_shape=(40, 40, 1))` take.

    Args:
        x: images `(n, 28, 28)` or `(n, 28, 28, 1)` in [0, 255].
        y: labels `(n,)`.
        batch_size: examples per batch (100).
        canvas_size: side of the canvas (40).
        shuffle: reshuffle every epoch.
        seed: optional integer seed of the shuffle and the positions.

    Example:

    >>> from keras_capsules.datasets import affine, mnist
    >>> (x, y), _ = mnist.load_data()
    >>> dataset = affine.training_pipeline(x, y, batch_size=100, seed=0)
    >>> images, labels = next(iter(dataset))
    >>> tuple(images.shape)
    (100, 40, 40, 1)
    """
    tf = require("tensorflow", "datasets.affine.training_pipeline")

    x = _check_images(x)
    canvas_size = _check_canvas(canvas_size, x)
    y = _check_labels(y, len(x))
    if seed is not None:
        seed = _check_seed(seed)
    if not is_int(batch_size) or batch_size < 1:
        raise ValueError(
            f"`batch_size` must be a positive integer. Received: batch_size={batch_size!r}"
        )
    height, width = x.shape[1:]
    limits = tf.constant([canvas_size - height + 1, canvas_size - width + 1], tf.int32)

    def render(batch, batch_seed):
        images, labels = batch
        offsets = tf.random.stateless_uniform(
            (tf.shape(images)[0], 2), batch_seed, minval=0, maxval=tf.int32.max, dtype=tf.int32
        )
        offsets = offsets % limits
        placed = _place_batch(images, offsets, canvas_size)
        return tf.cast(placed, tf.float32)[..., None], labels

    dataset = tf.data.Dataset.from_tensor_slices((x, y))
    if shuffle:
        dataset = dataset.shuffle(len(x), seed=seed, reshuffle_each_iteration=True)
    dataset = dataset.batch(batch_size)
    # One stateless seed per batch, drawn anew every epoch (also when `seed` is set).
    seeds = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True).batch(2)
    dataset = tf.data.Dataset.zip((dataset, seeds))
    dataset = dataset.map(render, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return dataset.prefetch(tf.data.AUTOTUNE)


def affine_matrices(rotation, shear, scale):
    """The 2x2 linear parts of affNIST-style transformations.

    `A = R(rotation) @ H(shear) @ S(scale)` acting on `(x, y)` = (column,
    row) pixel coordinates, rows growing downwards: first each axis is
    scaled, then sheared horizontally (`x += shear * y`), then rotated
    counter-clockwise on the screen by `rotation` degrees.

    Args:
        rotation: `(n,)` angles in degrees.
        shear: `(n,)` horizontal shear factors.
        scale: `(n, 2)` horizontal and vertical scale factors.

    Returns:
        float64 `(n, 2, 2)`.
    """
    theta = np.deg2rad(np.asarray(rotation, np.float64))
    shear = np.asarray(shear, np.float64)
    scale = np.asarray(scale, np.float64)
    cos, sin = np.cos(theta), np.sin(theta)
    rotate = np.stack([np.stack([cos, sin], -1), np.stack([-sin, cos], -1)], -2)
    ones, zeros = np.ones_like(shear), np.zeros_like(shear)
    shear_matrix = np.stack([np.stack([ones, shear], -1), np.stack([zeros, ones], -1)], -2)
    return rotate @ shear_matrix @ (scale[:, :, None] * np.eye(2))


def _resample(x, inverse, offset, canvas_size):
    """The digits on the canvas: canvas point `p` shows source point `inverse @ (p - offset)`.

    Bilinear, zero outside the digit (`keras.ops.image.affine_transform` on
    the digit placed at the top-left of a blank canvas), rounded to uint8.
    """
    n, height, width = x.shape
    source = np.zeros((n, canvas_size, canvas_size, 1), np.float32)
    source[:, :height, :width, 0] = x
    origin = -np.einsum("nij,nj->ni", inverse, offset)
    transform = np.concatenate(
        [inverse[:, 0], origin[:, :1], inverse[:, 1], origin[:, 1:], np.zeros((n, 2))], axis=1
    )
    images = ops.image.affine_transform(
        source,
        transform.astype(np.float32),
        interpolation="bilinear",
        fill_mode="constant",
        fill_value=0,
        data_format="channels_last",
    )
    return np.clip(np.rint(ops.convert_to_numpy(images)[..., 0]), 0, 255).astype(np.uint8)


def _translation_limits(x, linear, canvas_size):
    """Per example, the range of the digit centre's offset from the canvas centre.

    The digit's bounding box of non-zero pixels, widened by one pixel (the
    reach of bilinear sampling), must map inside the canvas.
    """
    n, height, width = x.shape
    centre = np.array([(width - 1) / 2, (height - 1) / 2])
    nonzero_rows, nonzero_cols = x.any(axis=2), x.any(axis=1)
    empty = ~nonzero_rows.any(axis=1)
    top = np.where(empty, centre[1], np.argmax(nonzero_rows, axis=1))
    bottom = np.where(empty, centre[1], height - 1 - np.argmax(nonzero_rows[:, ::-1], axis=1))
    left = np.where(empty, centre[0], np.argmax(nonzero_cols, axis=1))
    right = np.where(empty, centre[0], width - 1 - np.argmax(nonzero_cols[:, ::-1], axis=1))
    corners = (
        np.stack(
            [
                np.stack([left - 1, top - 1], -1),
                np.stack([right + 1, top - 1], -1),
                np.stack([left - 1, bottom + 1], -1),
                np.stack([right + 1, bottom + 1], -1),
            ],
            axis=1,
        )
        - centre
    )  # (n, 4, 2)
    mapped = np.einsum("nij,nkj->nki", linear, corners)
    canvas_centre = (canvas_size - 1) / 2
    # Sampled pixel centres run from 0 to canvas_size - 1.
    low = -canvas_centre - mapped.min(axis=1)
    high = (canvas_size - 1 - canvas_centre) - mapped.max(axis=1)
    return low, high


def random_affine(
    x,
    seed=0,
    canvas_size=CANVAS_SIZE,
    rotation=AFFNIST_RANGES["rotation"],
    shear=AFFNIST_RANGES["shear"],
    scale=AFFNIST_RANGES["scale"],
):
    """Transform digits with random affNIST-style affine maps onto a black canvas, with NumPy.

    For each digit, a rotation, a horizontal shear and a scale of each axis
    are drawn uniformly in the given ranges (affNIST's by default, see the
    module docstring) and composed as in `affine_matrices()` around the
    centre of the 28x28 image; then the digit is translated uniformly among
    the positions that keep all of it (its bounding box of non-zero pixels,
    transformed) on the canvas. Where no position can (not for MNIST digits
    with these ranges), the digit is centred. Pixels are resampled
    bilinearly and rounded to uint8.

    Args:
        x: images `(n, 28, 28)` (or `(n, 28, 28, 1)`) in [0, 255].
        seed: non-negative integer seed (0): the same seed, the same arrays.
        canvas_size: side of the canvas (40).
        rotation: `(low, high)` rotation in degrees, counter-clockwise.
        shear: `(low, high)` horizontal shear factor.
        scale: `(low, high)` scale factor, drawn for each axis.

    Returns:
        A dict of NumPy arrays: `"images"` uint8 `(n, canvas_size,
        canvas_size)`; `"rotation"` `(n,)` degrees; `"shear"` `(n,)`;
        `"scale"` `(n, 2)` horizontal and vertical; `"translation"` `(n, 2)`
        offset (x, y) in pixels of the image centre from the canvas centre;
        `"matrices"` `(n, 2, 3)`: canvas `(x, y)` = `M[:, :2] @ source (x, y)
        + M[:, 2]`, pixel coordinates (column, row) of pixel centres.

    Example:

    >>> import numpy as np
    >>> digits = np.zeros((2, 28, 28), np.uint8)
    >>> digits[:, 10:18, 12:16] = 255
    >>> out = random_affine(digits, seed=0)
    >>> out["images"].shape, out["matrices"].shape
    ((2, 40, 40), (2, 2, 3))
    """
    x = _check_images(x)
    seed = _check_seed(seed)
    canvas_size = _check_canvas(canvas_size, x)
    ranges = {}
    for name, value in (("rotation", rotation), ("shear", shear), ("scale", scale)):
        low, high = (float(v) for v in value)
        if not low <= high or (name == "scale" and low <= 0):
            raise ValueError(
                f"`{name}` must be a (low, high) range with low <= high"
                + (" and low > 0" if name == "scale" else "")
                + f". Received: {name}={value!r}"
            )
        ranges[name] = (low, high)
    n, height, width = x.shape
    rng = np.random.default_rng(seed)
    angles = rng.uniform(*ranges["rotation"], size=n)
    shears = rng.uniform(*ranges["shear"], size=n)
    scales = rng.uniform(*ranges["scale"], size=(n, 2))
    linear = affine_matrices(angles, shears, scales)
    low, high = _translation_limits(x, linear, canvas_size)
    u = rng.uniform(size=(n, 2))
    translation = np.where(low <= high, low + u * (high - low), (low + high) / 2)

    source_centre = np.array([(width - 1) / 2, (height - 1) / 2])
    canvas_centre = np.full(2, (canvas_size - 1) / 2)
    offset = canvas_centre + translation - np.einsum("nij,j->ni", linear, source_centre)
    matrices = np.concatenate([linear, offset[:, :, None]], axis=2)

    inverse = np.linalg.inv(linear)
    images = np.empty((n, canvas_size, canvas_size), np.uint8)
    for start in range(0, n, _CHUNK):
        part = slice(start, start + _CHUNK)
        images[part] = _resample(x[part], inverse[part], offset[part], canvas_size)
    return {
        "images": images,
        "rotation": angles,
        "shear": shears,
        "scale": scales,
        "translation": translation,
        "matrices": matrices,
    }


def affnist_test_set(x_test, y_test, seed=2, canvas_size=CANVAS_SIZE, **ranges):
    """An affNIST-style test set: `random_affine()` of a split, with its labels.

    Args:
        x_test: images `(n, 28, 28)` in [0, 255], e.g. the MNIST test split.
        y_test: labels `(n,)`.
        seed: non-negative integer seed (2; use another than for training).
        canvas_size: side of the canvas (40).
        **ranges: `rotation`, `shear`, `scale` ranges, as in `random_affine()`.

    Returns:
        The dict of `random_affine()` plus `"labels"` (the `y_test` given).

    Example:

    >>> from keras_capsules.datasets import affine, mnist
    >>> _, (x_test, y_test) = mnist.load_data()
    >>> test = affine.affnist_test_set(x_test, y_test)
    >>> test["images"].shape
    (10000, 40, 40)
    """
    x_test = _check_images(x_test)
    y_test = _check_labels(y_test, len(x_test))
    result = random_affine(x_test, seed=seed, canvas_size=canvas_size, **ranges)
    result["labels"] = y_test
    return result

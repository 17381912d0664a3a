"""MultiMNIST (Sabour et al. 2017, section 6): two overlapping digits of different classes.

Each example overlays a *base* digit on a *top* digit of another class from the
same split. Both 28x28 digits are zero padded by `max_shift` (4) pixels on every
side, giving a 36x36 canvas, and shifted independently by a random integer
offset in `[-max_shift, max_shift]` in each direction. The two canvases are
combined by a clipped sum, `min(a + b, 255)` (`rule="sum"`, the rule of the
authors' generator `mnist_shift.py`), or by the pixel-wise maximum
(`rule="max"`). The paper makes 1,000 pairs per MNIST digit: 60M training and
10M test examples.

Everything is drawn from counter-based (stateless) random numbers: pass `p`
over the digits uses seeds derived from `(seed, p)` only, so an example depends
on the seed and its position in the stream, never on what was read before.
Each pass visits every digit of the split once, in a random order, as the base
digit, with a partner drawn uniformly among the digits of the other classes.

- `pairs()` draws the index list `(base, top)` and the shifts.
- `overlay()` renders examples from that list with NumPy.
- `training_pipeline()` renders the same stream on the fly with `tf.data`,
  so the paper's 60M examples need no disk.
- `test_set()` returns a fixed evaluation set as NumPy arrays.

For the same split and seed, `training_pipeline()` yields exactly the examples
`test_set()` returns, in the same order.

Example:

>>> from keras_capsules.datasets import mnist, multimnist
>>> (x_train, y_train), (x_test, y_test) = mnist.load_data()
>>> train = multimnist.training_pipeline(x_train, y_train, batch_size=128, seed=0)
>>> test = multimnist.test_set(x_test, y_test, pairs_per_digit=1, seed=1)
>>> test["images"].shape, test["labels"].shape
((10000, 36, 36), (10000, 2))
"""

import numpy as np

from keras_capsules._optional import require
from keras_capsules._validation import is_int
from keras_capsules.datasets._shift import shifted_windows

MAX_SHIFT = 4
"""Largest shift of a digit in pixels, in each direction (the paper's 4)."""

INPUT_SHAPE = (36, 36, 1)
"""The shape of an example: a 28x28 digit padded by `MAX_SHIFT` on every side, one channel."""

PAPER_ERRORS = {
    "CapsNet (Sabour et al. 2017)": 5.2,
    "its baseline CNN": 8.1,
}
"""The MultiMNIST test errors Sabour et al. publish, in percent (a pair is wrong unless its
two labels are the two highest scores)."""

RULES = ("sum", "max")
"""Overlay rules: clipped sum (the authors' code) and pixel-wise maximum."""


def _check_int(name, value, minimum):
    if not is_int(value, numpy=True) or value < minimum:
        raise ValueError(f"`{name}` must be an integer >= {minimum}. Received: {name}={value!r}")
    return int(value)


def _check_rule(rule):
    if rule not in RULES:
        raise ValueError(f'`rule` must be "sum" or "max". Received: rule={rule!r}')
    return rule


def _check_images(x):
    x = np.asarray(x)
    if x.ndim == 4 and x.shape[-1] == 1:
        x = x[..., 0]
    if x.ndim != 3 or x.shape[0] == 0:
        raise ValueError(
            "`x` must be grey images of shape (n, height, width) or (n, height, width, 1). "
            f"Received: x.shape={x.shape}"
        )
    if x.dtype != np.uint8:
        if x.min() < 0 or x.max() > 255:
            raise ValueError("`x` must hold pixel values in [0, 255], as mnist.load_data gives.")
        x = np.rint(x).astype(np.uint8)
    return x


def _check_labels(y, num_classes, n=None):
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] == num_classes:  # one-hot
        y = np.argmax(y, axis=1)
    if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
        raise ValueError(
            f"`y` must be integer class indices (n,) or one-hot (n, {num_classes}). "
            f"Received: y.shape={y.shape}, dtype={y.dtype}"
        )
    if n is not None and len(y) != n:
        raise ValueError(f"`x` and `y` differ in length: {n} and {len(y)}.")
    if len(y) and (y.min() < 0 or y.max() >= num_classes):
        raise ValueError(
            f"`y` must hold class indices in [0, {num_classes}). "
            f"Received values in [{y.min()}, {y.max()}]"
        )
    if len(np.unique(y)) < 2:
        raise ValueError("`y` must hold at least two classes: a pair needs two different classes.")
    return y.astype(np.int64)


def _class_table(y):
    """Digits sorted by class, and where each class starts in that order and how long it is."""
    order = np.argsort(y, kind="stable")
    counts = np.bincount(y)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    return order, starts, counts


def _pass_draws(pass_index, seed, labels, order, starts, counts):
    """The draws of one pass over the `n` digits, as TensorFlow tensors.

    Returns `(indices (n, 2), shifts (n, 2, 2))`: row `r` pairs base digit
    `indices[r, 0]` (a permutation of the digits) with top digit
    `indices[r, 1]` of another class; `shifts[r, d]` is `(dy, dx)` of digit `d`.
    """
    tf = require("tensorflow", "The MultiMNIST tf.data pipeline")

    n = tf.shape(labels, out_type=tf.int64)[0]
    p = tf.cast(pass_index, tf.int64)
    seed = tf.cast(seed, tf.int64)

    def seed_for(stream):  # three independent counter-based streams per pass
        return tf.stack([seed, 3 * p + stream])

    base = tf.argsort(tf.random.stateless_uniform((n,), seed_for(0), dtype=tf.float32))
    base = tf.cast(base, tf.int64)
    base_class = tf.gather(labels, base)
    others = tf.gather(n - counts, base_class)  # digits of the other classes
    u = tf.random.stateless_uniform((n,), seed_for(1), dtype=tf.float64)
    position = tf.minimum(tf.cast(u * tf.cast(others, tf.float64), tf.int64), others - 1)
    # Skip the block of the base digit's own class in the class-sorted order.
    start = tf.gather(starts, base_class)
    position = tf.where(position >= start, position + tf.gather(counts, base_class), position)
    top = tf.gather(order, position)
    shifts = tf.random.stateless_uniform(
        (n, 2, 2), seed_for(2), minval=-MAX_SHIFT, maxval=MAX_SHIFT + 1, dtype=tf.int32
    )
    return tf.stack([base, top], axis=1), shifts


def _tables(y):
    tf = require("tensorflow", "The MultiMNIST tf.data pipeline")

    order, starts, counts = _class_table(y)
    return tuple(tf.constant(a, tf.int64) for a in (y, order, starts, counts))


def pairs(y, pairs_per_digit=1000, seed=0, num_classes=10):
    """Draw the fixed list of MultiMNIST pairs and shifts for a split.

    Pass `p` (of `pairs_per_digit`) visits every digit once, in a random order,
    as the base digit, and pairs it with a top digit drawn uniformly among the
    digits of the other classes. Example `k` of the list is row `k % n` of
    pass `k // n`; the same seed gives the same list.

    Args:
        y: labels of the split, integer `(n,)` or one-hot `(n, num_classes)`;
            at least two classes.
        pairs_per_digit: pairs made with each digit as the base (1,000 in the
            paper).
        seed: non-negative integer seed.
        num_classes: number of classes (10).

    Returns:
        `(indices, shifts)`: int64 `(n * pairs_per_digit, 2)` indices into the
        split of the base and the top digit (always of different classes),
        and int8 `(n * pairs_per_digit, 2, 2)` shifts `(dy, dx)` of each digit
        in `[-4, 4]`.

    Example:

    >>> import numpy as np
    >>> indices, shifts = pairs(np.array([0, 1, 2, 1]), pairs_per_digit=3, seed=0)
    >>> indices.shape, shifts.shape
    ((12, 2), (12, 2, 2))
    """
    pairs_per_digit = _check_int("pairs_per_digit", pairs_per_digit, 1)
    seed = _check_int("seed", seed, 0)
    num_classes = _check_int("num_classes", num_classes, 2)
    tables = _tables(_check_labels(y, num_classes))
    indices, shifts = zip(*(_pass_draws(p, seed, *tables) for p in range(pairs_per_digit)))
    return (
        np.concatenate([i.numpy() for i in indices]),
        np.concatenate([s.numpy() for s in shifts]).astype(np.int8),
    )


def shift(images, shifts, max_shift=MAX_SHIFT):
    """Pad images by `max_shift` on every side and shift them, with NumPy.

    Args:
        images: uint8 `(n, height, width)`.
        shifts: integer `(n, 2)` offsets `(dy, dx)` in `[-max_shift, max_shift]`;
            positive moves the digit down / right.
        max_shift: the padding (4).

    Returns:
        uint8 `(n, height + 2 * max_shift, width + 2 * max_shift)`.
    """
    tf = require("tensorflow", "datasets.multimnist.shift")

    images = np.asarray(images)
    shifts = np.asarray(shifts)
    if np.abs(shifts).max(initial=0) > max_shift:
        raise ValueError(f"`shifts` must lie in [-{max_shift}, {max_shift}].")
    shifted = _shift_batch(tf.constant(images), tf.constant(shifts, tf.int32), max_shift)
    return shifted.numpy()


def _combine(a, b, rule):
    if rule == "max":
        return np.maximum(a, b)
    return np.minimum(a.astype(np.int32) + b, 255).astype(np.uint8)


def overlay(x, indices, shifts, rule="sum"):
    """Render MultiMNIST examples from `pairs()` with NumPy.

    Args:
        x: the split's images, uint8 `(n, 28, 28)` (or `(n, 28, 28, 1)`).
        indices: `(m, 2)` base and top digit indices, from `pairs()`.
        shifts: `(m, 2, 2)` shifts, from `pairs()`.
        rule: `"sum"` (clipped sum, the authors' code, default) or `"max"`.

    Returns:
        `(images, digits)`: uint8 `(m, 36, 36)` overlays and uint8
        `(m, 2, 36, 36)` the base and the top digit alone, each shifted.

    Example:

    >>> import numpy as np
    >>> x = np.zeros((2, 28, 28), np.uint8)
    >>> images, digits = overlay(x, np.array([[0, 1]]), np.zeros((1, 2, 2), int))
    >>> images.shape, digits.shape
    ((1, 36, 36), (1, 2, 36, 36))
    """
    x = _check_images(x)
    rule = _check_rule(rule)
    indices = np.asarray(indices)
    shifts = np.asarray(shifts)
    m = len(indices)
    if indices.shape != (m, 2) or shifts.shape != (m, 2, 2):
        raise ValueError(
            "`indices` must be (m, 2) and `shifts` (m, 2, 2). "
            f"Received: indices.shape={indices.shape}, shifts.shape={shifts.shape}"
        )
    if m and (indices.min() < 0 or indices.max() >= len(x)):
        raise ValueError(f"`indices` must lie in [0, {len(x)}).")
    digits = shift(x[indices.reshape(-1)], shifts.reshape(-1, 2))
    digits = digits.reshape((m, 2) + digits.shape[1:])
    return _combine(digits[:, 0], digits[:, 1], rule), digits


def multi_hot(labels, num_classes=10):
    """Multi-hot float32 `(m, num_classes)` targets from `(m, 2)` class pairs."""
    labels = np.asarray(labels)
    targets = np.zeros((len(labels), num_classes), np.float32)
    rows = np.arange(len(labels))
    targets[rows, labels[:, 0]] = 1.0
    targets[rows, labels[:, 1]] = 1.0
    return targets


def test_set(x_test, y_test, pairs_per_digit=1, seed=1, rule="sum", num_classes=10):
    """A fixed MultiMNIST evaluation set, as NumPy arrays.

    The paper's test set has 1,000 pairs per test digit (10M examples, 13 GB
    as uint8); `pairs_per_digit` sets the size (`10,000 * pairs_per_digit`
    examples from the MNIST test split). For the paper's scale, evaluate on
    `training_pipeline(x_test, y_test, pairs_per_digit=1000, seed=...)`, which
    streams the same examples.

    Args:
        x_test: images of the split, `(n, 28, 28)` in [0, 255].
        y_test: labels, `(n,)` or one-hot.
        pairs_per_digit: pairs with each digit as the base (1).
        seed: non-negative integer seed (1; use another than for training).
        rule: `"sum"` (clipped sum, default) or `"max"`.
        num_classes: number of classes (10).

    Returns:
        A dict of NumPy arrays, `m = n * pairs_per_digit` examples:
        `"images"` uint8 `(m, 36, 36)`; `"labels"` int32 `(m, 2)` classes of
        the base and the top digit; `"multi_hot"` float32 `(m, num_classes)`;
        `"digits"` uint8 `(m, 2, 36, 36)` each digit alone, shifted;
        `"indices"` `(m, 2)` and `"shifts"` `(m, 2, 2)` from `pairs()`.

    Example:

    >>> from keras_capsules.datasets import mnist, multimnist
    >>> _, (x_test, y_test) = mnist.load_data()
    >>> test = multimnist.test_set(x_test, y_test, pairs_per_digit=1)
    >>> test["images"].shape
    (10000, 36, 36)
    """
    x_test = _check_images(x_test)
    y = _check_labels(y_test, _check_int("num_classes", num_classes, 2), len(x_test))
    rule = _check_rule(rule)
    indices, shifts = pairs(y, pairs_per_digit, seed, num_classes)
    images, digits = overlay(x_test, indices, shifts, rule)
    labels = y[indices].astype(np.int32)
    return {
        "images": images,
        "labels": labels,
        "multi_hot": multi_hot(labels, num_classes),
        "digits": digits,
        "indices": indices,
        "shifts": shifts,
    }


TEST_SEED = 1
"""The seed of the fixed test set `evaluation_set` draws."""


def evaluation_set(data_dir=None):
    """The fixed MultiMNIST test set keras-capsules measures a model on, as NumPy arrays.

    One pair per MNIST test digit drawn with `TEST_SEED`: 10,000 pairs, the
    test set of `keras-capsules train --data multimnist` and `keras-capsules
    evaluate --data multimnist`, and of the shipped MultiMNIST preset's
    recorded accuracy.

    Args:
        data_dir: folder of the MNIST IDX files (`mnist.load_data`'s);
            `None` for the package's copy.

    Returns:
        The dict `test_set(x_test, y_test, pairs_per_digit=1, seed=TEST_SEED)`
        returns.
    """
    from keras_capsules.datasets import mnist

    _, (x_test, y_test) = mnist.load_data(data_dir)
    return test_set(x_test, y_test, pairs_per_digit=1, seed=TEST_SEED)


def _shift_batch(images, shifts, max_shift=MAX_SHIFT):
    """`shift()` on tensors: `(b, height, width)` images and `(b, 2)` int32 shifts."""
    size = (images.shape[1] + 2 * max_shift, images.shape[2] + 2 * max_shift)
    # Canvas row r shows padded row r + max_shift - dy (the digit starts at max_shift + dy).
    return shifted_windows(images, max_shift - shifts, size, 2 * max_shift)


def training_pipeline(
    x,
    y,
    batch_size=128,
    pairs_per_digit=1000,
    seed=0,
    rule="sum",
    num_classes=10,
    as_dict=False,
    drop_remainder=False,
    start=0,
):
    """A streaming `tf.data.Dataset` of MultiMNIST batches, rendered on the fly.

    The stream is the list of `pairs(y, pairs_per_digit, seed)` in order (pass
    after pass over the digits, each pass in a new random order), rendered as
    `overlay()` does; nothing but the 28x28 split is held in memory, so the
    paper's 1,000 pairs per digit (60M examples) need no disk. The same
    arguments give the same stream, also across runs; every epoch repeats it.

    Args:
        x: images of the split, `(n, 28, 28)` or `(n, 28, 28, 1)` in [0, 255].
        y: labels, `(n,)` or one-hot `(n, num_classes)`.
        batch_size: examples per batch (128).
        pairs_per_digit: pairs with each digit as the base (1,000, the paper):
            one epoch is `n * pairs_per_digit` examples.
        seed: non-negative integer seed (0).
        rule: `"sum"` (clipped sum, the authors' code, default) or `"max"`.
        num_classes: number of classes (10).
        as_dict: `False` yields `(images, multi_hot)` pairs, ready for `fit`;
            `True` yields dicts with `"images"`, `"labels"`, `"multi_hot"`
            and `"digits"`.
        drop_remainder: drop the last, smaller batch.
        start: the first example of the stream to yield (0): a run resumed
            after `k` examples reads on from example `k`, not from the start.

    Returns:
        A `tf.data.Dataset` of batches with known cardinality: `"images"`
        float32 `(b, 36, 36, 1)` in [0, 255]; `"multi_hot"` float32
        `(b, num_classes)`; `"labels"` int32 `(b, 2)` (base, top);
        `"digits"` float32 `(b, 2, 36, 36, 1)` each digit alone, shifted.

    Example:

    >>> from keras_capsules.datasets import mnist, multimnist
    >>> (x, y), _ = mnist.load_data()
    >>> train = multimnist.training_pipeline(x, y, batch_size=128, pairs_per_digit=1000)
    >>> images, targets = next(iter(train))
    >>> tuple(images.shape), tuple(targets.shape)
    ((128, 36, 36, 1), (128, 10))
    """
    tf = require("tensorflow", "datasets.multimnist.training_pipeline")

    x = _check_images(x)
    num_classes = _check_int("num_classes", num_classes, 2)
    y = _check_labels(y, num_classes, len(x))
    batch_size = _check_int("batch_size", batch_size, 1)
    pairs_per_digit = _check_int("pairs_per_digit", pairs_per_digit, 1)
    seed = _check_int("seed", seed, 0)
    rule = _check_rule(rule)
    total = len(y) * pairs_per_digit
    start = _check_int("start", start, 0)
    if start >= total:
        raise ValueError(
            f"`start` must be below the stream's {total} examples "
            f"(len(y) * pairs_per_digit). Received: start={start}"
        )
    tables = _tables(y)
    images_table = tf.constant(x)
    labels_table = tables[0]

    def render(indices, shifts):
        flat = tf.reshape(indices, (-1,))
        digits = _shift_batch(tf.gather(images_table, flat), tf.reshape(shifts, (-1, 2)))
        digits = tf.reshape(digits, (-1, 2) + tuple(digits.shape[1:]))
        digits = tf.cast(digits, tf.int32)
        if rule == "max":
            images = tf.maximum(digits[:, 0], digits[:, 1])
        else:
            images = tf.minimum(digits[:, 0] + digits[:, 1], 255)
        labels = tf.cast(tf.gather(labels_table, indices), tf.int32)
        targets = tf.reduce_max(tf.one_hot(labels, num_classes, dtype=tf.float32), axis=1)
        images = tf.cast(images, tf.float32)[..., None]
        if not as_dict:
            return images, targets
        return {
            "images": images,
            "labels": labels,
            "multi_hot": targets,
            "digits": tf.cast(digits, tf.float32)[..., None],
        }

    first_pass = start // len(y)  # the passes before it are not drawn at all
    dataset = tf.data.Dataset.range(first_pass, pairs_per_digit)
    dataset = dataset.map(lambda p: _pass_draws(p, seed, *tables))
    dataset = dataset.unbatch().skip(start - first_pass * len(y))
    dataset = dataset.apply(tf.data.experimental.assert_cardinality(total - start))
    dataset = dataset.batch(batch_size, drop_remainder=drop_remainder)
    dataset = dataset.map(render, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return dataset.prefetch(tf.data.AUTOTUNE)

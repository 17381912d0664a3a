"""Numerically safe capsule operations built on `keras.ops`.

Both functions compute in float32 when given `float16` or `bfloat16` tensors
(the squared norm of a 16D capsule overflows float16 well before the capsule
itself does) and return the input's dtype.
"""

from keras import ops

EPSILON = 1e-7
"""Added to the squared norm before every square root, so that the norm and its
gradient are finite at an exactly zero vector."""

_LOW_PRECISION = ("float16", "bfloat16")


def _to_float32(x):
    x = ops.convert_to_tensor(x)
    dtype = ops.dtype(x)
    if dtype in _LOW_PRECISION or "int" in dtype:
        return ops.cast(x, "float32"), dtype
    return x, dtype


def squash(x, axis=-1, epsilon=EPSILON):
    """Squash capsule vectors to a length in [0, 1) without changing direction.

    `v = |s|^2 / (1 + |s|^2) * s / |s|` (Sabour et al. 2017, eq. 1), with
    `epsilon` added to `|s|^2` inside the square root so that the value and
    the gradient are finite (zero) at `s = 0`.

    Args:
        x: tensor of capsule vectors.
        axis: the axis that holds a capsule's dimensions.
        epsilon: small positive float added inside the square root.

    Returns:
        A tensor of the same shape and dtype as `x`.

    Example:

    >>> import numpy as np
    >>> v = squash(np.array([[3.0, 4.0]]))
    >>> round(float(np.linalg.norm(v)), 4)  # 25 / 26
    0.9615
    """
    x32, dtype = _to_float32(x)
    squared_norm = ops.sum(ops.square(x32), axis=axis, keepdims=True)
    scale = squared_norm / (1.0 + squared_norm) / ops.sqrt(squared_norm + epsilon)
    out = x32 * scale
    return out if ops.dtype(out) == dtype else ops.cast(out, dtype)


def length(x, axis=-1, keepdims=False, epsilon=EPSILON):
    """Length (Euclidean norm) of capsule vectors, finite with finite gradient at zero.

    Computes `sqrt(sum(x^2) + epsilon)`. At an exactly zero capsule this is
    `sqrt(epsilon)` (about 3e-4 with the default), and the gradient is zero
    instead of NaN.

    Args:
        x: tensor of capsule vectors.
        axis: the axis that holds a capsule's dimensions.
        keepdims: whether to keep `axis` with size 1.
        epsilon: small positive float added inside the square root.

    Returns:
        A tensor with `axis` reduced, in the dtype of `x`.

    Example:

    >>> import numpy as np
    >>> round(float(length(np.array([3.0, 4.0]))), 4)
    5.0
    """
    x32, dtype = _to_float32(x)
    out = ops.sqrt(ops.sum(ops.square(x32), axis=axis, keepdims=keepdims) + epsilon)
    return out if ops.dtype(out) == dtype else ops.cast(out, dtype)

"""Numerically safe capsule operations built on `keras.ops`.

Both functions compute in float32 when given `float16` or `bfloat16` tensors
(the squared norm of a 16D capsule overflows float16 well before the capsule
itself does) and return the input's dtype. Both are finite and accurate for any
finite input: a capsule whose largest entry exceeds 1 is divided by that entry
before it is squared, so the squared norm cannot overflow (an entry of 1e20
would give a squared norm of 1e40, beyond float32).
"""

from keras import ops

from keras_capsules._precision import scaled
from keras_capsules._precision import to_float32

EPSILON = 1e-7
"""Added to the squared norm before every square root, so that the norm and its
gradient are finite at an exactly zero vector."""


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
    x32, dtype = to_float32(x)
    # With y = x / c and k = 1 / c^2: |x|^2 / (1 + |x|^2) / sqrt(|x|^2 + eps) * x
    # = |y|^2 / (k + |y|^2) / sqrt(|y|^2 + eps k) * y, which never squares x.
    y, c = scaled(x32, axis)
    k = 1.0 / ops.square(c)  # underflows to 0 for c > 1e19: then y / |y|, exactly
    squared_norm = ops.sum(ops.square(y), axis=axis, keepdims=True)
    scale = squared_norm / (k + squared_norm) / ops.sqrt(squared_norm + epsilon * k)
    out = y * scale
    return out if ops.dtype(out) == dtype else ops.cast(out, dtype)


def exponential_squash(x, axis=-1, epsilon=EPSILON):
    """Squash capsule vectors with the exponential of their length (Efficient-CapsNet).

    `v = (1 - exp(-|s|)) * s / |s|` (Mazzia et al. 2021, eq. 5). Unlike
    `squash`, whose slope at zero is zero, it grows linearly from zero, so
    short capsules keep a useful gradient. `epsilon` is added to `|s|^2`
    inside the square root, so that the value and the gradient are finite
    (zero) at `s = 0`; the length is computed as `length` does, without
    squaring large entries.

    Args:
        x: tensor of capsule vectors.
        axis: the axis that holds a capsule's dimensions.
        epsilon: small positive float added inside the square root.

    Returns:
        A tensor of the same shape and dtype as `x`.

    Example:

    >>> import numpy as np
    >>> v = exponential_squash(np.array([[3.0, 4.0]]))
    >>> round(float(np.linalg.norm(v)), 4)  # 1 - exp(-5)
    0.9933

    Reference:
        Mazzia, Salvetti, Chiaberge. Efficient-CapsNet: Capsule Network with
        Self-Attention Routing. Scientific Reports 11, 14634 (2021).
    """
    x32, dtype = to_float32(x)
    # s / |s| = y / sqrt(|y|^2 + eps k) with y = x / c, k = 1 / c^2; |s| = c sqrt(...).
    y, c = scaled(x32, axis)
    k = 1.0 / ops.square(c)
    unit_norm = ops.sqrt(ops.sum(ops.square(y), axis=axis, keepdims=True) + epsilon * k)
    # 1 - exp(-|s|) = -expm1(-|s|): accurate for short capsules, 1 for long ones.
    out = y * (-ops.expm1(-unit_norm * c) / unit_norm)
    return out if ops.dtype(out) == dtype else ops.cast(out, dtype)


def length(x, axis=-1, keepdims=False, epsilon=EPSILON):
    """Length (Euclidean norm) of capsule vectors, finite with finite gradient at zero.

    Computes `sqrt(sum(x^2) + epsilon)`. At an exactly zero capsule this is
    `sqrt(epsilon)` (about 3e-4 with the default), and the gradient is zero
    instead of NaN. Only a length beyond the dtype's largest number is `inf`.

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
    x32, dtype = to_float32(x)
    # sqrt(|x|^2 + eps) = c sqrt(|y|^2 + eps k), with y = x / c and k = 1 / c^2.
    y, c = scaled(x32, axis)
    squared_norm = ops.sum(ops.square(y), axis=axis, keepdims=True)
    out = ops.sqrt(squared_norm + epsilon / ops.square(c)) * c
    if not keepdims:
        out = ops.squeeze(out, axis=axis)
    return out if ops.dtype(out) == dtype else ops.cast(out, dtype)

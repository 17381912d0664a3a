"""The dtypes that capsule operations and routing compute in float32, and how they stay finite."""

from keras import ops

LOW_PRECISION = ("float16", "bfloat16")
"""Dtypes whose squared norms and routing sums overflow or lose too much: computed in float32."""


def to_float32(x):
    """`(x, dtype)`: `x` as a tensor, in float32 if it is float16, bfloat16 or integer.

    `dtype` is the dtype `x` came in, the one to cast results back to.
    """
    x = ops.convert_to_tensor(x)
    dtype = ops.dtype(x)
    if dtype in LOW_PRECISION or "int" in dtype:
        return ops.cast(x, "float32"), dtype
    return x, dtype


def scaled(x, axis):
    """`(y, c)` with `y = x / c`, `c = max(1, max |x|)` along `axis`.

    `c` is a constant for differentiation: every formula that uses it (the
    norms of `keras_capsules.ops`, the layer norm of inverted dot-product
    routing) is exactly the same function of `x` for any `c`, so treating it
    as one gives the true gradient. Capsules with no entry above 1 are left
    as they are (`c = 1`).
    """
    # max(1, |x|...): `initial` also lets an empty batch through.
    largest = ops.stop_gradient(ops.max(ops.abs(x), axis=axis, keepdims=True, initial=1.0))
    # XLA divides by multiplying with the reciprocal, which flushes to zero for
    # divisors above 2^126: capsules beyond 2^64 are first multiplied by 2^-64.
    pre = ops.cast(ops.where(largest > 2.0**64, 2.0**-64, 1.0), ops.dtype(x))
    divisor = ops.maximum(largest * pre, 1.0)
    return x * pre / divisor, divisor / pre

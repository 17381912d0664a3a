"""The dtypes that capsule operations and routing compute in float32."""

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

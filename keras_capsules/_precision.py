"""The dtypes that capsule operations and routing compute in float32."""

from keras import ops

LOW_PRECISION = ("float16", "bfloat16")
"""Dtypes whose squared norms and routing sums overflow or lose too much: computed in float32."""


def to_float32(x):
    """`(x in float32 if it is float16 or bfloat16, its dtype)`, to cast results back to."""
    dtype = ops.dtype(x)
    return (ops.cast(x, "float32") if dtype in LOW_PRECISION else x), dtype

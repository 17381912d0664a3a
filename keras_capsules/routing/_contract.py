"""The two batched contractions that every routing iteration is made of."""

from keras import ops

LOW_PRECISION = ("float16", "bfloat16")
"""Dtypes that routing computes in float32 and casts back."""


def contract_inputs(weights, x):  # sum_i weights[..., j, i] x[..., j, i, :]
    return ops.squeeze(ops.matmul(ops.expand_dims(weights, -2), x), -2)


def contract_pose(x, coefficients):  # sum_h x[..., j, i, h] coefficients[..., j, h]
    # A row times the transposed votes, not the votes times a column: the
    # backends fold the transpose into the product (TensorFlow's graph
    # optimiser, XLA), and oneDNN runs a (1 x h) @ (h x i) product about 1.5x
    # faster than the (i x h) @ (h x 1) one.
    row = ops.expand_dims(coefficients, -2)
    return ops.squeeze(ops.matmul(row, ops.swapaxes(x, -1, -2)), -2)

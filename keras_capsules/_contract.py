"""What every routing function takes and returns, and the contractions they are made of.

The routing functions (`keras_capsules.routing`) and the routing layers
(`keras_capsules.layers`) share them.
"""

from keras import ops

from keras_capsules.ops import exponential_squash

LAYOUT = "(batch, num_outputs, num_inputs, dim)"
"""The votes' layout: each parent's votes from every child, next to the pose entries."""


def check_votes(votes, dim=None):
    """`votes` as a tensor laid out `LAYOUT`; a `ValueError` naming its shape otherwise.

    `dim`, if given, is the one pose size the routing takes.
    """
    votes = ops.convert_to_tensor(votes)
    if len(votes.shape) != 4 or (dim is not None and votes.shape[-1] != dim):
        size = "dim" if dim is None else f"{dim}"
        raise ValueError(
            f"`votes` must have shape (batch, num_outputs, num_inputs, {size}): every "
            "parent's votes from every child. "
            f"Received: votes.shape={tuple(votes.shape)}"
        )
    return votes


def uniform_coupling(votes, dtype=None):
    """Every child's coupling before routing: `1 / num_outputs`, shaped `votes.shape[:3]`."""
    dtype = dtype or ops.dtype(votes)
    return ops.full(ops.shape(votes)[:3], 1.0 / votes.shape[1], dtype=dtype)


def contract_inputs(weights, x):  # sum_i weights[..., j, i] x[..., j, i, :]
    return ops.squeeze(ops.matmul(ops.expand_dims(weights, -2), x), -2)


def contract_pose(x, coefficients):  # sum_h x[..., j, i, h] coefficients[..., j, h]
    # A row times the transposed votes: the backends fold the transpose into
    # the product, and oneDNN runs it faster than a product with a column.
    row = ops.expand_dims(coefficients, -2)
    return ops.squeeze(ops.matmul(row, ops.swapaxes(x, -1, -2)), -2)


def self_attention_parents(coupling, bias, votes):
    """`(v, c + bias)`: the parents `v_j = exponential_squash(sum_i (c + bias)[j, i] votes[j, i])`.

    The last step of self-attention routing, for any coupling `c` laid out
    `(batch, num_outputs, num_inputs)` (`SelfAttentionCapsule` also gives it
    the uniform one); `bias` of shape `(num_outputs, num_inputs)` or `None`.
    """
    if bias is not None:
        coupling = coupling + ops.cast(bias, ops.dtype(coupling))
    return exponential_squash(contract_inputs(coupling, votes)), coupling

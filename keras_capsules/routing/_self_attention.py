"""Self-attention routing (Mazzia et al. 2021, Efficient-CapsNet)."""

from keras import ops

from keras_capsules._contract import check_votes
from keras_capsules._contract import contract_pose
from keras_capsules._contract import self_attention_parents
from keras_capsules._precision import to_float32


def self_attention_routing(votes, bias=None, return_coupling=False):
    """Self-attention routing of Efficient-CapsNet, in one pass.

    For every parent `j`, the votes of the `n` children form a matrix `U_j`
    (`n x d`) and their self-attention matrix is `A_j = U_j U_j^T / sqrt(d)`.
    Each child's agreement with the others, `sum_k A_j[i, k]`, goes through a
    softmax over the parents `j`, giving the coupling coefficients `c[j, i]`;
    the prior `bias[j, i]` is added, and each output is `v_j = squash(sum_i
    (c[j, i] + bias[j, i]) * U_j[i])` with the exponential squash
    (`keras_capsules.ops.exponential_squash`). There are no iterations.

    The row sums of `A_j` are computed as `U_j (sum_k U_j[k]) / sqrt(d)`, the
    same numbers without forming the `n x n` matrices: the cost is linear in
    the number of children. Routing runs in float32 whatever the dtype of
    `votes` and returns their dtype. It stays finite for huge votes: the
    agreements, which scale as the square of the votes, never overflow, and
    only outputs longer than the largest float32 would not be finite.

    Args:
        votes: prediction vectors `u_hat[j|i]`, shape
            `(batch, num_outputs, num_inputs, output_dim)`.
        bias: optional prior of the coupling coefficients, added after the
            softmax, shape `(num_outputs, num_inputs)`; `None` for none.
        return_coupling: if `True`, also return the coefficients `c + bias`,
            shape `(batch, num_outputs, num_inputs)`.

    Returns:
        The output capsules `v`, shape `(batch, num_outputs, output_dim)`, or
        `(v, c)` if `return_coupling` is `True`.

    Example:

    >>> import numpy as np
    >>> votes = np.random.normal(size=(2, 10, 16, 16)).astype("float32")
    >>> tuple(self_attention_routing(votes).shape)
    (2, 10, 16)

    Reference:
        Mazzia, Salvetti, Chiaberge. Efficient-CapsNet: Capsule Network with
        Self-Attention Routing. Scientific Reports 11, 14634 (2021), eq. 6-8.
    """
    votes = check_votes(votes)
    if bias is not None:
        expected = tuple(votes.shape[1:3])
        if tuple(bias.shape) != expected and None not in expected:
            raise ValueError(
                f"`bias` must have shape (num_outputs, num_inputs) = {expected}. "
                f"Received: bias.shape={tuple(bias.shape)}"
            )
    votes, dtype = to_float32(votes)
    # The logits scale as the square of the votes: they are computed for the
    # votes divided by c = max(1, max |votes|) of each example, and multiplied
    # by c twice after subtracting their maximum, so that no product of two
    # large numbers overflows, in the forward pass or the backward one.
    largest = ops.max(ops.abs(votes), axis=(1, 2, 3), keepdims=True, initial=1.0)
    scale = ops.stop_gradient(ops.maximum(largest, 1.0))
    scaled = votes / scale
    totals = ops.sum(scaled, axis=2)  # (batch, outputs, dim)
    logits = contract_pose(scaled, totals / float(votes.shape[-1]) ** 0.5)  # true logits / c^2
    scale = scale[..., 0]
    # `initial` lets an empty batch through, as in the other routings.
    top = ops.max(logits, axis=1, keepdims=True, initial=float("-inf"))
    logits = logits - ops.stop_gradient(top)
    # Beyond 2^40 the factor is capped: any gap between scaled logits that
    # float32 resolves is then multiplied by at least 2^80 with or without the
    # cap, so the softmax is one-hot either way and its gradient zero but for
    # rounding, which an uncapped c^2 would blow up to inf.
    factor = ops.minimum(scale, 2.0**40)
    coupling = ops.softmax(logits * factor * factor, axis=1)  # over the output capsules
    outputs, coupling = self_attention_parents(coupling, bias, votes)
    outputs, coupling = ops.cast(outputs, dtype), ops.cast(coupling, dtype)
    return (outputs, coupling) if return_coupling else outputs

"""Inverted dot-product attention routing (Tsai et al. 2020)."""

from keras import ops

from keras_capsules._contract import check_votes
from keras_capsules._contract import contract_inputs
from keras_capsules._contract import contract_pose
from keras_capsules._contract import uniform_coupling
from keras_capsules._precision import scaled
from keras_capsules._precision import to_float32
from keras_capsules._validation import check_positive
from keras_capsules._validation import check_positive_int

LAYER_NORM_EPSILON = 1e-5
"""The layer norm's epsilon, as `torch.nn.LayerNorm`'s in the official code."""

_LARGEST_VOTE = 2.0**100
"""Routing runs on the votes of an example divided by `max(1, max |votes| / 2**100)`.

That is, on the votes themselves up to about 1.3e30; beyond, on votes no
larger than that, whose agreements with poses of thousands of entries and sums
over millions of children stay inside float32. The divisor is at most 2**28,
so that the layer norm's epsilon divided by its square stays a normal float32
number above `_EPSILON_FLOOR` (for an epsilon of 1e-7 or more).
"""

_EPSILON_FLOOR = 1e-24
"""The smallest epsilon term of the rescaled layer norm.

It applies only where that term underflows, for poses with entries beyond
about 3e9: it is negligible there next to the variance of the rescaled pose
(whose largest entry is 1), unless that variance is exactly zero (a constant
pose, normalised to 0 instead of 0 / 0). It keeps the derivative of the
inverse square root finite.
"""


def inverted_dot_product_routing(
    votes,
    iterations=2,
    gamma=None,
    beta=None,
    epsilon=LAYER_NORM_EPSILON,
    agreement_scale=1.0,
    return_coupling=False,
):
    """Inverted dot-product attention routing (Tsai et al. 2020, Procedure 1).

    The parent poses start at `p[j] = 0`, so the first iteration routes every
    child uniformly. Each of the `iterations` iterations then computes, from
    the poses of the previous iteration, for all parents at once:

    - the agreements `a[j, i] = agreement_scale * p[j] . votes[j, i]`;
    - the routing coefficients `r[:, i] = softmax(a[:, i])`, a softmax over
      the *parents* `j` for every child `i` (the "inverted" attention: the
      parents compete for each child);
    - the poses `p[j] = LayerNorm(sum_i r[j, i] * votes[j, i])`, the layer
      norm normalising each parent's pose over its `output_dim` entries,
      then multiplying by `gamma` and adding `beta`.

    The first iteration is thus `p[j] = LayerNorm(sum_i votes[j, i] / num_outputs)`,
    and `iterations=1` does no routing by agreement. The official code scales
    the agreements by `1 / sqrt(output_dim)` (`agreement_scale`); the paper's
    Procedure 1 does not (the default).

    Routing runs in float32 whatever the dtype of `votes` (so it is safe under
    `mixed_float16` / `mixed_bfloat16`); the poses are cast back to the dtype
    of `votes`. The poses, coefficients and gradients are finite for votes of
    any finite size: the layer norm divides each pose by its largest entry
    before squaring it (undone exactly, epsilon included), and the votes of an
    example beyond 2**100 are routed divided down to that size, the agreements
    being multiplied back after their largest is subtracted. A parent no child
    is routed to (all its coefficients 0, as agreements of 1e20 make them)
    gets the pose `beta`, as do zero votes.

    Args:
        votes: the children's votes `v[j, i]` for the parents' poses, shape
            `(batch, num_outputs, num_inputs, output_dim)` (a 4x4 pose matrix
            flattened to 16 entries).
        iterations: number of routing iterations, a positive integer; the
            first routes uniformly.
        gamma: the layer norm's scale, shape `(output_dim,)` or
            `(num_outputs, output_dim)`; `None` for 1.
        beta: the layer norm's offset, shaped like `gamma`; `None` for 0.
        epsilon: added to each pose's variance in the layer norm, a positive
            number.
        agreement_scale: the factor of the dot products, a positive number:
            1 in the paper, `1 / sqrt(output_dim)` in the official code.
        return_coupling: if `True`, also return the routing coefficients `r`
            of the last iteration, shape `(batch, num_outputs, num_inputs)`;
            they sum to 1 over the parents.

    Returns:
        The parent poses `p`, shape `(batch, num_outputs, output_dim)`, or
        `(p, r)` if `return_coupling` is `True`.

    Example:

    >>> import numpy as np
    >>> votes = np.random.normal(size=(2, 10, 64, 16)).astype("float32")
    >>> tuple(inverted_dot_product_routing(votes, iterations=2).shape)
    (2, 10, 16)

    Reference:
        Tsai, Srivastava, Goh, Salakhutdinov. Capsules with Inverted
        Dot-Product Attention Routing. ICLR 2020. arXiv:2002.04764.
    """
    check_positive_int("iterations", iterations)
    check_positive("epsilon", epsilon)
    check_positive("agreement_scale", agreement_scale)
    votes = check_votes(votes)
    gamma = _layer_norm_weight("gamma", gamma, votes.shape)
    beta = _layer_norm_weight("beta", beta, votes.shape)
    votes, dtype = to_float32(votes)
    poses, coupling = _route(votes, iterations, gamma, beta, epsilon, agreement_scale)
    poses = ops.cast(poses, dtype)
    if not return_coupling:
        return poses
    coupling = uniform_coupling(votes) if coupling is None else coupling
    return poses, ops.cast(coupling, dtype)


def _layer_norm_weight(name, weight, votes_shape):
    if weight is None:
        return None
    weight = ops.convert_to_tensor(weight)
    num_outputs, output_dim = votes_shape[1], votes_shape[3]
    shape = tuple(weight.shape)
    if shape not in ((output_dim,), (num_outputs, output_dim)):
        raise ValueError(
            f"`{name}` must have shape (output_dim,) = ({output_dim},) or "
            f"(num_outputs, output_dim) = ({num_outputs}, {output_dim}). "
            f"Received: {name}.shape={shape}"
        )
    return weight


def _route(votes, iterations, gamma, beta, epsilon, agreement_scale):
    """The iterations on float32 or float64 votes: `(poses, coupling)`, `None` after one."""
    compute_dtype = ops.dtype(votes)
    gamma = None if gamma is None else ops.cast(gamma, compute_dtype)
    beta = None if beta is None else ops.cast(beta, compute_dtype)
    num_outputs = votes.shape[1]

    # Routing runs on votes / c, c = max(1, max |votes| / 2**100) per example,
    # whose agreements and sums stay well inside float32. The division is
    # folded into the small operands of the two contractions, the poses and
    # the routing coefficients, so that no copy of the votes is written. `c`
    # is a constant for differentiation: every formula below is the same
    # function of the votes for any `c`. `initial` lets an empty batch through.
    largest = ops.maximum(
        ops.max(votes, axis=(1, 2, 3), keepdims=True, initial=0.0),
        -ops.min(votes, axis=(1, 2, 3), keepdims=True, initial=0.0),
    )  # max |votes| without writing |votes|
    c = ops.stop_gradient(ops.maximum(ops.squeeze(largest, -1) / _LARGEST_VOTE, 1.0))
    inverse = 1.0 / c  # (batch, 1, 1); c <= 2**28

    poses = coupling = None
    for iteration in range(iterations):
        if iteration == 0:  # p = 0: every agreement is 0, every coefficient 1 / num_outputs
            shape = ops.shape(votes)[:3]
            uniform = ops.broadcast_to(inverse / float(num_outputs), shape)
            weighted = contract_inputs(uniform, votes)  # = the weighted sum / c
        else:
            # The agreements / c, their largest subtracted before multiplying
            # back by c, so that they cannot overflow.
            agreement = contract_pose(votes, poses * inverse)  # (batch, outputs, inputs)
            top = ops.max(agreement, axis=1, keepdims=True, initial=-float("inf"))
            agreement = (agreement - ops.stop_gradient(top)) * (c * agreement_scale)
            exp = ops.exp(agreement)
            coupling = exp / ops.sum(exp, axis=1, keepdims=True)  # softmax over the parents
            weighted = contract_inputs(coupling * inverse, votes)
        poses = _layer_norm(weighted, c, gamma, beta, epsilon)
    return poses, coupling


def _layer_norm(x, c, gamma, beta, epsilon):
    """`LayerNorm(c * x)` over the last axis, without squaring an entry above 1.

    With `y = x / m`, `m = max(1, max |x|)` per pose: `(c x - mean) / sqrt(var +
    epsilon) = (y - mean_y) / sqrt(var_y + epsilon / (c m)^2)`.
    """
    y, m = scaled(x, axis=-1)
    mean = ops.mean(y, axis=-1, keepdims=True)
    centered = y - mean
    variance = ops.mean(ops.square(centered), axis=-1, keepdims=True)
    epsilon = ops.maximum(epsilon / ops.square(c * m), _EPSILON_FLOOR)
    out = centered * ops.rsqrt(variance + epsilon)
    if gamma is not None:
        out = out * gamma
    if beta is not None:
        out = out + beta
    return out

"""The iterations of EM routing on votes grouped by site, and their structured gradient."""

from keras import ops

from keras_capsules._autodiff import recompute_gradient
from keras_capsules._autodiff import supports_recompute_gradient
from keras_capsules._autodiff import vjp
from keras_capsules._autodiff import with_gradient
from keras_capsules._contract import contract_inputs
from keras_capsules._contract import contract_pose
from keras_capsules._validation import check_gradient_method

EM_EPSILON = 1e-7
"""Added to the summed responsibilities `sum_i R[i, j] a[i]` before dividing by them."""

_LOG_2PI = 1.8378770664093453
_LARGEST_FLOAT32 = 3.4028234663852886e38
_VARIANCE_FLOOR = 2.0**-56
"""The least variance routing uses, in the units of the votes it routes (at most 2^16).

Squared distances over it stay below 2^95, so the E-step's logits stay finite
and above the padding of `normalize_over_positions` (-1e30). It is 2^-88 of the
largest squared vote, far below what float32 resolves among votes of that size.
"""


def em_route(
    votes,
    activations,
    beta_v,
    beta_a,
    settings,
    initial_responsibility,
    log_normalize,
    gradient="auto",
    reference=None,
    vote_bound=None,
):
    """The iterations of EM routing, shared by `em_routing` and the matrix capsule layers.

    Votes are grouped by *site*: a set of parents that see the same children
    (one site for fully connected capsules, one per output position for
    convolutional ones).

    Args:
        votes: `(batch, sites, num_outputs, num_inputs, 16)`; the input axis
            sits next to the pose entries so that the M-step and the E-step are
            batched matrix products over contiguous memory.
        activations: `(batch, sites, num_inputs)`.
        beta_v, beta_a: `(num_outputs,)`.
        settings: an `EMSettings`, the iterations and their schedules.
        initial_responsibility: `R` of the first M-step, a float or a tensor
            broadcastable to `(batch, sites, num_outputs, num_inputs)`.
        log_normalize: maps the E-step's logits `tau (log a[j] + log p[i, j])`,
            shaped like `R`, to `log R`, normalising over all the parents of
            each child (a convolutional layer's children have parents at
            several sites).
        gradient: how the gradient reaches the votes. `"autodiff"`: plain
            automatic differentiation, which keeps several tensors of the
            votes' size per iteration for the backward pass and adds up one
            gradient of that size per contraction. `"structured"`: the votes
            enter routing only through contractions with small per-parent
            tensors, so their gradient is a sum of outer products; the
            backward pass recomputes the iterations on small tensors (the
            contractions' results are kept from the forward pass),
            differentiates them with respect to those results and forms the
            votes' gradient as one batched matrix product. Only the votes and
            small tensors are kept between the passes. `"auto"` (default) is
            `"structured"` on the TensorFlow and JAX backends and
            `"autodiff"` elsewhere. Both give the same gradients up to
            float32 rounding. On TensorFlow `"structured"` is first-order
            only (see `dynamic_routing`): use `"autodiff"` for gradients
            of gradients.
        reference: `(batch, sites, num_outputs, 16)`, a pose near the middle
            of each parent's votes, subtracted from them before routing; by
            default their mean over the inputs. Any value gives the same
            result, up to rounding: a layer that can form the mean from
            smaller tensors than the votes passes it, sparing a pass over them.
        vote_bound: `(batch,)`, at least the largest `|votes|` of each
            example; by default that largest value, found with two passes
            over the votes. A looser bound divides some votes by a larger
            power of two than they need, which changes nothing but rounding.

    Returns:
        `(poses, activations, R)`: `(batch, sites, num_outputs, 16)`,
        `(batch, sites, num_outputs)` and the last E-step's `R` (`None` after
        a single iteration).
    """
    check_gradient_method(gradient)
    if gradient == "auto":
        gradient = "structured" if supports_recompute_gradient() else "autodiff"
    votes = ops.cast(votes, "float32")
    activations = ops.cast(activations, "float32")
    beta_v = ops.cast(beta_v, "float32")
    beta_a = ops.cast(beta_a, "float32")
    # Routing is shift-equivariant: votes moved by c move the means by c and leave
    # everything else as it is. Centring each parent's votes on a pose near their
    # middle keeps the expanded squares below (V^2 - 2 V mu + mu^2) free of
    # cancellation when votes are large or share an offset. The reference is a
    # constant for differentiation, which is exact because the result does not
    # depend on it.
    # Routing is also scale-equivariant, given the variance floor: votes divided
    # by c, with the floor divided by c^2, give the means divided by c, the same
    # responsibilities, and costs short of dim log c per unit of `total`, added
    # back through beta_v (the E-step's log c terms are shared by all the parents
    # of a child and cancel in its normalisation). Votes beyond 2^16 in an example
    # are divided by the power of two c that brings them under it, so that
    # their squares and sums stay far from float32's overflow; smaller votes are
    # routed as they are (c = 1). The reference is formed after the division, so
    # that the mean of votes near float32's largest number does not overflow.
    if vote_bound is None:
        vote_bound = largest_magnitude(votes)
    vote_bound = ops.cast(vote_bound, "float32")
    # The mean of the votes is no larger than the largest of them.
    reference_bound = vote_bound if reference is None else largest_magnitude(reference)
    scale = ops.stop_gradient(_vote_scale(vote_bound + reference_bound, len(votes.shape)))

    def centred(votes, reference):
        if reference is None:
            reference = ops.mean(votes, axis=-2, keepdims=True)
        else:
            reference = ops.expand_dims(ops.cast(reference, "float32"), -2)
        reference = ops.stop_gradient(reference)
        return votes - reference, reference

    # Only a batch with such votes pays for the division, forward and backward:
    # the other branch is the centring alone. Divided first, then centred: c is a
    # power of two, so both orders give the same result, and the mean of the
    # divided votes cannot overflow.
    votes, reference = ops.cond(
        ops.any(scale > 1.0),
        lambda: centred(votes / scale, None if reference is None else reference / scale[..., 0]),
        lambda: centred(votes, reference),
    )
    reference = reference[..., 0, :]  # (batch, sites, outputs, 16), divided by c
    log_scale = ops.reshape(ops.log(scale), (-1, 1, 1))
    beta_v = beta_v + log_scale  # (batch, 1, outputs)
    # The floor divided by c^2 (twice by c: c^2 overflows beyond c = 2^64), and
    # kept at least _VARIANCE_FLOOR.
    variance_epsilon = ops.maximum(
        settings.variance_epsilon / scale[..., 0] / scale[..., 0], _VARIANCE_FLOOR
    )
    iterations = settings.iterations
    settings = {
        "schedule": settings.inverse_temperatures(),
        "tempering": settings.temperings(),
        "dim": votes.shape[-1],
        "variance_epsilon": variance_epsilon,
        "initial_responsibility": initial_responsibility,
        "log_normalize": log_normalize,
    }
    if gradient == "autodiff":
        moments, deviations = _contractions(votes)
        mean, acts, resp = _em_iterations(
            moments, deviations, activations, beta_v, beta_a, **settings
        )
        return _poses(mean, reference, scale), acts, resp
    route = recompute_gradient(
        lambda *args: _structured_forward(*args, settings),
        lambda args, saved, upstream: _structured_backward(args, saved, upstream, settings),
    )
    outputs = route(votes, activations, beta_v, beta_a)
    poses = _poses(outputs[0], reference, scale)
    return poses, outputs[1], (outputs[2] if iterations > 1 else None)


_LARGEST_ROUTED = 16
"""Votes are routed as they are while they and their mean stay under 2^16, divided beyond."""


def largest_magnitude(x):
    """Per example, the largest `|x|`, `(batch,)`: two reductions, no copy of `x`.

    Both start from 0 (`initial`), which leaves the largest magnitude as it is
    and gives an empty batch an empty result instead of an error.
    """
    axes = tuple(range(1, len(x.shape)))
    return ops.maximum(ops.max(x, axis=axes, initial=0.0), -ops.min(x, axis=axes, initial=0.0))


def _vote_scale(bound, rank):
    """Per example, the power of two c >= 1 that brings `bound`, `(batch,)`, under 2^16.

    Shaped `(batch,) + (1,) * (rank - 1)`. A bound beyond float32's range
    counts as its largest number, whose c still brings float32 votes under
    2^17; a zero bound gives c = 1.
    """
    bound = ops.minimum(bound, _LARGEST_FLOAT32)
    exponent = ops.maximum(ops.ceil(ops.log2(bound)) - _LARGEST_ROUTED, 0.0)
    return ops.reshape(ops.power(2.0, exponent), (-1,) + (1,) * (rank - 1))


def _poses(mean, reference, scale):
    """The means of votes divided by c, centred on `reference` (divided by c), as poses.

    The mean and the reference are added before multiplying by c: their sum is
    a weighted mean of the votes, no larger than they are, where each part can
    be twice that. The clip keeps a rounding up beyond float32's largest number
    finite.
    """
    poses = (mean + reference) * scale[..., 0]
    return ops.clip(poses, -_LARGEST_FLOAT32, _LARGEST_FLOAT32)


def _em_iterations(
    moments,
    deviations,
    activations,
    beta_v,
    beta_a,
    schedule,
    tempering,
    dim,
    variance_epsilon,
    initial_responsibility,
    log_normalize,
):
    """EM routing's iterations, given how to contract the votes.

    The votes `V` and their squares `S` enter only through two contractions
    with small tensors, so that callers choose how to compute (and
    differentiate) them:

    - `moments(t, weights)`: `(sum_i w V, sum_i w S)`, each
      `(batch, sites, outputs, 16)`, for the M-step of iteration `t`;
    - `deviations(t, inverse, weighted_mean)`:
      `sum_h S inverse - 2 sum_h V weighted_mean`,
      `(batch, sites, outputs, inputs)`, for its E-step.

    The squared deviations are expanded, `sum_h (V - mu)^2 / var =
    sum_h V^2 / var - 2 V mu / var + mu^2 / var`, so that no tensor of the
    votes' size is created per iteration.
    """
    child_activations = ops.expand_dims(activations, 2)  # (batch, sites, 1, inputs)
    responsibility = None
    for t, lam in enumerate(schedule):
        # M-step.
        if responsibility is None:
            weights = child_activations * initial_responsibility
        else:
            weights = responsibility * child_activations
        total = ops.sum(weights, axis=-1)
        scale = ops.expand_dims(1.0 / (total + EM_EPSILON), -1)
        first, second = moments(t, weights)
        mean = first * scale
        variance = ops.maximum(second * scale - ops.square(mean), 0.0) + variance_epsilon
        log_variance = ops.log(variance)
        cost = (dim * beta_v + 0.5 * ops.sum(log_variance, axis=-1)) * total
        logit_a = lam * (beta_a - cost)
        if t == len(schedule) - 1:
            return mean, ops.sigmoid(logit_a), responsibility
        # E-step, in log space: log a[j] + log N(V[i, j]; mu[j], var[j]).
        inverse = 1.0 / variance
        squared = deviations(t, inverse, mean * inverse)
        offset = ops.sum(ops.square(mean) * inverse, axis=-1, keepdims=True)
        squared = ops.maximum(squared + offset, 0.0)  # (batch, sites, outputs, inputs)
        log_norm = -0.5 * (ops.sum(log_variance, axis=-1, keepdims=True) + dim * _LOG_2PI)
        logits = ops.expand_dims(ops.log_sigmoid(logit_a), -1) + log_norm - 0.5 * squared
        if tempering[t] != 1.0:  # the tempered E-step: R ∝ (a p) ** tau
            logits = tempering[t] * logits
        responsibility = ops.exp(log_normalize(logits))


def _contractions(votes):
    """`_em_iterations`' `moments` and `deviations`, computed directly from the votes."""
    squares = ops.square(votes)

    def moments(t, weights):
        return contract_inputs(weights, votes), contract_inputs(weights, squares)

    def deviations(t, inverse, weighted_mean):
        return contract_pose(squares, inverse) - 2.0 * contract_pose(votes, weighted_mean)

    return moments, deviations


def _structured_forward(votes, activations, beta_v, beta_a, settings):
    """`_em_iterations` on the votes; also returns every contraction's result.

    The backward pass reuses those results (`_structured_backward`), so it
    contracts the votes only where a derivative needs them.
    """
    direct_moments, direct_deviations = _contractions(votes)
    moments_done, deviations_done = [], []

    def moments(t, weights):
        result = direct_moments(t, weights)
        moments_done.extend(result)
        return result

    def deviations(t, inverse, weighted_mean):
        result = direct_deviations(t, inverse, weighted_mean)
        deviations_done.append(result)
        return result

    mean, acts, resp = _em_iterations(moments, deviations, activations, beta_v, beta_a, **settings)
    outputs = (mean, acts) if resp is None else (mean, acts, resp)
    return outputs, moments_done + deviations_done


def _structured_backward(args, saved, upstream, settings):
    """The gradient of `_structured_forward`, the votes' part as one batched product.

    Every contraction of the votes is `sum_i w[i] V[i, :]` or
    `sum_h V[i, h] c[h]` with small `w` or `c`, so with `g` the gradient of its
    result, its share of the votes' gradient is the outer product `w g^T` or
    `g c^T`. The iterations are recomputed on the small tensors, each
    contraction taking its value from the forward pass (`saved`) plus a zero
    *probe*; differentiating with respect to the probes gives every `g`, and
    stacking the `w`, `g` and `c` turns the sum of outer products into one
    matrix product per batch, site and parent. The squares `S = V^2` add
    `2 V dS`. The votes are read only where a derivative needs them: the
    contractions' derivatives with respect to `w` and `c`, and that product.
    """
    votes, activations, beta_v, beta_a = args
    squares = ops.square(votes)
    iterations = len(settings["schedule"])
    saved_moments, saved_deviations = saved[: 2 * iterations], saved[2 * iterations :]
    # Distinct tensors: a backend may add up the gradients of a repeated one.
    probes = [ops.zeros_like(votes[..., 0, :]) for _ in range(2 * iterations)]  # (..., 16)
    probes += [ops.zeros_like(votes[..., 0]) for _ in range(iterations - 1)]  # (..., inputs)
    shape_of_r = ops.zeros_like(votes[..., 0])

    def moments_gradient(constants, upstream):  # d/dw of (sum_i w V, sum_i w S)
        v, s = constants
        return (contract_pose(v, upstream[0]) + contract_pose(s, upstream[1]),)

    def deviations_gradient(constants, upstream):  # d/d(inverse, weighted mean)
        v, s = constants
        return (contract_inputs(upstream[0], s), -2.0 * contract_inputs(upstream[0], v))

    def recompute(activations, beta_v, beta_a, *probes):
        weights, coefficients = [], []

        def moments(t, w):
            w = w + shape_of_r  # the first iteration's w broadcasts
            weights.append(w)
            first, second = with_gradient(
                saved_moments[2 * t : 2 * t + 2], (votes, squares), (w,), moments_gradient
            )
            return first + probes[2 * t], second + probes[2 * t + 1]

        def deviations(t, inverse, weighted_mean):
            coefficients.append((-2.0 * weighted_mean, inverse))
            (squared,) = with_gradient(
                (saved_deviations[t],),
                (votes, squares),
                (inverse, weighted_mean),
                deviations_gradient,
            )
            return squared + probes[2 * iterations + t]

        mean, acts, resp = _em_iterations(
            moments, deviations, activations, beta_v, beta_a, **settings
        )
        outputs = (mean, acts) if resp is None else (mean, acts, resp)
        return outputs, (weights, coefficients)

    grads, (weights, coefficients) = vjp(
        recompute, [activations, beta_v, beta_a, *probes], upstream
    )
    d_moments = grads[3 : 3 + 2 * iterations]
    d_deviations = grads[3 + 2 * iterations :]
    # dV = sum_t w_t dmean_t^T + sum_t ddev_t (-2 mu inv)_t^T, and
    # dS = sum_t w_t dsecond_t^T + sum_t ddev_t inv_t^T, one product each.
    # Stacked on a new second-to-last axis and transposed (see `_structured_agreement`).
    left = ops.swapaxes(ops.stack(weights + d_deviations, axis=-2), -1, -2)  # (..., inputs, k)
    right_v = ops.stack(d_moments[0::2] + [c[0] for c in coefficients], axis=-2)
    right_s = ops.stack(d_moments[1::2] + [c[1] for c in coefficients], axis=-2)
    d_votes = ops.matmul(left, right_v) + votes * ops.matmul(left, 2.0 * right_s)
    return [d_votes] + list(grads[:3])

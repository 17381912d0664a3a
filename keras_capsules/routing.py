"""Routing-by-agreement procedures, as pure functions on `keras.ops`."""

from keras import ops

from keras_capsules._autodiff import recompute_gradient
from keras_capsules._autodiff import supports_recompute_gradient
from keras_capsules._autodiff import vjp
from keras_capsules._autodiff import with_gradient
from keras_capsules._validation import check_choice
from keras_capsules._validation import check_gradient_method
from keras_capsules._validation import check_in_unit_interval
from keras_capsules._validation import check_positive_int
from keras_capsules.ops import squash

_LOW_PRECISION = ("float16", "bfloat16")


def dynamic_routing(votes, routings=3, stop_gradient=False, return_coupling=False, gradient="auto"):
    """Dynamic routing between capsules (Sabour et al. 2017, Procedure 1).

    Starting from logits `b[i, j] = 0`, each of the `routings` iterations
    computes the coupling coefficients `c[i, :] = softmax(b[i, :])` (a softmax
    over the *output* capsules `j`, separately for every input capsule `i`),
    the weighted sums `s[j] = sum_i c[i, j] * votes[i, j]`, the outputs
    `v[j] = squash(s[j])` and, between iterations, the agreement update
    `b[i, j] += votes[i, j] . v[j]`.

    Routing runs in float32 whatever the dtype of `votes` (so it is safe under
    `mixed_float16` / `mixed_bfloat16`); the outputs are cast back to the
    dtype of `votes`.

    Args:
        votes: prediction vectors `u_hat[j|i]`, shape
            `(batch, num_inputs, num_outputs, output_dim)`.
        routings: number of routing iterations, a positive integer.
        stop_gradient: if `True`, the iterations before the last one see the
            votes through `stop_gradient`, so that gradients reach the votes
            only through the final weighted sum (as some re-implementations
            do). The paper, and the default, let gradients flow through every
            iteration.
        return_coupling: if `True`, also return the coupling coefficients
            `c` used in the last iteration, shape
            `(batch, num_inputs, num_outputs)`; they sum to 1 over outputs.
        gradient: how the gradient reaches the votes: `"auto"` (default),
            `"structured"` or `"autodiff"`; see `route_by_agreement`. The
            values are the same either way. Use `"autodiff"` for gradients of
            gradients on TensorFlow.

    Returns:
        The output capsules `v`, shape `(batch, num_outputs, output_dim)`, or
        `(v, c)` if `return_coupling` is `True`.

    Example:

    >>> import numpy as np
    >>> votes = np.random.normal(size=(2, 1152, 10, 16)).astype("float32")
    >>> tuple(dynamic_routing(votes, routings=3).shape)
    (2, 10, 16)

    Reference:
        Sabour, Frosst, Hinton. Dynamic Routing Between Capsules. NIPS 2017.
        arXiv:1710.09829.
    """
    check_positive_int("routings", routings)
    if len(votes.shape) != 4:
        raise ValueError(
            "`votes` must have shape (batch, num_inputs, num_outputs, output_dim). "
            f"Received: votes.shape={tuple(votes.shape)}"
        )
    votes = ops.convert_to_tensor(votes)
    outputs, coupling = route_by_agreement(
        ops.transpose(votes, (0, 2, 1, 3)), routings, stop_gradient, return_coupling, gradient
    )
    if not return_coupling:
        return outputs
    return outputs, coupling


def route_by_agreement(
    votes,
    routings=3,
    stop_gradient=False,
    return_coupling=False,
    gradient="auto",
    inputs_first=False,
):
    """The core of `dynamic_routing` on votes laid out `(batch, num_outputs, num_inputs, dim)`.

    With the input axis next to the capsule dimensions, the weighted sum and
    the agreement of every iteration are batched matrix-vector products over
    contiguous memory. Returns `(outputs, coupling)`, `coupling` being `None`
    unless `return_coupling` is set (then shaped `(batch, num_inputs, num_outputs)`).

    `gradient` chooses how the gradient reaches the votes, as `em_route`'s:
    `"autodiff"` differentiates the iterations automatically, which writes one
    gradient of the votes' size per contraction (five for 3 routings) and adds
    them up; `"structured"` forms it as one batched matrix product
    (`_structured_agreement`). `"auto"` (default) is `"structured"` on the
    TensorFlow and JAX backends without `stop_gradient`, and `"autodiff"`
    otherwise; a single routing has one contraction and always uses
    `"autodiff"`. Both give the same gradients up to float32 rounding.

    `inputs_first=True` takes the votes laid out `(num_inputs, batch,
    num_outputs, dim)` instead, as one batched product per input capsule
    writes them (`CapsuleLayer`). They are transposed to the routing layout
    here, and the structured gradient is written straight into the layout
    they came in: `[g..., v...]^T @ [c..., g...]` gives it as
    `(batch, outputs, dim, inputs)`, one plain two-dimensional transpose
    away, where transposing the gradient of the routing layout back moves
    16-float blocks and takes about 1.5x as long.

    On TensorFlow the structured gradient is a first-order gradient only: a
    gradient of the gradient (a gradient penalty, a Hessian-vector product)
    does not see the values its backward pass reuses from the forward pass,
    and comes out wrong without an error. Use `"autodiff"` there. On JAX
    both methods differentiate twice correctly.
    """
    check_gradient_method(gradient, stop_gradient)
    if gradient == "auto":
        gradient = (
            "structured" if supports_recompute_gradient() and not stop_gradient else "autodiff"
        )
    if routings == 1:
        gradient = "autodiff"  # one uniform sum: nothing to structure
    dtype = ops.dtype(votes)
    if dtype in _LOW_PRECISION:
        votes = ops.cast(votes, "float32")
    if inputs_first and gradient != "structured":
        votes, inputs_first = ops.transpose(votes, _TO_ROUTING_LAYOUT), False
    if gradient == "structured":
        outputs, coupling = _structured_agreement(routings, inputs_first)(votes)
    else:
        outputs, coupling = _agreement_iterations(votes, routings, stop_gradient)
    if dtype in _LOW_PRECISION:
        outputs = ops.cast(outputs, dtype)
    if not return_coupling:
        return outputs, None
    if coupling is None:  # a single routing: every coefficient is 1 / num_outputs
        shape = ops.shape(votes)
        return outputs, ops.full((shape[0], shape[2], shape[1]), 1.0 / votes.shape[1])
    return outputs, ops.transpose(coupling, (0, 2, 1))


_TO_ROUTING_LAYOUT = (1, 2, 0, 3)  # (inputs, batch, outputs, dim) -> (batch, outputs, inputs, dim)


def _agreement_contractions(votes, inner_votes=None, record=None):
    """`routing_loop`'s three contractions of votes `(batch, outputs, inputs, dim)`.

    `inner_votes` (default `votes`) are what the iterations before the last
    one contract; `record` (default none) is called on every result.
    """
    inner_votes = votes if inner_votes is None else inner_votes
    record = record or (lambda x: x)
    num_outputs = votes.shape[1]

    def uniform_sum(last):
        return record(ops.sum(votes if last else inner_votes, axis=2) / float(num_outputs))

    def weighted_sum(coupling, last):  # coupling: (batch, outputs, inputs)
        return record(_contract_inputs(coupling, votes if last else inner_votes))

    def agreement(outputs):
        return record(_contract_pose(inner_votes, outputs))

    return uniform_sum, weighted_sum, agreement


def _agreement_iterations(votes, routings, stop_gradient):
    """Procedure 1 on the votes, differentiated automatically."""
    inner_votes = ops.stop_gradient(votes) if stop_gradient else votes
    contractions = _agreement_contractions(votes, inner_votes)
    return routing_loop(*contractions, routings)


def _structured_agreement(routings, inputs_first=False):
    """Procedure 1 on the votes, with the votes' gradient as one batched product.

    The votes `V` enter routing only through contractions with small
    per-parent tensors: the weighted sums `sum_i c[i] V[i, :]` and the
    agreements `sum_h V[i, h] v[h]`. With `g` the gradient of a contraction's
    result, its share of the votes' gradient is `c g^T` or `g v^T`. As in
    `em_route`'s structured gradient, the forward pass keeps the contractions'
    results; the backward pass recomputes the iterations on the small tensors
    from those results plus zero probes, differentiates with respect to the
    probes, and forms `dV = [c..., g...] @ [g..., v...]`, one matrix product
    per batch element and parent. The votes are read once per contraction
    whose derivative needs them and written once, where automatic
    differentiation writes one vote-sized gradient per contraction and then
    adds them up.

    With `inputs_first`, the function takes the votes laid out `(inputs,
    batch, outputs, dim)` (see `route_by_agreement`), keeps their transpose
    from the forward pass, and returns their gradient in that layout.

    Returns a function of the votes that returns `(outputs, coupling)`.
    """

    def forward(votes):
        if inputs_first:
            votes = ops.transpose(votes, _TO_ROUTING_LAYOUT)
        saved = []

        def record(x):
            saved.append(x)
            return x

        outputs, coupling = routing_loop(*_agreement_contractions(votes, record=record), routings)
        return (outputs, coupling), (saved + [votes] if inputs_first else saved)

    def backward(args, saved, upstream):
        if inputs_first:
            *saved, votes = saved
        else:
            (votes,) = args
        num_outputs = votes.shape[1]

        def weighted_gradient(constants, upstream):  # d/dc of sum_i c[i] V[i, :]
            return (_contract_pose(constants[0], upstream[0]),)

        def agreement_gradient(constants, upstream):  # d/dv of sum_h V[:, h] v[h]
            return (_contract_inputs(upstream[0], constants[0]),)

        def recompute(*probes):
            factors = []  # per contraction: its small tensor, and on which side of dV

            def uniform_sum(last):
                factors.append(("left", ops.full(ops.shape(votes)[:3], 1.0 / num_outputs)))
                return saved[0] + probes[0]

            def weighted_sum(coupling, last):
                k = len(factors)
                factors.append(("left", coupling))
                (s,) = with_gradient((saved[k],), (votes,), (coupling,), weighted_gradient)
                return s + probes[k]

            def agreement(outputs):
                k = len(factors)
                factors.append(("right", outputs))
                (a,) = with_gradient((saved[k],), (votes,), (outputs,), agreement_gradient)
                return a + probes[k]

            results = routing_loop(uniform_sum, weighted_sum, agreement, routings)
            return results, factors

        # Distinct tensors: a backend may add up the gradients of a repeated one.
        probes = [ops.zeros_like(s) for s in saved]
        grads, factors = vjp(recompute, probes, upstream)
        left = [t if side == "left" else g for (side, t), g in zip(factors, grads, strict=True)]
        right = [g if side == "left" else t for (side, t), g in zip(factors, grads, strict=True)]
        # Stacked on a new second-to-last axis and transposed: stacking on a new
        # last axis interleaves the five tensors and is several times slower.
        left, right = ops.stack(left, axis=-2), ops.stack(right, axis=-2)
        if inputs_first:  # (batch, outputs, dim, inputs) -> (inputs, batch, outputs, dim)
            d_votes = ops.matmul(ops.swapaxes(right, -1, -2), left)
            return [ops.transpose(d_votes, (3, 0, 1, 2))]
        return [ops.matmul(ops.swapaxes(left, -1, -2), right)]  # (batch, outputs, inputs, dim)

    return recompute_gradient(forward, backward)


def routing_loop(uniform_sum, weighted_sum, agreement, routings):
    """The iterations of Procedure 1, independent of how the votes are stored.

    The contractions are supplied by the caller, so that the forward pass and
    the recomputation in `_structured_agreement`'s backward pass share the loop:

    - `uniform_sum(last)`: `s` for the first iteration, where `b = 0` makes
      every coupling coefficient `1 / num_outputs`.
    - `weighted_sum(coupling, last)`: `s[j] = sum_i c[i, j] votes[i, j]`.
    - `agreement(outputs)`: `votes[i, j] . v[j]`, laid out like the logits.

    `last` tells whether this is the final iteration (callers that stop the
    gradient through the inner iterations use it). The logits and coupling
    coefficients are laid out `(batch, outputs, inputs)`; the softmax runs
    over the outputs. Returns the squashed outputs and the coupling coefficients
    of the last iteration (`None` after a single iteration, where they are
    uniform).
    """
    logits = None
    coupling = None
    for iteration in range(routings):
        last = iteration == routings - 1
        if logits is None:
            weighted = uniform_sum(last)
        else:
            coupling = _softmax(logits, axis=1)
            weighted = weighted_sum(coupling, last)
        outputs = squash(weighted, axis=-1)
        if not last:
            update = agreement(outputs)
            logits = update if logits is None else logits + update
    return outputs, coupling


def _softmax(x, axis):
    """`ops.softmax` over `axis`, computed in place of transposing it last.

    TensorFlow's softmax works on the last axis only, so `ops.softmax` over
    another axis transposes its input and output (and the gradient's): for
    the `(batch, outputs, inputs)` logits of routing, those transposes cost
    more than the softmax itself.
    """
    # `initial` lets an empty batch through (Keras refuses the max of an empty tensor).
    e = ops.exp(x - ops.max(x, axis=axis, keepdims=True, initial=-float("inf")))
    return e / ops.sum(e, axis=axis, keepdims=True)


INVERSE_TEMPERATURE = 0.01
"""Default final inverse temperature `lambda` of EM routing."""

TEMPERING = 0.1
"""Default exponent `tau` of the tempered E-step, `R ∝ (a[j] p[i, j]) ** tau` (1: the paper's)."""

SCHEDULES = ("rescaled", "authors")
"""The inverse temperature schedules of `inverse_temperatures`."""

NORMALIZATIONS = ("types_and_positions", "positions")
"""How a convolutional capsule layer normalises a child's `R` (see `normalize_over_positions`)."""

VARIANCE_EPSILON = 1e-4
"""Default floor of every per-dimension variance in EM routing."""

EM_EPSILON = 1e-7
"""Added to the summed responsibilities `sum_i R[i, j] a[i]` before dividing by them."""

_LOG_2PI = 1.8378770664093453


def inverse_temperatures(iterations, final=INVERSE_TEMPERATURE, schedule="rescaled"):
    """The inverse temperature `lambda` of each EM iteration.

    Both schedules grow as `1 - 0.95 ** (t + 1)` over the iterations
    `t = 0 .. iterations - 1`, the schedule of the authors' answer on
    OpenReview and of their code:

    - `"rescaled"` (default): `final * (1 - 0.95 ** (t + 1)) / (1 - 0.95 **
      iterations)`, rescaled so that the last iteration, the one whose
      activations leave the layer, uses `final` itself;
    - `"authors"`: `final * (1 - 0.95 ** (t + 1))`, as the authors' code
      computes it. With `final = 0.01` and 3 iterations the last `lambda` is
      0.0014, 14% of `final`, and the activations barely depend on the costs.
      (The authors' class capsule layer also divides `final` by 4.)

    Example:

    >>> [round(x, 5) for x in inverse_temperatures(3, 0.01, schedule="authors")]
    [0.0005, 0.00098, 0.00143]
    """
    check_positive_int("iterations", iterations)
    check_choice("schedule", schedule, SCHEDULES)
    top = 1.0 - 0.95**iterations if schedule == "rescaled" else 1.0
    return [final * (1.0 - 0.95 ** (t + 1)) / top for t in range(iterations)]


def tempering_schedule(tempering, iterations):
    """The exponent `tau` of each E-step of `iterations` EM iterations.

    `tempering` is one positive number for every E-step, or a sequence with
    one per E-step (`iterations - 1` of them: the last iteration has no
    E-step). Raises a `ValueError` naming `tempering` otherwise.
    """
    check_positive_int("iterations", iterations)
    if isinstance(tempering, (list, tuple)):
        values = list(tempering)
        if len(values) != iterations - 1:
            raise ValueError(
                "`tempering` must be a positive number or one per E-step "
                f"({iterations - 1} for {iterations} iterations). Received: "
                f"tempering={tempering!r}"
            )
    else:
        values = [tempering] * (iterations - 1)
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1e30:
            raise ValueError(
                "`tempering` must be a positive finite number or a sequence of them. "
                f"Received: tempering={tempering!r}"
            )
    return [float(value) for value in values]


def em_routing(
    votes,
    activations,
    beta_v,
    beta_a,
    iterations=3,
    inverse_temperature=INVERSE_TEMPERATURE,
    variance_epsilon=VARIANCE_EPSILON,
    return_responsibilities=False,
    tempering=TEMPERING,
    inverse_temperature_schedule="rescaled",
):
    """EM routing between matrix capsules (Hinton, Sabour, Frosst 2018, Procedure 1).

    Every output capsule `j` is a Gaussian cluster with a diagonal covariance
    over the 16 entries of its pose. Starting from `R[i, j] = 1 / num_outputs`,
    each iteration runs

    - the M-step: with `r[i, j] = R[i, j] * a[i]` (the child's activation
      weights its responsibilities *after* they were normalised),
      `mu[j] = sum_i r V / sum_i r`,
      `var[j] = sum_i r (V - mu)^2 / sum_i r` floored at `variance_epsilon`,
      `cost[j] = (16 beta_v[j] + sum_h log sigma[j, h]) sum_i r[i, j]` and
      `a[j] = sigmoid(lambda_t (beta_a[j] - cost[j]))`;
    - the E-step (all but the last iteration): the log-density `log p[i, j]`
      of each vote under its parent's Gaussian and
      `R[i, j] = softmax_j(tau * (log a[j] + log p[i, j]))`, in log space,
      that is `R[i, j] ∝ (a[j] p[i, j]) ** tau`.

    `tau` is `tempering`. The paper's E-step is `tau = 1`; the default, 0.1,
    is a tempered E-step (deterministic annealing EM), which keeps the
    responsibilities soft after the first M-step so that 3 iterations train
    as well as 2 (see the Matrix capsules guide). `lambda_t` follows
    `inverse_temperatures(iterations, inverse_temperature,
    inverse_temperature_schedule)`.
    Three epsilons are involved: `variance_epsilon` floors the variance (so
    `log sigma` and `1 / var` stay finite when all votes agree exactly),
    `EM_EPSILON` (1e-7) is added to `sum_i r` before dividing, and negative
    round-off in the expanded squares is clipped to zero.

    The squared deviations are expanded, `sum_h (V - mu)^2 / var =
    sum_h V^2 / var - 2 V mu / var + mu^2 / var`, so that every step is a
    contraction of the votes (and their squares, computed once) with small
    per-parent tensors: no tensor of the votes' size is created per iteration.
    The votes are first centred on each parent's plain mean (and the poses
    moved back), so the expansion keeps its precision for large votes and
    votes that share an offset: routing is shift-equivariant. On TensorFlow
    and JAX the votes' gradient is formed as one batched product (see
    `em_route`'s `gradient`), so training keeps no per-iteration tensor of the
    votes' size either. Routing computes in float32 for float16 /
    bfloat16 inputs.

    Args:
        votes: `V[i, j]`, shape `(batch, num_inputs, num_outputs, 16)`: each
            child's 4x4 vote for each parent, flattened.
        activations: child activations `a[i]` in [0, 1], shape
            `(batch, num_inputs)`.
        beta_v: per-parent cost offsets, shape `(num_outputs,)`.
        beta_a: per-parent activation offsets, shape `(num_outputs,)`.
        iterations: EM iterations, a positive integer.
        inverse_temperature: the final `lambda`.
        variance_epsilon: the variance floor.
        return_responsibilities: also return `R` of the last E-step,
            `(batch, num_inputs, num_outputs)`, summing to 1 over parents.
        tempering: the E-step exponent `tau`, a positive number (0.1), or a
            sequence of one per E-step (`iterations - 1` numbers). 1 is the
            paper's E-step.
        inverse_temperature_schedule: `"rescaled"` (default) or `"authors"`;
            see `inverse_temperatures`.

    Returns:
        `(poses, activations)`: the parents' means, `(batch, num_outputs, 16)`,
        and activations in (0, 1), `(batch, num_outputs)`; then `R` if asked.

    Example:

    >>> import numpy as np
    >>> votes = np.random.normal(size=(2, 32, 5, 16)).astype("float32")
    >>> poses, acts = em_routing(votes, np.ones((2, 32), "float32"),
    ...                          np.zeros(5, "float32"), np.zeros(5, "float32"))
    >>> tuple(poses.shape), tuple(acts.shape)
    ((2, 5, 16), (2, 5))

    Reference:
        Hinton, Sabour, Frosst. Matrix capsules with EM routing. ICLR 2018.
    """
    check_positive_int("iterations", iterations)
    tempering_schedule(tempering, iterations)
    check_choice("inverse_temperature_schedule", inverse_temperature_schedule, SCHEDULES)
    check_in_unit_interval("activations", activations)
    votes = ops.convert_to_tensor(votes)
    activations = ops.convert_to_tensor(activations)
    if len(votes.shape) != 4 or votes.shape[-1] != 16:
        raise ValueError(
            "`votes` must have shape (batch, num_inputs, num_outputs, 16): a flattened "
            f"4x4 pose matrix per vote. Received: votes.shape={tuple(votes.shape)}"
        )
    if tuple(activations.shape) != tuple(votes.shape[:2]):
        raise ValueError(
            "`activations` must have shape (batch, num_inputs) matching `votes`. "
            f"Received: activations.shape={tuple(activations.shape)}, "
            f"votes.shape={tuple(votes.shape)}"
        )
    num_outputs = votes.shape[2]
    dtype = ops.dtype(votes)
    poses, acts, resp = em_route(
        ops.expand_dims(ops.transpose(votes, (0, 2, 1, 3)), 1),
        ops.expand_dims(activations, 1),
        beta_v,
        beta_a,
        iterations,
        inverse_temperature,
        variance_epsilon,
        initial_responsibility=1.0 / num_outputs,
        log_normalize=normalize_over_outputs,
        tempering=tempering,
        schedule=inverse_temperature_schedule,
    )
    poses, acts = poses[:, 0], acts[:, 0]
    if dtype in _LOW_PRECISION:
        poses, acts = ops.cast(poses, dtype), ops.cast(acts, dtype)
    if not return_responsibilities:
        return poses, acts
    if resp is None:
        resp = ops.full(ops.shape(votes)[:3], 1.0 / num_outputs)
    else:
        resp = ops.transpose(resp[:, 0], (0, 2, 1))
    return poses, acts, resp


def normalize_over_outputs(logits):
    """`log R` when each child's parents are the outputs of its site (axis 2)."""
    return logits - ops.logsumexp(logits, axis=2, keepdims=True)


def em_route(
    votes,
    activations,
    beta_v,
    beta_a,
    iterations,
    inverse_temperature,
    variance_epsilon,
    initial_responsibility,
    log_normalize,
    gradient="auto",
    tempering=TEMPERING,
    schedule="rescaled",
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
        iterations, inverse_temperature, variance_epsilon, tempering: as
            `em_routing`.
        schedule: `em_routing`'s `inverse_temperature_schedule`.
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
            only (see `route_by_agreement`): use `"autodiff"` for gradients
            of gradients.

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
    # everything else as it is. Centring each parent's votes on their plain mean
    # keeps the expanded squares below (V^2 - 2 V mu + mu^2) free of cancellation
    # when votes are large or share an offset. The reference is a constant for
    # differentiation, which is exact because the result does not depend on it.
    reference = ops.stop_gradient(ops.mean(votes, axis=-2, keepdims=True))
    votes = votes - reference
    reference = reference[..., 0, :]  # (batch, sites, outputs, 16)
    settings = {
        "schedule": inverse_temperatures(iterations, inverse_temperature, schedule),
        "tempering": tempering_schedule(tempering, iterations),
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
        return mean + reference, acts, resp
    route = recompute_gradient(
        lambda *args: _structured_forward(*args, settings),
        lambda args, saved, upstream: _structured_backward(args, saved, upstream, settings),
    )
    outputs = route(votes, activations, beta_v, beta_a)
    return outputs[0] + reference, outputs[1], (outputs[2] if iterations > 1 else None)


def _contract_inputs(weights, x):  # sum_i weights[..., j, i] x[..., j, i, :]
    return ops.squeeze(ops.matmul(ops.expand_dims(weights, -2), x), -2)


def _contract_pose(x, coefficients):  # sum_h x[..., j, i, h] coefficients[..., j, h]
    # A row times the transposed votes, not the votes times a column: the
    # backends fold the transpose into the product (TensorFlow's graph
    # optimiser, XLA), and oneDNN runs a (1 x h) @ (h x i) product about 1.5x
    # faster than the (i x h) @ (h x 1) one.
    row = ops.expand_dims(coefficients, -2)
    return ops.squeeze(ops.matmul(row, ops.swapaxes(x, -1, -2)), -2)


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
        return _contract_inputs(weights, votes), _contract_inputs(weights, squares)

    def deviations(t, inverse, weighted_mean):
        return _contract_pose(squares, inverse) - 2.0 * _contract_pose(votes, weighted_mean)

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
        return (_contract_pose(v, upstream[0]) + _contract_pose(s, upstream[1]),)

    def deviations_gradient(constants, upstream):  # d/d(inverse, weighted mean)
        v, s = constants
        return (_contract_inputs(upstream[0], s), -2.0 * _contract_inputs(upstream[0], v))

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


def convolution_sites(height, width, kernel_size, strides):
    """Which child each patch entry of a valid convolution reads, and its inverse.

    A convolutional capsule layer with `kernel_size` and `strides` over a
    `height x width` grid has `out_h x out_w` sites (output positions), each
    reading a `kernel_size x kernel_size` patch. Entry `p = (site, kh, kw)`
    of the flattened patches reads the child at position `children[p]`
    (`row * width + column`). `parents_of[c]` lists the patch entries that read
    child position `c`, padded with `len(children)`; `counts[c]` is their number
    (0 for positions that no patch covers).

    Returns:
        `(children, parents_of, counts, (out_h, out_w))`, NumPy arrays.
    """
    import numpy as np

    out_h = (height - kernel_size) // strides + 1
    out_w = (width - kernel_size) // strides + 1
    if out_h < 1 or out_w < 1:
        raise ValueError(
            f"A {kernel_size}x{kernel_size} kernel does not fit a {height}x{width} grid "
            f"of capsules. Received: kernel_size={kernel_size}, input grid {height}x{width}"
        )
    oy, ox, ky, kx = np.meshgrid(
        np.arange(out_h),
        np.arange(out_w),
        np.arange(kernel_size),
        np.arange(kernel_size),
        indexing="ij",
    )
    children = ((oy * strides + ky) * width + (ox * strides + kx)).reshape(-1)
    counts = np.bincount(children, minlength=height * width)
    parents_of = np.full((height * width, max(int(counts.max()), 1)), len(children))
    filled = np.zeros(height * width, dtype=int)
    for entry, child in enumerate(children):
        parents_of[child, filled[child]] = entry
        filled[child] += 1
    return children.astype("int32"), parents_of.astype("int32"), counts, (out_h, out_w)


def normalize_over_positions(logits, children, parents_of, normalization="types_and_positions"):
    """`log R` for a convolutional layer: each child over the parents that read it.

    A child is read by the parents of every site whose patch contains it.
    `normalization` says which of them share it:

    - `"types_and_positions"` (default), Procedure 1's text: all of them, the
      output types of every such site; `exp(log R)` sums to 1 per child.
    - `"positions"`, the authors' code (`update_conv_routing`): for each
      output type, the parents of that type at those sites; `exp(log R)`
      sums to 1 per child and output type, so types do not compete.

    Args:
        logits: `(batch, sites, num_outputs, patch_size, num_input_types)`.
        children, parents_of: from `convolution_sites` (`sites * patch_size`
            patch entries).
        normalization: `"types_and_positions"` or `"positions"`.

    Returns:
        `log R`, shaped like `logits`.
    """
    check_choice("normalization", normalization, NORMALIZATIONS)
    shape = ops.shape(logits)
    batch, sites, patch = shape[0], shape[1], shape[3]
    if normalization == "types_and_positions":
        # Per patch entry: log-sum-exp over the output types of its site.
        local = ops.logsumexp(logits, axis=2)  # (batch, sites, patch, types)
        groups = 1
    else:
        local = ops.transpose(logits, (0, 1, 3, 2, 4))  # (batch, sites, patch, outputs, types)
        groups = shape[2]
    local = ops.reshape(local, (batch, sites * patch, -1))
    padding = ops.full((batch, 1, ops.shape(local)[2]), -1e30, dtype=local.dtype)
    local = ops.concatenate([local, padding], axis=1)
    # Per child: log-sum-exp over the patch entries that read it.
    per_child = ops.logsumexp(ops.take(local, parents_of, axis=1), axis=2)
    per_entry = ops.take(per_child, children, axis=1)  # (batch, sites * patch, groups * types)
    if groups == 1:
        return logits - ops.reshape(per_entry, (batch, sites, 1, patch, -1))
    per_entry = ops.reshape(per_entry, (batch, sites, patch, groups, -1))
    return logits - ops.transpose(per_entry, (0, 1, 3, 2, 4))

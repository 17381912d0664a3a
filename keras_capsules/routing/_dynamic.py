"""Dynamic routing (Sabour et al. 2017) and its structured gradient."""

from keras import ops

from keras_capsules._autodiff import recompute_gradient
from keras_capsules._autodiff import supports_recompute_gradient
from keras_capsules._autodiff import vjp
from keras_capsules._autodiff import with_gradient
from keras_capsules._validation import check_gradient_method
from keras_capsules._validation import check_positive_int
from keras_capsules.ops import squash
from keras_capsules.routing._contract import LOW_PRECISION
from keras_capsules.routing._contract import contract_inputs
from keras_capsules.routing._contract import contract_pose


def dynamic_routing(
    votes, iterations=3, stop_gradient=False, return_coupling=False, gradient="auto"
):
    """Dynamic routing between capsules (Sabour et al. 2017, Procedure 1).

    Starting from logits `b[i, j] = 0`, each of the `iterations` routing iterations
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
        iterations: number of routing iterations, a positive integer.
        stop_gradient: if `True`, the iterations before the last one see the
            votes through `stop_gradient`, so that gradients reach the votes
            only through the final weighted sum (as some re-implementations
            do). The paper, and the default, let gradients flow through every
            iteration.
        return_coupling: if `True`, also return the coupling coefficients
            `c` used in the last iteration, shape
            `(batch, num_inputs, num_outputs)`; they sum to 1 over outputs.
        gradient: how the gradient reaches the votes: `"autodiff"`
            differentiates the iterations automatically; `"structured"` forms
            the votes' gradient as one batched matrix product, which is faster
            and keeps less memory (the Routing guide explains it); `"auto"`
            (default) is `"structured"` on TensorFlow and JAX without
            `stop_gradient`. The values are the same either way. Use
            `"autodiff"` for gradients of gradients on TensorFlow.

    Returns:
        The output capsules `v`, shape `(batch, num_outputs, output_dim)`, or
        `(v, c)` if `return_coupling` is `True`.

    Example:

    >>> import numpy as np
    >>> votes = np.random.normal(size=(2, 1152, 10, 16)).astype("float32")
    >>> tuple(dynamic_routing(votes, iterations=3).shape)
    (2, 10, 16)

    Reference:
        Sabour, Frosst, Hinton. Dynamic Routing Between Capsules. NIPS 2017.
        arXiv:1710.09829.
    """
    check_positive_int("iterations", iterations)
    if len(votes.shape) != 4:
        raise ValueError(
            "`votes` must have shape (batch, num_inputs, num_outputs, output_dim). "
            f"Received: votes.shape={tuple(votes.shape)}"
        )
    votes = ops.convert_to_tensor(votes)
    outputs, coupling = route_by_agreement(
        ops.transpose(votes, (0, 2, 1, 3)), iterations, stop_gradient, return_coupling, gradient
    )
    if not return_coupling:
        return outputs
    return outputs, coupling


def route_by_agreement(
    votes,
    iterations=3,
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
    gradient of the votes' size per contraction (five for 3 iterations) and adds
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
    if iterations == 1:
        gradient = "autodiff"  # one uniform sum: nothing to structure
    dtype = ops.dtype(votes)
    if dtype in LOW_PRECISION:
        votes = ops.cast(votes, "float32")
    if inputs_first and gradient != "structured":
        votes, inputs_first = ops.transpose(votes, _TO_ROUTING_LAYOUT), False
    if gradient == "structured":
        outputs, coupling = _structured_agreement(iterations, inputs_first)(votes)
    else:
        outputs, coupling = _agreement_iterations(votes, iterations, stop_gradient)
    if dtype in LOW_PRECISION:
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
        return record(contract_inputs(coupling, votes if last else inner_votes))

    def agreement(outputs):
        return record(contract_pose(inner_votes, outputs))

    return uniform_sum, weighted_sum, agreement


def _agreement_iterations(votes, iterations, stop_gradient):
    """Procedure 1 on the votes, differentiated automatically."""
    inner_votes = ops.stop_gradient(votes) if stop_gradient else votes
    contractions = _agreement_contractions(votes, inner_votes)
    return routing_loop(*contractions, iterations)


def _structured_agreement(iterations, inputs_first=False):
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

        outputs, coupling = routing_loop(*_agreement_contractions(votes, record=record), iterations)
        return (outputs, coupling), (saved + [votes] if inputs_first else saved)

    def backward(args, saved, upstream):
        if inputs_first:
            *saved, votes = saved
        else:
            (votes,) = args
        num_outputs = votes.shape[1]

        def weighted_gradient(constants, upstream):  # d/dc of sum_i c[i] V[i, :]
            return (contract_pose(constants[0], upstream[0]),)

        def agreement_gradient(constants, upstream):  # d/dv of sum_h V[:, h] v[h]
            return (contract_inputs(upstream[0], constants[0]),)

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

            results = routing_loop(uniform_sum, weighted_sum, agreement, iterations)
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


def routing_loop(uniform_sum, weighted_sum, agreement, iterations):
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
    for iteration in range(iterations):
        last = iteration == iterations - 1
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

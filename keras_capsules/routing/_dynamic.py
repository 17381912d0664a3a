"""Dynamic routing (Sabour et al. 2017) and its structured gradient."""

from keras import ops

from keras_capsules._autodiff import recompute_gradient
from keras_capsules._autodiff import supports_recompute_gradient
from keras_capsules._autodiff import vjp
from keras_capsules._autodiff import with_gradient
from keras_capsules._contract import check_votes
from keras_capsules._contract import contract_inputs
from keras_capsules._contract import contract_pose
from keras_capsules._contract import uniform_coupling
from keras_capsules._precision import to_float32
from keras_capsules._validation import check_gradient_method
from keras_capsules._validation import check_positive_int
from keras_capsules.ops import squash


def dynamic_routing(
    votes, iterations=3, stop_gradient=False, return_coupling=False, gradient="auto"
):
    """Dynamic routing between capsules (Sabour et al. 2017, Procedure 1).

    Starting from logits `b[j, i] = 0`, each of the `iterations` routing iterations
    computes the coupling coefficients `c[:, i] = softmax(b[:, i])` (a softmax
    over the *parents* `j`, separately for every child `i`), the weighted
    sums `s[j] = sum_i c[j, i] * votes[j, i]`, the outputs `v[j] = squash(s[j])`
    and, between iterations, the agreement update `b[j, i] += votes[j, i] . v[j]`.

    Routing runs in float32 whatever the dtype of `votes` (so it is safe under
    `mixed_float16` / `mixed_bfloat16`); the outputs are cast back to the
    dtype of `votes`.

    Args:
        votes: prediction vectors `u_hat[j|i]`, shape
            `(batch, num_outputs, num_inputs, output_dim)`.
        iterations: number of routing iterations, a positive integer. One
            iteration is uniform coupling: no routing by agreement.
        stop_gradient: if `True`, the iterations before the last one see the
            votes through `stop_gradient`, so that gradients reach the votes
            only through the final weighted sum (as some re-implementations
            do). The paper, and the default, let gradients flow through every
            iteration.
        return_coupling: if `True`, also return the coupling coefficients
            `c` used in the last iteration, shape
            `(batch, num_outputs, num_inputs)`; they sum to 1 over the parents.
        gradient: how the gradient reaches the votes: `"autodiff"`
            differentiates the iterations automatically; `"structured"` forms
            the votes' gradient as one batched matrix product, which is faster
            and keeps less memory (the Routing guide explains it); `"auto"`
            (default) is `"structured"` on TensorFlow and JAX without
            `stop_gradient`. The values are the same either way. On
            TensorFlow the structured gradient is first-order only: use
            `"autodiff"` for gradients of gradients there.

    Returns:
        The output capsules `v`, shape `(batch, num_outputs, output_dim)`, or
        `(v, c)` if `return_coupling` is `True`.

    Example:

    >>> import numpy as np
    >>> votes = np.random.normal(size=(2, 10, 1152, 16)).astype("float32")
    >>> tuple(dynamic_routing(votes, iterations=3).shape)
    (2, 10, 16)

    Reference:
        Sabour, Frosst, Hinton. Dynamic Routing Between Capsules. NIPS 2017.
        arXiv:1710.09829.
    """
    check_positive_int("iterations", iterations)
    check_gradient_method(gradient, stop_gradient)
    votes = check_votes(votes)
    if gradient == "auto":
        gradient = (
            "structured" if supports_recompute_gradient() and not stop_gradient else "autodiff"
        )
    if iterations == 1:
        gradient = "autodiff"  # one uniform sum: nothing to structure
    votes, dtype = to_float32(votes)
    if gradient == "structured":
        outputs, coupling = _structured_agreement(iterations)(votes)
    else:
        outputs, coupling = _agreement_iterations(votes, iterations, stop_gradient)
    outputs = ops.cast(outputs, dtype)
    if not return_coupling:
        return outputs
    return outputs, (uniform_coupling(votes) if coupling is None else coupling)


def _agreement_contractions(votes, inner_votes=None, record=None):
    """`_routing_loop`'s three contractions of votes `(batch, outputs, inputs, dim)`.

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
    return _routing_loop(*contractions, iterations)


def _structured_agreement(iterations):
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

    Returns a function of the votes that returns `(outputs, coupling)`.
    """

    def forward(votes):
        saved = []

        def record(x):
            saved.append(x)
            return x

        contractions = _agreement_contractions(votes, record=record)
        return _routing_loop(*contractions, iterations), saved

    def backward(args, saved, upstream):
        (votes,) = args

        def weighted_gradient(constants, upstream):  # d/dc of sum_i c[i] V[i, :]
            return (contract_pose(constants[0], upstream[0]),)

        def agreement_gradient(constants, upstream):  # d/dv of sum_h V[:, h] v[h]
            return (contract_inputs(upstream[0], constants[0]),)

        def recompute(*probes):
            factors = []  # per contraction: its small tensor, and on which side of dV

            def uniform_sum(last):
                factors.append(("left", uniform_coupling(votes)))
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

            results = _routing_loop(uniform_sum, weighted_sum, agreement, iterations)
            return results, factors

        # Distinct tensors: a backend may add up the gradients of a repeated one.
        probes = [ops.zeros_like(s) for s in saved]
        grads, factors = vjp(recompute, probes, upstream)
        left = [t if side == "left" else g for (side, t), g in zip(factors, grads, strict=True)]
        right = [g if side == "left" else t for (side, t), g in zip(factors, grads, strict=True)]
        # Stacked on a new second-to-last axis and transposed: stacking on a new
        # last axis interleaves the five tensors and is several times slower.
        left, right = ops.stack(left, axis=-2), ops.stack(right, axis=-2)
        return [ops.matmul(ops.swapaxes(left, -1, -2), right)]  # (batch, outputs, inputs, dim)

    return recompute_gradient(forward, backward)


def _routing_loop(uniform_sum, weighted_sum, agreement, iterations):
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

"""Routing-by-agreement procedures, as pure functions on `keras.ops`."""

from keras import ops

from keras_capsules._validation import check_positive_int
from keras_capsules.ops import squash

_LOW_PRECISION = ("float16", "bfloat16")


def dynamic_routing(votes, routings=3, stop_gradient=False, return_coupling=False):
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

    Returns:
        The output capsules `v`, shape `(batch, num_outputs, output_dim)`, or
        `(v, c)` if `return_coupling` is `True`.

    Example:

    >>> import numpy as np
    >>> votes = np.random.normal(size=(2, 1152, 10, 16)).astype("float32")
    >>> dynamic_routing(votes, routings=3).shape
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
        ops.transpose(votes, (0, 2, 1, 3)), routings, stop_gradient, return_coupling
    )
    if not return_coupling:
        return outputs
    return outputs, coupling


def route_by_agreement(votes, routings=3, stop_gradient=False, return_coupling=False):
    """The core of `dynamic_routing` on votes laid out `(batch, num_outputs, num_inputs, dim)`.

    With the input axis next to the capsule dimensions, the weighted sum and
    the agreement of every iteration are batched matrix-vector products over
    contiguous memory. Returns `(outputs, coupling)`, `coupling` being `None`
    unless `return_coupling` is set (then shaped `(batch, num_inputs, num_outputs)`).
    """
    dtype = ops.dtype(votes)
    if dtype in _LOW_PRECISION:
        votes = ops.cast(votes, "float32")
    num_outputs = votes.shape[1]
    inner_votes = ops.stop_gradient(votes) if stop_gradient else votes

    def uniform_sum(last):
        return ops.sum(votes if last else inner_votes, axis=2) / float(num_outputs)

    def weighted_sum(coupling, last):  # coupling: (batch, outputs, inputs)
        current = votes if last else inner_votes
        return ops.squeeze(ops.matmul(ops.expand_dims(coupling, 2), current), 2)

    def agreement(outputs):
        return ops.squeeze(ops.matmul(inner_votes, ops.expand_dims(outputs, -1)), -1)

    outputs, coupling = routing_loop(uniform_sum, weighted_sum, agreement, routings, output_axis=1)
    if dtype in _LOW_PRECISION:
        outputs = ops.cast(outputs, dtype)
    if not return_coupling:
        return outputs, None
    shape = ops.shape(votes)
    return outputs, coupling_by_input(coupling, (0, 2, 1), shape[0], shape[2], num_outputs)


def coupling_by_input(coupling, perm, batch, num_inputs, num_outputs):
    """`routing_loop`'s coupling coefficients as `(batch, num_inputs, num_outputs)`.

    `perm` transposes the loop's layout to that one. After a single iteration
    the loop has none (`None`): every coefficient is then `1 / num_outputs`.
    """
    if coupling is None:
        return ops.full((batch, num_inputs, num_outputs), 1.0 / num_outputs)
    return ops.transpose(coupling, perm)


def routing_loop(uniform_sum, weighted_sum, agreement, routings, output_axis):
    """The iterations of Procedure 1, independent of how the votes are stored.

    The contractions are supplied by the caller, so that layers may compute them
    without materialising the votes (`CapsuleLayer` does):

    - `uniform_sum(last)`: `s` for the first iteration, where `b = 0` makes
      every coupling coefficient `1 / num_outputs`.
    - `weighted_sum(coupling, last)`: `s[j] = sum_i c[i, j] votes[i, j]`.
    - `agreement(outputs)`: `votes[i, j] . v[j]`, laid out like the logits.

    `last` tells whether this is the final iteration (callers that stop the
    gradient through the inner iterations use it). The logits and coupling
    coefficients have the output capsules on `output_axis`; the softmax runs
    over that axis. Returns the squashed outputs and the coupling coefficients
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
            coupling = ops.softmax(logits, axis=output_axis)
            weighted = weighted_sum(coupling, last)
        outputs = squash(weighted, axis=-1)
        if not last:
            update = agreement(outputs)
            logits = update if logits is None else logits + update
    return outputs, coupling

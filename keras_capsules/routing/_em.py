"""EM routing between matrix capsules (Hinton, Sabour, Frosst 2018)."""

from keras import ops

from keras_capsules._contract import check_votes
from keras_capsules._contract import uniform_coupling
from keras_capsules._em_route import em_route
from keras_capsules._positions import normalize_over_outputs
from keras_capsules._validation import check_in_unit_interval
from keras_capsules.routing._em_settings import INVERSE_TEMPERATURE
from keras_capsules.routing._em_settings import TEMPERING
from keras_capsules.routing._em_settings import VARIANCE_EPSILON
from keras_capsules.routing._em_settings import EMSettings


def em_routing(
    votes,
    activations,
    beta_v,
    beta_a,
    iterations=3,
    inverse_temperature=INVERSE_TEMPERATURE,
    variance_epsilon=VARIANCE_EPSILON,
    tempering=TEMPERING,
    inverse_temperature_schedule="rescaled",
    return_coupling=False,
):
    """EM routing between matrix capsules (Hinton, Sabour, Frosst 2018, Procedure 1).

    Every output capsule `j` is a Gaussian cluster with a diagonal covariance
    over the 16 entries of its pose. Starting from `R[j, i] = 1 / num_outputs`,
    each iteration runs

    - the M-step: with `r[j, i] = R[j, i] * a[i]` (the child's activation
      weights its responsibilities *after* they were normalised),
      `mu[j] = sum_i r V / sum_i r`,
      `var[j] = sum_i r (V - mu)^2 / sum_i r` floored at `variance_epsilon`,
      `cost[j] = (16 beta_v[j] + sum_h log sigma[j, h]) sum_i r[i, j]` and
      `a[j] = sigmoid(lambda_t (beta_a[j] - cost[j]))`;
    - the E-step (all but the last iteration): the log-density `log p[j, i]`
      of each vote under its parent's Gaussian and
      `R[j, i] = softmax_j(tau * (log a[j] + log p[j, i]))`, in log space,
      that is `R[j, i] ∝ (a[j] p[j, i]) ** tau`.

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
    votes that share an offset: routing is shift-equivariant. An example's
    votes beyond 2^16 are divided by a power of two `c` first, with the floor
    divided by `c^2` (kept at least 2^-56) and `16 log c` added to the costs,
    so that votes up to float32's largest number route without overflow:
    routing is scale-equivariant too. On TensorFlow
    and JAX the votes' gradient is formed as one batched product (the Routing
    guide explains it), so training keeps no per-iteration tensor of the
    votes' size either. Routing computes in float32 for float16 /
    bfloat16 inputs.

    Args:
        votes: `V[j, i]`, shape `(batch, num_outputs, num_inputs, 16)`: each
            child's 4x4 vote for each parent, flattened.
        activations: child activations `a[i]` in [0, 1], shape
            `(batch, num_inputs)`.
        beta_v: per-parent cost offsets, shape `(num_outputs,)`.
        beta_a: per-parent activation offsets, shape `(num_outputs,)`.
        iterations: EM iterations, a positive integer; 1 is a single M-step on
            even assignments, no routing by agreement.
        inverse_temperature: the final `lambda`.
        variance_epsilon: the variance floor.
        tempering: the E-step exponent `tau`, a positive number (0.1), or a
            sequence of one per E-step (`iterations - 1` numbers). 1 is the
            paper's E-step.
        inverse_temperature_schedule: `"rescaled"` (default) or `"authors"`;
            see `inverse_temperatures`.
        return_coupling: also return the coupling, `R` of the last E-step,
            `(batch, num_outputs, num_inputs)`, summing to 1 over the parents.

    Returns:
        `(poses, activations)`: the parents' means, `(batch, num_outputs, 16)`,
        and activations in (0, 1), `(batch, num_outputs)`; then `R` if asked.

    Example:

    >>> import numpy as np
    >>> votes = np.random.normal(size=(2, 5, 32, 16)).astype("float32")
    >>> poses, acts = em_routing(votes, np.ones((2, 32), "float32"),
    ...                          np.zeros(5, "float32"), np.zeros(5, "float32"))
    >>> tuple(poses.shape), tuple(acts.shape)
    ((2, 5, 16), (2, 5))

    Reference:
        Hinton, Sabour, Frosst. Matrix capsules with EM routing. ICLR 2018.
    """
    settings = EMSettings(
        iterations, inverse_temperature, variance_epsilon, tempering, inverse_temperature_schedule
    )
    check_in_unit_interval("activations", activations)
    votes = check_votes(votes, dim=16)
    activations = ops.convert_to_tensor(activations)
    if tuple(activations.shape) != (votes.shape[0], votes.shape[2]):
        raise ValueError(
            "`activations` must have shape (batch, num_inputs) matching `votes` "
            f"(batch, num_outputs, num_inputs, 16). Received: "
            f"activations.shape={tuple(activations.shape)}, votes.shape={tuple(votes.shape)}"
        )
    num_outputs = votes.shape[1]
    beta_v = _check_beta("beta_v", beta_v, num_outputs)
    beta_a = _check_beta("beta_a", beta_a, num_outputs)
    dtype = ops.dtype(votes)
    poses, acts, resp = em_route(
        ops.expand_dims(votes, 1),
        ops.expand_dims(activations, 1),
        beta_v,
        beta_a,
        settings,
        initial_responsibility=1.0 / num_outputs,
        log_normalize=normalize_over_outputs,
    )
    poses, acts = ops.cast(poses[:, 0], dtype), ops.cast(acts[:, 0], dtype)
    if not return_coupling:
        return poses, acts
    return poses, acts, (uniform_coupling(votes, "float32") if resp is None else resp[:, 0])


def _check_beta(name, value, num_outputs):
    """`value` as a tensor of shape `(num_outputs,)` or `()`; a `ValueError` naming it otherwise."""
    value = ops.convert_to_tensor(value)
    if tuple(value.shape) not in ((), (num_outputs,)):
        raise ValueError(
            f"`{name}` must have shape (num_outputs,) = ({num_outputs},), one per parent, or be "
            f"a scalar. Received: {name}.shape={tuple(value.shape)}"
        )
    return value

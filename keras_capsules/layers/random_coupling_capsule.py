import keras
from keras import ops

from keras_capsules._contract import contract_inputs
from keras_capsules._validation import is_int
from keras_capsules.layers.fully_connected_capsule import FullyConnectedCapsule
from keras_capsules.ops import squash


@keras.saving.register_keras_serializable(package="keras_capsules")
class RandomCouplingCapsule(FullyConnectedCapsule):
    """Fully connected capsules whose coupling is drawn at random once and never changes.

    The control of Paik et al. 2019 for routing procedures: every child `i`
    votes for every parent `j` through its own matrix, `u_hat[j|i] = W[i, j]
    @ u_i`, as in `CapsuleLayer`, but the coupling is not routed: it is
    `c[:, i] = softmax(b[:, i])` over the parents, for logits `b` drawn from
    a standard normal distribution when the layer is built and kept as a
    non-trainable weight (so a saved model keeps them). The outputs are
    `squash(sum_i c[j, i] u_hat[j|i])`. `CapsuleLayer(iterations=1)` is the
    other control, uniform coupling. `FullyConnectedCapsule` is the base class.

    Args:
        capsule_types: number of output capsules, each a type of its own.
        capsule_dim: dimensions of each output capsule.
        seed: seed of the coupling's logits, a non-negative integer, or `None`
            for Keras's global random state.
        kernel_initializer: initializer of `W` (a normal distribution of
            standard deviation 0.02, as `CapsuleLayer`'s).
        kernel_regularizer: optional regularizer of `W`.
        **kwargs: base layer arguments such as `name` and `dtype`.

    Call arguments:
        inputs: input capsules, shape `(batch, num_inputs, input_dim)`.
        return_coupling: if `True`, return `(outputs, coupling)`, the fixed
            coefficients shaped `(batch, num_inputs, capsule_types)`.

    Returns:
        Output capsules of shape `(batch, capsule_types, capsule_dim)`.

    Example:

    >>> import numpy as np
    >>> from keras import ops
    >>> layer = RandomCouplingCapsule(capsule_types=10, capsule_dim=16, seed=0)
    >>> outputs, coupling = layer(np.ones((2, 32, 8), "float32"), return_coupling=True)
    >>> sums = ops.convert_to_numpy(coupling).sum(-1)  # each child over the parents
    >>> tuple(outputs.shape), bool(np.allclose(sums, 1.0, atol=1e-6))
    ((2, 10, 16), True)

    Reference:
        Paik, Kim, Lee, Kim. Capsule Networks Need an Improved Routing
        Algorithm. ACML 2019. arXiv:1907.13327.
    """

    def __init__(
        self,
        capsule_types=None,
        capsule_dim=None,
        seed=None,
        kernel_initializer=None,
        kernel_regularizer=None,
        **kwargs,
    ):
        if kernel_initializer is None:
            kernel_initializer = keras.initializers.RandomNormal(stddev=0.02)
        super().__init__(
            capsule_types, capsule_dim, kernel_initializer, kernel_regularizer, **kwargs
        )
        if seed is not None and (not is_int(seed) or seed < 0):
            raise ValueError(f"`seed` must be None or a non-negative integer. Received: {seed!r}")
        self.seed = seed

    def build_routing(self, num_inputs, input_dim):
        self.coupling_logits = self.add_weight(
            name="coupling_logits",
            shape=(self.capsule_types, num_inputs),
            initializer=keras.initializers.RandomNormal(stddev=1.0, seed=self.seed),
            trainable=False,
            autocast=False,
        )

    def route(self, votes):
        votes32 = ops.cast(votes, "float32")
        coupling = ops.softmax(ops.cast(self.coupling_logits, "float32"), axis=0)
        weighted = contract_inputs(coupling, votes32)  # the same coupling for every example
        outputs = ops.cast(squash(weighted, axis=-1), ops.dtype(votes))
        batch_coupling = ops.broadcast_to(coupling, (ops.shape(votes)[0],) + tuple(coupling.shape))
        return outputs, batch_coupling

    def get_config(self):
        config = super().get_config()
        config["seed"] = self.seed
        return config

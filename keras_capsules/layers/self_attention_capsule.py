import keras
from keras import ops

from keras_capsules._contract import self_attention_parents
from keras_capsules._contract import uniform_coupling
from keras_capsules._precision import to_float32
from keras_capsules.layers.fully_connected_capsule import FullyConnectedCapsule
from keras_capsules.routing import self_attention_routing


@keras.saving.register_keras_serializable(package="keras_capsules")
class SelfAttentionCapsule(FullyConnectedCapsule):
    """Fully connected capsules with self-attention routing (Efficient-CapsNet's FCCaps).

    Every input capsule `u_i` predicts every output capsule through its own
    matrix, `u_hat[j|i] = W[j, i] @ u_i`, and the predictions are combined in
    one pass of `keras_capsules.routing.self_attention_routing`, with a learned
    prior `B[i, j]` (initialised to zero) added to the coupling coefficients.
    The outputs are squashed with `keras_capsules.ops.exponential_squash`.
    With `uniform_coupling=True` the attention is left out, the control
    without routing: every child's coupling is `1 / capsule_types` before the
    prior is added. `FullyConnectedCapsule` is the base class.

    Args:
        capsule_types: number of output capsules (10 for MNIST).
        capsule_dim: dimensions of each output capsule (16).
        kernel_initializer: initializer of `W`, shape `(capsule_types,
            num_inputs, input_dim, capsule_dim)` (`"he_normal"`, as the
            official code).
        kernel_regularizer: optional regularizer of `W`.
        uniform_coupling: couple every child evenly to the parents instead of
            by self-attention (`False`).
        **kwargs: base layer arguments such as `name` and `dtype`.

    Call arguments:
        inputs: input capsules, shape `(batch, num_inputs, input_dim)`.
        return_coupling: if `True`, return `(outputs, coupling)`, with the
            coefficients `c + B` of shape `(batch, num_inputs, capsule_types)`.

    Returns:
        Output capsules of shape `(batch, capsule_types, capsule_dim)`.

    Example:

    >>> import numpy as np
    >>> layer = SelfAttentionCapsule(capsule_types=10, capsule_dim=16)
    >>> tuple(layer(np.ones((4, 16, 8), "float32")).shape)
    (4, 10, 16)

    Reference:
        Mazzia, Salvetti, Chiaberge. Efficient-CapsNet: Capsule Network with
        Self-Attention Routing. Scientific Reports 11, 14634 (2021).
    """

    def __init__(
        self,
        capsule_types=None,
        capsule_dim=None,
        kernel_initializer="he_normal",
        kernel_regularizer=None,
        uniform_coupling=False,
        **kwargs,
    ):
        super().__init__(
            capsule_types, capsule_dim, kernel_initializer, kernel_regularizer, **kwargs
        )
        if not isinstance(uniform_coupling, bool):
            raise ValueError(
                f"`uniform_coupling` must be True or False. Received: {uniform_coupling!r}"
            )
        self.uniform_coupling = uniform_coupling

    def kernel_shape(self, num_inputs, input_dim):
        """One `input_dim x capsule_dim` matrix `W[j, i]` per parent and child."""
        return (self.capsule_types, num_inputs, input_dim, self.capsule_dim)

    def build_routing(self, num_inputs, input_dim):
        self.bias = self.add_weight(
            name="bias", shape=(num_inputs, self.capsule_types), initializer="zeros"
        )

    def votes(self, inputs):
        inputs = ops.cast(inputs, self.compute_dtype)
        kernel = ops.cast(self.kernel, self.compute_dtype)
        return ops.einsum("bid,jide->bjie", inputs, kernel)

    def route(self, votes):
        bias = ops.transpose(self.bias)
        if not self.uniform_coupling:
            return self_attention_routing(votes, bias, return_coupling=True)
        votes, dtype = to_float32(votes)
        outputs, coupling = self_attention_parents(uniform_coupling(votes), bias, votes)
        return ops.cast(outputs, dtype), ops.cast(coupling, dtype)

    def get_config(self):
        config = super().get_config()
        config["uniform_coupling"] = self.uniform_coupling
        return config

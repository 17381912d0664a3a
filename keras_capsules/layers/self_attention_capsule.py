import keras
from keras import ops

from keras_capsules._validation import check_positive_int
from keras_capsules.routing._self_attention import attend


@keras.saving.register_keras_serializable(package="keras_capsules")
class SelfAttentionCapsule(keras.layers.Layer):
    """Fully connected capsules with self-attention routing (Efficient-CapsNet's FCCaps).

    Every input capsule `u_i` predicts every output capsule through its own
    matrix, `u_hat[j|i] = W[j, i] @ u_i`, and the predictions are combined in
    one pass of `keras_capsules.routing.self_attention_routing`, with a learned
    prior `B[i, j]` (initialised to zero) added to the coupling coefficients.
    The outputs are squashed with `keras_capsules.ops.exponential_squash`.

    Args:
        capsule_types: number of output capsules (10 for MNIST).
        capsule_dim: dimensions of each output capsule (16).
        kernel_initializer: initializer of `W`, shape `(capsule_types,
            num_inputs, input_dim, capsule_dim)` (`"he_normal"`, as the
            official code).
        kernel_regularizer: optional regularizer of `W`.
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
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_positive_int("capsule_types", capsule_types)
        check_positive_int("capsule_dim", capsule_dim)
        self.capsule_types = capsule_types
        self.capsule_dim = capsule_dim
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.input_spec = keras.layers.InputSpec(ndim=3)

    def build(self, input_shape):
        if len(input_shape) != 3 or input_shape[1] is None or input_shape[2] is None:
            raise ValueError(
                "SelfAttentionCapsule expects inputs of shape (batch, num_inputs, input_dim) "
                f"with known num_inputs and input_dim. Received: input_shape={input_shape}"
            )
        num_inputs, input_dim = input_shape[1], input_shape[2]
        self.kernel = self.add_weight(
            name="kernel",
            shape=(self.capsule_types, num_inputs, input_dim, self.capsule_dim),
            initializer=self.kernel_initializer,
            regularizer=self.kernel_regularizer,
        )
        self.bias = self.add_weight(
            name="bias", shape=(num_inputs, self.capsule_types), initializer="zeros"
        )
        self.input_spec = keras.layers.InputSpec(ndim=3, axes={1: num_inputs, -1: input_dim})

    def votes(self, inputs):
        """Prediction vectors `u_hat[j|i]`: `(batch, num_inputs, capsule_types, capsule_dim)`."""
        return ops.transpose(self._votes(inputs), (0, 2, 1, 3))

    def _votes(self, inputs):
        # Laid out (batch, capsule_types, num_inputs, capsule_dim), as routing takes them.
        inputs = ops.cast(inputs, self.compute_dtype)
        kernel = ops.cast(self.kernel, self.compute_dtype)
        return ops.einsum("bid,jide->bjie", inputs, kernel)

    def call(self, inputs, return_coupling=False):
        outputs, coupling = attend(self._votes(inputs), ops.transpose(self.bias))
        return (outputs, ops.transpose(coupling, (0, 2, 1))) if return_coupling else outputs

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.capsule_types, self.capsule_dim)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "capsule_types": self.capsule_types,
                "capsule_dim": self.capsule_dim,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "kernel_regularizer": keras.regularizers.serialize(self.kernel_regularizer),
            }
        )
        return config

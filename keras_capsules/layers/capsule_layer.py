import keras
from keras import ops

from keras_capsules._validation import check_gradient_method
from keras_capsules._validation import check_positive_int
from keras_capsules.layers._votes import votes_inputs_first
from keras_capsules.routing._dynamic import route_by_agreement


@keras.saving.register_keras_serializable(package="keras_capsules")
class CapsuleLayer(keras.layers.Layer):
    """Fully connected capsules with dynamic routing (the paper's DigitCaps).

    Every input capsule `u_i` predicts every output capsule through its own
    transformation matrix: `u_hat[j|i] = W[i, j] @ u_i`; the predictions are
    combined by `iterations` iterations of routing by agreement
    (`keras_capsules.routing.dynamic_routing`). The votes are one batched
    matrix product of the inputs with `W` (no tiling of inputs or weights).

    Args:
        capsule_types: number of output capsules (10 for MNIST), each a type
            of its own.
        capsule_dim: dimensions of each output capsule (16).
        iterations: routing iterations, a positive integer (3).
        share_weights: if `False` (default, as the official code), each input
            capsule has its own `W[i, j]`; if `True`, one `W[j]` is shared by
            all input capsules, and the layer accepts any number of inputs.
        stop_gradient: stop the gradient through the routing iterations before
            the last one. `False` (the paper) by default.
        kernel_initializer: initializer of `W`. The default, a normal
            distribution with standard deviation 0.02, gives output capsules
            of useful length at initialisation (the Results page compares
            scales); `glorot_uniform` on this 4D kernel gives near-zero votes
            and a network that learns very slowly.
        kernel_regularizer: optional regularizer of `W`.
        gradient: how the gradient reaches the votes (`"auto"`,
            `"structured"` or `"autodiff"`, as `keras_capsules.routing.dynamic_routing`
            takes it). The default is
            fastest; `"autodiff"` is for gradients of gradients on TensorFlow.
        **kwargs: base layer arguments such as `name` and `dtype`.

    Call arguments:
        inputs: input capsules, shape `(batch, num_inputs, input_dim)`.
        return_coupling: if `True`, return `(outputs, coupling)` where
            `coupling` holds the coefficients of the last routing iteration,
            shape `(batch, num_inputs, capsule_types)`.

    Returns:
        Output capsules of shape `(batch, capsule_types, capsule_dim)`.

    Example:

    >>> import numpy as np
    >>> layer = CapsuleLayer(capsule_types=10, capsule_dim=16, iterations=3)
    >>> tuple(layer(np.zeros((4, 1152, 8), "float32")).shape)
    (4, 10, 16)

    Reference:
        Sabour, Frosst, Hinton. Dynamic Routing Between Capsules. NIPS 2017.
    """

    def __init__(
        self,
        capsule_types=None,
        capsule_dim=None,
        iterations=3,
        share_weights=False,
        stop_gradient=False,
        kernel_initializer=None,
        kernel_regularizer=None,
        gradient="auto",
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_positive_int("capsule_types", capsule_types)
        check_positive_int("capsule_dim", capsule_dim)
        check_positive_int("iterations", iterations)
        self.capsule_types = capsule_types
        self.capsule_dim = capsule_dim
        self.iterations = iterations
        self.share_weights = bool(share_weights)
        self.stop_gradient = bool(stop_gradient)
        check_gradient_method(gradient, self.stop_gradient)
        self.gradient = gradient
        if kernel_initializer is None:
            kernel_initializer = keras.initializers.RandomNormal(stddev=0.02)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.input_spec = keras.layers.InputSpec(ndim=3)

    def build(self, input_shape):
        if len(input_shape) != 3 or input_shape[-1] is None:
            raise ValueError(
                "CapsuleLayer expects inputs of shape (batch, num_inputs, input_dim) "
                f"with a known input_dim. Received: input_shape={input_shape}"
            )
        num_inputs, input_dim = input_shape[1], input_shape[2]
        if not self.share_weights and num_inputs is None:
            raise ValueError(
                "CapsuleLayer with share_weights=False needs a known number of input "
                f"capsules. Received: input_shape={input_shape}"
            )
        outputs = self.capsule_types * self.capsule_dim
        shape = (input_dim, outputs) if self.share_weights else (num_inputs, input_dim, outputs)
        self.kernel = self.add_weight(
            name="kernel",
            shape=shape,
            initializer=self.kernel_initializer,
            regularizer=self.kernel_regularizer,
        )
        self.input_spec = keras.layers.InputSpec(
            ndim=3, axes={-1: input_dim} if self.share_weights else {1: num_inputs, -1: input_dim}
        )

    def votes(self, inputs):
        """Prediction vectors `u_hat[j|i]`.

        Returns a tensor of shape `(batch, num_inputs, num_capsules, capsule_dim)`.
        """
        return ops.transpose(self._votes(inputs), (1, 0, 2, 3))

    def _votes(self, inputs):
        # `route_by_agreement(inputs_first=True)` transposes them for routing.
        return votes_inputs_first(
            inputs, self.kernel, self.capsule_types, self.capsule_dim, self.compute_dtype
        )

    def call(self, inputs, return_coupling=False):
        outputs, coupling = route_by_agreement(
            self._votes(inputs),
            inputs_first=True,
            iterations=self.iterations,
            stop_gradient=self.stop_gradient,
            return_coupling=return_coupling,
            gradient=self.gradient,
        )
        return (outputs, coupling) if return_coupling else outputs

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.capsule_types, self.capsule_dim)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "capsule_types": self.capsule_types,
                "capsule_dim": self.capsule_dim,
                "iterations": self.iterations,
                "share_weights": self.share_weights,
                "stop_gradient": self.stop_gradient,
                "gradient": self.gradient,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "kernel_regularizer": keras.regularizers.serialize(self.kernel_regularizer),
            }
        )
        return config

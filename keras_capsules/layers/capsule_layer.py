import keras

from keras_capsules._validation import check_gradient_method
from keras_capsules._validation import check_positive_int
from keras_capsules.layers.fully_connected_capsule import FullyConnectedCapsule
from keras_capsules.routing import dynamic_routing


@keras.saving.register_keras_serializable(package="keras_capsules")
class CapsuleLayer(FullyConnectedCapsule):
    """Fully connected capsules with dynamic routing (the paper's DigitCaps).

    Every input capsule `u_i` predicts every output capsule through its own
    transformation matrix: `u_hat[j|i] = W[i, j] @ u_i`; the predictions are
    combined by `iterations` iterations of routing by agreement
    (`keras_capsules.routing.dynamic_routing`). The votes are one batched
    matrix product of the inputs with `W` (no tiling of inputs or weights);
    `FullyConnectedCapsule` is the base class.

    Args:
        capsule_types: number of output capsules (10 for MNIST), each a type
            of its own.
        capsule_dim: dimensions of each output capsule (16).
        iterations: routing iterations, a positive integer (3). One
            iteration is uniform coupling: no routing by agreement.
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
        if kernel_initializer is None:
            kernel_initializer = keras.initializers.RandomNormal(stddev=0.02)
        super().__init__(
            capsule_types, capsule_dim, kernel_initializer, kernel_regularizer, **kwargs
        )
        check_positive_int("iterations", iterations)
        self.iterations = iterations
        self.share_weights = bool(share_weights)
        self.stop_gradient = bool(stop_gradient)
        check_gradient_method(gradient, self.stop_gradient)
        self.gradient = gradient

    def kernel_shape(self, num_inputs, input_dim):
        outputs = self.capsule_types * self.capsule_dim
        return (input_dim, outputs) if self.share_weights else (num_inputs, input_dim, outputs)

    def route(self, votes):
        return dynamic_routing(
            votes,
            iterations=self.iterations,
            stop_gradient=self.stop_gradient,
            return_coupling=True,
            gradient=self.gradient,
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "iterations": self.iterations,
                "share_weights": self.share_weights,
                "stop_gradient": self.stop_gradient,
                "gradient": self.gradient,
            }
        )
        return config

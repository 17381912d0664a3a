import keras

from keras_capsules._validation import check_positive
from keras_capsules._validation import check_positive_int
from keras_capsules.layers.fully_connected_capsule import FullyConnectedCapsule
from keras_capsules.routing import LAYER_NORM_EPSILON
from keras_capsules.routing import inverted_dot_product_routing


@keras.saving.register_keras_serializable(package="keras_capsules")
class InvertedDotProductCapsule(FullyConnectedCapsule):
    """Fully connected capsules with inverted dot-product attention routing.

    Every input capsule `u_i` votes for every output capsule through its own
    transformation matrix, `v[i, j] = W[i, j] @ u_i`, computed as one batched
    matrix product of the inputs with `W` (no tiling of inputs or weights).
    `iterations` iterations of inverted dot-product attention routing
    (`keras_capsules.routing.inverted_dot_product_routing`) turn the votes
    into the output poses: agreements `p_j . v[i, j]` with the previous poses,
    a softmax over the output capsules for every input capsule, and the layer
    norm of the weighted sums of the votes. The layer norm's scale `gamma`
    and offset `beta` (one each per pose entry, shared by the output capsules,
    as the official code's `nn.LayerNorm(capsule_dim)`) are learned.
    `FullyConnectedCapsule` is the base class.

    Poses are vectors. The paper's 4x4 pose matrices are the 16-entry vectors
    flattened from them; its vote `P_i W[i, j]` with a 4x4 `W[i, j]` is the
    special case of this layer's 16x16 `W[i, j]` made of four copies of the
    4x4 one on the diagonal (`kron(I_4, W)` acting on the row-major
    flattening), so this layer learns 16x more parameters per pair. The
    paper's concurrent routing across stacked layers is a model-level loop;
    this layer routes its own iterations.

    Args:
        capsule_types: number of output capsules, each a type of its own (10
            class capsules for CIFAR-10).
        capsule_dim: dimensions of each output capsule's pose (16, a
            flattened 4x4 matrix).
        iterations: routing iterations, a positive integer; the first routes
            uniformly (2: the official code's CIFAR runs; 1 does no routing by
            agreement).
        agreement_scale: factor of the agreements, a positive number: 1 as
            in the paper (default), `1 / sqrt(capsule_dim)` as in the official
            code.
        epsilon: the layer norm's epsilon (1e-5, as the official code's).
        kernel_initializer: initializer of `W`. The default, as the official
            code's, is a normal distribution of standard deviation
            `sqrt(capsule_types / (num_inputs * input_dim))`.
        kernel_regularizer: optional regularizer of `W`.
        **kwargs: base layer arguments such as `name` and `dtype`.

    Call arguments:
        inputs: input capsules, shape `(batch, num_inputs, input_dim)`.
        return_coupling: if `True`, return `(outputs, coupling)` where
            `coupling` holds the routing coefficients of the last iteration,
            shape `(batch, num_inputs, capsule_types)`.

    Returns:
        Output capsule poses of shape `(batch, capsule_types, capsule_dim)`.

    Example:

    >>> import numpy as np
    >>> layer = InvertedDotProductCapsule(capsule_types=10, capsule_dim=16, iterations=2)
    >>> tuple(layer(np.zeros((4, 288, 16), "float32")).shape)
    (4, 10, 16)

    Reference:
        Tsai, Srivastava, Goh, Salakhutdinov. Capsules with Inverted
        Dot-Product Attention Routing. ICLR 2020. arXiv:2002.04764.
    """

    def __init__(
        self,
        capsule_types=None,
        capsule_dim=None,
        iterations=2,
        agreement_scale=1.0,
        epsilon=LAYER_NORM_EPSILON,
        kernel_initializer=None,
        kernel_regularizer=None,
        **kwargs,
    ):
        check_positive_int("capsule_types", capsule_types)
        if kernel_initializer is None:
            # std sqrt(capsule_types / fan_in), fan_in = num_inputs * input_dim for
            # the kernel (num_inputs, input_dim, capsule_types * capsule_dim).
            kernel_initializer = keras.initializers.VarianceScaling(
                scale=float(capsule_types), mode="fan_in", distribution="untruncated_normal"
            )
        super().__init__(
            capsule_types, capsule_dim, kernel_initializer, kernel_regularizer, **kwargs
        )
        check_positive_int("iterations", iterations)
        check_positive("agreement_scale", agreement_scale)
        check_positive("epsilon", epsilon)
        self.iterations = iterations
        self.agreement_scale = float(agreement_scale)
        self.epsilon = float(epsilon)

    def build_routing(self, num_inputs, input_dim):
        # Routing computes in float32: under mixed precision gamma and beta are read
        # as they are kept, not rounded to the compute dtype.
        self.gamma = self.add_weight(
            name="gamma", shape=(self.capsule_dim,), initializer="ones", autocast=False
        )
        self.beta = self.add_weight(
            name="beta", shape=(self.capsule_dim,), initializer="zeros", autocast=False
        )

    def route(self, votes):
        return inverted_dot_product_routing(
            votes,
            iterations=self.iterations,
            gamma=self.gamma,
            beta=self.beta,
            epsilon=self.epsilon,
            agreement_scale=self.agreement_scale,
            return_coupling=True,
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "iterations": self.iterations,
                "agreement_scale": self.agreement_scale,
                "epsilon": self.epsilon,
            }
        )
        return config

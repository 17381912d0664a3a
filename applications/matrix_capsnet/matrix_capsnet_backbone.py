import keras

from applications._defaults import dtype_policy
from applications.backbone import Backbone
from keras_capsules import routing
from keras_capsules.layers import MatrixCapsule
from keras_capsules.layers import PrimaryMatrixCapsule
from keras_capsules.utils import check_image_shape
from keras_capsules.utils import check_positive_ints


@keras.saving.register_keras_serializable(package="keras_capsules")
class MatrixCapsNetBackbone(Backbone):
    """The matrix capsule network's feature extractor (Hinton et al. 2018): images to capsules.

    ReLU Conv1 (`conv_filters` filters, 5x5, stride 2) -> PrimaryCaps
    (`primary_capsule_types` types, 1x1) -> ConvCaps1 (`conv_caps1_types`
    types, 3x3, stride 2) -> ConvCaps2 (`conv_caps2_types` types, 3x3), EM
    routing in both convolutional capsule layers. Images scaled as the
    classifier scales them in; out a list `[poses, activations]`:
    `(batch, height, width, types, 16)` pose matrices (4x4, flattened) and
    `(batch, height, width, types)` activations, which
    `applications.MatrixCapsNet` routes to its class capsules. All paddings
    are valid: 32x32 images give a 4x4 grid, and 17x17 is the smallest image
    (a smaller `input_shape` is a `ValueError` that says so).

    Args:
        input_shape: shape of one image, `(height, width, channels)`;
            `(28, 28, 1)` by default.
        conv_filters: Conv1 filters, the paper's A (32).
        primary_capsule_types: primary capsule types, B (32).
        conv_caps1_types: ConvCaps1 capsule types, C (32).
        conv_caps2_types: ConvCaps2 capsule types, D (32).
        normalization: how ConvCaps1 and ConvCaps2 share a child's `R`:
            `"types_and_positions"` (default) or `"positions"`.
        weight_decay: L2 factor on every kernel (2e-7); 0 for none.
        em_settings: the `keras_capsules.routing.EMSettings` both capsule
            layers route with; by default made of the five settings below.
        iterations: EM iterations (3).
        inverse_temperature: final inverse temperature of EM routing (0.01).
        variance_epsilon: floor of the routing variances (1e-4).
        tempering: the exponent of the E-step (0.1).
        inverse_temperature_schedule: `"rescaled"` (default) or `"authors"`.
        dtype: dtype policy of the layers; by default the global policy.
        **kwargs: `keras.Model` arguments such as `name`.

    Call arguments:
        images: `(batch,) + input_shape`.

    Example:

    >>> import applications
    >>> import numpy as np
    >>> backbone = applications.MatrixCapsNetBackbone(input_shape=(32, 32, 2))
    >>> poses, activations = backbone(np.zeros((1, 32, 32, 2)))
    >>> tuple(poses.shape), tuple(activations.shape)
    ((1, 4, 4, 32, 16), (1, 4, 4, 32))

    Reference:
        Hinton, Sabour, Frosst. Matrix capsules with EM routing. ICLR 2018.
    """

    def __init__(
        self,
        input_shape=(28, 28, 1),
        conv_filters=32,
        primary_capsule_types=32,
        conv_caps1_types=32,
        conv_caps2_types=32,
        normalization="types_and_positions",
        weight_decay=2e-7,
        em_settings=None,
        iterations=3,
        inverse_temperature=routing.INVERSE_TEMPERATURE,
        variance_epsilon=routing.VARIANCE_EPSILON,
        tempering=routing.TEMPERING,
        inverse_temperature_schedule="rescaled",
        dtype=None,
        name="matrix_capsnet_backbone",
        **kwargs,
    ):
        input_shape = check_image_shape(input_shape)
        sizes = {
            "conv_filters": conv_filters,
            "primary_capsule_types": primary_capsule_types,
            "conv_caps1_types": conv_caps1_types,
            "conv_caps2_types": conv_caps2_types,
        }
        check_positive_ints(**sizes)
        if weight_decay < 0:
            raise ValueError(f"`weight_decay` must be non-negative. Received: {weight_decay!r}")
        if min(input_shape[:2]) < SMALLEST_SIDE:
            raise ValueError(
                f"`input_shape` {input_shape} is too small for the matrix capsule network's "
                f"convolutions: images must be at least {SMALLEST_SIDE}x{SMALLEST_SIDE}. "
                f"Received: input_shape={input_shape}"
            )
        settings = routing.EMSettings.resolve(
            em_settings,
            iterations=iterations,
            inverse_temperature=inverse_temperature,
            variance_epsilon=variance_epsilon,
            tempering=tempering,
            inverse_temperature_schedule=inverse_temperature_schedule,
        )
        policy = dtype_policy(dtype)
        regularizer = keras.regularizers.L2(weight_decay) if weight_decay else None
        images = keras.Input(shape=input_shape, name="images")
        x = keras.layers.Conv2D(
            conv_filters,
            5,
            strides=2,
            activation="relu",
            kernel_initializer="he_normal",
            kernel_regularizer=regularizer,
            name="conv1",
            data_format="channels_last",
            dtype=policy,
        )(images)
        capsules = PrimaryMatrixCapsule(
            primary_capsule_types,
            kernel_initializer="he_normal",
            kernel_regularizer=regularizer,
            name="primary_caps",
            dtype=policy,
        )(x)
        for index, (types, strides) in enumerate(
            ((conv_caps1_types, 2), (conv_caps2_types, 1)), start=1
        ):
            capsules = MatrixCapsule(
                types,
                3,
                strides=strides,
                kernel_regularizer=regularizer,
                normalization=normalization,
                name=f"conv_caps{index}",
                dtype=policy,
                em_settings=settings,
            )(capsules)
        config = {
            "input_shape": input_shape,
            **sizes,
            "normalization": normalization,
            "weight_decay": weight_decay,
            **settings.get_config(),
        }
        super().__init__(images, list(capsules), config=config, policy=policy, name=name, **kwargs)
        self.em_settings = settings
        self.regularizer = regularizer


SMALLEST_SIDE = 17
"""The smallest image side: Conv1 (5, stride 2), ConvCaps1 (3, stride 2), ConvCaps2 (3)."""

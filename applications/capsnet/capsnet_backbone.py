import keras

from applications._defaults import dtype_policy
from applications.backbone import Backbone
from keras_capsules.layers import PrimaryCapsule
from keras_capsules.utils import check_image_shape
from keras_capsules.utils import check_positive_ints


@keras.saving.register_keras_serializable(package="keras_capsules")
class CapsNetBackbone(Backbone):
    """CapsNet's feature extractor: images to primary capsules (Sabour et al. 2017).

    Conv1 (`conv_filters` filters, ReLU) -> PrimaryCaps (`primary_capsule_types`
    types of `primary_capsule_dim` dimensions, strided): images scaled to
    [0, 1] in, `(batch, num_primary_capsules, primary_capsule_dim)` out,
    position-major then type. On 28x28 grey images with the defaults it is
    the paper's 5,329,664 parameters before the class capsules, and gives
    6 x 6 x 32 = 1,152 capsules of 8D. `applications.CapsNet` routes them to
    the class capsules; its `backbone` is this model, which is what a
    preset's backbone weights are.

    Both convolutions are valid (no padding), so an image must be at least
    `conv_kernel_size + primary_kernel_size - 1` pixels on each side (17
    with the defaults); a smaller `input_shape` is a `ValueError` that says
    so.

    Args:
        input_shape: shape of one image, `(height, width, channels)`;
            `(28, 28, 1)` by default.
        conv_filters: filters of Conv1 (256).
        conv_kernel_size: kernel size of Conv1 (9).
        primary_capsule_types: primary capsule types (32).
        primary_capsule_dim: dimensions of a primary capsule (8).
        primary_kernel_size: kernel size of the primary capsule convolution (9).
        primary_strides: strides of the primary capsule convolution (2).
        dtype: dtype policy of the layers; by default the global policy.
        **kwargs: `keras.Model` arguments such as `name`.

    Call arguments:
        images: `(batch,) + input_shape`, pixel values scaled to [0, 1].

    Example:

    >>> import applications
    >>> import numpy as np
    >>> backbone = applications.CapsNetBackbone()
    >>> backbone.count_params()
    5329664
    >>> tuple(backbone(np.zeros((2, 28, 28, 1))).shape)
    (2, 1152, 8)

    Reference:
        Sabour, Frosst, Hinton. Dynamic Routing Between Capsules. NIPS 2017.
        arXiv:1710.09829.
    """

    def __init__(
        self,
        input_shape=(28, 28, 1),
        conv_filters=256,
        conv_kernel_size=9,
        primary_capsule_types=32,
        primary_capsule_dim=8,
        primary_kernel_size=9,
        primary_strides=2,
        dtype=None,
        name="capsnet_backbone",
        **kwargs,
    ):
        input_shape = check_image_shape(input_shape)
        sizes = {
            "conv_filters": conv_filters,
            "conv_kernel_size": conv_kernel_size,
            "primary_capsule_types": primary_capsule_types,
            "primary_capsule_dim": primary_capsule_dim,
            "primary_kernel_size": primary_kernel_size,
            "primary_strides": primary_strides,
        }
        check_positive_ints(**sizes)
        _check_size(input_shape, conv_kernel_size + primary_kernel_size - 1)
        policy = dtype_policy(dtype)
        images = keras.Input(shape=input_shape, name="images")
        x = keras.layers.Conv2D(
            conv_filters,
            conv_kernel_size,
            activation="relu",
            kernel_initializer="he_normal",
            name="conv1",
            data_format="channels_last",
            dtype=policy,
        )(images)
        primary = PrimaryCapsule(
            primary_capsule_types,
            primary_capsule_dim,
            primary_kernel_size,
            strides=primary_strides,
            name="primary_caps",
            dtype=policy,
        )(x)
        config = {"input_shape": input_shape, **sizes}
        super().__init__(images, primary, config=config, policy=policy, name=name, **kwargs)


def _check_size(input_shape, smallest):
    """A `ValueError` naming `input_shape` if its sides are under `smallest` pixels."""
    if min(input_shape[:2]) < smallest:
        raise ValueError(
            f"`input_shape` {input_shape} is too small for CapsNet's convolutions: images "
            f"must be at least {smallest}x{smallest} (conv_kernel_size + "
            f"primary_kernel_size - 1). Received: input_shape={input_shape}"
        )

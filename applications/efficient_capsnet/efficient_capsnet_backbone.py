import keras

from applications._defaults import dtype_policy
from applications.backbone import Backbone
from keras_capsules.layers import DepthwisePrimaryCapsule
from keras_capsules.utils import check_image_shape
from keras_capsules.utils import check_positive_ints


@keras.saving.register_keras_serializable(package="keras_capsules")
class EfficientCapsNetBackbone(Backbone):
    """Efficient-CapsNet's feature extractor: images to primary capsules (Mazzia et al. 2021).

    Four valid convolutions, each followed by batch normalisation (32 5x5,
    64 3x3, 64 3x3, 128 3x3 stride 2, ReLU), then primary capsules from a
    depthwise convolution over the whole last feature map
    (`primary_capsule_types` capsules of `primary_capsule_dim`, exponential
    squash): images scaled to [0, 1] in, `(batch, primary_capsule_types,
    primary_capsule_dim)` out. `applications.EfficientCapsNet` routes them
    to the class capsules; its `backbone` is this model.

    The convolutions must leave at least one pixel: 11x11 is the smallest
    image with the defaults, and a smaller `input_shape` is a `ValueError`
    that says which size it needs.

    Args:
        input_shape: shape of one image, `(height, width, channels)`;
            `(28, 28, 1)` by default.
        conv_filters: filters of the four convolutions, `(32, 64, 64, 128)`.
            The last must equal `primary_capsule_types * primary_capsule_dim`.
        conv_kernel_sizes: their kernel sizes, `(5, 3, 3, 3)`.
        conv_strides: their strides, `(1, 1, 1, 2)`.
        primary_capsule_types: primary capsules (16).
        primary_capsule_dim: dimensions of a primary capsule (8).
        dtype: dtype policy of the layers; by default the global policy.
        **kwargs: `keras.Model` arguments such as `name`.

    Call arguments:
        images: `(batch,) + input_shape`, pixel values scaled to [0, 1].

    Example:

    >>> import applications
    >>> import numpy as np
    >>> backbone = applications.EfficientCapsNetBackbone()
    >>> tuple(backbone(np.zeros((2, 28, 28, 1))).shape)
    (2, 16, 8)

    Reference:
        Mazzia, Salvetti, Chiaberge. Efficient-CapsNet: Capsule Network with
        Self-Attention Routing. Scientific Reports 11, 14634 (2021).
        arXiv:2101.12491.
    """

    def __init__(
        self,
        input_shape=(28, 28, 1),
        conv_filters=(32, 64, 64, 128),
        conv_kernel_sizes=(5, 3, 3, 3),
        conv_strides=(1, 1, 1, 2),
        primary_capsule_types=16,
        primary_capsule_dim=8,
        dtype=None,
        name="efficient_capsnet_backbone",
        **kwargs,
    ):
        input_shape = check_image_shape(input_shape)
        conv_filters = _int_tuple("conv_filters", conv_filters)
        conv_kernel_sizes = _int_tuple("conv_kernel_sizes", conv_kernel_sizes, len(conv_filters))
        conv_strides = _int_tuple("conv_strides", conv_strides, len(conv_filters))
        check_positive_ints(
            primary_capsule_types=primary_capsule_types,
            primary_capsule_dim=primary_capsule_dim,
        )
        if conv_filters[-1] != primary_capsule_types * primary_capsule_dim:
            raise ValueError(
                "The last of `conv_filters` must equal primary_capsule_types * "
                f"primary_capsule_dim = {primary_capsule_types * primary_capsule_dim}. "
                f"Received: conv_filters={conv_filters}"
            )
        _check_convolutions_fit(input_shape, conv_kernel_sizes, conv_strides)
        policy = dtype_policy(dtype)
        images = keras.Input(shape=input_shape, name="images")
        x = images
        for index, (count, kernel, stride) in enumerate(
            zip(conv_filters, conv_kernel_sizes, conv_strides), start=1
        ):
            x = keras.layers.Conv2D(
                count,
                kernel,
                strides=stride,
                activation="relu",
                kernel_initializer="he_normal",
                name=f"conv{index}",
                data_format="channels_last",
                dtype=policy,
            )(x)
            x = keras.layers.BatchNormalization(name=f"batch_norm{index}", dtype=policy)(x)
        primary = DepthwisePrimaryCapsule(
            primary_capsule_types, primary_capsule_dim, name="primary_caps", dtype=policy
        )(x)
        config = {
            "input_shape": input_shape,
            "conv_filters": conv_filters,
            "conv_kernel_sizes": conv_kernel_sizes,
            "conv_strides": conv_strides,
            "primary_capsule_types": primary_capsule_types,
            "primary_capsule_dim": primary_capsule_dim,
        }
        super().__init__(images, primary, config=config, policy=policy, name=name, **kwargs)


def _int_tuple(name, values, length=None):
    values = tuple(values) if isinstance(values, (tuple, list)) else (values,)
    if not values or (length is not None and len(values) != length):
        raise ValueError(
            f"`{name}` must be a tuple of {length or 'some'} positive integers. "
            f"Received: {name}={values!r}"
        )
    check_positive_ints(**{f"{name}[{i}]": v for i, v in enumerate(values)})
    return values


def _smallest_side(kernel_sizes, strides):
    """The smallest image side from which the valid convolutions leave one pixel."""
    side = 1
    for kernel, stride in reversed(list(zip(kernel_sizes, strides))):
        side = (side - 1) * stride + kernel
    return side


def _check_convolutions_fit(input_shape, kernel_sizes, strides):
    """A `ValueError` naming `input_shape` unless the valid convolutions leave a pixel."""
    smallest = _smallest_side(kernel_sizes, strides)
    if min(input_shape[:2]) < smallest:
        raise ValueError(
            f"`input_shape` {input_shape} is too small for the convolutions (kernel sizes "
            f"{kernel_sizes}, strides {strides}): images must be at least "
            f"{smallest}x{smallest}. Received: input_shape={input_shape}"
        )

import keras

from applications._capsule_classifier import CapsuleClassifier
from applications._capsule_classifier import check_reconstruction_weight
from applications._classes import resolve_classes
from applications._defaults import dtype_policy
from applications._inputs import PIXELS
from applications._inputs import check_rescale
from applications._inputs import rescaled
from applications._transfer import BackboneView
from applications.recipe import Recipe
from keras_capsules._validation import check_image_shape
from keras_capsules._validation import check_positive_ints
from keras_capsules.layers import DepthwisePrimaryCapsule
from keras_capsules.layers import SelfAttentionCapsule


def _int_tuple(name, values, length=None):
    values = tuple(values) if isinstance(values, (tuple, list)) else (values,)
    if not values or (length is not None and len(values) != length):
        raise ValueError(
            f"`{name}` must be a tuple of {length or 'some'} positive integers. "
            f"Received: {name}={values!r}"
        )
    check_positive_ints(**{f"{name}[{i}]": v for i, v in enumerate(values)})
    return values


@keras.saving.register_keras_serializable(package="keras_capsules")
class EfficientCapsNet(BackboneView, CapsuleClassifier):
    """Efficient-CapsNet (Mazzia et al. 2021), for any images and classes, ready to `fit`.

    Four convolutions with batch normalisation (32 5x5, 64 3x3, 64 3x3,
    128 3x3 stride 2, ReLU) -> primary capsules from a depthwise convolution
    over the whole feature map (16 capsules of 8D) -> 10 class capsules of 16D
    with self-attention routing -> capsule lengths; both capsule layers use
    the exponential squash. The reconstruction decoder (512, 1024, 784) is
    fed the capsule of the true label during training, as in `CapsNet`.
    With the defaults the classifier has the paper's 161,824 trainable
    parameters (`count_params()` also counts the 576 moving statistics of
    batch normalisation); the decoder adds 1,411,344.

    The defaults are the paper's MNIST network. Other data: `input_shape`,
    `num_classes` and `class_names` set the sizes, e.g.
    `EfficientCapsNet(input_shape=(32, 32, 3), num_classes=100)`; the primary
    convolution always covers the last feature map. The convolutions and the
    primary capsules are `backbone`.

    Inputs, outputs and loss are those of `CapsNet`: images with pixel
    values in [0, 255] multiplied by `rescale` (1 / 255) in the model,
    `{"probabilities", "poses"}` outputs (`predict` gives the
    probabilities, `predict_poses` the class capsules), and the margin loss
    plus `reconstruction_weight` times the summed squared reconstruction
    error (0.0005, the paper's 0.392 times the mean over 784 pixels).

    Args:
        input_shape: shape of one image, `(height, width, channels)` with 1
            or 3 channels; `(28, 28, 1)` by default.
        num_classes: number of class capsules: by default the number of
            `class_names`, or 10.
        class_names: the classes' names in label order (see `CapsNet`).
        conv_filters: filters of the four convolutions, `(32, 64, 64, 128)`.
            The last must equal `primary_capsule_types * primary_capsule_dim`.
        conv_kernel_sizes: their kernel sizes, `(5, 3, 3, 3)`.
        conv_strides: their strides, `(1, 1, 1, 2)`.
        primary_capsule_types: primary capsules (16).
        primary_capsule_dim: dimensions of a primary capsule (8).
        capsule_dim: dimensions of a class capsule (16).
        decoder_units: hidden layer sizes of the decoder, `(512, 1024)`; `None`
            builds no decoder and trains on the margin loss alone.
        reconstruction_weight: scale of the summed squared reconstruction
            error (0.0005).
        rescale: the factor the model multiplies its inputs by, `1 / 255` for
            pixel values in [0, 255]; `None` for inputs already scaled.
        compile: compile with `compile()`'s defaults: Adam with `RECIPE`'s
            learning rate (5e-4 as the paper, decayed by 0.97 per epoch as
            the official code: every 3,750 steps, an epoch of MNIST in
            batches of 16, unless the trainer knows the epoch's steps), the
            loss above and accuracy.
        dtype: dtype policy of the layers, e.g. `"mixed_bfloat16"`; by default
            the global policy. Routing, lengths and losses run in float32.
        **kwargs: `keras.Model` arguments such as `name`.

    Example:

    >>> import applications
    >>> import numpy as np
    >>> model = applications.EfficientCapsNet()
    >>> sum(int(np.prod(w.shape)) for w in model.trainable_weights if "decoder" not in w.path)
    161824
    >>> from keras_capsules import datasets
    >>> (x_train, y_train), (x_test, y_test) = datasets.mnist.load_data()
    >>> model.fit(x_train, y_train, epochs=1, batch_size=16)  # doctest: +SKIP

    Reference:
        Mazzia, Salvetti, Chiaberge. Efficient-CapsNet: Capsule Network with
        Self-Attention Routing. Scientific Reports 11, 14634 (2021).
        arXiv:2101.12491.
    """

    BACKBONE_OUTPUT = "primary_caps"
    RECIPE = Recipe(
        batch_size=16, learning_rate=5e-4, decay_rate=0.97, decay_steps=3750, decay_every_epoch=True
    )

    def __init__(
        self,
        input_shape=(28, 28, 1),
        num_classes=None,
        class_names=None,
        conv_filters=(32, 64, 64, 128),
        conv_kernel_sizes=(5, 3, 3, 3),
        conv_strides=(1, 1, 1, 2),
        primary_capsule_types=16,
        primary_capsule_dim=8,
        capsule_dim=16,
        decoder_units=(512, 1024),
        reconstruction_weight=0.0005,
        rescale=PIXELS,
        compile=True,
        dtype=None,
        name="efficient_capsnet",
        **kwargs,
    ):
        input_shape = check_image_shape(input_shape)
        num_classes, class_names = resolve_classes(num_classes, class_names)
        rescale = check_rescale(rescale)
        policy = dtype_policy(dtype)
        conv_filters = _int_tuple("conv_filters", conv_filters)
        conv_kernel_sizes = _int_tuple("conv_kernel_sizes", conv_kernel_sizes, len(conv_filters))
        conv_strides = _int_tuple("conv_strides", conv_strides, len(conv_filters))
        check_positive_ints(
            primary_capsule_types=primary_capsule_types,
            primary_capsule_dim=primary_capsule_dim,
            capsule_dim=capsule_dim,
        )
        if conv_filters[-1] != primary_capsule_types * primary_capsule_dim:
            raise ValueError(
                "The last of `conv_filters` must equal primary_capsule_types * "
                f"primary_capsule_dim = {primary_capsule_types * primary_capsule_dim}. "
                f"Received: conv_filters={conv_filters}"
            )
        check_reconstruction_weight(reconstruction_weight)
        _check_convolutions_fit(input_shape, conv_kernel_sizes, conv_strides)

        images = keras.Input(shape=input_shape, name="images")
        x = rescaled(images, rescale, policy)
        x = _convolutions(x, conv_filters, conv_kernel_sizes, conv_strides, policy)
        primary = DepthwisePrimaryCapsule(
            primary_capsule_types, primary_capsule_dim, name="primary_caps", dtype=policy
        )(x)
        poses = SelfAttentionCapsule(num_classes, capsule_dim, name="digit_caps", dtype=policy)(
            primary
        )
        config = {
            "input_shape": input_shape,
            "num_classes": num_classes,
            "class_names": class_names,
            "conv_filters": conv_filters,
            "conv_kernel_sizes": conv_kernel_sizes,
            "conv_strides": conv_strides,
            "primary_capsule_types": primary_capsule_types,
            "primary_capsule_dim": primary_capsule_dim,
            "capsule_dim": capsule_dim,
        }
        super().__init__(
            images,
            poses,
            config=config,
            policy=policy,
            rescale=rescale,
            decoder_units=decoder_units,
            reconstruction_weight=reconstruction_weight,
            compile=compile,
            name=name,
            **kwargs,
        )


def _check_convolutions_fit(input_shape, kernel_sizes, strides):
    """A `ValueError` unless the valid convolutions leave at least one pixel."""
    height, width = input_shape[:2]
    for kernel, stride in zip(kernel_sizes, strides):
        height, width = (height - kernel) // stride + 1, (width - kernel) // stride + 1
    if height < 1 or width < 1:
        raise ValueError(
            f"`input_shape` {input_shape} is too small for the convolutions "
            f"(kernel sizes {kernel_sizes}, strides {strides})."
        )


def _convolutions(x, filters, kernel_sizes, strides, policy):
    """The paper's stack: each a valid ReLU convolution followed by batch normalization."""
    for index, (count, kernel, stride) in enumerate(zip(filters, kernel_sizes, strides), start=1):
        x = keras.layers.Conv2D(
            count,
            kernel,
            strides=stride,
            activation="relu",
            kernel_initializer="he_normal",
            name=f"conv{index}",
            dtype=policy,
        )(x)
        x = keras.layers.BatchNormalization(name=f"batch_norm{index}", dtype=policy)(x)
    return x

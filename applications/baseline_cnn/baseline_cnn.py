import keras

from applications._softmax_classifier import SoftmaxClassifier
from applications.recipe import Recipe
from keras_capsules.utils import check_image_shape
from keras_capsules.utils import check_positive_ints
from keras_capsules.utils import is_number

POOLING = (None, "max")


@keras.saving.register_keras_serializable(package="keras_capsules")
class BaselineCNN(SoftmaxClassifier):
    """The baseline CNN of Sabour et al. 2017, ready to `fit`.

    Three 5x5 convolutions with stride 1, "same" padding and ReLU (256, 256
    and 128 channels), then fully connected ReLU layers of 328 and 192 units,
    dropout, and a softmax over the classes, trained with cross-entropy.

    The paper states no pooling for its MNIST baseline, and its 35.4M
    parameters are this architecture without pooling on 28x28 inputs:
    6,656 + 1,638,656 + 819,328 (convolutions) + 32,915,784 (28 x 28 x 128 ->
    328) + 63,168 + 1,930 = **35,445,522**. For the affNIST experiment the
    paper compares with "a traditional convolutional network (with
    MaxPooling and DropOut)" trained on 40x40 inputs; `pooling="max"` adds a
    2x2 max pooling after each convolution, which on 40x40 inputs gives
    **3,579,666** parameters (5 x 5 x 128 -> 328 is 1,049,928 of them).
    Without pooling, 40x40 inputs give 69,704,466.

    The model takes images with pixel values in [0, 255] of any size and
    colour (uint8 or float, `(h, w)` or `(h, w, 1)`) and converts them
    itself. It outputs
    class probabilities and is compiled at construction (unless
    `compile=False`) with Adam, the learning rate schedule of `CapsNet`,
    sparse categorical cross-entropy (integer labels) and accuracy.

    Args:
        input_shape: shape of one image, `(28, 28, 1)` (MNIST) or
            `(40, 40, 1)` (expanded MNIST and affNIST).
        num_classes: number of classes: by default the number of
            `class_names`, or 10.
        class_names: the classes' names in label order (see `CapsNet`).
        filters: channels of the three convolutions, `(256, 256, 128)`.
        kernel_size: kernel size of the convolutions (5).
        pooling: `None` (the paper's MNIST baseline) or `"max"`: 2x2 max
            pooling, stride 2, after each convolution.
        dense_units: sizes of the fully connected ReLU layers, `(328, 192)`.
        dropout: dropout rate before the softmax layer (0.5; the paper gives
            none).
        name: the model's name.
        **kwargs: `image_converter`, a `keras_capsules.layers.ImageConverter`
            that brings the images to `input_shape` and scales them, inside
            the model (by default one that scales pixels in [0, 255] to
            [0, 1]); `compile`, compile with `compile()`'s defaults (`True`:
            Adam with `RECIPE`'s learning rate, 1e-3 decayed by 0.96 every
            2,000 steps, sparse categorical cross-entropy and accuracy);
            `dtype`, the layers' dtype policy, e.g. `"mixed_bfloat16"` (by
            default the global policy; the softmax runs in float32); and
            `keras.Model`'s `trainable`.

    Example:

    >>> import applications
    >>> from keras_capsules.datasets import mnist
    >>> (x_train, y_train), (x_test, y_test) = mnist.load_data()
    >>> model = applications.BaselineCNN()
    >>> model.count_params()
    35445522
    >>> model.fit(x_train, y_train, epochs=1, batch_size=100)  # doctest: +SKIP
    >>> affnist_cnn = applications.BaselineCNN(input_shape=(40, 40, 1), pooling="max")

    Reference:
        Sabour, Frosst, Hinton. Dynamic Routing Between Capsules. NIPS 2017,
        sections 5 and 5.2. arXiv:1710.09829.
    """

    RECIPE = Recipe(batch_size=100, learning_rate=1e-3)

    def __init__(
        self,
        input_shape=(28, 28, 1),
        num_classes=None,
        class_names=None,
        filters=(256, 256, 128),
        kernel_size=5,
        pooling=None,
        dense_units=(328, 192),
        dropout=0.5,
        name="baseline_cnn",
        **kwargs,
    ):
        input_shape = check_image_shape(input_shape)
        check_positive_ints(kernel_size=kernel_size)
        filters = tuple(filters)
        dense_units = tuple(dense_units)
        for arg, values in (("filters", filters), ("dense_units", dense_units)):
            for value in values:
                check_positive_ints(**{arg: value})
        if not filters:
            raise ValueError(f"`filters` must name at least one layer. Received: filters={filters}")
        if pooling not in POOLING:
            raise ValueError(f'`pooling` must be None or "max". Received: pooling={pooling!r}')
        if not is_number(dropout) or not 0 <= dropout < 1:
            raise ValueError(f"`dropout` must be in [0, 1). Received: dropout={dropout!r}")

        def network(x, policy):
            for index, channels in enumerate(filters):
                x = keras.layers.Conv2D(
                    channels,
                    kernel_size,
                    padding="same",
                    activation="relu",
                    name=f"conv{index + 1}",
                    data_format="channels_last",
                    dtype=policy,
                )(x)
                if pooling == "max":
                    x = keras.layers.MaxPooling2D(
                        2, name=f"pool{index + 1}", data_format="channels_last", dtype=policy
                    )(x)
            x = keras.layers.Flatten(name="flatten", data_format="channels_last", dtype=policy)(x)
            for index, units in enumerate(dense_units):
                x = keras.layers.Dense(
                    units, activation="relu", name=f"fc{index + 1}", dtype=policy
                )(x)
            return keras.layers.Dropout(dropout, name="dropout", dtype=policy)(x)

        super().__init__(
            network,
            config={
                "filters": filters,
                "kernel_size": kernel_size,
                "pooling": pooling,
                "dense_units": dense_units,
                "dropout": dropout,
            },
            input_shape=input_shape,
            num_classes=num_classes,
            class_names=class_names,
            name=name,
            **kwargs,
        )

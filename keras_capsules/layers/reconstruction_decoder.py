import math

import keras
from keras import ops

from keras_capsules._validation import is_int
from keras_capsules.layers._shapes import output_spec


@keras.saving.register_keras_serializable(package="keras_capsules")
class ReconstructionDecoder(keras.layers.Layer):
    """The paper's decoder: fully connected layers from masked capsules to an image.

    The masked capsules are flattened and passed through `Dense` layers with
    ReLU (512 and 1024 units in the paper), then a sigmoid `Dense` layer with
    one unit per pixel, reshaped to `target_shape`.

    The last layer has one unit per pixel and channel, so on large images it
    holds most of a network's weights (150,528 x 1,024 at 224x224x3). With
    `resolution`, the layer draws the image at that smaller height and width
    and resizes it bilinearly to `target_shape`: its size no longer depends
    on the image's. `ReconstructionDecoder.resolution_for(target_shape)` gives
    the resolution of at most `MAX_VALUES` values (28x28x3) that keeps the
    image's aspect ratio, which the applications' classifiers use.

    Args:
        target_shape: shape of one reconstructed image, e.g. `(28, 28, 1)`.
        hidden_units: sizes of the ReLU layers, `(512, 1024)` by default.
        resolution: `(height, width)` at which the image is drawn before it
            is resized to `target_shape` (which must then be
            `(height, width, channels)`); `None` (default) draws every pixel
            of `target_shape`, as the paper.
        **kwargs: base layer arguments such as `name` and `dtype`.

    Call arguments:
        inputs: masked capsules, shape `(batch, num_capsules, capsule_dim)`
            (or already flattened, `(batch, features)`).

    Returns:
        Reconstructions in [0, 1], shape `(batch,) + target_shape`.

    Example:

    >>> import numpy as np
    >>> decoder = ReconstructionDecoder(target_shape=(28, 28, 1))
    >>> tuple(decoder(np.zeros((2, 10, 16), "float32")).shape)
    (2, 28, 28, 1)
    >>> ReconstructionDecoder.resolution_for((224, 224, 3))
    (28, 28)
    >>> photo = ReconstructionDecoder((224, 224, 3), resolution=(28, 28))
    >>> tuple(photo(np.zeros((2, 10, 16), "float32")).shape)
    (2, 224, 224, 3)
    >>> photo.count_params()  # the same at any image size
    3018544

    Reference:
        Sabour, Frosst, Hinton. Dynamic Routing Between Capsules. NIPS 2017,
        figure 2.
    """

    MAX_VALUES = 28 * 28 * 3
    """The most values per image `resolution_for` lets the decoder draw."""

    def __init__(self, target_shape, hidden_units=(512, 1024), resolution=None, **kwargs):
        super().__init__(**kwargs)
        target_shape = tuple(target_shape)
        if not target_shape or not all(is_int(d) and d > 0 for d in target_shape):
            raise ValueError(
                "`target_shape` must be a tuple of positive integers. "
                f"Received: target_shape={target_shape!r}"
            )
        hidden_units = tuple(hidden_units)
        if not all(isinstance(u, int) and u > 0 for u in hidden_units):
            raise ValueError(
                f"`hidden_units` must be positive integers. Received: hidden_units={hidden_units!r}"
            )
        if resolution is not None:
            resolution = tuple(resolution)
            if (
                len(target_shape) != 3
                or len(resolution) != 2
                or not all(is_int(d) and d > 0 for d in resolution)
            ):
                raise ValueError(
                    "`resolution` must be None or (height, width), two positive integers, "
                    "for a `target_shape` of (height, width, channels). Received: "
                    f"resolution={resolution!r} with target_shape={target_shape!r}"
                )
            if resolution == target_shape[:2]:
                resolution = None
        self.target_shape = target_shape
        self.hidden_units = hidden_units
        self.resolution = resolution
        self._drawn_shape = target_shape if resolution is None else resolution + target_shape[2:]

    @classmethod
    def resolution_for(cls, target_shape):
        """The `resolution` of at most `MAX_VALUES` values for images of `target_shape`.

        `None` where `target_shape` has no more (the paper's decoders: MNIST,
        MultiMNIST, affNIST, smallNORB); otherwise the largest height and
        width of the image's aspect ratio within it.

        Args:
            target_shape: `(height, width, channels)`.
        """
        height, width, channels = target_shape
        if height * width * channels <= cls.MAX_VALUES:
            return None
        scale = math.sqrt(cls.MAX_VALUES / (height * width * channels))
        # The tiny margin keeps exact square roots (128x128x3: 0.21875) from rounding down.
        return (
            max(1, math.floor(height * scale + 1e-9)),
            max(1, math.floor(width * scale + 1e-9)),
        )

    def build(self, input_shape):
        features = math.prod(input_shape[1:]) if None not in input_shape[1:] else None
        if features is None:
            raise ValueError(
                "ReconstructionDecoder needs a fully known input shape apart from the "
                f"batch. Received: input_shape={input_shape}"
            )
        self.hidden_layers = []
        for index, units in enumerate(self.hidden_units):
            layer = keras.layers.Dense(
                units, activation="relu", dtype=self.dtype_policy, name=f"dense_{index}"
            )
            layer.build((None, features))
            features = units
            self.hidden_layers.append(layer)
        self.output_layer = keras.layers.Dense(
            math.prod(self._drawn_shape),
            activation="sigmoid",
            dtype=self.dtype_policy,
            name="pixels",
        )
        self.output_layer.build((None, features))

    def call(self, inputs):
        x = ops.reshape(inputs, (ops.shape(inputs)[0], -1))
        for layer in self.hidden_layers:
            x = layer(x)
        x = self.output_layer(x)
        x = ops.reshape(x, (ops.shape(x)[0],) + self._drawn_shape)
        if self.resolution is None:
            return x
        # Bilinear weights are convex: the resized pixels stay in [0, 1].
        return ops.image.resize(
            x, self.target_shape[:2], interpolation="bilinear", data_format="channels_last"
        )

    def compute_output_shape(self, input_shape):
        return (input_shape[0],) + self.target_shape

    def compute_output_spec(self, inputs):
        # Keras hands `compute_output_shape` the shapes of tensors only, not of arrays.
        return output_spec(self, inputs)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "target_shape": self.target_shape,
                "hidden_units": self.hidden_units,
                "resolution": self.resolution,
            }
        )
        return config

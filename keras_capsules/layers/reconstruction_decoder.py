import math

import keras
from keras import ops

from keras_capsules._validation import is_int


@keras.saving.register_keras_serializable(package="keras_capsules")
class ReconstructionDecoder(keras.layers.Layer):
    """The paper's decoder: fully connected layers from masked capsules to an image.

    The masked capsules are flattened and passed through `Dense` layers with
    ReLU (512 and 1024 units in the paper), then a sigmoid `Dense` layer with
    one unit per pixel, reshaped to `target_shape`.

    Args:
        target_shape: shape of one reconstructed image, e.g. `(28, 28, 1)`.
        hidden_units: sizes of the ReLU layers, `(512, 1024)` by default.
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

    Reference:
        Sabour, Frosst, Hinton. Dynamic Routing Between Capsules. NIPS 2017,
        figure 2.
    """

    def __init__(self, target_shape, hidden_units=(512, 1024), **kwargs):
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
        self.target_shape = target_shape
        self.hidden_units = hidden_units

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
            math.prod(self.target_shape),
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
        return ops.reshape(x, (ops.shape(x)[0],) + self.target_shape)

    def compute_output_shape(self, input_shape):
        return (input_shape[0],) + self.target_shape

    def get_config(self):
        config = super().get_config()
        config.update({"target_shape": self.target_shape, "hidden_units": self.hidden_units})
        return config

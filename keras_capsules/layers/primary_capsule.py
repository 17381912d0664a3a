import keras

from keras_capsules._validation import check_positive_int
from keras_capsules.layers._convolutional_capsule import ConvolutionalCapsule
from keras_capsules.layers._shapes import output_spec
from keras_capsules.ops import squash


@keras.saving.register_keras_serializable(package="keras_capsules")
class PrimaryCapsule(ConvolutionalCapsule):
    """Convolutional primary capsules: a convolution reshaped into squashed capsules.

    A 2D convolution with `capsule_types * capsule_dim` filters; at every output
    position its channels are split into `capsule_types` capsule types of
    `capsule_dim` dimensions, and each capsule is squashed. The capsules of all
    positions are returned as one flat list, position-major then type.

    Args:
        capsule_types: number of capsule types (32 in the paper).
        capsule_dim: dimensions of each capsule (8 in the paper).
        kernel_size: int or tuple of 2 ints, the convolution's window (9).
        strides: int or tuple of 2 ints (2).
        padding: `"valid"` or `"same"`.
        kernel_initializer: initializer of the convolution kernel.
        bias_initializer: initializer of the convolution bias.
        kernel_regularizer: optional regularizer of the convolution kernel.
        **kwargs: base layer arguments such as `name` and `dtype`.

    Call arguments:
        inputs: feature maps, shape `(batch, height, width, channels)`.

    Returns:
        Capsules of shape `(batch, out_height * out_width * capsule_types, capsule_dim)`.

    Example:

    >>> import numpy as np
    >>> layer = PrimaryCapsule(capsule_types=32, capsule_dim=8, kernel_size=9, strides=2)
    >>> tuple(layer(np.zeros((2, 20, 20, 256), "float32")).shape)
    (2, 1152, 8)

    Reference:
        Sabour, Frosst, Hinton. Dynamic Routing Between Capsules. NIPS 2017,
        section 4 (PrimaryCapsules).
    """

    def __init__(
        self,
        capsule_types=None,
        capsule_dim=None,
        kernel_size=None,
        strides=1,
        padding="valid",
        kernel_initializer="lecun_normal",
        bias_initializer="zeros",
        kernel_regularizer=None,
        **kwargs,
    ):
        check_positive_int("capsule_types", capsule_types)
        check_positive_int("capsule_dim", capsule_dim)
        super().__init__(
            capsule_types * capsule_dim,
            kernel_size,
            strides,
            padding,
            kernel_initializer,
            bias_initializer,
            kernel_regularizer,
            **kwargs,
        )
        self.capsule_types = capsule_types
        self.capsule_dim = capsule_dim

    def call(self, inputs):
        features = self._convolve(inputs)
        return squash(self._capsule_list(features, self.capsule_types, self.capsule_dim), axis=-1)

    def compute_output_shape(self, input_shape):
        return self._capsule_list_shape(input_shape, self.capsule_types, self.capsule_dim)

    def compute_output_spec(self, inputs):
        return output_spec(self, inputs)

    def get_config(self):
        config = super().get_config()
        config.update({"capsule_types": self.capsule_types, "capsule_dim": self.capsule_dim})
        return config

import keras
from keras import ops

from keras_capsules._validation import check_positive_int
from keras_capsules.layers._convolutional_capsule import ConvolutionalCapsule
from keras_capsules.layers._shapes import output_spec


@keras.saving.register_keras_serializable(package="keras_capsules")
class PrimaryMatrixCapsule(ConvolutionalCapsule):
    """Primary matrix capsules: a convolution to 4x4 poses and sigmoid activations.

    One 2D convolution with `capsule_types * 17` filters; at every position
    and type, 16 channels are the (linear) entries of a 4x4 pose matrix and
    one, through a sigmoid, is the capsule's activation. The paper uses a 1x1
    kernel on the ReLU Conv1 features.

    Args:
        capsule_types: number of capsule types (B in the paper).
        kernel_size: int or tuple of 2 ints (1).
        strides: int or tuple of 2 ints (1).
        padding: `"valid"` or `"same"`.
        kernel_initializer: initializer of the convolution kernel.
        bias_initializer: initializer of the convolution bias.
        kernel_regularizer: optional regularizer of the convolution kernel.
        **kwargs: base layer arguments such as `name` and `dtype`.

    Call arguments:
        inputs: feature maps, shape `(batch, height, width, channels)`.

    Returns:
        `(poses, activations)`: `(batch, out_h, out_w, capsule_types, 16)`
        (flattened 4x4 matrices) and `(batch, out_h, out_w, capsule_types)`
        in (0, 1).

    Example:

    >>> import numpy as np
    >>> layer = PrimaryMatrixCapsule(capsule_types=32)
    >>> poses, acts = layer(np.zeros((2, 14, 14, 32), "float32"))
    >>> tuple(poses.shape), tuple(acts.shape)
    ((2, 14, 14, 32, 16), (2, 14, 14, 32))

    Reference:
        Hinton, Sabour, Frosst. Matrix capsules with EM routing. ICLR 2018,
        section 3 (PrimaryCaps).
    """

    def __init__(
        self,
        capsule_types,
        kernel_size=1,
        strides=1,
        padding="valid",
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        kernel_regularizer=None,
        **kwargs,
    ):
        check_positive_int("capsule_types", capsule_types)
        super().__init__(
            capsule_types * 17,
            kernel_size,
            strides,
            padding,
            kernel_initializer,
            bias_initializer,
            kernel_regularizer,
            **kwargs,
        )
        self.capsule_types = capsule_types

    def call(self, inputs):
        features = self._convolve(inputs)
        shape = ops.shape(features)
        grid = (shape[0], shape[1], shape[2])
        # A split, not two slices, whose gradients would each be a full-size tensor.
        poses, logits = ops.split(features, [16 * self.capsule_types], axis=-1)
        poses = ops.reshape(poses, grid + (self.capsule_types, 16))
        activations = ops.sigmoid(logits)
        return poses, activations

    def compute_output_shape(self, input_shape):
        batch, height, width, _ = self._convolved_shape(input_shape)
        return (
            (batch, height, width, self.capsule_types, 16),
            (batch, height, width, self.capsule_types),
        )

    def compute_output_spec(self, inputs):
        return output_spec(self, inputs)

    def get_config(self):
        config = super().get_config()
        config.update({"capsule_types": self.capsule_types})
        return config

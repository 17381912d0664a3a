import keras
from keras import ops

from keras_capsules._validation import check_positive_int
from keras_capsules._validation import is_int
from keras_capsules.layers._convolutional_capsule import ConvolutionalCapsule
from keras_capsules.layers._shapes import output_spec
from keras_capsules.ops import exponential_squash


def _pair(name, value):
    pair = (value, value) if is_int(value) else value
    if (
        not isinstance(pair, (tuple, list))
        or len(pair) != 2
        or not all(is_int(v) and v > 0 for v in pair)
    ):
        raise ValueError(
            f"`{name}` must be a positive integer or a tuple of 2. Received: {name}={value!r}"
        )
    return tuple(pair)


@keras.saving.register_keras_serializable(package="keras_capsules")
class DepthwisePrimaryCapsule(ConvolutionalCapsule):
    """Primary capsules from a depthwise convolution (Efficient-CapsNet).

    Each input channel is filtered on its own (a depthwise convolution, one
    `kernel_size` filter and a bias per channel, no activation); at every
    output position the channels are split into `capsule_types` capsules of
    `capsule_dim` dimensions, squashed with
    `keras_capsules.ops.exponential_squash`. The input must have
    `capsule_types * capsule_dim` channels. With `kernel_size=None` the
    filter covers the whole feature map, as in the paper, so that each
    capsule sees the whole image: one position, `capsule_types` capsules,
    each channel's weighted sum of the map (computed as that, not as a
    convolution, whenever the kernel is as large as the input).

    Args:
        capsule_types: number of capsules per position (16 in the paper).
        capsule_dim: dimensions of each capsule (8 in the paper).
        kernel_size: int or tuple of 2 ints; `None` (default) for the whole
            feature map (the input's height and width must then be known).
        strides: int or tuple of 2 ints (1).
        kernel_initializer: initializer of the depthwise kernel.
        bias_initializer: initializer of the bias.
        kernel_regularizer: optional regularizer of the depthwise kernel.
        **kwargs: base layer arguments such as `name` and `dtype`.

    Call arguments:
        inputs: feature maps `(batch, height, width, capsule_types * capsule_dim)`.

    Returns:
        Capsules of shape `(batch, out_height * out_width * capsule_types, capsule_dim)`.

    Example:

    >>> import numpy as np
    >>> layer = DepthwisePrimaryCapsule(capsule_types=16, capsule_dim=8)
    >>> tuple(layer(np.ones((2, 9, 9, 128), "float32")).shape)
    (2, 16, 8)

    Reference:
        Mazzia, Salvetti, Chiaberge. Efficient-CapsNet: Capsule Network with
        Self-Attention Routing. Scientific Reports 11, 14634 (2021).
    """

    def __init__(
        self,
        capsule_types=None,
        capsule_dim=None,
        kernel_size=None,
        strides=1,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        kernel_regularizer=None,
        **kwargs,
    ):
        check_positive_int("capsule_types", capsule_types)
        check_positive_int("capsule_dim", capsule_dim)
        super().__init__(
            capsule_types * capsule_dim,
            None if kernel_size is None else _pair("kernel_size", kernel_size),
            _pair("strides", strides),
            "valid",
            kernel_initializer,
            bias_initializer,
            kernel_regularizer,
            **kwargs,
        )
        self.capsule_types = capsule_types
        self.capsule_dim = capsule_dim

    def _convolution(self, filters):
        return None  # the depthwise kernel and bias are this layer's own weights

    def _window(self, input_shape):
        """The kernel's (height, width) for inputs of `input_shape`."""
        if self.kernel_size is not None:
            return self.kernel_size
        height, width = input_shape[1], input_shape[2]
        if height is None or width is None:
            raise ValueError(
                "DepthwisePrimaryCapsule with kernel_size=None covers the whole feature map, "
                f"so it needs a known height and width. Received: input_shape={input_shape}"
            )
        return (height, width)

    def build(self, input_shape):
        channels = self.capsule_types * self.capsule_dim
        if len(input_shape) != 4 or input_shape[-1] != channels:
            raise ValueError(
                "DepthwisePrimaryCapsule expects inputs of shape (batch, height, width, "
                f"capsule_types * capsule_dim = {channels}). Received: input_shape={input_shape}"
            )
        super().build(input_shape)
        self.input_spec = keras.layers.InputSpec(ndim=4, axes={-1: channels})

    def _build_convolution(self, input_shape):
        window = self._window(input_shape)
        for size, extent in zip(window, input_shape[1:3]):
            if extent is not None and size > extent:
                raise ValueError(
                    f"`kernel_size` {window} is larger than the feature map "
                    f"{tuple(input_shape[1:3])}. Received: input_shape={input_shape}"
                )
        self.kernel = self.add_weight(
            name="kernel",
            shape=window + (input_shape[-1], 1),
            initializer=self.kernel_initializer,
            regularizer=self.kernel_regularizer,
        )
        self.bias = self.add_weight(
            name="bias", shape=(input_shape[-1],), initializer=self.bias_initializer
        )

    def _convolve(self, inputs):
        if tuple(inputs.shape[1:3]) == tuple(self.kernel.shape[:2]):
            return self._weighted_sum(inputs)
        kernel = ops.cast(self.kernel, self.compute_dtype)
        features = ops.depthwise_conv(
            inputs, kernel, strides=self.strides, padding="valid", data_format="channels_last"
        )
        return features + ops.cast(self.bias, self.compute_dtype)

    def _weighted_sum(self, inputs):
        """The depthwise convolution of a kernel as large as the map: `(batch, 1, 1, channels)`.

        Its one output position is each channel's sum of the map times the
        kernel, computed as that: a depthwise convolution's kernels (their
        gradients especially) are slow for a window this large on some CPUs.
        Summed in float32 under a 16-bit policy, as a convolution accumulates.
        """
        height, width, channels = self.kernel.shape[:3]
        dtype = self.compute_dtype
        if dtype in ("float16", "bfloat16"):
            dtype = "float32"
        kernel = ops.reshape(ops.cast(self.kernel, dtype), (height * width, channels))
        values = ops.reshape(ops.cast(inputs, dtype), (-1, height * width, channels))
        features = ops.sum(values * kernel, axis=1) + ops.cast(self.bias, dtype)
        return ops.reshape(ops.cast(features, self.compute_dtype), (-1, 1, 1, channels))

    def _convolved_shape(self, input_shape):
        window = self._window(input_shape)
        extents = [
            None if extent is None else (extent - size) // stride + 1
            for extent, size, stride in zip(input_shape[1:3], window, self.strides)
        ]
        return (input_shape[0], *extents, self.capsule_types * self.capsule_dim)

    def call(self, inputs):
        features = self._convolve(inputs)
        return exponential_squash(
            self._capsule_list(features, self.capsule_types, self.capsule_dim)
        )

    def compute_output_shape(self, input_shape):
        return self._capsule_list_shape(input_shape, self.capsule_types, self.capsule_dim)

    def compute_output_spec(self, inputs):
        return output_spec(self, inputs)

    def get_config(self):
        config = super().get_config()
        del config["padding"]  # always "valid", not an argument of this layer
        config.update({"capsule_types": self.capsule_types, "capsule_dim": self.capsule_dim})
        return config

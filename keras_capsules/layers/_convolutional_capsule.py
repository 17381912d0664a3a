"""The convolution that the primary capsule layers read capsules off."""

import keras
from keras import ops


class ConvolutionalCapsule(keras.layers.Layer):
    """A layer whose capsules are the channels of one convolution of its inputs.

    It holds the convolution's arguments, checks them, checks that the inputs
    are `(batch, height, width, channels)` with a known channel count, builds
    and applies the convolution (`_convolve`, `_convolved_shape`) and writes
    its arguments into the config. The convolution is a `Conv2D` of `filters`
    channels, `self.conv`, created in `__init__` so that `compute_output_shape`
    can ask it without building anything. A subclass checks its own arguments,
    passes the number of `filters` they make, and turns the features into
    capsules in `call`; one with another convolution overrides `_convolution`,
    `_build_convolution`, `_convolve` and `_convolved_shape`.
    """

    def __init__(
        self,
        filters,
        kernel_size,
        strides,
        padding,
        kernel_initializer,
        bias_initializer,
        kernel_regularizer,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if padding not in ("valid", "same"):
            raise ValueError(f'`padding` must be "valid" or "same". Received: padding={padding!r}')
        self.kernel_size = kernel_size
        self.strides = strides
        self.padding = padding
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.input_spec = keras.layers.InputSpec(ndim=4)
        self.conv = self._convolution(filters)

    def _convolution(self, filters):
        """The `Conv2D` sublayer the capsules are read off, or `None` if the layer holds its own."""
        return keras.layers.Conv2D(
            filters,
            self.kernel_size,
            strides=self.strides,
            padding=self.padding,
            kernel_initializer=self.kernel_initializer,
            bias_initializer=self.bias_initializer,
            kernel_regularizer=self.kernel_regularizer,
            data_format="channels_last",
            dtype=self.dtype_policy,
            name="conv",
        )

    def build(self, input_shape):
        if len(input_shape) != 4 or input_shape[-1] is None:
            raise ValueError(
                f"{type(self).__name__} expects inputs of shape (batch, height, width, "
                f"channels) with a known channel count. Received: input_shape={input_shape}"
            )
        self._build_convolution(input_shape)

    def _build_convolution(self, input_shape):
        self.conv.build(input_shape)

    def _convolve(self, inputs):
        """The convolution's features, `(batch, out_height, out_width, filters)`."""
        return self.conv(inputs)

    def _convolved_shape(self, input_shape):
        """The shape of `_convolve`'s features for inputs of `input_shape`."""
        return self.conv.compute_output_shape(input_shape)

    def _capsule_list(self, features, capsule_types, capsule_dim):
        """The features' capsules, every position's `capsule_types` in turn, as one list.

        Returns `(batch, out_height * out_width * capsule_types, capsule_dim)`.
        """
        shape = ops.shape(features)
        return ops.reshape(features, (shape[0], shape[1] * shape[2] * capsule_types, capsule_dim))

    def _capsule_list_shape(self, input_shape, capsule_types, capsule_dim):
        """The shape of `_capsule_list` for inputs of `input_shape`."""
        _, height, width, _ = self._convolved_shape(input_shape)
        count = None if height is None or width is None else height * width * capsule_types
        return (input_shape[0], count, capsule_dim)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "kernel_size": self.kernel_size,
                "strides": self.strides,
                "padding": self.padding,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
                "kernel_regularizer": keras.regularizers.serialize(self.kernel_regularizer),
            }
        )
        return config

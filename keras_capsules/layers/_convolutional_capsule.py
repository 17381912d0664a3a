"""The convolution that `PrimaryCapsule` and `PrimaryMatrixCapsule` read capsules off."""

import keras


class ConvolutionalCapsule(keras.layers.Layer):
    """A layer whose capsules are the channels of one `Conv2D` (`self.conv`).

    It holds the convolution's arguments, checks them, creates the convolution
    in `__init__` (so that `compute_output_shape` can ask it without building
    anything), builds it on `(batch, height, width, channels)` inputs and
    writes its arguments into the config. A subclass checks its own arguments,
    passes the number of `filters` they make, and splits the features in `call`.
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
        self.conv = keras.layers.Conv2D(
            filters,
            kernel_size,
            strides=strides,
            padding=padding,
            kernel_initializer=self.kernel_initializer,
            bias_initializer=self.bias_initializer,
            kernel_regularizer=self.kernel_regularizer,
            dtype=self.dtype_policy,
            name="conv",
        )

    def build(self, input_shape):
        if len(input_shape) != 4 or input_shape[-1] is None:
            raise ValueError(
                f"{type(self).__name__} expects inputs of shape (batch, height, width, "
                f"channels) with a known channel count. Received: input_shape={input_shape}"
            )
        self.conv.build(input_shape)

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

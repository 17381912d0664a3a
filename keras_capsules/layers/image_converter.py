import keras
from keras import ops

from keras_capsules._validation import is_int
from keras_capsules._validation import is_number
from keras_capsules.layers._shapes import output_spec

LUMA = (0.299, 0.587, 0.114)
"""ITU-R BT.601's weights of red, green and blue in grey, as Pillow's and TensorFlow's."""
INTERPOLATIONS = ("bilinear", "nearest", "bicubic", "lanczos3", "lanczos5", "area")
COLOUR_CHANNELS = (1, 3, 4)
"""The channels a converter to grey or colour takes: grey, RGB and RGBA (alpha dropped)."""


def accepted_channels(channels):
    """The channels an image may have for a network of `channels` behind its converter.

    Grey, RGB or RGBA (`COLOUR_CHANNELS`) for a grey or colour network; a
    network of other channels (smallNORB's stereo pairs) takes its own only.

    >>> accepted_channels(1), accepted_channels(2)
    ((1, 3, 4), (2,))
    """
    return COLOUR_CHANNELS if channels in (1, 3) else (channels,)


def check_image_shape(shape, channels=COLOUR_CHANNELS):
    """Raise a `ValueError` naming `shape` unless it is a batch of images with `channels`.

    `shape` is `(batch, height, width, channels)`, or `(batch, height,
    width)` for grey images; an unknown (`None`) channel count passes. The
    message is the one `model.predict`, the layer and the applications'
    models give.

    >>> check_image_shape((2, 28, 28, 4))  # RGBA: taken
    >>> try:
    ...     check_image_shape((2, 28, 28, 5))
    ... except ValueError as error:
    ...     print(str(error).split(". ")[-1])
    Received: shape=(2, 28, 28, 5)
    """
    shape = tuple(None if d is None else int(d) for d in shape)
    rank_ok = len(shape) == 4 or (len(shape) == 3 and 1 in channels)
    if not rank_ok or (len(shape) == 4 and shape[-1] is not None and shape[-1] not in channels):
        if tuple(channels) == COLOUR_CHANNELS:
            takes = "1, 3 or 4 channels (grey, RGB or RGBA, whose alpha is dropped)"
        else:
            takes = " or ".join(map(str, channels)) + " channels"
        grey = ", or grey (batch, height, width)" if 1 in channels else ""
        raise ValueError(
            f"Images must be (batch, height, width, channels) with {takes}{grey}. "
            f"Received: shape={shape}"
        )


@keras.saving.register_keras_serializable(package="keras_capsules")
class ImageConverter(keras.layers.Layer):
    """Bring images of any size and colour to the size, colour and scale a network takes.

    In this order: an image of 4 channels loses its alpha channel; colour
    becomes grey (the luma of ITU-R BT.601, as Pillow and TensorFlow
    convert) or grey becomes colour (the grey channel three times), to
    `channels`; the image is resized to `image_size` (or cropped to its
    aspect ratio first, then resized); and the pixels are multiplied by
    `scale` and shifted by `offset`. Inside a model it lets the model, its
    `.keras` file and its exports take an image as it comes.

    A converter to grey or colour takes images of 1, 3 or 4 channels (grey,
    RGB, RGBA) and refuses any other count (2, 5, ...) rather than guess
    what its channels are: with a `ValueError` naming the shape wherever the
    shape is known (eagerly, in `model.predict`, on every backend), and in a
    graph that takes any image (the SavedModel, ONNX and LiteRT exports) by
    failing when it runs. An alpha channel is dropped, never composited:
    the colour of a transparent pixel is kept as it is.

    Args:
        image_size: `(height, width)` of the output, or `None` to keep each
            image's size.
        channels: channels of the output, 1 (grey) or 3 (RGB), or `None` to
            keep the input's, any number (a fourth channel is dropped as alpha
            all the same).
        scale: factor of the pixel values, e.g. `1 / 255` for pixels in
            [0, 255]; `None` for none.
        offset: added after `scale`, e.g. `-1` with `scale=2 / 255` for
            [-1, 1]; `None` for none.
        interpolation: how `keras.ops.image.resize` resamples: `"bilinear"`
            (default), `"nearest"`, `"bicubic"`, `"lanczos3"`, `"lanczos5"`
            or `"area"`.
        antialias: filter when downsampling (`keras.ops.image.resize`'s
            `antialias`; `False`).
        crop_to_aspect_ratio: crop the image's centre to the aspect ratio of
            `image_size` before resizing, so that it is not distorted
            (`False`: resize the whole image).
        **kwargs: base layer arguments such as `name` and `dtype`.

    Call arguments:
        images: `(batch, height, width, channels)` with 1, 3 or 4 channels
            (any number without `channels`), or `(batch, height, width)` grey
            images; any real dtype.

    Returns:
        Images of the layer's compute dtype, `(batch, *image_size, channels)`.

    Example:

    >>> import numpy as np
    >>> converter = ImageConverter(image_size=(28, 28), channels=1, scale=1 / 255)
    >>> photos = np.full((2, 96, 64, 3), 255, "uint8")  # two white RGB photos
    >>> grey = converter(photos)
    >>> tuple(grey.shape), round(float(grey[0, 0, 0, 0]), 4)
    ((2, 28, 28, 1), 1.0)

    Reference:
        ITU-R Recommendation BT.601: the weights of red, green and blue in
        luma. keras-hub's `ImageConverter` has the same role.
    """

    def __init__(
        self,
        image_size=None,
        channels=None,
        scale=None,
        offset=None,
        interpolation="bilinear",
        antialias=False,
        crop_to_aspect_ratio=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if image_size is not None:
            if (
                not isinstance(image_size, (tuple, list))
                or len(image_size) != 2
                or not all(is_int(side) and side > 0 for side in image_size)
            ):
                raise ValueError(
                    "`image_size` must be None or (height, width), two positive integers. "
                    f"Received: image_size={image_size!r}"
                )
            image_size = tuple(int(side) for side in image_size)
        if channels not in (None, 1, 3):
            raise ValueError(f"`channels` must be None, 1 or 3. Received: channels={channels!r}")
        for name, value in (("scale", scale), ("offset", offset)):
            if value is not None and not is_number(value):
                raise ValueError(f"`{name}` must be a number or None. Received: {name}={value!r}")
        if interpolation not in INTERPOLATIONS:
            raise ValueError(
                f"`interpolation` must be one of {', '.join(INTERPOLATIONS)}. "
                f"Received: interpolation={interpolation!r}"
            )
        if crop_to_aspect_ratio and image_size is None:
            raise ValueError("`crop_to_aspect_ratio` needs an `image_size` to take the ratio of.")
        self.image_size = image_size
        self.channels = channels
        self.scale = None if scale is None else float(scale)
        self.offset = None if offset is None else float(offset)
        self.interpolation = interpolation
        self.antialias = bool(antialias)
        self.crop_to_aspect_ratio = bool(crop_to_aspect_ratio)

    def build(self, input_shape):
        self._check(input_shape)

    def _check(self, shape):
        """Refuse a batch of `shape` this converter cannot take, naming the shape.

        A converter to grey or colour takes grey, RGB and RGBA images only
        (`check_image_shape`); one without `channels` takes any channels.
        """
        if self.channels is not None:
            check_image_shape(shape)
        elif len(shape) not in (3, 4):
            raise ValueError(
                "Images must be (batch, height, width, channels), or grey (batch, height, "
                f"width). Received: shape={tuple(shape)}"
            )

    def call(self, images):
        self._check(images.shape)
        x = ops.cast(images, self.compute_dtype)
        if len(x.shape) == 3:
            x = ops.expand_dims(x, -1)
        if self.channels is not None and x.shape[-1] is None:
            x = _refuse_other_channels(x)
        x = self._colour(x)
        if self.image_size is not None and tuple(x.shape[1:3]) != self.image_size:
            x = ops.image.resize(
                x,
                self.image_size,
                interpolation=self.interpolation,
                antialias=self.antialias,
                crop_to_aspect_ratio=self.crop_to_aspect_ratio,
                data_format="channels_last",
            )
        if self.scale is not None:
            x = x * ops.cast(self.scale, x.dtype)
        if self.offset is not None:
            x = x + ops.cast(self.offset, x.dtype)
        return x

    def _colour(self, x):
        """`x` without alpha, with `channels` channels (grey <-> colour).

        Written without a branch on the number of channels, which a model
        taking any image only knows when it runs: the first three channels of
        a grey image are its one, so their luma is itself and their product
        with three ones is the grey channel three times.
        """
        if self.channels is None:
            return x[..., :3] if x.shape[-1] == 4 else x
        x = x[..., :3]
        if x.shape[-1] == self.channels:
            return x
        if self.channels == 1:
            return ops.sum(x * ops.convert_to_tensor(LUMA, x.dtype), axis=-1, keepdims=True)
        return x * ops.ones((3,), x.dtype)

    def compute_output_shape(self, input_shape):
        input_shape = tuple(input_shape)
        if len(input_shape) == 3:
            input_shape = (*input_shape, 1)
        channels = input_shape[-1]
        if channels == 4:
            channels = 3
        if self.channels is not None:
            channels = self.channels
        size = self.image_size if self.image_size is not None else input_shape[1:3]
        return (input_shape[0], *size, channels)

    def compute_output_spec(self, images):
        return output_spec(self, images)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "image_size": self.image_size,
                "channels": self.channels,
                "scale": self.scale,
                "offset": self.offset,
                "interpolation": self.interpolation,
                "antialias": self.antialias,
                "crop_to_aspect_ratio": self.crop_to_aspect_ratio,
            }
        )
        return config


def _refuse_other_channels(x):
    """`x`, through a reshape that fails unless it has 1, 3 or 4 channels.

    For a graph whose channel count is only known when it runs (an export
    taking any image): the reshape asks for one more channel than an image
    with other channels has, which TensorFlow, ONNX Runtime and LiteRT all
    refuse (ONNX and LiteRT have no operation that fails with a message of
    its own); grey, RGB and RGBA images pass unchanged.
    """
    batch, height, width, channels = ops.shape(x)
    ok = ops.logical_or(
        ops.logical_or(ops.equal(channels, 1), ops.equal(channels, 3)), ops.equal(channels, 4)
    )
    shape = ops.stack(
        [ops.where(ok, batch, 1), height, width, ops.where(ok, channels, channels + 1)]
    )
    return ops.reshape(x, shape)

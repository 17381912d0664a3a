"""The applications' images: an image converter inside the model, and a loud wrong range."""

import warnings

import keras
import numpy as np

from keras_capsules.layers import ImageConverter

PIXELS = 1.0 / 255.0
"""The default converter's `scale`: images arrive as 8-bit pixel values in [0, 255]."""


def converter_for(converter, image_shape):
    """The model's `ImageConverter` to images of `image_shape`.

    `None` gives the default: pixels in [0, 255] scaled to [0, 1], any size
    resized and any colour converted to the network's. A given converter's
    unset `image_size` and `channels` become the network's; set ones must be
    them.
    """
    if converter is None:
        converter = ImageConverter(scale=PIXELS)
    if not isinstance(converter, ImageConverter):
        raise ValueError(
            "`image_converter` must be a keras_capsules.layers.ImageConverter or None. "
            f"Received: image_converter={converter!r}"
        )
    size, channels = tuple(image_shape[:2]), image_shape[-1]
    want = {"image_size": size, "channels": channels if channels in (1, 3) else None}
    config = converter.get_config()
    for key, value in want.items():
        given = config[key]
        if given is not None and (tuple(given) if key == "image_size" else given) != value:
            raise ValueError(
                f"`image_converter` gives {key}={config[key]!r}, but the network takes images "
                f"of shape {tuple(image_shape)}: leave `{key}` unset or give {value!r}."
            )
    config.update(want, name="image_converter", dtype="float32")
    return ImageConverter.from_config(config)


def image_input(image_shape):
    """The model's input: images of any size with the network's channels (`None` for any)."""
    return keras.Input(shape=(None, None, image_shape[-1]), name="images")


def accept_any_image(model):
    """Let `model` take images of any size and colour, grey ones also as `(h, w)`.

    The converter inside brings them to the network's; the input's own shape
    keeps the network's channels, so that grey `(n, h, w)` arrays are taken
    as `(n, h, w, 1)`, as Keras takes them.
    """
    model.input_spec = keras.InputSpec(min_ndim=3, max_ndim=4, name="images")


class InputRangeCheck:
    """Warn once when the first NumPy batch given to `fit`, `evaluate` or `predict`
    cannot be in the range the model's image converter expects.

    With a converter `scale` the model expects raw values up to about
    `1 / scale` (pixels in [0, 255] for `1 / 255`): negative values, or
    values that never exceed `1 / scale` divided by 100 (images already
    scaled to [0, 1]), warn. Without one it expects values already scaled:
    values above 20 (raw pixels) warn. The check looks at the arrays before
    `fit` starts, so the compiled step is untouched; `tf.data` pipelines are
    not inspected.
    """

    def _check_input_range(self, x):
        if getattr(self, "_input_range_checked", False):
            return
        images = x.get("images") if isinstance(x, dict) else x
        if not isinstance(images, np.ndarray) or images.size == 0:
            return
        self._input_range_checked = True
        sample = np.asarray(images[:1024], dtype="float64")
        low, high = float(np.min(sample)), float(np.max(sample))
        name = type(self).__name__
        scale = self.image_converter.scale
        if scale is not None:
            top = 1.0 / scale
            if low < 0 or 0 < high <= top / 100:
                warnings.warn(
                    f"{name}'s image converter multiplies its inputs by scale={scale:.6g}, so "
                    f"it expects values in [0, {top:.6g}], but the first batch ranges over "
                    f"[{low:.6g}, {high:.6g}]. Pass the raw pixel values, or build the model "
                    "with image_converter=ImageConverter() if the inputs are already scaled.",
                    stacklevel=3,
                )
        elif high > 20:
            warnings.warn(
                f"{name}'s image converter does not scale, so it expects inputs already scaled "
                f"(about [-3, 3] or [0, 1]), but the first batch reaches {high:.6g}. For raw "
                "pixel values build it with image_converter=ImageConverter(scale=1 / 255).",
                stacklevel=3,
            )

    def fit(self, x=None, *args, **kwargs):
        self._check_input_range(x)
        return super().fit(x, *args, **kwargs)

    def evaluate(self, x=None, *args, **kwargs):
        self._check_input_range(x)
        return super().evaluate(x, *args, **kwargs)

    def predict(self, x, *args, **kwargs):
        self._check_input_range(x)
        return super().predict(x, *args, **kwargs)

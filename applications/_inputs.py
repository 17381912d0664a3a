"""The applications' images: an image converter inside the model, any size and colour."""

import keras
import numpy as np

from keras_capsules.layers import ImageConverter
from keras_capsules.layers.image_converter import COLOUR_CHANNELS
from keras_capsules.layers.image_converter import accepted_channels

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
    as `(n, h, w, 1)`, as Keras takes them. A network of other channels than
    grey or colour (smallNORB's stereo pairs) takes its own channels only.
    """
    channels = model.inputs[0].shape[-1]
    if accepted_channels(channels) == COLOUR_CHANNELS:
        model.input_spec = keras.InputSpec(min_ndim=3, max_ndim=4, name="images")
    else:
        model.input_spec = keras.InputSpec(ndim=4, axes={-1: channels}, name="images")


def batch_shape(x):
    """The shape of `x` when it is an array or a number, else `None` (a dataset, a generator)."""
    if isinstance(x, (bool, int, float, np.generic)):
        return ()
    shape = getattr(x, "shape", None)
    if shape is None or isinstance(x, dict):
        return None
    try:
        return tuple(None if d is None else int(d) for d in shape)
    except TypeError:
        return None


def empty_answer(model, shape):
    """What `model.predict` answers for an empty batch of `shape`: every output with 0 rows."""
    spec = model.compute_output_spec(keras.KerasTensor(shape, dtype="float32"))
    return keras.tree.map_structure(
        lambda output: keras.ops.convert_to_numpy(keras.ops.zeros(output.shape, output.dtype)),
        spec,
    )

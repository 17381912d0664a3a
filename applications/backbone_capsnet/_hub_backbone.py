"""keras-hub image backbones by preset handle, behind their presets' own preprocessing."""

import importlib.util
import os
import re

import keras

from applications._weights_file import first_line
from applications._weights_file import load_weights_file

IMAGENET_SHAPE = (224, 224, 3)
"""The input shape of a standard backbone whose size is not given: ImageNet's 224x224 RGB."""
BACKBONE_WEIGHTS = "The backbone weights file"
"""How the errors name a weights file given for a backbone (`--backbone-weights`)."""
HUB_WEIGHTS_FILE = "model.weights.h5"
"""The weights file of a keras-hub preset folder (unsharded)."""


def hub_installed():
    """Whether keras-hub can be imported here."""
    return importlib.util.find_spec("keras_hub") is not None


def hub_backbone(handle, input_shape, weights):
    """A keras-hub preset's backbone: pixels in [0, 1] to its last feature map.

    The backbone is loaded with `keras_hub.models.Backbone.from_preset` and
    built for `input_shape` where its class takes an `image_shape`. Its
    preset's `ImageConverter` gives the preprocessing: pixels in [0, 255]
    times its `scale` plus its `offset`, applied here as one `Rescaling` of
    the images in [0, 1] (the converter's resizing is left out: the model
    takes images of `input_shape`).

    Args:
        handle: a keras-hub preset: a name such as
            `"mobilenet_v3_small_100_imagenet"`, a `kaggle://` or `hf://`
            handle, or a local preset folder.
        input_shape: `(height, width, 3)`, or `None` for the converter's
            image size (224x224 if it has none).
        weights: `"imagenet"` for the preset's own weights, `None` for
            random weights, or the path of a weights file of the backbone.
            A weights file, given or the preset folder's own, that is damaged
            or another model's is a `ValueError` naming it.

    Returns:
        A functional `keras.Model` named after the preset.
    """
    import keras_hub

    if not is_hub_handle(handle):
        raise ValueError(
            "`backbone` names a keras.applications model (`applications.STANDARD_BACKBONES`) "
            "or a keras-hub image preset: a name of `keras_hub.models.Backbone.presets`, a "
            f"kaggle:// or hf:// handle, or a preset folder. Received: backbone={handle!r}"
        )
    folder_weights = os.path.join(handle, HUB_WEIGHTS_FILE)
    # A folder's own weights are loaded here, to name the file if they do not fit.
    own_folder = weights == "imagenet" and os.path.isfile(folder_weights)
    load = weights == "imagenet" and not own_folder
    try:
        converter = keras_hub.layers.ImageConverter.from_preset(handle)
        shape = tuple(input_shape or (*(converter.image_size or IMAGENET_SHAPE[:2]), 3))
        try:
            backbone = keras_hub.models.Backbone.from_preset(
                handle, load_weights=load, image_shape=shape
            )
        except TypeError as error:
            if "image_shape" not in str(error):
                raise
            backbone = keras_hub.models.Backbone.from_preset(handle, load_weights=load)
    except Exception as error:  # keras-hub and the hubs raise many types
        raise ValueError(
            f"Could not load the keras-hub preset {handle!r} ({type(error).__name__}: "
            f"{first_line(error)}). It needs an image converter (image_converter.json) and a "
            "backbone; a preset from a hub is downloaded on first use: where this machine cannot, "
            "download it elsewhere and pass its folder."
        ) from None
    if own_folder:
        load_weights_file(backbone, folder_weights, "The keras-hub preset's weights file")
    elif weights is not None and not load:
        load_weights_file(backbone, weights, BACKBONE_WEIGHTS)
    scale = 1.0 if converter.scale is None else converter.scale
    offset = 0.0 if converter.offset is None else converter.offset
    images = keras.Input(shape, name="images")
    pixels = keras.layers.Rescaling(_times(scale, 255.0), offset=offset, name="preprocessing")(
        images
    )
    return keras.Model(images, backbone(pixels), name=_model_name(handle))


def is_hub_handle(handle):
    """Whether `handle` can name a keras-hub preset: a known name, a hub's handle, a folder."""
    import keras_hub

    return isinstance(handle, str) and (
        "://" in handle or os.path.isdir(handle) or handle in keras_hub.models.Backbone.presets
    )


def _times(scale, factor):
    """`scale * factor` for a number or a list of per-channel numbers."""
    if isinstance(scale, (list, tuple)):
        return [float(value) * factor for value in scale]
    return float(scale) * factor


def _model_name(handle):
    """A Keras name for the preset: its last path part, letters, digits and `_`."""
    last = str(handle).rstrip("/").split("/")[-1]
    return re.sub(r"[^0-9a-zA-Z_]+", "_", last).strip("_").lower() or "hub_backbone"

"""The `keras.applications` models a head can sit on, by name, with their own preprocessing."""

import os

import keras

from applications._weights_file import load_weights_file
from applications.backbone_capsnet._hub_backbone import BACKBONE_WEIGHTS
from applications.backbone_capsnet._hub_backbone import IMAGENET_SHAPE
from applications.backbone_capsnet._hub_backbone import hub_backbone
from applications.backbone_capsnet._hub_backbone import hub_installed
from keras_capsules.utils import check_image_shape

STANDARD_BACKBONES = {
    **{f"ConvNeXt{size}": "convnext" for size in ("Tiny", "Small", "Base", "Large", "XLarge")},
    **{f"DenseNet{depth}": "densenet" for depth in (121, 169, 201)},
    **{f"EfficientNetB{index}": "efficientnet" for index in range(8)},
    **{
        f"EfficientNetV2{size}": "efficientnet_v2"
        for size in ("B0", "B1", "B2", "B3", "S", "M", "L")
    },
    "InceptionResNetV2": "inception_resnet_v2",
    "InceptionV3": "inception_v3",
    "MobileNet": "mobilenet",
    "MobileNetV2": "mobilenet_v2",
    "MobileNetV3Small": "mobilenet_v3",
    "MobileNetV3Large": "mobilenet_v3",
    "NASNetMobile": "nasnet",
    "NASNetLarge": "nasnet",
    **{f"ResNet{depth}": "resnet" for depth in (50, 101, 152)},
    **{f"ResNet{depth}V2": "resnet_v2" for depth in (50, 101, 152)},
    "VGG16": "vgg16",
    "VGG19": "vgg19",
    "Xception": "xception",
}
"""`{name: module}`: the `keras.applications` models by name, and the module of each
whose `preprocess_input` brings pixels in [0, 255] to what the model takes."""


def standard_name(name):
    """The `STANDARD_BACKBONES` name `name` stands for, in any case, or `None`."""
    names = {known.lower(): known for known in STANDARD_BACKBONES}
    return names.get(name.lower()) if isinstance(name, str) else None


def standard_backbone(name, input_shape=None, weights="imagenet"):
    """A standard model as a backbone: pixels in [0, 1] to its last feature map.

    `name` is a `keras.applications` model or, where keras-hub is installed,
    a keras-hub image preset.

    The model is built without its classifier (`include_top=False`,
    `pooling=None`), so it returns its last feature map, and behind its own
    preprocessing: the images, with pixel values in [0, 1] as every backbone
    of `applications` takes them, are brought to [0, 255] and through the
    model's `preprocess_input` (mean and scale, BGR for the Caffe-trained
    ResNets and VGGs; nothing more for the models that rescale inside, such
    as MobileNetV3 and EfficientNet). The preprocessing is Keras operations
    in the functional graph, saved with the model and its exports.

    A keras-hub preset's backbone (`keras_hub.models.Backbone.from_preset`)
    is built for `input_shape` where its class takes an `image_shape`, behind
    its preset's image converter's `scale` and `offset` (its resizing is left
    out: the model takes images of `input_shape`). Its model and the models
    saved with it need keras-hub to load.

    Args:
        name: a `keras.applications` model, e.g. `"MobileNetV3Small"`,
            `"EfficientNetB0"` or `"ResNet50"` (any case; `STANDARD_BACKBONES`
            lists them), or, with keras-hub installed, a keras-hub image
            preset: a name such as `"resnet_18_imagenet"`, a `kaggle://` or
            `hf://` handle, or a preset folder with an `image_converter.json`.
        input_shape: `(height, width, 3)`; the smallest size is the model's
            (32x32 for most). By default 224x224, or a keras-hub preset's
            image size.
        weights: `"imagenet"` (downloaded once into Keras's cache, where the
            machine can reach it; for a keras-hub preset, the preset's own
            weights), `None` for random weights, or the path of a
            `.weights.h5` file of the model without its top. A damaged
            file, or another model's, is a `ValueError` naming it.

    Returns:
        A functional `keras.Model` named after the model.

    Example:

    >>> from applications import standard_backbone
    >>> backbone = standard_backbone("MobileNetV3Small", (96, 96, 3), weights=None)
    >>> tuple(backbone.output.shape)
    (None, 3, 3, 576)

    Reference:
        The models' papers are listed in the `keras.applications` docs.
    """
    known = standard_name(name)
    if known is None and not hub_installed():
        raise ValueError(
            "`backbone` names a keras.applications model: one of "
            f"{', '.join(STANDARD_BACKBONES)} (in any case), or, with keras-hub installed "
            f"(`pip install keras-hub`), a keras-hub image preset. Received: backbone={name!r}"
        )
    if input_shape is not None:
        input_shape = check_image_shape(input_shape)
        if input_shape[-1] != 3:
            raise ValueError(
                f"{known or name} takes colour images: `input_shape` must have 3 channels. "
                f"Received: input_shape={input_shape}"
            )
    if weights is not None and weights != "imagenet" and not os.path.isfile(str(weights)):
        raise ValueError(
            "`weights` must be 'imagenet', None or the path of a weights file. "
            f"Received: weights={weights!r}"
        )
    if known is None:
        return hub_backbone(name, input_shape, weights)
    name = known
    input_shape = input_shape or IMAGENET_SHAPE
    module = getattr(keras.applications, STANDARD_BACKBONES[name])
    own_file = weights not in (None, "imagenet")
    try:
        model = getattr(keras.applications, name)(
            include_top=False,
            weights=None if own_file else weights,
            input_shape=input_shape,
            pooling=None,
        )
    except Exception as error:  # keras.utils.get_file raises a bare Exception
        if weights != "imagenet" or "fetch failure" not in str(error):
            raise
        raise ValueError(
            f"Could not download {name}'s ImageNet weights ({error}). Download them where "
            "the internet can be reached and pass the file as weights, or train from "
            "random weights with weights=None (--backbone-weights none)."
        ) from None
    if own_file:  # one line naming the file if it is damaged or another model's
        load_weights_file(model, weights, BACKBONE_WEIGHTS)
    images = keras.Input(input_shape, name="images")
    pixels = keras.layers.Rescaling(255.0, name="to_0_255")(images)
    features = model(module.preprocess_input(pixels))
    return keras.Model(images, features, name=name.lower())

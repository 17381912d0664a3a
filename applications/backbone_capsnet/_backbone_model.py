"""What the models on a user's backbone share: checking the backbone and its feature map."""

import keras

from applications.backbone_capsnet.standard_backbone import standard_backbone
from keras_capsules.utils import check_image_shape


class BackboneModel:
    """What a model on a user's backbone adds to its base class.

    The subclass holds the user's model as `self.backbone`, which its config
    holds as it is now (frozen or not); `head_parameters()` counts the rest.
    """

    def head_parameters(self):
        """The number of parameters outside the backbone: the head's size."""
        return self.count_params() - self.backbone.count_params()


def resolve_backbone(backbone, input_shape, weights):
    """`(backbone, input_shape)`: the user's model, or the standard backbone it names.

    A name (`standard_backbone`) is built for `input_shape` (by default
    224x224, or a keras-hub preset's size) in colour, with `weights`: a grey
    `input_shape` becomes RGB, which the image converter makes of grey
    images. A model keeps its own weights: `weights` is then a `ValueError`
    unless left at `"imagenet"`.
    """
    if isinstance(backbone, str):
        if input_shape is not None:
            input_shape = check_image_shape(input_shape)[:2] + (3,)
        model = standard_backbone(backbone, input_shape, weights=weights)
        return model, tuple(model.input_shape[1:])
    if weights != "imagenet":
        raise ValueError(
            "`backbone_weights` is for a backbone given by name; a model brings its own "
            f"weights. Received: backbone_weights={weights!r}"
        )
    return backbone, backbone_input_shape(backbone, input_shape)


def check_backbone(backbone):
    """Raise a `ValueError` unless `backbone` is a Keras layer or model."""
    if not isinstance(backbone, keras.layers.Layer):
        raise ValueError(
            "`backbone` must be a Keras model or layer that maps images to feature "
            f"maps. Received: backbone={backbone!r}"
        )


def backbone_input_shape(backbone, input_shape):
    """The image shape: `input_shape`, or the backbone's own, which must agree with it.

    Raises a `ValueError` unless `backbone` is a Keras layer or model.
    """
    check_backbone(backbone)
    try:
        own = backbone.input_shape
    except (AttributeError, ValueError):
        own = None
    if own is not None:
        if isinstance(own, list) or len(own) != 4:
            raise ValueError(
                "`backbone` must take one input of images (batch, height, width, channels). "
                f"Its input shape is {own}."
            )
        own = tuple(own[1:])
    if input_shape is None:
        if own is None or None in own:
            raise ValueError(
                "`input_shape` is needed: the backbone's input shape is "
                f"{'unknown' if own is None else (None,) + own}. Pass "
                "input_shape=(height, width, channels)."
            )
        return check_image_shape(own)
    input_shape = check_image_shape(input_shape)
    if own is not None and any(o is not None and o != i for o, i in zip(own, input_shape)):
        raise ValueError(
            f"`input_shape` {input_shape} does not fit the backbone's input shape "
            f"{(None,) + own}. Received: input_shape={input_shape}"
        )
    return input_shape


def checked_features(features, input_shape, normalize, policy):
    """The backbone's feature map, layer-normalised with `normalize`.

    A `ValueError` unless the backbone gave one 4D feature map of known size.
    """
    shape = getattr(features, "shape", None)
    if (
        not isinstance(features, keras.KerasTensor)
        or len(shape) != 4
        or any(d is None for d in shape[1:])
    ):
        got = shape if isinstance(features, keras.KerasTensor) else type(features).__name__
        raise ValueError(
            "`backbone` must map images to one feature map (batch, height, width, "
            f"channels) of known size; on images of shape {input_shape} it gives {got}. "
            "Build a keras.applications model with include_top=False and pooling=None."
        )
    if not normalize:
        return features
    return keras.layers.LayerNormalization(name="feature_norm", dtype=policy)(features)

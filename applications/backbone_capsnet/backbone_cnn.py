import keras

from applications._classes import resolve_classes
from applications._softmax_classifier import SoftmaxClassifier
from applications.backbone_capsnet._backbone_model import BackboneModel
from applications.backbone_capsnet._backbone_model import checked_features
from applications.backbone_capsnet._backbone_model import resolve_backbone
from applications.backbone_capsnet.backbone_capsnet import BackboneCapsNet
from keras_capsules.utils import check_positive_ints
from keras_capsules.utils import is_int


@keras.saving.register_keras_serializable(package="keras_capsules")
class BackboneCNN(BackboneModel, SoftmaxClassifier):
    """A plain CNN head on any backbone: the non-capsule control of `BackboneCapsNet`.

    The same backbone and feature normalisation as `BackboneCapsNet`, then
    global average pooling, one fully connected ReLU layer and a softmax over
    the classes, trained with sparse categorical cross-entropy. It answers
    whether a capsule head beats an ordinary head of the same size: with
    `head_parameters`, the hidden layer's width is chosen so that the head
    (everything but the backbone) has as close to that many parameters as it
    can, e.g. `BackboneCapsNet.head_parameters()` of a capsule head on the
    same backbone.

    Args:
        backbone: a `keras.Model` or layer from images to a 4D feature map of
            known size, or a `keras.applications` model's name, as for
            `BackboneCapsNet`.
        num_classes: number of classes: by default the number of
            `class_names`, one of which is needed.
        class_names: the classes' names in label order (see `CapsNet`).
        hidden_units: width of the hidden layer (128), or `None` with
            `head_parameters`.
        head_parameters: the head's parameter budget; the hidden width is then
            computed from it. Give this or `hidden_units`, not both.
        input_shape: shape of one image; by default the backbone's.
        backbone_weights: for a backbone's name, as for `BackboneCapsNet`.
        normalize_features: normalise the feature map's channels at every
            position before pooling (`True`), as `BackboneCapsNet`.
        name: the model's name.
        **kwargs: `image_converter`, a `keras_capsules.layers.ImageConverter`
            that brings the images to `input_shape` and scales them before
            the backbone, as `BackboneCapsNet`'s (by default pixels in
            [0, 255] scaled to [0, 1]); `compile` (`True`: Adam with
            `RECIPE`'s learning rate, 1e-3 decayed by 0.96 every 2,000
            steps, sparse categorical cross-entropy and accuracy); `dtype`,
            the head's layers' dtype policy (the softmax runs in float32);
            and `keras.Model`'s `trainable`.

    Example:

    >>> import applications
    >>> import keras
    >>> import numpy as np
    >>> def backbone():
    ...     return keras.Sequential(
    ...         [keras.Input((28, 28, 1)), keras.layers.Conv2D(16, 5, strides=2, activation="relu")]
    ...     )
    >>> capsnet = applications.BackboneCapsNet(backbone(), num_classes=10)
    >>> cnn = applications.BackboneCNN(
    ...     backbone(), num_classes=10, head_parameters=capsnet.head_parameters()
    ... )
    >>> abs(cnn.head_parameters() - capsnet.head_parameters()) < 30
    True
    >>> images = np.random.default_rng(0).integers(0, 256, (4, 28, 28, 1))
    >>> cnn.predict(images, verbose=0).shape
    (4, 10)

    Reference:
        Gu, Tresp. Improving the Robustness of Capsule Networks to Image
        Affine Transformations. CVPR 2020 (a capsule network against CNN
        heads of its size).
    """

    RECIPE = BackboneCapsNet.RECIPE
    """The capsule head's recipe: the two heads are compared trained alike."""

    def __init__(
        self,
        backbone,
        num_classes=None,
        class_names=None,
        hidden_units=None,
        head_parameters=None,
        input_shape=None,
        backbone_weights="imagenet",
        normalize_features=True,
        name="backbone_cnn",
        **kwargs,
    ):
        backbone, input_shape = resolve_backbone(backbone, input_shape, backbone_weights)
        num_classes, class_names = resolve_classes(num_classes, class_names, None)
        normalize = bool(normalize_features)
        width = {}

        def network(x, policy):
            features = checked_features(backbone(x), input_shape, normalize, policy)
            width["units"] = _hidden_units(
                hidden_units, head_parameters, features.shape[-1], num_classes, normalize
            )
            x = keras.layers.GlobalAveragePooling2D(
                name="pool", data_format="channels_last", dtype=policy
            )(features)
            return keras.layers.Dense(
                width["units"], activation="relu", name="hidden", dtype=policy
            )(x)

        super().__init__(
            network,
            config={"normalize_features": normalize},
            input_shape=input_shape,
            num_classes=num_classes,
            class_names=class_names,
            default_classes=None,
            name=name,
            **kwargs,
        )
        self._config["hidden_units"] = width["units"]
        self.backbone = backbone


def _hidden_units(hidden_units, head_parameters, channels, num_classes, normalize):
    """The hidden width: `hidden_units`, or the one whose head is closest to `head_parameters`."""
    if hidden_units is not None and head_parameters is not None:
        raise ValueError(
            "Give `hidden_units` or `head_parameters`, not both. Received: "
            f"hidden_units={hidden_units!r}, head_parameters={head_parameters!r}"
        )
    if head_parameters is None:
        hidden_units = 128 if hidden_units is None else hidden_units
        check_positive_ints(hidden_units=hidden_units)
        return hidden_units
    fixed = num_classes + (2 * channels if normalize else 0)  # output biases, norm
    per_unit = channels + 1 + num_classes  # weights in, bias, weights out
    if not is_int(head_parameters) or head_parameters < fixed + per_unit:
        raise ValueError(
            f"`head_parameters` must be an integer of at least {fixed + per_unit}, the head "
            f"with one hidden unit on {channels} channels and {num_classes} classes. "
            f"Received: head_parameters={head_parameters!r}"
        )
    return max(1, round((head_parameters - fixed) / per_unit))

import keras

from applications._capsule_classifier import CapsuleClassifier
from applications.backbone_capsnet._backbone_model import BackboneModel
from applications.backbone_capsnet._backbone_model import checked_features
from applications.backbone_capsnet._backbone_model import resolve_backbone
from applications.recipe import Recipe
from keras_capsules.cli.argument_types import backbone_weights
from keras_capsules.cli.argument_types import positive_int
from keras_capsules.cli.option import Option
from keras_capsules.layers import CapsuleLayer
from keras_capsules.layers import ClassMatrixCapsule
from keras_capsules.layers import DepthwisePrimaryCapsule
from keras_capsules.layers import InvertedDotProductCapsule
from keras_capsules.layers import PrimaryCapsule
from keras_capsules.layers import PrimaryMatrixCapsule
from keras_capsules.layers import RandomCouplingCapsule
from keras_capsules.layers import SelfAttentionCapsule
from keras_capsules.utils import check_choice
from keras_capsules.utils import check_margin
from keras_capsules.utils import check_positive_ints

ROUTINGS = (
    "dynamic",
    "em",
    "self_attention",
    "inverted_dot_product",
    "uniform",
    "self_attention_uniform",
    "random",
)
"""The values of `BackboneCapsNet`'s `routing`."""

_ITERATIONS = {"dynamic": 3, "em": 3, "inverted_dot_product": 2}
"""Each routing's default number of iterations."""

_CHEAPER_BACKBONE = "MobileNetV3Small"
"""The backbone of `cheaper_option`."""

_SMALLEST_BACKBONE_INPUT = 32
"""The smallest side `keras.applications` models take."""

_ONE_PASS = ("self_attention", "uniform", "self_attention_uniform", "random")
"""The routings that route in one pass: no iterations to set."""

_MATRIX_DIM = 16
"""Entries of a flattened 4x4 pose matrix: EM routing's capsule size."""

_SPREAD_MARGIN = 0.2
"""EM routing's default spread margin, the start of the paper's rise to 0.9."""


@keras.saving.register_keras_serializable(package="keras_capsules")
class BackboneCapsNet(BackboneModel, CapsuleClassifier):
    """Capsules on any feature extractor: a backbone, primary capsules and a routing layer.

    `backbone` is any Keras model or layer that maps images to a feature map:
    your own `Sequential` of convolutions, a `keras.applications` model built
    with `include_top=False`, or a keras-hub backbone that returns a feature
    map. The model runs the converted images through it, normalises the
    feature map's channels at every position (`normalize_features`), reads it
    into primary capsules and routes them to `num_classes` class capsules:

    - `"dynamic"`: `PrimaryCapsule` -> `CapsuleLayer`; the scores are the
      capsules' lengths, trained on the margin loss.
    - `"self_attention"`: a convolution -> `DepthwisePrimaryCapsule` ->
      `SelfAttentionCapsule`, as Efficient-CapsNet; lengths, margin loss.
    - `"inverted_dot_product"`: `PrimaryCapsule` ->
      `InvertedDotProductCapsule`. Its capsules are layer-normalised, so one
      linear unit shared by the classes reads each (as Tsai et al.'s code),
      through a sigmoid trained on the margin loss.
    - `"em"`: `PrimaryMatrixCapsule` -> `ClassMatrixCapsule` with coordinate
      addition; the scores are the activations, trained on the spread loss
      at the fixed `spread_margin`. The backbone stands in for the paper's
      convolutional capsule layers (`MatrixCapsNetNORB` is the whole network).
    - `"uniform"`, no routing: `PrimaryCapsule` -> `CapsuleLayer(iterations=1)`,
      every child split evenly between the classes; lengths, margin loss.
      Inverted dot-product routing with `iterations=1` and EM routing with
      `iterations=1` (one M-step on even assignments) are the same control
      in their families.
    - `"self_attention_uniform"`: `"self_attention"` with the attention left
      out (`SelfAttentionCapsule(uniform_coupling=True)`).
    - `"random"`, a fixed random coupling (Paik et al. 2019):
      `PrimaryCapsule` -> `RandomCouplingCapsule`; lengths, margin loss.

    The control without capsules is `BackboneCNN`: the same backbone under a
    pooled fully connected head of as many parameters (`head_parameters()`).

    With `decoder_units`, a `ReconstructionDecoder` fed the true class's
    capsule reconstructs the converted image, as in `CapsNetMNIST`; it is off
    by default because it has one output per pixel. Otherwise the model
    behaves as `CapsNetMNIST`: `fit(x, y)` with no `loss`, `predict` for the
    scores and the class capsules, and `.keras` files that
    hold the backbone too (a custom layer of the backbone must be registered
    with Keras, as for any model).

    Args:
        backbone: a `keras.Model` or layer from images to a 4D feature map of
            known size, its own preprocessing running after the image
            converter's; or the name of a `keras.applications` model, e.g.
            `"MobileNetV3Small"` or `"ResNet50"`, or, with keras-hub
            installed, a keras-hub image preset, built by
            `applications.standard_backbone` with its own preprocessing. To
            train the head alone, set `model.backbone.trainable = False`.
        num_classes: number of class capsules; may be left `None` when
            `class_names` are given.
        class_names: the classes' names in label order (see `CapsNet`).
        routing: `"dynamic"` (default), `"em"`, `"self_attention"`,
            `"inverted_dot_product"`, or the controls without routing,
            `"uniform"`, `"self_attention_uniform"` and `"random"`.
        input_shape: shape of one image, `(height, width, channels)`; by
            default the backbone's input shape, which must then be fully
            known (224x224x3 for a backbone's name, a keras-hub preset's
            image size; these take colour: grey images are converted).
        backbone_weights: for a backbone's name: `"imagenet"` (default,
            downloaded once into Keras's cache; a keras-hub preset's own
            weights), `None` for random weights,
            or the path of a weights file of the model without its top.
        primary_capsule_types: capsule types per position of the primary
            convolution (32); for the self-attention routings, the number
            of primary capsules.
        primary_capsule_dim: dimensions of a primary capsule: 8 by default;
            EM routing's primary capsules are 4x4 matrices (16).
        primary_kernel_size: kernel size of the convolution that reads the
            feature map (1, so any feature map of at least 1x1 works).
        capsule_dim: dimensions of a class capsule (16; EM routing: 16, a
            4x4 matrix).
        iterations: routing iterations; by default 3 for `"dynamic"` and
            `"em"`, 2 for `"inverted_dot_product"`. Self-attention routing
            and the controls have none: leave it `None`.
        normalize_features: normalise the feature map's channels at every
            position before the primary capsules (`True`).
        spread_margin: the margin of EM routing's spread loss, in (0, 1]
            (0.2, the paper's first). Only for `routing="em"`.
        decoder_units: hidden layer sizes of the reconstruction decoder, e.g.
            `(512, 1024)`; `None` (default) builds none and trains on the
            margin loss alone.
        name: the model's name.
        **kwargs: the other arguments every capsule classifier takes, as
            `CapsNet`'s: `reconstruction_weight` (0.0005, with a decoder),
            `image_converter` (by default one that scales pixels in [0, 255]
            to [0, 1]; `ImageConverter()` hands the pixels over unscaled, for
            a `keras.applications` backbone that preprocesses raw pixels
            itself), `compile` (`True`: Adam with `RECIPE`'s learning rate,
            1e-3 decayed by 0.96 every 2,000 steps, the loss above and
            accuracy), `dtype` (the head's layers' policy; the backbone keeps
            its own; routing, scores and losses run in float32) and
            `trainable`.

    Example:

    >>> import applications
    >>> import keras
    >>> import numpy as np
    >>> backbone = keras.Sequential(
    ...     [
    ...         keras.Input((32, 32, 3)),
    ...         keras.layers.Conv2D(16, 3, strides=2, activation="relu"),
    ...         keras.layers.Conv2D(32, 3, strides=2, activation="relu"),
    ...     ]
    ... )
    >>> model = applications.BackboneCapsNet(backbone, num_classes=5, routing="self_attention")
    >>> images = np.random.default_rng(0).integers(0, 256, (8, 32, 32, 3))
    >>> model.predict(images, verbose=0)["probabilities"].shape
    (8, 5)
    >>> model.predict(images, verbose=0)["poses"].shape
    (8, 5, 16)

    A pretrained `keras.applications` backbone (this downloads its weights),
    which takes pixels in [0, 255] and rescales them itself:

    >>> base = keras.applications.MobileNetV3Small(
    ...     input_shape=(224, 224, 3), include_top=False, weights="imagenet"
    ... )  # doctest: +SKIP
    >>> from keras_capsules.layers import ImageConverter
    >>> model = applications.BackboneCapsNet(  # doctest: +SKIP
    ...     base, num_classes=102, image_converter=ImageConverter()  # photos of any size
    ... )

    Reference:
        Sabour, Frosst, Hinton. Dynamic Routing Between Capsules. NIPS 2017.
        Hinton, Sabour, Frosst. Matrix capsules with EM routing. ICLR 2018.
        Mazzia, Salvetti, Chiaberge. Efficient-CapsNet: Capsule Network with
        Self-Attention Routing. Scientific Reports 11, 14634 (2021).
        Tsai, Srivastava, Goh, Salakhutdinov. Capsules with Inverted
        Dot-Product Attention Routing. ICLR 2020.
    """

    RECIPE = Recipe(batch_size=100, learning_rate=1e-3)
    OPTIONS = (
        Option(
            "backbone",
            "the keras.applications model the capsule head sits on, e.g. MobileNetV3Small, "
            "EfficientNetB0 or ResNet50, or with keras-hub installed a keras-hub image preset "
            "(name, kaggle:// or hf:// handle, or folder)",
            metavar="NAME",
            required=True,
        ),
        Option(
            "backbone_weights",
            "imagenet (downloaded once into Keras's cache; a keras-hub preset's own weights), "
            "none, or the path of a .weights.h5 file of the backbone without its top",
            type=backbone_weights,
            default="imagenet",
            metavar="WEIGHTS",
        ),
        Option("routing", "the head's routing", choices=ROUTINGS, default="dynamic"),
        Option(
            "iterations",
            "routing iterations (default: the routing's, 3 for dynamic and em, 2 for "
            "inverted_dot_product; the others route in one pass and take none)",
            type=positive_int,
            metavar="N",
        ),
    )

    @classmethod
    def cheaper_option(cls, input_shape, num_classes):
        """`(options, build)`: this family's cheaper model for images of `input_shape`, or `None`.

        `keras-capsules train` names it where another architecture needs more
        memory: a capsule head on `MobileNetV3Small` (for images of at least
        32x32, the smallest `keras.applications` models take).
        """
        if min(input_shape[:2]) < _SMALLEST_BACKBONE_INPUT:
            return None

        def build():
            return cls(
                _CHEAPER_BACKBONE,
                num_classes=num_classes,
                input_shape=input_shape,
                backbone_weights=None,
                compile=False,
            )

        return f"--backbone {_CHEAPER_BACKBONE}", build

    def __init__(
        self,
        backbone,
        num_classes=None,
        class_names=None,
        routing="dynamic",
        input_shape=None,
        backbone_weights="imagenet",
        primary_capsule_types=32,
        primary_capsule_dim=None,
        primary_kernel_size=1,
        capsule_dim=16,
        iterations=None,
        normalize_features=True,
        spread_margin=None,
        decoder_units=None,
        name="backbone_capsnet",
        **kwargs,
    ):
        check_choice("routing", routing, ROUTINGS)
        backbone, input_shape = resolve_backbone(backbone, input_shape, backbone_weights)
        primary_capsule_dim, capsule_dim, iterations = _capsule_sizes(
            routing, primary_capsule_dim, capsule_dim, iterations
        )
        spread_margin = _spread_margin(routing, spread_margin)
        sizes = {
            "primary_capsule_types": primary_capsule_types,
            "primary_capsule_dim": primary_capsule_dim,
            "primary_kernel_size": primary_kernel_size,
            "capsule_dim": capsule_dim,
        }
        check_positive_ints(**sizes, **({} if iterations is None else {"iterations": iterations}))
        sizes["iterations"] = iterations
        config = {
            "routing": routing,
            "input_shape": input_shape,
            **sizes,
            "normalize_features": bool(normalize_features),
            "spread_margin": spread_margin,
        }

        def head(features, num_classes, policy, backbone):
            features = checked_features(features, input_shape, normalize_features, policy)
            return _head(features, routing, num_classes=num_classes, policy=policy, **sizes)

        classes = {"num_classes": num_classes, "class_names": class_names, "default_classes": None}
        super().__init__(
            backbone,
            head,
            config=config,
            decoder_units=decoder_units,
            name=name,
            image_shape=input_shape,
            spread_margin=spread_margin,
            **classes,  # no default number: the user's data says
            **kwargs,
        )
        self.routing = routing


def _capsule_sizes(routing, primary_capsule_dim, capsule_dim, iterations):
    """`(primary_capsule_dim, capsule_dim, iterations)` with each routing's defaults."""
    if routing == "em":
        for arg, value in (
            ("primary_capsule_dim", primary_capsule_dim),
            ("capsule_dim", capsule_dim),
        ):
            if value not in (None, _MATRIX_DIM):
                raise ValueError(
                    "EM routing's capsules are 4x4 pose matrices: "
                    f"`{arg}` must be {_MATRIX_DIM}. Received: {arg}={value!r}"
                )
        primary_capsule_dim = capsule_dim = _MATRIX_DIM
    elif primary_capsule_dim is None:
        primary_capsule_dim = 8
    if routing in _ONE_PASS:
        if iterations is not None:
            raise ValueError(
                f"`routing={routing!r}` routes in one pass: leave `iterations` None. "
                f"Received: iterations={iterations!r}"
            )
    elif iterations is None:
        iterations = _ITERATIONS[routing]
    return primary_capsule_dim, capsule_dim, iterations


def _spread_margin(routing, spread_margin):
    """EM routing's spread margin as a float; `None` for the other routings."""
    if routing != "em":
        if spread_margin is not None:
            raise ValueError(
                "`spread_margin` is the margin of EM routing's spread loss; the other "
                f"routings train on the margin loss. Received: spread_margin={spread_margin!r} "
                f"with routing={routing!r}"
            )
        return None
    if spread_margin is None:
        return _SPREAD_MARGIN
    return check_margin("spread_margin", spread_margin)


def _head(
    features,
    routing,
    *,
    num_classes,
    primary_capsule_types,
    primary_capsule_dim,
    primary_kernel_size,
    capsule_dim,
    iterations,
    policy,
):
    """The class capsules' poses and their scores in [0, 1] (`None`: their lengths)."""
    if routing == "em":
        capsules = PrimaryMatrixCapsule(
            primary_capsule_types,
            kernel_size=primary_kernel_size,
            padding="same",
            name="primary_caps",
            dtype=policy,
        )(features)
        poses, activations = ClassMatrixCapsule(
            num_classes, iterations=iterations, name="class_caps", dtype=policy
        )(capsules)
        return poses, activations
    if routing in ("self_attention", "self_attention_uniform"):
        x = keras.layers.Conv2D(
            primary_capsule_types * primary_capsule_dim,
            primary_kernel_size,
            padding="same",
            name="primary_conv",
            data_format="channels_last",
            dtype=policy,
        )(features)
        primary = DepthwisePrimaryCapsule(
            primary_capsule_types, primary_capsule_dim, name="primary_caps", dtype=policy
        )(x)
        poses = SelfAttentionCapsule(
            num_classes,
            capsule_dim,
            uniform_coupling=routing == "self_attention_uniform",
            name="class_caps",
            dtype=policy,
        )(primary)
        return poses, None
    primary = PrimaryCapsule(
        primary_capsule_types,
        primary_capsule_dim,
        primary_kernel_size,
        padding="same",
        name="primary_caps",
        dtype=policy,
    )(features)
    if routing in ("dynamic", "uniform"):  # uniform coupling: a single iteration
        poses = CapsuleLayer(
            num_classes,
            capsule_dim,
            iterations=1 if routing == "uniform" else iterations,
            name="class_caps",
            dtype=policy,
        )(primary)
        return poses, None
    if routing == "random":
        poses = RandomCouplingCapsule(num_classes, capsule_dim, name="class_caps", dtype=policy)(
            primary
        )
        return poses, None
    poses = InvertedDotProductCapsule(
        num_classes, capsule_dim, iterations=iterations, name="class_caps", dtype=policy
    )(primary)
    scores = keras.layers.Dense(1, activation="sigmoid", name="class_scores", dtype=policy)(poses)
    return poses, keras.layers.Reshape((num_classes,), name="class_scores_flat", dtype=policy)(
        scores
    )

import dataclasses

import keras

from applications._capsule_classifier import CapsuleClassifier
from applications.matrix_capsnet.matrix_capsnet_backbone import MatrixCapsNetBackbone
from applications.recipe import Recipe
from keras_capsules import routing
from keras_capsules.cli.argument_types import positive_float
from keras_capsules.cli.argument_types import positive_int
from keras_capsules.cli.argument_types import tempering
from keras_capsules.cli.option import Option
from keras_capsules.layers import ClassMatrixCapsule
from keras_capsules.utils import check_margin
from keras_capsules.utils import is_int


@keras.saving.register_keras_serializable(package="keras_capsules")
class MatrixCapsNet(CapsuleClassifier):
    """The matrix capsule network of Hinton, Sabour, Frosst 2018, for any images and classes.

    ReLU Conv1 (A filters, 5x5, stride 2) -> PrimaryCaps (B types, 1x1) ->
    ConvCaps1 (C types, 3x3, stride 2) -> ConvCaps2 (D types, 3x3, stride 1)
    -> class capsules (one per class, coordinate addition), EM routing with
    `iterations` iterations and a tempered E-step (`tempering`) in every
    capsule layer; `tempering=1.0` is the paper's E-step. All paddings are valid:
    a 32x32 input gives 14x14 primary capsules, 6x6 and 4x4 convolutional
    capsules. Conv1 to ConvCaps2 are `backbone`, a `MatrixCapsNetBackbone`
    (images of at least 17x17). `MatrixCapsNetNORB` is the
    paper's configuration for smallNORB (32x32 stereo pairs, 5 classes).

    Parameter counts, with 2 input channels (the stereo pair) and 5 classes:
    A=B=C=D=32 has 317,194 (Conv1 1,632; PrimaryCaps 17,952 = 32 x (16 + 1)
    x (32 + 1); each ConvCaps 147,456 matrices + 64 betas; class capsules
    2,560 + 10), the paper's "about 310K"; A=64, B=8, C=D=16 has 68,754, the
    paper's "68K". The paper does not list its count exactly; the layers
    above are its architecture as described.

    Outputs are a dict: `"probabilities"` (class capsule activations in (0, 1),
    what the model predicts with) and `"poses"` (`(batch, num_classes, 16)`,
    flattened 4x4 matrices): the scores of every classifier are named
    `"probabilities"`, and a class capsule's activation is the probability
    that its entity is present, as the paper has it. `predict` returns both.
    The loss is the spread loss of the activations at the margin of the
    model's `spread_margin`, a `keras_capsules.metrics.SpreadMargin` (the
    paper raises it from 0.2 to 0.9: `RECIPE.callbacks(steps)` gives the
    `SpreadMarginSchedule` that does); `fit(x, y)` needs no `loss`
    argument. Weight decay (2e-7, as the paper) is an L2 penalty on every
    kernel. The margin of the current step is logged as `spread_margin`.

    Args:
        A: the paper's letter for `conv_filters`, Conv1's filters (32).
        B: the paper's letter for `primary_capsule_types` (32).
        C: the paper's letter for `conv_caps1_types` (32).
        D: the paper's letter for `conv_caps2_types` (32). Each size may be
            given by its name or its letter, not both.
        backbone: a `MatrixCapsNetBackbone`; by default one built from the
            backbone's arguments in `kwargs`.
        num_classes: number of class capsules: by default the number of
            `class_names`, or 10.
        class_names: the classes' names in label order (see `CapsNet`).
        coordinate_addition: add the capsules' positions to the class votes.
        spread_margin: the spread loss's margin, a number in (0, 1] (0.2,
            where the paper starts). The attribute of the same name holds it
            as a `keras_capsules.metrics.SpreadMargin`, which
            `keras_capsules.callbacks.SpreadMarginSchedule` raises during
            `fit` and `model.spread_margin.assign(margin)` sets; the config
            holds the margin the model is at.
        name: the model's name.
        **kwargs: the arguments every capsule classifier takes but the
            decoder's, as `CapsNet`'s: `image_converter`, `dtype` (EM routing
            and the loss run in float32), `trainable` and `compile` (`True`:
            Adam with `RECIPE`'s learning rate, 3e-3 decayed by 0.96 every
            2,000 steps, the loss above and accuracy; `RECIPE` also raises the
            margin from 0.2 to 0.9 over a `keras-capsules train` run). Then
            the backbone's, `MatrixCapsNetBackbone`'s: `input_shape`
            (`(28, 28, 1)`), the sizes by name, `normalization`
            (`"types_and_positions"`, the paper's text, or `"positions"`, the
            authors' code), `weight_decay` (2e-7, an L2 penalty on every
            kernel, the class capsules' too), and EM routing's settings,
            which every capsule layer routes with: `iterations` (3),
            `inverse_temperature` (0.01), `variance_epsilon` (1e-4),
            `tempering` (the exponent `tau` of the E-step,
            `R ∝ (a p) ** tau`, 0.1; 1 is the paper's E-step),
            `inverse_temperature_schedule` (`"rescaled"` or `"authors"`),
            or all five as one `keras_capsules.routing.EMSettings`,
            `em_settings`.

    Example:

    >>> import applications
    >>> import keras
    >>> import numpy as np
    >>> model = applications.MatrixCapsNet(A=64, B=8, C=16, D=16, input_shape=(32, 32, 2),
    ...                                    num_classes=5)
    >>> model.count_params()  # the paper's 68K
    68754
    >>> same = applications.MatrixCapsNet(
    ...     conv_filters=64, primary_capsule_types=8, conv_caps1_types=16, conv_caps2_types=16,
    ...     input_shape=(32, 32, 2), num_classes=5,
    ... )
    >>> same.count_params()
    68754
    >>> model = applications.MatrixCapsNet(A=64, B=8, C=16, D=16)
    >>> model.predict(np.zeros((2, 28, 28, 1)), verbose=0)["probabilities"].shape
    (2, 10)
    >>> [type(c).__name__ for c in model.RECIPE.callbacks(steps=1000)]  # 0.2 to 0.9
    ['SpreadMarginSchedule']

    Reference:
        Hinton, Sabour, Frosst. Matrix capsules with EM routing. ICLR 2018.
    """

    BACKBONE = MatrixCapsNetBackbone
    RECIPE = Recipe(batch_size=32, learning_rate=3e-3, spread_margin=(0.2, 0.9))
    OPTIONS = (
        *(
            Option(
                letter, f"{letter} of the paper: {what}", type=positive_int, default=32, metavar="N"
            )
            for letter, what in zip(
                "ABCD",
                ("ReLU Conv1's filters", "primary capsule types", "ConvCaps1's", "ConvCaps2's"),
            )
        ),
        Option(
            "normalization",
            "how a convolutional capsule layer shares a child's R: over types and positions "
            "(the paper's text) or per type over positions (the authors' code)",
            choices=("types_and_positions", "positions"),
            default="types_and_positions",
        ),
        Option(
            "iterations",
            "EM iterations of every capsule layer",
            type=positive_int,
            default=3,
            metavar="N",
        ),
        Option(
            "inverse_temperature",
            "final inverse temperature lambda",
            type=positive_float,
            default=routing.INVERSE_TEMPERATURE,
            metavar="X",
        ),
        Option(
            "variance_epsilon",
            "variance floor",
            type=positive_float,
            default=routing.VARIANCE_EPSILON,
            metavar="X",
        ),
        Option(
            "tempering",
            "E-step exponent tau, R ~ (a p)^tau, one number or one per E-step separated by "
            "commas (1 is the paper's E-step)",
            type=tempering,
            default=routing.TEMPERING,
            metavar="TAU",
        ),
        Option(
            "inverse_temperature_schedule",
            "lambda rescaled to end at --inverse-temperature, or the authors' "
            "0.01 (1 - 0.95^(t+1))",
            choices=routing.SCHEDULES,
            default="rescaled",
        ),
    )

    @classmethod
    def option_arguments(cls, values):
        """The sizes and `normalization` as they are, EM routing's settings as one `EMSettings`."""
        arguments = dict(values)
        settings = {name: arguments.pop(name) for name in _EM_SETTINGS if name in arguments}
        return {**arguments, "em_settings": routing.EMSettings(**settings)}

    def __init__(
        self,
        A=None,
        B=None,
        C=None,
        D=None,
        backbone=None,
        num_classes=None,
        class_names=None,
        coordinate_addition=True,
        spread_margin=0.2,
        name="matrix_capsnet",
        **kwargs,
    ):
        for letter, value, size in zip("ABCD", (A, B, C, D), _SIZES):
            if value is not None:
                kwargs[size] = _size(letter, value, size, kwargs.get(size))
        no_decoder = sorted({"decoder_units", "reconstruction_weight"} & set(kwargs))
        if no_decoder:
            name = no_decoder[0]
            raise ValueError(
                f"{type(self).__name__} trains on the spread loss alone and has no decoder, so "
                f"it takes no `{name}`. Received: {name}={kwargs[name]!r}"
            )

        def head(capsules, num_classes, policy, backbone):
            return ClassMatrixCapsule(
                num_classes,
                coordinate_addition=coordinate_addition,
                kernel_regularizer=backbone.regularizer,
                name="class_caps",
                dtype=policy,
                em_settings=backbone.em_settings,
            )(capsules)

        spread_margin = _checked_margin(spread_margin)
        super().__init__(
            backbone,
            head,
            config={"coordinate_addition": coordinate_addition, "spread_margin": spread_margin},
            num_classes=num_classes,
            class_names=class_names,
            decoder_units=None,
            reconstruction_weight=0.0,
            name=name,
            spread_margin=spread_margin,
            **kwargs,
        )

    def _architecture_config(self):
        config = super()._architecture_config()
        for key in ("decoder_units", "reconstruction_weight"):  # none: the spread loss alone
            del config[key]
        return config


def _size(letter, letter_value, name, value):
    """A layer size given by the paper's letter, and perhaps (the same) by its name too."""
    if letter_value is not None:
        if value not in (None, letter_value):
            raise ValueError(
                f"`{name}` and `{letter}` name the same size; give one. "
                f"Received: {name}={value!r}, {letter}={letter_value!r}"
            )
        value = letter_value
    if not is_int(value) or value < 1:
        raise ValueError(
            f"`{name}` (the paper's {letter}) must be a positive integer. "
            f"Received: {name}={value!r}"
        )
    return value


def _checked_margin(margin):
    """`margin` as a float in (0, 1]; a `ValueError` naming it otherwise."""
    if isinstance(margin, keras.optimizers.schedules.LearningRateSchedule):
        raise ValueError(
            "`spread_margin` is the margin training starts at; it rises during `fit` with "
            "keras_capsules.callbacks.SpreadMarginSchedule (in `RECIPE.callbacks(steps)`), "
            f"not with a schedule. Received: spread_margin={margin!r}"
        )
    return check_margin("spread_margin", margin)


_EM_SETTINGS = tuple(field.name for field in dataclasses.fields(routing.EMSettings))
"""The arguments that are EM routing's settings, which `option_arguments` makes one value."""

_SIZES = ("conv_filters", "primary_capsule_types", "conv_caps1_types", "conv_caps2_types")
"""The backbone's sizes that the paper's letters A, B, C and D name."""

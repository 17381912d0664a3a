import keras
from keras import ops

from applications._capsule_classifier import CapsuleClassifier
from applications._losses import batch_mean
from applications._losses import with_penalties
from applications.matrix_capsnet.matrix_capsnet_backbone import MatrixCapsNetBackbone
from applications.recipe import Recipe
from keras_capsules._compat import keras as keras_compat
from keras_capsules._validation import is_int
from keras_capsules._validation import is_number
from keras_capsules.layers import ClassMatrixCapsule
from keras_capsules.losses import SpreadLoss


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
    that its entity is present, as the paper has it. `predict` returns the
    activations,
    `predict_poses` the poses and `predict_outputs` both. The loss is the
    spread loss of the activations at the margin `spread_margin`, a number
    or a schedule of the optimizer's step, which the loss computation reads
    on every backend (the paper raises it from 0.2 to 0.9);
    `fit(x, y)` needs no `loss` argument. Weight decay (2e-7, as the paper) is
    an L2 penalty on every kernel. The margin of the current step is logged
    as `spread_margin`.

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
        image_converter: a `keras_capsules.layers.ImageConverter` that brings
            the images to the network's size and colour and scale, inside the
            model (its unset `image_size` and `channels` are the network's);
            by default one that scales pixels in [0, 255] to [0, 1]. For
            images already in [0, 1], `ImageConverter()`.
        spread_margin: the spread loss's margin: a number in (0, 1] (0.2), or
            a `keras.optimizers.schedules.LearningRateSchedule` of the
            optimizer's step, such as the paper's linear rise from 0.2 to 0.9
            over `steps` steps, `PolynomialDecay(0.2, steps, end_learning_rate=0.9)`.
            The attribute of the same name may be set before `fit`.
        compile: compile with `compile()`'s defaults: Adam with `RECIPE`'s
            learning rate (3e-3, decayed by 0.96 every 2,000 steps), the
            loss above and accuracy. `RECIPE` also raises the margin from
            0.2 to 0.9 over a `keras-capsules train` run.
        dtype: dtype policy of the layers, e.g. `"mixed_bfloat16"`; by default
            the global policy. EM routing and the loss run in float32.
        name: the model's name.
        **kwargs: the backbone's arguments, `MatrixCapsNetBackbone`'s:
            `input_shape` (`(28, 28, 1)`), the sizes by name, `normalization`
            (`"types_and_positions"`, the paper's text, or `"positions"`, the
            authors' code), `weight_decay` (2e-7, an L2 penalty on every
            kernel, the class capsules' too), and EM routing's settings,
            which every capsule layer routes with: `iterations` (3),
            `inverse_temperature` (0.01), `variance_epsilon` (1e-4),
            `tempering` (the exponent `tau` of the E-step,
            `R ∝ (a p) ** tau`, 0.1; 1 is the paper's E-step),
            `inverse_temperature_schedule` (`"rescaled"` or `"authors"`),
            or all five as one `keras_capsules.routing.EMSettings`,
            `em_settings`; and `keras.Model`'s `trainable`.

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
    >>> rise = keras.optimizers.schedules.PolynomialDecay(0.2, 1000, end_learning_rate=0.9)
    >>> model = applications.MatrixCapsNet(A=64, B=8, C=16, D=16, spread_margin=rise)
    >>> model.predict_outputs(np.zeros((2, 28, 28, 1)), verbose=0)["probabilities"].shape
    (2, 10)

    Reference:
        Hinton, Sabour, Frosst. Matrix capsules with EM routing. ICLR 2018.
    """

    BACKBONE = MatrixCapsNetBackbone
    RECIPE = Recipe(batch_size=32, learning_rate=3e-3, spread_margin=(0.2, 0.9))

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
        image_converter=None,
        spread_margin=0.2,
        compile=True,
        dtype=None,
        name="matrix_capsnet",
        **kwargs,
    ):
        for letter, value, size in zip("ABCD", (A, B, C, D), _SIZES):
            if value is not None:
                kwargs[size] = _size(letter, value, size, kwargs.get(size, 32))

        def head(capsules, num_classes, policy, backbone):
            return ClassMatrixCapsule(
                num_classes,
                coordinate_addition=coordinate_addition,
                kernel_regularizer=backbone.regularizer,
                name="class_caps",
                dtype=policy,
                em_settings=backbone.em_settings,
            )(capsules)

        super().__init__(
            backbone,
            head,
            config={"coordinate_addition": coordinate_addition},
            num_classes=num_classes,
            class_names=class_names,
            decoder_units=None,
            reconstruction_weight=0.0,
            image_converter=image_converter,
            compile=False,
            dtype=dtype,
            name=name,
            class_loss=SpreadLoss(),  # its name; `compute_loss` applies the margin of the step
            **kwargs,
        )
        self.spread_margin = spread_margin
        self._optimizer_step = None  # the step a JAX training step is computing
        self.spread_margin_tracker = keras.metrics.Mean(name="spread_margin")
        if compile:
            self.compile()

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        if y is None:
            raise ValueError(f"{type(self).__name__} needs labels `y` to compute its loss.")
        # The loss is scaled for summing across tf.distribute replicas (as Keras
        # scales it); the tracker reports the batch's plain mean.
        margin = self.margin_at(self._step())
        spread = SpreadLoss(margin=margin)
        activations = y_pred["probabilities"]
        loss = spread(y, activations, sample_weight=sample_weight)
        self.margin_loss_tracker.update_state(batch_mean(spread, y, activations, sample_weight))
        self.spread_margin_tracker.update_state(margin)
        return with_penalties(self, loss, x, y, y_pred, sample_weight, training)

    # The spread margin --------------------------------------------------------

    @property
    def spread_margin(self):
        """The spread loss's margin: a number, or a schedule of the optimizer's step."""
        return self._spread_margin

    @spread_margin.setter
    def spread_margin(self, margin):
        self._spread_margin = _checked_margin(margin)
        if self.compiled:  # the compiled steps read the margin when traced: make them anew
            self.make_train_function(force=True)
            self.make_test_function(force=True)

    def margin_at(self, step):
        """The margin at optimizer step `step`, a float32 scalar tensor."""
        margin = self._spread_margin
        if isinstance(margin, keras.optimizers.schedules.LearningRateSchedule):
            margin = margin(step)
        return ops.cast(margin, "float32")

    def _step(self):
        if self._optimizer_step is not None:
            return self._optimizer_step
        if not self.compiled or self.optimizer is None:  # no optimizer: the first step
            return 0
        return self.optimizer.iterations

    def compute_loss_and_updates(self, *args, optimizer_variables=None, **kwargs):
        # JAX's training step: the optimizer's variables are arguments of the
        # compiled step, not readable through `self.optimizer`, so the step the
        # margin depends on is handed to `compute_loss` here.
        if optimizer_variables is not None:
            self._optimizer_step = keras_compat.optimizer_step(self.optimizer, optimizer_variables)
        try:
            return super().compute_loss_and_updates(
                *args, optimizer_variables=optimizer_variables, **kwargs
            )
        finally:
            self._optimizer_step = None

    def _architecture_config(self):
        margin = self._spread_margin
        if not isinstance(margin, float):
            margin = keras.saving.serialize_keras_object(margin)
        config = super()._architecture_config()
        for key in ("decoder_units", "reconstruction_weight"):  # none: the spread loss alone
            del config[key]
        return {**config, "spread_margin": margin}

    @classmethod
    def _from_architecture_config(cls, config):
        config = dict(config)
        if isinstance(config.get("spread_margin"), dict):
            config["spread_margin"] = keras.saving.deserialize_keras_object(config["spread_margin"])
        return super()._from_architecture_config(config)


def _size(letter, letter_value, name, value):
    """A layer size given by its descriptive name or by the paper's letter, which wins."""
    if letter_value is not None:
        if value not in (32, letter_value):  # 32: the name's default, so not given
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
    """`margin` as a float in (0, 1] or a schedule; a `ValueError` naming it otherwise."""
    if isinstance(margin, keras.optimizers.schedules.LearningRateSchedule):
        first = float(ops.convert_to_numpy(margin(0)))
        if not 0 < first <= 1:
            raise ValueError(
                "`spread_margin` must stay in (0, 1]; the schedule starts at "
                f"{first}. Received: spread_margin={margin!r}"
            )
        return margin
    if not is_number(margin) or not 0 < margin <= 1:
        raise ValueError(
            "`spread_margin` must be a number in (0, 1] or a "
            "keras.optimizers.schedules.LearningRateSchedule. "
            f"Received: spread_margin={margin!r}"
        )
    return float(margin)


_SIZES = ("conv_filters", "primary_capsule_types", "conv_caps1_types", "conv_caps2_types")
"""The backbone's sizes that the paper's letters A, B, C and D name."""

from applications.matrix_capsnet.matrix_capsnet import MatrixCapsNet
from keras_capsules import routing
from keras_capsules.layers import ImageConverter
from keras_capsules.layers import MatrixCapsule
from keras_capsules.tuning import CapsuleHyperModel
from keras_capsules.utils import check_choice
from keras_capsules.utils import check_positive
from keras_capsules.utils import is_number


class MatrixCapsNetHyperModel(CapsuleHyperModel):
    """A keras-tuner hypermodel of the matrix capsule network with EM routing.

    `build(hp)` returns a compiled `applications.MatrixCapsNet` (ReLU
    Conv1 with A filters -> B primary capsule types -> ConvCaps1 with C types
    -> ConvCaps2 with D types -> class capsules, EM routing) drawn from the
    search space below. `fit(hp, model, x, y, ...)` trains it with
    `keras_capsules.callbacks.SpreadMarginSchedule` raising the spread loss
    margin from `margin_start` to `margin_end` over the `fit` call, and, for
    NumPy inputs, random shifts of up to `max_shift` pixels. The defaults are
    the paper's settings (A=B=C=D=32, 3 iterations, final inverse temperature
    0.01, margin 0.2 to 0.9).

    | Hyperparameter | Kind | Values | Default |
    | --- | --- | --- | --- |
    | `iterations` | Int | 1 to 5 EM iterations | 3 |
    | `A` | Choice | 32, 64 | 32 |
    | `B` | Choice | 8, 16, 32 | 32 |
    | `C` | Choice | 8, 16, 32 | 32 |
    | `D` | Choice | 8, 16, 32 | 32 |
    | `learning_rate` | Float, log | 1e-4 to 1e-2 | 3e-3 |
    | `decay_rate` | Choice | 0.9, 0.96, 1.0 (per `decay_steps`) | 0.96 |
    | `inverse_temperature` | Float, log | 1e-3 to 1e-1 (final lambda of the schedule) | 0.01 |
    | `tempering` | Float, log | 0.03 to 1 (E-step exponent; 1 is the paper's E-step) | 0.1 |
    | `margin_start` | Float | 0.1 to 0.3, step 0.05 | 0.2 |
    | `margin_end` | Float | 0.8 to 0.95, step 0.05 | 0.9 |
    | `max_shift` | Int | 0 to 3 pixels | 2 |

    `inverse_temperature` is the last value of the EM inverse temperature
    schedule `keras_capsules.routing.inverse_temperatures`, which rises to it
    over the iterations; `tempering` is the exponent `tau` of every E-step,
    `R ∝ (a p) ** tau` (`keras_capsules.routing.em_routing`). `max_shift` acts
    only when `fit` receives arrays; fix it (`hp.Fixed("max_shift", 0)`) when
    training on a `tf.data.Dataset` such as `smallnorb.training_pipeline`,
    which augments by itself. The models
    report `loss`, `accuracy` and `spread_loss` (and `val_` versions).

    Args:
        input_shape: shape of one input, `(32, 32, 2)` (smallNORB crops);
            `(28, 28, 1)` for MNIST. At least 17 x 17.
        num_classes: number of classes (5), at least 2.
        scale: factor the model's image converter multiplies its inputs by
            first: `1 / 255` for uint8 images such as MNIST; `None` (default)
            for smallNORB, which `keras_capsules.datasets.smallnorb` normalises.
        batch_size: examples per training batch when `fit` receives arrays
            and no `batch_size` (32).
        coordinate_addition: add the capsules' positions to the class votes.
        variance_epsilon: floor of the routing variances (1e-4).
        normalization: how the convolutional capsule layers share a child's
            `R`: `"types_and_positions"` (default) or `"positions"`.
        inverse_temperature_schedule: `"rescaled"` (default) or `"authors"`.
        weight_decay: L2 factor on every kernel (2e-7); 0 for none.
        **kwargs: `keras_capsules.tuning.CapsuleHyperModel`'s `decay_steps`
            (2000), `name` and `tunable`.

    Example:

    >>> import keras_tuner as kt
    >>> from applications import MatrixCapsNetHyperModel
    >>> hypermodel = MatrixCapsNetHyperModel(input_shape=(28, 28, 1), num_classes=10,
    ...                                      scale=1 / 255)
    >>> tuner = kt.RandomSearch(hypermodel, objective="val_accuracy", max_trials=10,
    ...                         directory="runs/tune-em")  # doctest: +SKIP
    >>> tuner.search(x_train, y_train, epochs=2, validation_split=0.1)  # doctest: +SKIP

    Reference:
        Hinton, Sabour, Frosst. Matrix capsules with EM routing. ICLR 2018.
    """

    METRICS = ("loss", "accuracy", "spread_loss")

    def __init__(
        self,
        input_shape=(32, 32, 2),
        num_classes=5,
        scale=None,
        batch_size=32,
        coordinate_addition=True,
        variance_epsilon=routing.VARIANCE_EPSILON,
        normalization="types_and_positions",
        inverse_temperature_schedule="rescaled",
        weight_decay=2e-7,
        **kwargs,
    ):
        super().__init__(input_shape, num_classes, batch_size, **kwargs)
        routing.EMSettings(
            variance_epsilon=variance_epsilon,
            inverse_temperature_schedule=inverse_temperature_schedule,
        )
        check_choice("normalization", normalization, MatrixCapsule.NORMALIZATIONS)
        if scale is not None:
            check_positive("scale", scale)
        if not is_number(weight_decay):
            raise ValueError(f"`weight_decay` must be a number. Received: {weight_decay!r}")
        if weight_decay < 0:
            raise ValueError(
                f"`weight_decay` must be non-negative. Received: weight_decay={weight_decay!r}"
            )
        for size in self.input_shape[:2]:
            # Conv1 5x5 stride 2, ConvCaps1 3x3 stride 2, ConvCaps2 3x3: all valid.
            if ((size - 5) // 2 + 1 - 3) // 2 + 1 < 3:
                raise ValueError(
                    "`input_shape` must be at least 17 x 17 for Conv1, ConvCaps1 and "
                    f"ConvCaps2. Received: input_shape={self.input_shape!r}"
                )
        self.scale = scale
        self.coordinate_addition = bool(coordinate_addition)
        self.variance_epsilon = variance_epsilon
        self.normalization = normalization
        self.inverse_temperature_schedule = inverse_temperature_schedule
        self.weight_decay = weight_decay

    def _values(self, hp):
        values = {
            "iterations": hp.Int("iterations", 1, 5, default=3),
            "A": hp.Choice("A", [32, 64], default=32),
            "B": hp.Choice("B", [8, 16, 32], default=32),
            "C": hp.Choice("C", [8, 16, 32], default=32),
            "D": hp.Choice("D", [8, 16, 32], default=32),
            "learning_rate": hp.Float("learning_rate", 1e-4, 1e-2, sampling="log", default=3e-3),
            "decay_rate": hp.Choice("decay_rate", [0.9, 0.96, 1.0], default=0.96),
            "inverse_temperature": hp.Float(
                "inverse_temperature",
                1e-3,
                1e-1,
                sampling="log",
                default=routing.INVERSE_TEMPERATURE,
            ),
            "tempering": hp.Float(
                "tempering", 0.03, 1.0, sampling="log", default=routing.TEMPERING
            ),
        }
        hp.Float("margin_start", 0.1, 0.3, step=0.05, default=0.2)
        hp.Float("margin_end", 0.8, 0.95, step=0.05, default=0.9)
        return values

    def _model(self, values):
        """The `applications.MatrixCapsNet` of the trial's `values`, uncompiled."""
        return MatrixCapsNet(
            coordinate_addition=self.coordinate_addition,
            variance_epsilon=self.variance_epsilon,
            normalization=self.normalization,
            inverse_temperature_schedule=self.inverse_temperature_schedule,
            image_converter=ImageConverter(scale=self.scale),
            weight_decay=self.weight_decay,
            **values,
        )

    def _fit_callbacks(self, hp, steps):
        from keras_capsules.callbacks import SpreadMarginSchedule

        start, end = hp.get("margin_start"), hp.get("margin_end")
        return [SpreadMarginSchedule(start, max(start, end), steps=steps)]

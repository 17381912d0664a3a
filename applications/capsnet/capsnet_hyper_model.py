from applications.capsnet.capsnet import CapsNet
from keras_capsules.tuning import CapsuleHyperModel
from keras_capsules.utils import check_positive_int
from keras_capsules.utils import is_int


class CapsNetHyperModel(CapsuleHyperModel):
    """A keras-tuner hypermodel of the dynamic-routing CapsNet (`applications.CapsNet`).

    `build(hp)` returns a compiled `applications.CapsNet` (Conv1 ->
    PrimaryCaps -> class capsules with dynamic routing, and the
    reconstruction decoder) whose sizes, routing and training settings are
    drawn from the search space below; `fit(hp, model, x, y, ...)` trains it
    with random shifts of up to `max_shift` pixels. The default value of every
    hyperparameter is the paper's setting, so `build(kt.HyperParameters())`
    is the paper's 8,215,568-parameter model.

    | Hyperparameter | Kind | Values | Default |
    | --- | --- | --- | --- |
    | `iterations` | Int | 1 to 3 | 3 |
    | `conv_filters` | Choice | 64, 128, 256 | 256 |
    | `primary_capsule_types` | Choice | 8, 16, 32 | 32 |
    | `primary_capsule_dim` | Choice | 4, 8, 16 | 8 |
    | `capsule_dim` | Choice | 8, 16, 32 | 16 |
    | `learning_rate` | Float, log | 1e-4 to 1e-2 | 1e-3 |
    | `decay_rate` | Choice | 0.9, 0.96, 1.0 (per `decay_steps`) | 0.96 |
    | `reconstruction_weight` | Choice | 0, 1e-4, 5e-4, 2e-3 (0: no decoder) | 5e-4 |
    | `max_shift` | Int | 0 to 3 pixels | 2 |

    `reconstruction_weight` is not searched when `decoder_units=None`. To fix
    or narrow a hyperparameter, register it first in the `hyperparameters`
    given to the tuner, e.g. `hp.Fixed("conv_filters", 64)` or
    `hp.Choice("iterations", [1, 3])`: the first registration of a name wins.

    The models report `loss`, `accuracy`, `margin_loss` and
    `reconstruction_loss`, and the same with `val_` when validating, so
    `objective="val_accuracy"` is the natural objective (`objectives()` lists
    them all).

    Args:
        input_shape: shape of one image, `(28, 28, 1)`; pixel values in
            [0, 255].
        num_classes: number of classes (10), at least 2.
        batch_size: examples per training batch when `fit` receives arrays
            and no `batch_size` (100, as the paper).
        conv_kernel_size: kernel size of Conv1 (9).
        primary_kernel_size: kernel size of the primary capsule convolution (9).
        primary_strides: strides of the primary capsule convolution (2).
        decoder_units: hidden layer sizes of the reconstruction decoder,
            `(512, 1024)`; `None` for no decoder (margin loss alone).
        stop_gradient: stop gradients through the inner routing iterations
            (`False`).
        **kwargs: `keras_capsules.tuning.CapsuleHyperModel`'s `decay_steps`
            (2000), `name` and `tunable`.

    Example:

    >>> import keras_tuner as kt
    >>> from applications import CapsNetHyperModel
    >>> hypermodel = CapsNetHyperModel(input_shape=(28, 28, 1), num_classes=10)
    >>> hypermodel.build(kt.HyperParameters()).count_params()
    8215568
    >>> tuner = kt.Hyperband(hypermodel, objective="val_accuracy", max_epochs=3,
    ...                      directory="runs/tune")  # doctest: +SKIP
    >>> tuner.search(x_train, y_train, validation_split=0.1)  # doctest: +SKIP
    >>> best = tuner.get_best_models(1)[0]  # doctest: +SKIP

    Reference:
        Sabour, Frosst, Hinton. Dynamic Routing Between Capsules. NIPS 2017.
        arXiv:1710.09829.
    """

    METRICS = ("loss", "accuracy", "margin_loss", "reconstruction_loss")

    def __init__(
        self,
        input_shape=(28, 28, 1),
        num_classes=10,
        batch_size=100,
        conv_kernel_size=9,
        primary_kernel_size=9,
        primary_strides=2,
        decoder_units=(512, 1024),
        stop_gradient=False,
        **kwargs,
    ):
        super().__init__(input_shape, num_classes, batch_size, **kwargs)
        for arg in ("conv_kernel_size", "primary_kernel_size", "primary_strides"):
            check_positive_int(arg, locals()[arg])
        if decoder_units is not None:
            decoder_units = tuple(decoder_units)
            if not decoder_units or not all(is_int(u) and u > 0 for u in decoder_units):
                raise ValueError(
                    "`decoder_units` must be None or a non-empty sequence of positive integers. "
                    f"Received: decoder_units={decoder_units!r}"
                )
        for size in self.input_shape[:2]:
            conv = size - conv_kernel_size + 1
            if conv < primary_kernel_size:
                raise ValueError(
                    f"`input_shape` {self.input_shape} is too small for a {conv_kernel_size}x"
                    f"{conv_kernel_size} Conv1 followed by a {primary_kernel_size}x"
                    f"{primary_kernel_size} primary capsule convolution."
                )
        self.conv_kernel_size = conv_kernel_size
        self.primary_kernel_size = primary_kernel_size
        self.primary_strides = primary_strides
        self.decoder_units = decoder_units
        self.stop_gradient = bool(stop_gradient)

    def _values(self, hp):
        values = {
            "iterations": hp.Int("iterations", 1, 3, default=3),
            "conv_filters": hp.Choice("conv_filters", [64, 128, 256], default=256),
            "primary_capsule_types": hp.Choice("primary_capsule_types", [8, 16, 32], default=32),
            "primary_capsule_dim": hp.Choice("primary_capsule_dim", [4, 8, 16], default=8),
            "capsule_dim": hp.Choice("capsule_dim", [8, 16, 32], default=16),
            "learning_rate": hp.Float("learning_rate", 1e-4, 1e-2, sampling="log", default=1e-3),
            "decay_rate": hp.Choice("decay_rate", [0.9, 0.96, 1.0], default=0.96),
            "reconstruction_weight": 0.0,
        }
        if self.decoder_units is not None:
            values["reconstruction_weight"] = hp.Choice(
                "reconstruction_weight", [0.0, 1e-4, 5e-4, 2e-3], default=5e-4
            )
        return values

    def _model(self, values):
        """The `applications.CapsNet` of the trial's `values`, uncompiled."""
        return CapsNet(
            conv_kernel_size=self.conv_kernel_size,
            primary_kernel_size=self.primary_kernel_size,
            primary_strides=self.primary_strides,
            stop_gradient=self.stop_gradient,
            decoder_units=self.decoder_units if values["reconstruction_weight"] else None,
            **values,
        )

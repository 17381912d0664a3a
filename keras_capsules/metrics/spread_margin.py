import keras
from keras import ops

from keras_capsules._validation import check_margin


@keras.saving.register_keras_serializable(package="keras_capsules")
class SpreadMargin(keras.metrics.Metric):
    """The margin of a spread loss, held by the model as a metric.

    A model that computes its own spread loss reads the margin from this
    metric's `margin` variable (a float32 scalar), e.g.
    `SpreadLoss(margin=tracker.margin)`. As a metric's variable the margin is
    part of the compiled training step's state on every backend (on JAX
    too, whose compiled step reads only the model's state), yet not one of
    the model's weights, so `count_params` leaves it out. Its result, logged
    under the metric's name, is the margin the step trained at.
    `keras_capsules.callbacks.SpreadMarginSchedule` raises it before every
    batch; resetting the metrics (every epoch) keeps it.

    Args:
        margin: the initial margin, a number in (0, 1] (0.2, the paper's
            starting value).
        name: the metric's name, under which `fit` logs the margin.
        dtype: the variable's dtype (float32).

    Call arguments:
        update_state: takes any arguments and changes nothing; `assign`
            sets the margin.

    Example:

    >>> from keras_capsules.metrics import SpreadMargin
    >>> margin = SpreadMargin(0.2)
    >>> margin.assign(0.55)
    >>> margin.reset_state()  # an epoch's reset keeps the margin
    >>> round(float(margin.result()), 4)
    0.55

    Reference:
        Hinton, Sabour, Frosst. Matrix capsules with EM routing. ICLR 2018,
        section 3.1.
    """

    def __init__(self, margin=0.2, name="spread_margin", dtype="float32"):
        super().__init__(name=name, dtype=dtype)
        check_margin("margin", margin)
        self.margin = self.add_variable(
            shape=(),
            initializer=keras.initializers.Constant(float(margin)),
            dtype=self.dtype,
            aggregation="mean",
            name="margin",
        )

    def assign(self, margin):
        """Set the margin to `margin`, a number in (0, 1]."""
        check_margin("margin", margin)
        self.margin.assign(float(margin))

    def update_state(self, *args, **kwargs):
        pass

    def reset_state(self):
        pass

    def result(self):
        return ops.copy(self.margin)

    def get_config(self):
        margin = float(ops.convert_to_numpy(self.margin))
        return {"margin": margin, "name": self.name, "dtype": self.dtype}

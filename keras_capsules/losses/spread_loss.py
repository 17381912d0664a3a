import keras
from keras import ops

from keras_capsules._validation import check_margin
from keras_capsules.losses.margin_loss import _one_hot_like


@keras.saving.register_keras_serializable(package="keras_capsules")
class SpreadLoss(keras.losses.Loss):
    """Spread loss of class activations (Hinton, Sabour, Frosst 2018, eq. 3).

    `L = sum_{i != t} max(0, m - (a_t - a_i))^2`: every wrong class `i` whose
    activation is not at least the margin `m` below the target's `a_t` is
    penalised quadratically. The paper raises `m` linearly from 0.2 to 0.9
    during training, which `keras_capsules.callbacks.SpreadMarginSchedule`
    does, so `margin` may be a float, a scalar tensor or a scalar
    `keras.Variable` (`applications.MatrixCapsNet` gives it the variable of
    its `keras_capsules.metrics.SpreadMargin`).

    With several targets (a multi-hot `y_true`, as MultiMNIST's pairs of
    digits) every target is held against every non-target:
    `L = sum_{t in T} sum_{i not in T} max(0, m - (a_t - a_i))^2`, which is
    the paper's loss for one target. The targets are not compared with each
    other, so both can be active at once.

    Args:
        margin: the margin `m` (0.2, the paper's starting value), a float in
            (0, 1], a scalar tensor or a scalar `keras.Variable`.
        reduction: Keras loss reduction.
        name: name of the loss.

    Call arguments:
        y_true: class indices `(batch,)`, or one-hot or multi-hot labels
            `(batch, num_classes)` (1 for each target, 0 elsewhere).
        y_pred: class activations `(batch, num_classes)`.

    Example:

    >>> import numpy as np
    >>> loss = SpreadLoss(margin=0.5)
    >>> float(loss(np.array([0]), np.array([[0.9, 0.6, 0.1]])))  # (0.5 - 0.3)^2
    0.04...
    >>> two = np.array([[1.0, 1.0, 0.0]])  # targets 0 and 1; class 2 within both margins
    >>> round(float(loss(two, np.array([[0.9, 0.6, 0.5]]))), 4)  # 0.1^2 + 0.4^2
    0.17

    Reference:
        Hinton, Sabour, Frosst. Matrix capsules with EM routing. ICLR 2018,
        section 3.1.
    """

    def __init__(self, margin=0.2, reduction="sum_over_batch_size", name="spread_loss"):
        super().__init__(reduction=reduction, name=name)
        if not (isinstance(margin, keras.Variable) or ops.is_tensor(margin)):
            check_margin("margin", margin)
        self.margin = margin

    def call(self, y_true, y_pred):
        y_pred = ops.cast(y_pred, "float32")
        target = _one_hot_like(y_true, y_pred)
        margin = ops.cast(self.margin, "float32")
        # (batch, targets t, classes i): a_t - a_i for every pair, kept where t is a
        # target and i is not.
        gaps = ops.expand_dims(y_pred, -1) - ops.expand_dims(y_pred, -2)
        pairs = ops.expand_dims(target, -1) * ops.expand_dims(1.0 - target, -2)
        violations = ops.square(ops.relu(margin - gaps))
        return ops.sum(pairs * violations, axis=(-2, -1))

    def get_config(self):
        config = super().get_config()
        margin = self.margin
        if isinstance(margin, keras.Variable):
            margin = float(ops.convert_to_numpy(margin.value))
        config.update({"margin": margin})
        return config

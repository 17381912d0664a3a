import keras
from keras import ops


def _one_hot_like(y_true, y_pred):
    """Integer labels `(batch,)` / `(batch, 1)` become one-hot; one-hot passes through."""
    y_true = ops.convert_to_tensor(y_true)
    num_classes = y_pred.shape[-1]
    if len(y_true.shape) == len(y_pred.shape) and y_true.shape[-1] == num_classes:
        return ops.cast(y_true, y_pred.dtype)
    if len(y_true.shape) == len(y_pred.shape) and y_true.shape[-1] == 1:
        y_true = ops.squeeze(y_true, axis=-1)
    if len(y_true.shape) != len(y_pred.shape) - 1:
        raise ValueError(
            "Labels must be class indices of shape (batch,) or one-hot of shape "
            f"(batch, {num_classes}). Received: y_true.shape={tuple(y_true.shape)}, "
            f"y_pred.shape={tuple(y_pred.shape)}"
        )
    return ops.one_hot(ops.cast(y_true, "int32"), num_classes, dtype=y_pred.dtype)


@keras.saving.register_keras_serializable(package="keras_capsules")
class MarginLoss(keras.losses.Loss):
    """Margin loss of capsule lengths, summed over classes (Sabour et al. 2017, eq. 4).

    For each class k: `T_k max(0, m_plus - |v_k|)^2 + down_weight (1 - T_k)
    max(0, |v_k| - m_minus)^2`, where `T_k` is 1 for a present class. The
    per-example value is the sum over classes; the reduction (mean over the
    batch by default) is Keras's.

    Args:
        m_plus: margin for present classes (0.9).
        m_minus: margin for absent classes (0.1).
        down_weight: weight of the absent-class term, lambda in the paper (0.5).
        reduction: Keras loss reduction.
        name: name of the loss.

    Call arguments:
        y_true: class indices `(batch,)` or one-hot / multi-hot labels
            `(batch, num_classes)`.
        y_pred: capsule lengths `(batch, num_classes)`.

    Example:

    >>> import numpy as np
    >>> loss = MarginLoss()
    >>> float(loss(np.array([1]), np.array([[0.1, 0.9]])))
    0.0

    Reference:
        Sabour, Frosst, Hinton. Dynamic Routing Between Capsules. NIPS 2017,
        section 3.
    """

    def __init__(
        self,
        m_plus=0.9,
        m_minus=0.1,
        down_weight=0.5,
        reduction="sum_over_batch_size",
        name="margin_loss",
        **kwargs,
    ):
        super().__init__(reduction=reduction, name=name, **kwargs)
        if not 0 <= m_minus < m_plus <= 1:
            raise ValueError(
                "Margins must satisfy 0 <= m_minus < m_plus <= 1. "
                f"Received: m_plus={m_plus!r}, m_minus={m_minus!r}"
            )
        if down_weight < 0:
            raise ValueError(
                f"`down_weight` must be non-negative. Received: down_weight={down_weight!r}"
            )
        self.m_plus = float(m_plus)
        self.m_minus = float(m_minus)
        self.down_weight = float(down_weight)

    def call(self, y_true, y_pred):
        y_pred = ops.convert_to_tensor(y_pred)
        y_true = _one_hot_like(y_true, y_pred)
        present = ops.square(ops.relu(self.m_plus - y_pred))
        absent = ops.square(ops.relu(y_pred - self.m_minus))
        per_class = y_true * present + self.down_weight * (1.0 - y_true) * absent
        return ops.sum(per_class, axis=-1)

    def get_config(self):
        config = super().get_config()
        config.update(
            {"m_plus": self.m_plus, "m_minus": self.m_minus, "down_weight": self.down_weight}
        )
        return config

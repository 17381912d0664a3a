"""How the applications add up their losses, on one device or several."""

import keras
from keras import ops


def batch_mean(loss, y_true, y_pred, sample_weight=None):
    """The batch's mean of `loss`, as its tracker reports it.

    Called, a `keras.losses.Loss` divides its mean by the number of
    `tf.distribute` replicas, so that summing the replicas' losses gives the
    global batch's; a metric averages over replicas instead, so it is given the
    plain mean of the per-example losses, `loss.call`.
    """
    values = loss.call(y_true, y_pred)
    if sample_weight is not None:
        values = values * ops.cast(ops.reshape(sample_weight, ops.shape(values)), values.dtype)
    return ops.mean(values)


def with_penalties(model, total, x, y, y_pred, sample_weight, training):
    """`total` plus the model's penalties (`model.losses`, e.g. weight decay).

    `keras.Model.compute_loss` adds them up, scaled for the replicas as Keras
    scales every loss.
    """
    if not model.losses:
        return total
    penalties = keras.Model.compute_loss(model, x, y, y_pred, sample_weight, training)
    return total + ops.cast(penalties, total.dtype)

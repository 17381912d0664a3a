import keras
from keras import ops


def _is_integer(x):
    return "int" in keras.backend.standardize_dtype(x.dtype)


def _pairs_to_multi_hot(pairs, num_classes, dtype="float32"):
    """`(batch, 2)` class indices -> `(batch, num_classes)` multi-hot."""
    one_hot = ops.one_hot(ops.cast(pairs, "int32"), num_classes, dtype=dtype)
    return ops.minimum(ops.sum(one_hot, axis=1), 1.0)


@keras.saving.register_keras_serializable(package="keras_capsules")
def multimnist_accuracy(y_true, y_pred):
    """Per-example MultiMNIST hit: 1 where the two largest `y_pred` are exactly the two labels.

    Args:
        y_true: the two classes of each example, integer `(batch, 2)`, or
            multi-hot `(batch, num_classes)` (floating point).
        y_pred: class scores `(batch, num_classes)`, e.g. capsule lengths.

    Returns:
        float32 `(batch,)`: 1.0 for a correct example, else 0.0.
    """
    y_pred = ops.convert_to_tensor(y_pred)
    y_true = ops.convert_to_tensor(y_true)
    num_classes = y_pred.shape[-1]
    if _is_integer(y_true) and y_true.shape[-1] == 2 and num_classes != 2:
        y_true = _pairs_to_multi_hot(y_true, num_classes)
    _, top_two = ops.top_k(y_pred, k=2)
    predicted = _pairs_to_multi_hot(top_two, num_classes)
    hits = ops.all(ops.equal(predicted > 0.5, ops.cast(y_true, "float32") > 0.5), axis=-1)
    return ops.cast(hits, "float32")


@keras.saving.register_keras_serializable(package="keras_capsules")
class MultiMNISTAccuracy(keras.metrics.MeanMetricWrapper):
    """MultiMNIST accuracy (Sabour et al. 2017, section 6).

    An example counts as correct when its two longest class capsules (the two
    largest scores) are exactly its two labels, in either order.

    Args:
        name: name of the metric (`"multimnist_accuracy"`).
        dtype: dtype of the metric's result.

    Example:

    >>> import numpy as np
    >>> metric = MultiMNISTAccuracy()
    >>> scores = np.array([[0.9, 0.8, 0.1], [0.9, 0.1, 0.8]])
    >>> metric.update_state(np.array([[0, 1], [0, 1]]), scores)
    >>> float(metric.result())
    0.5

    Reference:
        Sabour, Frosst, Hinton. Dynamic Routing Between Capsules. NIPS 2017,
        section 6.
    """

    def __init__(self, name="multimnist_accuracy", dtype=None):
        super().__init__(fn=multimnist_accuracy, name=name, dtype=dtype)

    def get_config(self):
        return {"name": self.name, "dtype": self.dtype}

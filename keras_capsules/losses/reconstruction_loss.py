import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_capsules")
class ReconstructionLoss(keras.losses.Loss):
    """Scaled sum of squared pixel errors between images and their reconstructions.

    The paper adds `0.0005 * sum((x - x_hat)^2)` to the margin loss, so that
    the reconstruction does not dominate it (0.0005 x the sum over 784 pixels
    is 0.392 x their mean squared error).

    Args:
        weight: scale of the summed squared error (0.0005).
        reduction: Keras loss reduction (mean over the batch by default).
        name: name of the loss.

    Call arguments:
        y_true: images, any shape `(batch, ...)`, values in [0, 1].
        y_pred: reconstructions with the same number of values per example.

    Example:

    >>> import numpy as np
    >>> loss = ReconstructionLoss()
    >>> round(float(loss(np.ones((1, 784)), np.zeros((1, 28, 28, 1)))), 4)
    0.392

    Reference:
        Sabour, Frosst, Hinton. Dynamic Routing Between Capsules. NIPS 2017,
        section 4.1.
    """

    def __init__(
        self, weight=0.0005, reduction="sum_over_batch_size", name="reconstruction_loss", **kwargs
    ):
        super().__init__(reduction=reduction, name=name, **kwargs)
        if weight < 0:
            raise ValueError(f"`weight` must be non-negative. Received: weight={weight!r}")
        self.weight = float(weight)

    def call(self, y_true, y_pred):
        y_pred = ops.convert_to_tensor(y_pred)
        batch = ops.shape(y_pred)[0]
        y_true = ops.reshape(ops.cast(y_true, y_pred.dtype), (batch, -1))
        y_pred = ops.reshape(y_pred, (batch, -1))
        if y_true.shape[-1] is not None and y_true.shape[-1] != y_pred.shape[-1]:
            raise ValueError(
                "Images and reconstructions must have the same number of values per "
                f"example. Received {y_true.shape[-1]} and {y_pred.shape[-1]}."
            )
        return self.weight * ops.sum(ops.square(y_true - y_pred), axis=-1)

    def get_config(self):
        config = super().get_config()
        config["weight"] = self.weight
        return config

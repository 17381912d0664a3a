import keras
from keras import ops

from keras_capsules.layers._shapes import output_spec
from keras_capsules.ops import length


@keras.saving.register_keras_serializable(package="keras_capsules")
class Mask(keras.layers.Layer):
    """Zero every capsule but the selected ones, for the reconstruction decoder.

    With `labels`, the capsules they name are kept: integer class indices
    (shape `(batch,)` or `(batch, 1)`), or one-hot / multi-hot weights of
    shape `(batch, num_capsules)`. During training the paper passes the true
    label; to reconstruct from a chosen capsule, pass its index. Without
    `labels`, the longest capsule of each example is kept (the paper's
    inference-time behaviour).

    The constructor takes only the base layer arguments, such as `name` and
    `dtype`.

    Call arguments:
        inputs: capsules of shape `(batch, num_capsules, capsule_dim)`, or a
            list `[capsules, labels]`.
        labels: optional selection, as described above.

    Returns:
        The masked capsules, same shape as the capsules.

    Example:

    >>> import numpy as np
    >>> capsules = np.random.normal(size=(2, 10, 16)).astype("float32")
    >>> masked = Mask()(capsules, labels=np.array([3, 7]))
    >>> int(np.count_nonzero(np.abs(np.asarray(masked)).sum(-1)))
    2

    Reference:
        Sabour, Frosst, Hinton. Dynamic Routing Between Capsules. NIPS 2017,
        section 4.1 (reconstruction as a regularization method).
    """

    def call(self, inputs, labels=None):
        if isinstance(inputs, (list, tuple)):
            if len(inputs) != 2 or labels is not None:
                raise ValueError(
                    "Mask takes `capsules` and optional `labels`, either as "
                    f"`[capsules, labels]` or as arguments. Received {len(inputs)} inputs."
                )
            inputs, labels = inputs
        if len(inputs.shape) != 3:
            raise ValueError(
                "Mask expects capsules of shape (batch, num_capsules, capsule_dim). "
                f"Received: shape={tuple(inputs.shape)}"
            )
        num_capsules = inputs.shape[1]
        if labels is None:
            selection = ops.one_hot(
                ops.argmax(length(inputs, axis=-1), axis=-1), num_capsules, dtype=inputs.dtype
            )
        else:
            labels = ops.convert_to_tensor(labels)
            if len(labels.shape) == 2 and labels.shape[-1] == 1 and num_capsules != 1:
                labels = ops.squeeze(labels, axis=-1)
            if len(labels.shape) == 1:
                selection = ops.one_hot(ops.cast(labels, "int32"), num_capsules, dtype=inputs.dtype)
            elif len(labels.shape) == 2 and labels.shape[-1] == num_capsules:
                selection = ops.cast(labels, inputs.dtype)
            else:
                raise ValueError(
                    "`labels` must be class indices of shape (batch,) or one-hot of shape "
                    f"(batch, {num_capsules}). Received: labels.shape={tuple(labels.shape)}"
                )
        return inputs * ops.expand_dims(selection, -1)

    def compute_output_shape(self, inputs_shape, labels_shape=None):
        if isinstance(inputs_shape, (list, tuple)) and isinstance(inputs_shape[0], (list, tuple)):
            return tuple(inputs_shape[0])
        return tuple(inputs_shape)

    def compute_output_spec(self, inputs, labels=None):
        # Keras hands `compute_output_shape` the shapes of tensors only, not of arrays.
        return output_spec(self, inputs)

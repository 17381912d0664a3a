"""What the MultiMNIST classifiers share: two labels per image, each digit reconstructed apart."""

import keras
import numpy as np
from keras import ops

from applications._losses import with_penalties
from applications.multimnist_accuracy import MultiMNISTAccuracy
from applications.multimnist_accuracy import _is_integer
from applications.multimnist_accuracy import _pairs_to_multi_hot
from keras_capsules.datasets.multimnist import INPUT_SHAPE as INPUT_SHAPE


def top_two(probabilities):
    """The two largest scores' classes, largest first: int32 `(n, 2)` (NumPy)."""
    return np.argsort(-probabilities, axis=-1, kind="stable")[:, :2].astype("int32")


class MultiMNISTMixin:
    """Training, metrics and inference of a capsule classifier on two overlapping digits.

    Mixed in before a `CapsuleClassifier` subclass. The loss is the margin
    loss with the multi-hot target of both classes plus, for each of the two
    digits, the scaled reconstruction loss between the decoder's output from
    that digit's capsule alone and that digit's own shifted image (Sabour et
    al. 2017, section 6). The targets come as one dict `{"images", "labels",
    "digits"}` (`multimnist.training_pipeline(..., as_dict=True)`,
    `multimnist.test_set(...)`) or as `x` the images and `y` a dict
    `{"labels", "digits"}`; without a decoder `y` may also be `(batch, 2)`
    labels or a `(batch, num_classes)` multi-hot.
    """

    def _default_metrics(self):
        return [MultiMNISTAccuracy()]

    def call(self, inputs, training=None, mask=None, **kwargs):
        if isinstance(inputs, dict):  # a MultiMNIST dict: images and targets
            inputs = inputs["images"]
        return super().call(inputs, training=training, mask=mask, **kwargs)

    def _targets(self, x, y):
        """`(multi_hot, labels, digits)` from the dict `y` or `x`; the last two may be None."""
        name = type(self).__name__
        source = y if y is not None else x
        if isinstance(source, dict):
            labels = source.get("labels")
            digits = source.get("digits")
            if labels is None:
                raise ValueError(
                    f'{name} needs "labels", the (batch, 2) classes of both digits, in its '
                    f"targets. Received keys: {sorted(source)}"
                )
            labels = ops.convert_to_tensor(labels)
            if not _is_integer(labels) or tuple(labels.shape[1:]) != (2,):
                raise ValueError(
                    '"labels" must be integer class indices of shape (batch, 2). '
                    f"Received: shape={tuple(labels.shape)}, dtype={labels.dtype}"
                )
            multi_hot = _pairs_to_multi_hot(labels, self.num_classes)
        elif y is not None:
            labels, digits = None, None
            multi_hot = ops.convert_to_tensor(y)
            if _is_integer(multi_hot) and multi_hot.shape[-1] == 2:
                labels = multi_hot
                multi_hot = _pairs_to_multi_hot(labels, self.num_classes)
            elif tuple(multi_hot.shape[1:]) != (self.num_classes,):
                raise ValueError(
                    "`y` must be integer (batch, 2) labels, a float multi-hot "
                    f'(batch, {self.num_classes}), or a dict with "labels" and "digits". '
                    f"Received: shape={tuple(multi_hot.shape)}"
                )
        else:
            raise ValueError(
                f'{name} needs targets: a dict with "images", "labels" and "digits" as `x` '
                "(multimnist.training_pipeline(..., as_dict=True)), or `y`."
            )
        if self.decoder is not None and digits is None:
            raise ValueError(
                f'{name} reconstructs each digit from its own capsule: it needs "labels" and '
                '"digits" (each digit alone, (batch, 2) + image shape), as '
                "multimnist.training_pipeline(..., as_dict=True) yields them. Build it "
                "with `decoder_units=None` to train on the margin loss alone."
            )
        return multi_hot, labels, digits

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        multi_hot, labels, digits = self._targets(x, y)
        pairs = []
        if self.decoder is not None:  # each digit from its own capsule, against its own image
            digits = ops.convert_to_tensor(digits)
            pairs = [(labels[:, d], self._images(digits[:, d])) for d in range(2)]
        total = self._capsule_loss(multi_hot, pairs, y_pred, sample_weight)
        return with_penalties(self, total, x, y, y_pred, sample_weight, training)

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        multi_hot = self._targets(x, y)[0]
        return keras.Model.compute_metrics(
            self, x, multi_hot, y_pred["probabilities"], sample_weight
        )

    def predict_digits(self, x, batch_size=100):
        """The two longest class capsules of each example: int `(n, 2)`, longest first."""
        return top_two(self.predict(x, batch_size=batch_size, verbose=0)["probabilities"])

    def reconstruct_pair(self, x, labels=None, batch_size=100):
        """Reconstruct both digits of each example, each from its own capsule alone.

        Args:
            x: images `(n, 36, 36[, 1])` in [0, 255], or a dict with `"images"`.
            labels: the two capsules to decode, integer `(n, 2)` (e.g. the
                true labels); `None` decodes the two longest capsules, longest
                first (the paper's test-time choice).
            batch_size: batch size of the forward pass.

        Returns:
            A NumPy array `(n, 2) + input_shape` in [0, 1]: `[:, d]` is decoded
            from capsule `labels[:, d]` with every other capsule masked.
        """
        outputs = self.predict(x, batch_size=batch_size, verbose=0)
        if labels is None:
            labels = top_two(outputs["probabilities"])
        labels = np.asarray(labels)
        n = len(outputs["poses"])
        if labels.shape != (n, 2) or not np.issubdtype(labels.dtype, np.integer):
            raise ValueError(
                f"`labels` must be integer class indices of shape ({n}, 2). "
                f"Received: labels.shape={labels.shape}, dtype={labels.dtype}"
            )
        return np.stack(
            [self.decode(outputs["poses"], labels=labels[:, d]) for d in range(2)], axis=1
        )

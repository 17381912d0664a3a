import keras
import numpy as np
from keras import ops

from applications._losses import with_penalties
from applications.capsnet.capsnet import CapsNet
from applications.capsnet.multimnist_accuracy import MultiMNISTAccuracy
from applications.capsnet.multimnist_accuracy import _is_integer
from applications.capsnet.multimnist_accuracy import _pairs_to_multi_hot


def _top_two(probabilities):
    """The two largest scores' classes, largest first: int32 `(n, 2)` (NumPy)."""
    return np.argsort(-probabilities, axis=-1, kind="stable")[:, :2].astype("int32")


@keras.saving.register_keras_serializable(package="keras_capsules")
class CapsNetMultiMNIST(CapsNet):
    """The CapsNet of Sabour et al. 2017 trained on MultiMNIST (two overlapping digits).

    The architecture of `CapsNet` (every argument is the same) on 36x36
    inputs, as the paper: Conv1 gives 28x28x256, PrimaryCaps 10x10x32 = 3,200
    capsules of 8D, DigitCaps 10 x 16D, and the decoder ends in 36 x 36 =
    1,296 sigmoid units. With the defaults it has 11,361,808 parameters (the
    paper's "11.36M").

    **Training targets.** Each example has two labels and each digit is
    reconstructed on its own: the loss is the margin loss with the multi-hot
    target of both classes, plus, for each of the two digits, the scaled
    reconstruction loss between the decoder's output from *that digit's*
    capsule alone (every other capsule masked) and that digit's own shifted
    image; the two reconstruction terms are summed, as in the paper. `fit`
    takes the targets in either of two forms:

    - one dict holding everything, as `multimnist.training_pipeline(...,
      as_dict=True)` and `multimnist.test_set(...)` give it:
      `{"images", "labels", "digits"}` (other keys such as `"multi_hot"` are
      ignored): `model.fit(pipeline)`, `model.evaluate(test_set)`;
    - `x` the images and `y` a dict `{"labels", "digits"}`.

    `"images"`: `(batch, 36, 36[, 1])` in [0, 255]; `"labels"`: integer
    `(batch, 2)` classes of the two digits; `"digits"`: `(batch, 2, 36, 36[,
    1])` in [0, 255], digit `d` alone, shifted as in the overlay. A model
    built with `decoder_units=None` trains on the margin loss alone and also
    takes `y` as plain `(batch, 2)` labels or a float multi-hot
    `(batch, num_classes)`.

    **Metrics.** `multimnist_accuracy` (see `MultiMNISTAccuracy`): an example
    is correct when the two longest capsules are exactly its two labels.
    `margin_loss` and `reconstruction_loss` (the sum of both digits' terms)
    are reported too.

    **Inference.** `predict` is `CapsNet.predict` (capsule lengths,
    poses, or both); `predict_digits(x)` gives the two longest capsules;
    `reconstruct_pair(x)` decodes each of two capsules on its own.

    Args:
        backbone: a `CapsNetBackbone`; by default one of 36x36 grey images,
            `input_shape=(36, 36, 1)`, built from the backbone's arguments.
        name: name of the model.
        **kwargs: every other argument of `CapsNet` (`conv_filters`,
            `primary_capsule_types`, `iterations`, `decoder_units`,
            `reconstruction_weight`, `compile`, `dtype`,
            ...), with the same defaults.

    Example:

    >>> import applications
    >>> from keras_capsules.datasets import mnist, multimnist
    >>> (x_train, y_train), (x_test, y_test) = mnist.load_data()
    >>> train = multimnist.training_pipeline(
    ...     x_train, y_train, batch_size=128, as_dict=True
    ... )  # doctest: +SKIP
    >>> model = applications.CapsNetMultiMNIST()
    >>> model.fit(train, epochs=1)  # doctest: +SKIP
    >>> test = multimnist.test_set(x_test, y_test)  # doctest: +SKIP
    >>> model.evaluate(test, return_dict=True)["multimnist_accuracy"]  # doctest: +SKIP
    >>> images = test["images"]  # doctest: +SKIP
    >>> digits = model.predict_digits(images[:8])  # doctest: +SKIP
    >>> pairs = model.reconstruct_pair(images[:8])  # doctest: +SKIP

    Reference:
        Sabour, Frosst, Hinton. Dynamic Routing Between Capsules. NIPS 2017,
        section 6. arXiv:1710.09829.
    """

    def __init__(self, backbone=None, name="capsnet_multimnist", **kwargs):
        if backbone is None:
            kwargs.setdefault("input_shape", (36, 36, 1))
        super().__init__(backbone, name=name, **kwargs)

    def _default_metrics(self):
        return [MultiMNISTAccuracy()]

    def call(self, inputs, training=None, mask=None, **kwargs):
        if isinstance(inputs, dict):  # a MultiMNIST dict: images and targets
            inputs = inputs["images"]
        return super().call(inputs, training=training, mask=mask, **kwargs)

    # Training ---------------------------------------------------------------

    def _targets(self, x, y):
        """`(multi_hot, labels, digits)` from the dict `y` or `x`; the last two may be None."""
        source = y if y is not None else x
        if isinstance(source, dict):
            labels = source.get("labels")
            digits = source.get("digits")
            if labels is None:
                raise ValueError(
                    'CapsNetMultiMNIST needs "labels", the (batch, 2) classes of both '
                    f"digits, in its targets. Received keys: {sorted(source)}"
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
                'CapsNetMultiMNIST needs targets: a dict with "images", "labels" and '
                '"digits" as `x` (multimnist.training_pipeline(..., as_dict=True)), '
                "or `y`."
            )
        if self.decoder is not None and digits is None:
            raise ValueError(
                'CapsNetMultiMNIST reconstructs each digit from its own capsule: it needs "labels" '
                'and "digits" (each digit alone, (batch, 2) + image shape), as '
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

    # Inference --------------------------------------------------------------

    def predict_digits(self, x, batch_size=100):
        """The two longest class capsules of each example: int `(n, 2)`, longest first."""
        return _top_two(self.predict(x, batch_size=batch_size, verbose=0)["probabilities"])

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
            labels = _top_two(outputs["probabilities"])
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

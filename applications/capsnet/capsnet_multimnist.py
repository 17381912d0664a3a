import keras

from applications._multimnist import INPUT_SHAPE
from applications._multimnist import MultiMNISTMixin
from applications.capsnet.capsnet import CapsNet


@keras.saving.register_keras_serializable(package="keras_capsules")
class CapsNetMultiMNIST(MultiMNISTMixin, CapsNet):
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
            kwargs.setdefault("input_shape", INPUT_SHAPE)
        super().__init__(backbone, name=name, **kwargs)

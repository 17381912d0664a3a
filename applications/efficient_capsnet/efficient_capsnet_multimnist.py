import keras

from applications._multimnist import INPUT_SHAPE
from applications._multimnist import MultiMNISTMixin
from applications.efficient_capsnet.efficient_capsnet import EfficientCapsNet
from applications.recipe import Recipe

MULTIMNIST_STRIDES = (1, 1, 2, 2)
"""The convolutions' strides of the official MultiMNIST network (36x36 -> 6x6 features)."""


@keras.saving.register_keras_serializable(package="keras_capsules")
class EfficientCapsNetMultiMNIST(MultiMNISTMixin, EfficientCapsNet):
    """Efficient-CapsNet (Mazzia et al. 2021) trained on MultiMNIST (two overlapping digits).

    The network of `EfficientCapsNet` on 36x36 inputs with the strides of the
    authors' MultiMNIST network, `(1, 1, 2, 2)`: the convolutions give 6x6x128
    features, the primary capsules (a depthwise convolution over the whole
    map) 16 capsules of 8D, and the self-attention routing 10 class capsules
    of 16D. The decoder ends in 36 x 36 = 1,296 sigmoid units.

    Training and inference are those of `CapsNetMultiMNIST`: each example has
    two labels, the margin loss takes the multi-hot target of both, and each
    digit is reconstructed from its own capsule alone against its own
    shifted image; `multimnist_accuracy` counts an example as correct when
    the two longest capsules are exactly its two labels; `predict_digits`
    and `reconstruct_pair` answer for new images. `fit` takes
    `multimnist.training_pipeline(..., as_dict=True)`; `evaluate` takes
    `multimnist.test_set(...)`.

    Args:
        backbone: an `EfficientCapsNetBackbone`; by default one of 36x36 grey
            images with the strides above, built from the backbone's
            arguments.
        name: name of the model.
        **kwargs: every other argument of `EfficientCapsNet`, with the same
            defaults.

    Example:

    >>> import applications
    >>> model = applications.EfficientCapsNetMultiMNIST(compile=False)
    >>> model.image_shape, model.backbone.output_shape
    ((36, 36, 1), (None, 16, 8))
    >>> from keras_capsules.datasets import mnist, multimnist
    >>> (x_train, y_train), (x_test, y_test) = mnist.load_data()
    >>> train = multimnist.training_pipeline(x_train, y_train, batch_size=32, as_dict=True)
    >>> model.compile()
    >>> model.fit(train, epochs=1)  # doctest: +SKIP

    Reference:
        Mazzia, Salvetti, Chiaberge. Efficient-CapsNet: Capsule Network with
        Self-Attention Routing. Scientific Reports 11, 14634 (2021).
        arXiv:2101.12491.
    """

    RECIPE = Recipe(
        batch_size=32,
        learning_rate=5e-4,
        decay_rate=0.97,
        decay_steps=1875,
        decay_every_epoch=True,
    )

    def __init__(self, backbone=None, name="efficient_capsnet_multimnist", **kwargs):
        if backbone is None:
            kwargs.setdefault("input_shape", INPUT_SHAPE)
            kwargs.setdefault("conv_strides", MULTIMNIST_STRIDES)
        super().__init__(backbone, name=name, **kwargs)

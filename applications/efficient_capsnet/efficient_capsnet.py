import keras

from applications._capsule_classifier import CapsuleClassifier
from applications.efficient_capsnet.efficient_capsnet_backbone import EfficientCapsNetBackbone
from applications.recipe import Recipe
from keras_capsules.layers import SelfAttentionCapsule
from keras_capsules.utils import check_positive_ints


@keras.saving.register_keras_serializable(package="keras_capsules")
class EfficientCapsNet(CapsuleClassifier):
    """Efficient-CapsNet (Mazzia et al. 2021), for any images and classes, ready to `fit`.

    Four convolutions with batch normalisation (32 5x5, 64 3x3, 64 3x3,
    128 3x3 stride 2, ReLU) -> primary capsules from a depthwise convolution
    over the whole feature map (16 capsules of 8D) -> 10 class capsules of 16D
    with self-attention routing -> capsule lengths; both capsule layers use
    the exponential squash. The reconstruction decoder (512, 1024, 784) is
    fed the capsule of the true label during training, as in `CapsNet`
    (which says how it draws images of more than 28x28x3 values).
    With the defaults the classifier has the paper's 161,824 trainable
    parameters (`count_params()` also counts the 576 moving statistics of
    batch normalisation); the decoder adds 1,411,344.

    The defaults are the paper's MNIST network. Other data: `input_shape`,
    `num_classes` and `class_names` set the sizes, e.g.
    `EfficientCapsNet(input_shape=(32, 32, 3), num_classes=100)`; the primary
    convolution always covers the last feature map. The convolutions and the
    primary capsules are `backbone`, an `EfficientCapsNetBackbone` (images
    of at least 11x11 with the default convolutions).

    Inputs, outputs and loss are those of `CapsNet`: images with pixel
    values in [0, 255] of any size and colour, converted in the model,
    `{"probabilities", "poses"}` outputs (which `predict` returns), and the margin loss
    plus `reconstruction_weight` times the summed squared reconstruction
    error (0.0005 per value the decoder draws, the paper's 0.392 times the
    mean over 784 pixels).

    Args:
        backbone: an `EfficientCapsNetBackbone`; by default one built from
            the backbone's arguments in `kwargs`.
        num_classes: number of class capsules: by default the number of
            `class_names`, or 10.
        class_names: the classes' names in label order (see `CapsNet`).
        capsule_dim: dimensions of a class capsule (16).
        name: the model's name.
        **kwargs: the arguments every capsule classifier takes, as
            `CapsNet`'s: `decoder_units` (`(512, 1024)`), `reconstruction_weight`
            (0.0005), `image_converter`, `dtype`, `trainable` and `compile`
            (`True`: Adam with `RECIPE`'s learning rate, 5e-4 as the paper,
            decayed by 0.97 per epoch as the official code: every 3,750
            steps, an epoch of MNIST in batches of 16, unless the trainer
            knows the epoch's steps). Then the backbone's,
            `EfficientCapsNetBackbone`'s: `input_shape` (`(28, 28, 1)`; 1 or
            3 channels), `conv_filters`
            (`(32, 64, 64, 128)`; the last must equal
            `primary_capsule_types * primary_capsule_dim`),
            `conv_kernel_sizes` (`(5, 3, 3, 3)`), `conv_strides`
            (`(1, 1, 1, 2)`), `primary_capsule_types` (16),
            `primary_capsule_dim` (8).

    Example:

    >>> import applications
    >>> import numpy as np
    >>> model = applications.EfficientCapsNet()
    >>> sum(int(np.prod(w.shape)) for w in model.trainable_weights if "decoder" not in w.path)
    161824
    >>> from keras_capsules import datasets
    >>> (x_train, y_train), (x_test, y_test) = datasets.mnist.load_data()
    >>> model.fit(x_train, y_train, epochs=1, batch_size=16)  # doctest: +SKIP

    Reference:
        Mazzia, Salvetti, Chiaberge. Efficient-CapsNet: Capsule Network with
        Self-Attention Routing. Scientific Reports 11, 14634 (2021).
        arXiv:2101.12491.
    """

    BACKBONE = EfficientCapsNetBackbone
    RECIPE = Recipe(
        batch_size=16,
        learning_rate=5e-4,
        decay_rate=0.97,
        decay_steps=3750,
        decay_every_epoch=True,
        bfloat16_on_cpu=True,
    )
    MULTIMNIST = "EfficientCapsNetMultiMNIST"

    def __init__(
        self,
        backbone=None,
        num_classes=None,
        class_names=None,
        capsule_dim=16,
        name="efficient_capsnet",
        **kwargs,
    ):
        check_positive_ints(capsule_dim=capsule_dim)

        def head(primary, num_classes, policy, backbone):
            layer = SelfAttentionCapsule(num_classes, capsule_dim, name="digit_caps", dtype=policy)
            return layer(primary), None

        super().__init__(
            backbone,
            head,
            config={"capsule_dim": capsule_dim},
            num_classes=num_classes,
            class_names=class_names,
            name=name,
            **kwargs,
        )

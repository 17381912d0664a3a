import keras

from applications._capsule_classifier import CapsuleClassifier
from applications.capsnet.capsnet_backbone import CapsNetBackbone
from applications.recipe import Recipe
from keras_capsules.cli.argument_types import positive_int
from keras_capsules.cli.option import Option
from keras_capsules.layers import CapsuleLayer
from keras_capsules.utils import check_positive_ints


@keras.saving.register_keras_serializable(package="keras_capsules")
class CapsNet(CapsuleClassifier):
    """The CapsNet of Sabour et al. 2017 (dynamic routing), for any images and classes.

    Conv1 (256 filters 9x9, ReLU) -> PrimaryCaps (32 types x 8D, 9x9 stride 2)
    -> class capsules (`num_classes` x 16D, dynamic routing) -> capsule
    lengths, plus the reconstruction decoder (512, 1024, then one output per
    pixel and channel of `input_shape`; an image of more than 28x28x3 values
    is drawn at the largest size of its aspect ratio within them and resized,
    so the decoder does not grow with the image: see
    `keras_capsules.layers.ReconstructionDecoder`). On 28x28 grey images with
    10 classes it is the paper's network, 8,215,568 parameters
    (`CapsNetMNIST`). Conv1 and PrimaryCaps are `backbone`, a
    `CapsNetBackbone` (images of at least 17x17 with the default kernels).

    The model takes images with pixel values in [0, 255] of any size and
    colour, as `keras.utils.image_dataset_from_directory` and
    `keras_capsules.datasets.mnist.load_data()` give them (uint8 or float;
    grey images as `(h, w)` or `(h, w, 1)`): its `image_converter` resizes
    them to `input_shape`, converts grey and colour, and scales them to
    [0, 1].

    Its outputs are a dict: `"probabilities"` (capsule lengths, one per class)
    and `"poses"` (the class capsules). `predict` returns both, as
    Keras returns a dict model's outputs. The loss is the
    margin loss plus the scaled reconstruction loss, with the decoder fed the
    capsule of the true label (integer or one-hot `y`), as in the paper;
    `fit(x, y)` needs no `loss` argument. `reconstruct()` and `decode()` give
    reconstructions from the longest or from chosen capsules.

    Args:
        backbone: a `CapsNetBackbone`; by default one built from the
            backbone's arguments in `kwargs`.
        num_classes: number of class capsules: by default the number of
            `class_names`, or 10.
        class_names: the classes' names in label order, e.g. the folder
            names `image_dataset_from_directory` found; saved with the model
            and used by `keras-capsules evaluate`, the server and the figures.
        capsule_dim: dimensions of a class capsule (16).
        iterations: routing iterations (3).
        stop_gradient: stop gradients through the inner routing iterations
            (`False`, as the paper).
        name: the model's name.
        **kwargs: the arguments every capsule classifier takes:
            `decoder_units`, the decoder's hidden layer sizes (`(512, 1024)`;
            `None` builds no decoder and trains on the margin loss alone);
            `reconstruction_weight`, the reconstruction loss's scale
            (0.0005 per value the decoder draws); `image_converter`, a
            `keras_capsules.layers.ImageConverter` that brings the images to
            the network's size, colour and scale inside the model (its unset
            `image_size` and `channels` are the network's; by default one
            that scales pixels in [0, 255] to [0, 1]; `ImageConverter()` for
            images already in [0, 1]);
            `compile`, compile with `compile()`'s defaults (`True`: Adam with
            `RECIPE`'s learning rate, 1e-3 decayed by 0.96 every 2,000 steps
            as the official code, the loss above and accuracy); `dtype`, the
            layers' dtype policy, e.g. `"mixed_bfloat16"` (by default the
            global policy; routing, lengths and losses run in float32); and
            `keras.Model`'s `trainable`. Then the backbone's,
            `CapsNetBackbone`'s: `input_shape` (`(28, 28, 1)`; 1 or 3
            channels), `conv_filters` (256), `conv_kernel_size` (9),
            `primary_capsule_types` (32), `primary_capsule_dim` (8),
            `primary_kernel_size` (9), `primary_strides` (2).

    Example:

    >>> import applications
    >>> import numpy as np
    >>> model = applications.CapsNet(input_shape=(32, 32, 3), class_names=["cat", "dog"])
    >>> images = np.random.default_rng(0).integers(0, 256, (4, 32, 32, 3))
    >>> model.predict(images, verbose=0)["probabilities"].shape
    (4, 2)
    >>> model.reconstruct(images).shape
    (4, 32, 32, 3)
    >>> model.class_names
    ('cat', 'dog')

    Reference:
        Sabour, Frosst, Hinton. Dynamic Routing Between Capsules. NIPS 2017.
        arXiv:1710.09829.
    """

    BACKBONE = CapsNetBackbone
    RECIPE = Recipe(batch_size=100, learning_rate=1e-3, bfloat16_on_cpu=True)
    MULTIMNIST = "CapsNetMultiMNIST"
    OPTIONS = (
        Option("iterations", "routing iterations", type=positive_int, default=3, metavar="N"),
        Option("conv_filters", "filters of Conv1", type=positive_int, default=256, metavar="N"),
        Option(
            "primary_capsule_types",
            "primary capsule types",
            type=positive_int,
            default=32,
            metavar="N",
        ),
    )

    def __init__(
        self,
        backbone=None,
        num_classes=None,
        class_names=None,
        capsule_dim=16,
        iterations=3,
        stop_gradient=False,
        name="capsnet",
        **kwargs,
    ):
        check_positive_ints(capsule_dim=capsule_dim, iterations=iterations)

        def head(primary, num_classes, policy, backbone):
            layer = CapsuleLayer(
                num_classes,
                capsule_dim,
                iterations=iterations,
                stop_gradient=stop_gradient,
                name="digit_caps",
                dtype=policy,
            )
            return layer(primary), None

        super().__init__(
            backbone,
            head,
            config={
                "capsule_dim": capsule_dim,
                "iterations": iterations,
                "stop_gradient": stop_gradient,
            },
            num_classes=num_classes,
            class_names=class_names,
            name=name,
            **kwargs,
        )

from applications._configuration import configured
from applications.capsnet.capsnet import CapsNet
from keras_capsules.datasets.mnist import CLASS_NAMES as DIGITS


def CapsNetMNIST(name="capsnet_mnist", **kwargs):
    """The paper's CapsNet for MNIST: 28x28 grey digits, 10 classes, ready to `fit`.

    Conv1 (256 filters 9x9, ReLU) -> PrimaryCaps (32 types x 8D, 9x9 stride 2)
    -> DigitCaps (10 x 16D, dynamic routing) -> capsule lengths, plus the
    reconstruction decoder (512, 1024, 784): the paper's 8,215,568
    parameters. The classes are the digits, named `"0"` to `"9"`. Like
    `keras.applications.ResNet50`, a function that returns the configured
    model: an `applications.CapsNet`, which takes `input_shape`,
    `num_classes` and `class_names` for other images or classes; every other
    argument is `CapsNet`'s.

    The model takes images with pixel values in [0, 255], as
    `keras_capsules.datasets.mnist.load_data()` returns them (uint8 or float,
    `(28, 28)` or `(28, 28, 1)`). Its outputs are a dict: `"probabilities"`
    (capsule lengths, one per class) and `"poses"` (the class capsules).
    `predict` returns both, as Keras returns a dict model's outputs. The
    loss is the margin loss plus the scaled reconstruction loss, with the
    decoder fed the capsule of the true label (integer or one-hot `y`), as
    in the paper; `fit(x, y)` needs no `loss`
    argument. `reconstruct()` and `decode()` give reconstructions from the
    longest or from chosen capsules.

    Args:
        name: the model's name (`"capsnet_mnist"`).
        **kwargs: `CapsNet`'s arguments but `input_shape`, `num_classes` and
            `class_names`, e.g. `iterations` or `conv_filters`.

    Returns:
        An `applications.CapsNet`.

    Example:

    >>> import applications
    >>> from keras_capsules import datasets
    >>> (x_train, y_train), (x_test, y_test) = datasets.mnist.load_data()
    >>> model = applications.CapsNetMNIST()
    >>> model.count_params()
    8215568
    >>> model.fit(x_train, y_train, epochs=1, batch_size=100)  # doctest: +SKIP
    >>> probabilities = model.predict(x_test[:8])["probabilities"]  # doctest: +SKIP

    Reference:
        Sabour, Frosst, Hinton. Dynamic Routing Between Capsules. NIPS 2017.
        arXiv:1710.09829.
    """
    fixed = {"input_shape": (28, 28, 1), "num_classes": 10, "class_names": DIGITS}
    return CapsNet(**configured("CapsNetMNIST", "CapsNet", fixed, kwargs), name=name)

from applications._configuration import configured
from applications.matrix_capsnet.matrix_capsnet import MatrixCapsNet
from keras_capsules.datasets.smallnorb import CLASS_NAMES
from keras_capsules.layers import ImageConverter


def MatrixCapsNetNORB(
    A=None, B=None, C=None, D=None, image_converter=None, name="matrix_capsnet_norb", **kwargs
):
    """The paper's matrix capsule network for smallNORB: 32x32 stereo pairs, 5 classes.

    Conv1 (A filters, 5x5, stride 2) -> PrimaryCaps (B types) -> ConvCaps1 (C
    types, 3x3, stride 2) -> ConvCaps2 (D types, 3x3) -> 5 class capsules with
    coordinate addition, EM routing in every capsule layer. A=B=C=D=32 (the
    default) has 317,194 parameters, the paper's "about 310K"; A=64, B=8,
    C=D=16 has 68,754, its "68K". The classes are smallNORB's
    (`keras_capsules.datasets.smallnorb.CLASS_NAMES`), and the inputs are
    taken as the smallNORB pipelines give them, standardised (by default an
    `ImageConverter()`, which resizes and does not scale). Like
    `keras.applications.ResNet50`, a function that returns the configured
    model: an `applications.MatrixCapsNet`, which takes
    `input_shape`, `num_classes` and `class_names` for other images or
    classes.

    Args:
        A: Conv1's filters, as `MatrixCapsNet`'s (32).
        B: primary capsule types (32).
        C: ConvCaps1's capsule types (32).
        D: ConvCaps2's capsule types (32).
        image_converter: by default `ImageConverter()`: the inputs come
            standardised, as the smallNORB pipelines give them.
        **kwargs: `MatrixCapsNet`'s other arguments but `input_shape`,
            `num_classes` and `class_names`: the sizes (`A`, `B`, `C`, `D`),
            the routing's settings, the spread margin, `compile`, `dtype`.

    Returns:
        An `applications.MatrixCapsNet`.

    Example:

    >>> import applications
    >>> model = applications.MatrixCapsNetNORB(A=64, B=8, C=16, D=16)
    >>> model.count_params()  # the paper's 68K
    68754
    >>> model.class_names[:2]
    ('four-legged animal', 'human figure')

    Reference:
        Hinton, Sabour, Frosst. Matrix capsules with EM routing. ICLR 2018.
    """

    fixed = {"input_shape": (32, 32, 2), "num_classes": 5, "class_names": CLASS_NAMES}
    kwargs = configured("MatrixCapsNetNORB", "MatrixCapsNet", fixed, kwargs)
    if image_converter is None:
        image_converter = ImageConverter()
    return MatrixCapsNet(A, B, C, D, **kwargs, image_converter=image_converter, name=name)

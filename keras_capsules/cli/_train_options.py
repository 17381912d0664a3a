"""`train`'s options: the run, your own images, the models' sizes, EM routing."""

from keras_capsules._devices import BFLOAT16_CPU_FLAGS
from keras_capsules.cli._types import backbone_weights
from keras_capsules.cli._types import data_dir
from keras_capsules.cli._types import image_folder_argument
from keras_capsules.cli._types import non_negative_int
from keras_capsules.cli._types import positive_float
from keras_capsules.cli._types import positive_int
from keras_capsules.cli._types import tempering
from keras_capsules.cli._types import unit_fraction

DATA = ("mnist", "fashion-mnist", "smallnorb")
"""The data sets `train` reads, by the name `--data` takes."""


def add_image_options(group):
    group.add_argument(
        "--images",
        type=image_folder_argument,
        default=None,
        metavar="DIR",
        help="train on a folder with one subfolder of images (PNG, JPEG, BMP, GIF) per class, "
        "instead of --data",
    )
    group.add_argument(
        "--image-size",
        type=positive_int,
        nargs=2,
        default=None,
        metavar=("H", "W"),
        help="resize every image to H x W pixels (default: the commonest size)",
    )
    group.add_argument(
        "--color-mode",
        choices=("grayscale", "rgb"),
        default=None,
        help="default: grayscale when every image is grey, else rgb",
    )
    group.add_argument(
        "--validation-split",
        type=unit_fraction,
        default=0.2,
        help="fraction of the images held out for the accuracy (0.2)",
    )
    group.add_argument(
        "--skip-bad-images",
        action="store_true",
        help="pass over files that cannot be decoded (counted) instead of stopping",
    )
    group.add_argument(
        "--from-preset",
        default=None,
        metavar="NAME",
        help="start from a trained preset of the same architecture (applications.list_presets()"
        " or a preset folder): its layers that fit are kept, the class capsules are new",
    )
    group.add_argument(
        "--freeze-backbone",
        action="store_true",
        help="train the class capsules and decoder alone (model.backbone.trainable = False)",
    )


def add_run_options(group):
    group.add_argument("--epochs", type=positive_int, default=1)
    group.add_argument(
        "--data",
        choices=DATA,
        default=None,
        help="the data set, when no --images (mnist); smallnorb is read from --data-dir",
    )
    group.add_argument(
        "--batch-size",
        type=positive_int,
        default=None,
        help="default: the architecture's recipe (applications.CapsNet.RECIPE and so on): "
        "100 for capsnet, 16 for efficient-capsnet, 32 for matrix-capsnet",
    )
    group.add_argument(
        "--learning-rate",
        type=positive_float,
        default=None,
        help="Adam's initial learning rate; default: the architecture's recipe, 1e-3 "
        "(capsnet), 5e-4 (efficient-capsnet, decayed by 0.97 per epoch), 3e-3 (matrix-capsnet)",
    )
    group.add_argument("--output", default="runs/mnist", help="folder for checkpoints and metrics")
    group.add_argument(
        "--data-dir",
        type=data_dir,
        default=None,
        help="folder of the MNIST IDX or smallNORB .mat files",
    )
    group.add_argument(
        "--max-shift",
        type=non_negative_int,
        default=None,
        help="MNIST and Fashion-MNIST: augmentation shift in pixels (the recipe's, 2)",
    )
    group.add_argument(
        "--train-size", type=positive_int, default=None, help="use the first N images"
    )
    group.add_argument(
        "--test-size", type=positive_int, default=None, help="evaluate on the first N"
    )
    group.add_argument("--seed", type=non_negative_int, default=None)
    group.add_argument(
        "--precision",
        choices=("float32", "mixed_float16", "mixed_bfloat16", "auto"),
        default="float32",
        help="Keras dtype policy; routing runs in float32 inside. auto: mixed_bfloat16 where "
        "the architecture's recipe trained faster in it at float32's accuracy, on TensorFlow "
        f"on a CPU with {' or '.join(BFLOAT16_CPU_FLAGS)}; else float32 (float32)",
    )
    group.add_argument(
        "--distribute",
        action="store_true",
        help="data-parallel over every device: tf.distribute (TensorFlow), "
        "keras.distribution.DataParallel (JAX; across processes when "
        "KERAS_DISTRIBUTION_JOB_ADDRESSES is set)",
    )
    group.add_argument(
        "--steps-per-execution",
        type=positive_int,
        default=None,
        help="training steps per call of the compiled step: each computes the same, the "
        "callbacks and the progress bar see every N-th (1; more can pay on a GPU, not on PyTorch)",
    )
    group.add_argument("--verbose", type=int, default=1, choices=(0, 1, 2))
    group.add_argument(
        "--fresh",
        action="store_true",
        help="start a new run in --output, deleting the run there (model, backup, history)",
    )


def add_model_options(group):
    group.add_argument(
        "--iterations",
        type=positive_int,
        default=None,
        help="routing iterations (default: the architecture's and routing's, 3 for capsnet "
        "and matrix-capsnet)",
    )
    group.add_argument(
        "--backbone",
        default=None,
        metavar="NAME",
        help="backbone-capsnet: the keras.applications model the capsule head sits on, "
        "e.g. MobileNetV3Small, EfficientNetB0 or ResNet50, or with keras-hub installed a "
        "keras-hub image preset (name, kaggle:// or hf:// handle, or folder)",
    )
    group.add_argument(
        "--backbone-weights",
        type=backbone_weights,
        default="imagenet",
        metavar="WEIGHTS",
        help="backbone-capsnet: imagenet (downloaded once into Keras's cache; a keras-hub "
        "preset's own weights), none, or the path of a .weights.h5 file of the backbone "
        "without its top (imagenet)",
    )
    group.add_argument(
        "--routing",
        default=None,
        help="backbone-capsnet: the head's routing, dynamic (default), em, self_attention "
        "or inverted_dot_product",
    )
    group.add_argument("--conv-filters", type=positive_int, default=256, help="capsnet: Conv1")
    group.add_argument(
        "--primary-capsule-types",
        type=positive_int,
        default=32,
        help="capsnet",
    )


def add_em_options(group):
    for letter, default in zip("ABCD", (32, 32, 32, 32)):
        group.add_argument(
            f"-{letter}",
            type=positive_int,
            default=default,
            help=f"{letter} of the paper",
        )
    group.add_argument(
        "--inverse-temperature",
        type=positive_float,
        default=None,
        help="final lambda (0.01)",
    )
    group.add_argument(
        "--variance-epsilon",
        type=positive_float,
        default=None,
        help="variance floor (1e-4)",
    )
    group.add_argument(
        "--tempering",
        type=tempering,
        default=None,
        help="E-step exponent tau, R ~ (a p)^tau, one number or one per E-step "
        "separated by commas (0.1; 1 is the paper's E-step)",
    )
    group.add_argument(
        "--normalization",
        choices=("types_and_positions", "positions"),
        default="types_and_positions",
        help="how a convolutional capsule layer shares a child's R: over types and "
        "positions (the paper's text) or per type over positions (the authors' code)",
    )
    group.add_argument(
        "--inverse-temperature-schedule",
        choices=("rescaled", "authors"),
        default="rescaled",
        help="lambda rescaled to end at --inverse-temperature, or the authors' "
        "0.01 (1 - 0.95^(t+1))",
    )

"""The options of `train ARCH`: the run's, your own images', and the architecture's.

An architecture's own options are its family's (`Catalog.options`); the run's
and the images' are every architecture's, and `NEEDS` says which of those
apply to one source of data alone. `option_values` reads the architecture's,
and `unknown_arguments` names the architecture an option given to another
belongs to.
"""

from keras_capsules._devices import BFLOAT16_CPU_FLAGS
from keras_capsules.cli.argument_types import data_dir
from keras_capsules.cli.argument_types import image_folder_argument
from keras_capsules.cli.argument_types import non_negative_int
from keras_capsules.cli.argument_types import positive_float
from keras_capsules.cli.argument_types import positive_int
from keras_capsules.cli.argument_types import unit_fraction

DATA = ("mnist", "fashion-mnist", "smallnorb", "multimnist")
"""The data sets `train` reads, by the name `--data` takes."""

SHIFTED = ("mnist", "fashion-mnist")
"""The data sets whose training images `--max-shift` shifts."""

VALIDATION_SPLIT = 0.2
"""The share of `--images` held out without `--validation-split`."""


def _own_images(args):
    return args.images is not None


def _a_data_set(args):
    return args.images is None


def _shifted(args):
    return args.images is None and (args.data or "mnist") in SHIFTED


NEEDS = {
    "image_size": ("--images", _own_images),
    "color_mode": ("--images", _own_images),
    "validation_split": ("--images", _own_images),
    "skip_bad_images": ("--images", _own_images),
    "train_size": ("--data (with --images, --validation-split holds out)", _a_data_set),
    "test_size": ("--data (with --images, --validation-split holds out)", _a_data_set),
    "data_dir": ("--data (not --images)", _a_data_set),
    "max_shift": (f"--data {' or '.join(SHIFTED)}", _shifted),
}
"""`{option: (what it needs, whether args have it)}`: options that apply to one source of data."""


def unneeded(args):
    """The first option of `NEEDS` given where it does not apply, as one line; `None` if none."""
    for name, (needed, applies) in NEEDS.items():
        value = getattr(args, name, None)
        if value not in (None, False) and not applies(args):
            return f"--{name.replace('_', '-')} needs {needed}"
    return None


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
        default=None,
        help=f"fraction of the images held out for the accuracy ({VALIDATION_SPLIT})",
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
        help="the data set, when no --images (mnist); smallnorb is read from --data-dir; "
        "multimnist makes pairs of overlapping MNIST digits as it trains (an epoch: one pair "
        "per training digit)",
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


def add_architecture_parsers(train, catalog):
    """Add one parser per architecture of `catalog` under the `train` parser.

    Each takes the options of every run and of your own images, and the
    architecture's own (`catalog.options(name)`), in a group of their own.
    """
    architectures = train.add_subparsers(
        dest="model", required=True, metavar="ARCH", title="architectures"
    )
    for name, text in catalog.architectures().items():
        parser = architectures.add_parser(name, help=text, description=f"Train {text}.")
        add_run_options(parser.add_argument_group("training run"))
        add_image_options(parser.add_argument_group("your own images (--images)"))
        own = parser.add_argument_group(f"{name}'s options")
        for option in catalog.options(name):
            option.add_to(own)


def option_values(args):
    """The values of the architecture's own options, each given or its declared default.

    Refuses, in one line, an option given beside `--from-preset` (the preset
    brings the architecture) and a required one left out without it.
    """
    prefix = "keras-capsules train"
    options = args.catalog.options(args.model)
    given = [option for option in options if hasattr(args, option.argument)]
    if args.from_preset is not None and given:
        flags = ", ".join(option.flag for option in given)
        raise SystemExit(
            f"{prefix}: {flags}: --from-preset {args.from_preset} brings the preset's "
            "architecture; give one or the other, not both"
        )
    for option in options:
        if option.required and args.from_preset is None and option not in given:
            metavar = f" {option.metavar}" if option.metavar else ""
            raise SystemExit(
                f"{prefix}: {args.model} needs {option.flag}{metavar}, {option.help}; or "
                "--from-preset, which brings its own"
            )
        if option not in given:
            setattr(args, option.argument, option.default)
    return {option.argument: getattr(args, option.argument) for option in options}


def unknown_arguments(args, unknown, catalog):
    """Why `train` refuses the arguments `unknown`, in one line; `None` where argparse says it.

    An option of another architecture is named with the architectures that
    take it: `-A is an option of matrix-capsnet, not of capsnet`.
    """
    flags = [_flag(text) for text in unknown if text.startswith("-") and len(text) > 1]
    for flag in flags:
        owners = [
            name
            for name in catalog.architectures()
            if name != args.model and any(_same(flag, o.flag) for o in catalog.options(name))
        ]
        if owners:
            return (
                f"keras-capsules train {args.model}: error: {flag} is an option of "
                f"{' and '.join(owners)}, not of {args.model} (keras-capsules train "
                f"{args.model} --help lists its options)"
            )
    return None


def _flag(text):
    """The option that the argument `text` names: `--a-b=1` is `--a-b`, `-A8` is `-A`."""
    if text.startswith("--"):
        return text.split("=", 1)[0]
    return text[:2]


def _same(typed, flag):
    """Whether `typed` names `flag`: the same, or a long option's prefix (argparse's rule)."""
    return typed == flag or (typed.startswith("--") and len(typed) > 2 and flag.startswith(typed))

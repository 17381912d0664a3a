"""`keras-capsules export`: a saved `.keras` model as a versioned SavedModel, ONNX or LiteRT.

    keras-capsules export runs/mnist/model.keras models/capsnet
    keras-capsules export runs/mnist/model.keras capsnet.onnx --format onnx
    keras-capsules export runs/mnist/model.keras capsnet.tflite --format litert

A SavedModel (the default) goes to `output/<version>`, the layout TF Serving
and `keras-capsules serve` read (`keras_capsules.serving.export_saved_model`).
ONNX and LiteRT are one file, `output` itself (`export_onnx`, `export_litert`).
"""

from keras_capsules.cli._model import load_model
from keras_capsules.cli._types import positive_int

FORMATS = ("saved_model", "onnx", "litert")
SUFFIXES = {"onnx": ".onnx", "litert": ".tflite"}


def add_parser(commands):
    """Add the `export` subcommand and its arguments to `commands` (argparse subparsers)."""
    export = commands.add_parser(
        "export", help="export a saved .keras model as a SavedModel, ONNX or LiteRT file"
    )
    export.add_argument("model_path")
    export.add_argument(
        "output_dir",
        metavar="output",
        help="saved_model: base directory, the model goes to output/<version>; "
        "onnx, litert: the file to write (.onnx, .tflite)",
    )
    export.add_argument(
        "--format",
        choices=FORMATS,
        default="saved_model",
        help="saved_model (default; TF Serving, KServe), onnx (ONNX Runtime) or litert "
        "(LiteRT's interpreter)",
    )
    export.add_argument(
        "--version",
        type=positive_int,
        default=None,
        help="SavedModel version number (default: the next one)",
    )
    export.add_argument(
        "--output-kind",
        choices=("probabilities", "logits"),
        default="probabilities",
        help="what the model's class scores are; logits are exported as their softmax",
    )
    return export


def run(args):
    """Run `keras-capsules export` with parsed arguments; return the exit status."""
    from keras_capsules import serving

    if args.format != "saved_model":
        if args.version is not None:
            raise SystemExit(
                "keras-capsules export: --version numbers SavedModel folders; "
                f"a {args.format} export is the one file named by output"
            )
        if not args.output_dir.endswith(SUFFIXES[args.format]):
            raise SystemExit(
                f"keras-capsules export: a {args.format} export is one file whose name ends "
                f"in {SUFFIXES[args.format]}; got {args.output_dir}"
            )
    _check_output(args)  # before the model is loaded and converted (seconds)
    model = load_model(args.model_path)
    try:
        if args.format == "saved_model":
            serving.export_saved_model(
                model, args.output_dir, version=args.version, output_kind=args.output_kind
            )
        else:
            export = {"onnx": serving.export_onnx, "litert": serving.export_litert}[args.format]
            export(model, args.output_dir, output_kind=args.output_kind)
    except (FileExistsError, ImportError, RuntimeError, ValueError) as error:
        raise SystemExit(f"keras-capsules export: {error}") from None
    except OSError as error:  # a full disk, a folder removed meanwhile
        raise SystemExit(
            f"keras-capsules export: cannot write {args.output_dir}: {error.strerror or error}"
        ) from None
    return 0


def _check_output(args):
    """End the command, naming the path, unless the export can be written where asked."""
    import os

    from keras_capsules._atomic import check_writable

    output = args.output_dir
    if args.format == "saved_model":
        folder = output if os.path.isdir(output) else os.path.dirname(os.path.abspath(output))
        if os.path.exists(output) and not os.path.isdir(output):
            raise SystemExit(f"keras-capsules export: {output} is a file, not a folder")
        if not os.path.isdir(folder):
            ancestor = folder
            while not os.path.isdir(ancestor):  # the folders are created: check the first
                ancestor = os.path.dirname(ancestor)
            folder = ancestor
    else:
        if os.path.isdir(output):
            raise SystemExit(
                f"keras-capsules export: {output} is a folder; a {args.format} export is one file"
            )
        folder = os.path.dirname(os.path.abspath(output))
        if not os.path.isdir(folder):
            raise SystemExit(f"keras-capsules export: the folder of {output} does not exist")
    try:
        check_writable(folder)
    except SystemExit as error:
        raise SystemExit(f"keras-capsules export: {output}: {error}") from None

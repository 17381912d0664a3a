"""`keras-capsules export`: a saved `.keras` model as a versioned SavedModel for serving.

    keras-capsules export runs/mnist/model.keras models/capsnet

The model goes to `OUTPUT_DIR/<version>`, the layout TF Serving and
`keras-capsules serve` read (`keras_capsules.serving.export_saved_model`).
"""

from keras_capsules.cli._model import load_model
from keras_capsules.cli._types import positive_int


def add_parser(commands):
    """Add the `export` subcommand and its arguments to `commands` (argparse subparsers)."""
    export = commands.add_parser(
        "export", help="export a saved .keras model as a versioned SavedModel for serving"
    )
    export.add_argument("model_path")
    export.add_argument("output_dir", help="base directory; the model goes to OUTPUT_DIR/<version>")
    export.add_argument(
        "--version", type=positive_int, default=None, help="version number (default: the next one)"
    )
    export.add_argument(
        "--output-kind",
        choices=("probabilities", "logits"),
        default="probabilities",
        help="what the model's class scores are; logits are served as their softmax",
    )
    return export


def run(args):
    """Run `keras-capsules export` with parsed arguments; return the exit status."""
    from keras_capsules.serving import export_saved_model

    model = load_model(args.model_path)
    try:
        export_saved_model(
            model, args.output_dir, version=args.version, output_kind=args.output_kind
        )
    except (FileExistsError, RuntimeError, ValueError) as error:
        raise SystemExit(f"keras-capsules export: {error}") from None
    return 0

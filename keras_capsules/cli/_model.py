"""Loading the model a command works on: a saved `.keras` file or a preset, one line per failure."""

import os
import zipfile

DEFAULT_PRESET = "capsnet_mnist"


def load_model(path):
    """The model saved at `path`; a missing, corrupt or unloadable file ends the command.

    The command's catalog, loaded before, registered the models' classes (and
    the layers and losses of `keras_capsules` they use) for deserialization.
    """
    import keras

    if not os.path.exists(path):
        raise SystemExit(f"keras-capsules: no model at {path}")
    if path.endswith(".keras") and not zipfile.is_zipfile(path):
        raise SystemExit(
            f"keras-capsules: {path} is not a .keras archive (a zip file): "
            "it is truncated or corrupt, or another format"
        )
    try:
        return keras.saving.load_model(path)
    except (OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile) as error:
        raise SystemExit(f"keras-capsules: cannot load the model at {path}: {error}") from None


def add_model_arguments(parser, what="a .keras file"):
    """`model_path` (optional) and `--preset`: the model a command works on."""
    parser.add_argument(
        "model_path",
        nargs="?",
        default=None,
        help=f"{what}; without it, --preset (the {DEFAULT_PRESET} preset by default)",
    )
    parser.add_argument(
        "--preset",
        default=None,
        help="a shipped preset (applications.list_presets()), a preset folder, or an hf:// or "
        f"kaggle:// handle ({DEFAULT_PRESET} when no model_path is given)",
    )


def load_model_or_preset(args, command):
    """`(model, data)`: the model of `args` and the data set it was trained on.

    `data` is the preset's data set (`"mnist"`, `"fashion_mnist"`), or `None`
    for a `.keras` file, whose data the command infers from the input shape.
    """
    if args.model_path is not None and args.preset is not None:
        raise SystemExit(f"keras-capsules {command}: give a model_path or --preset, not both")
    if args.model_path is not None:
        return load_model(args.model_path), None
    preset = args.preset or DEFAULT_PRESET
    try:
        metadata = args.catalog.preset_metadata(preset)
        model = args.catalog.from_preset(preset)
    except (ValueError, ImportError, OSError) as error:
        raise SystemExit(f"keras-capsules {command}: preset {preset!r}: {error}") from None
    return model, (metadata.get("data") or {}).get("name")

"""Loading a saved `.keras` model, with one line for each way that fails."""

import os
import zipfile


def load_model(path):
    """The model saved at `path`; a missing, corrupt or unloadable file ends the command.

    Imports `applications` first, which registers the prebuilt models' classes
    (and the layers and losses of `keras_capsules` they use) for deserialization.
    """
    import keras

    import applications  # noqa: F401  (registers the application classes)

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

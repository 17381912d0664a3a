"""Presets: a trained model as a folder of config, weights and metadata, keras-hub style.

A preset folder holds `config.json` (the model's Keras serialization),
`model.weights.h5` (its weights, float32 or stored as float16) and
`metadata.json` (how it was made, its test accuracy, and the SHA-256 of the
weights file, checked before every load). The presets the package ships keep
their config and metadata in `applications/presets/NAME`, and their weights in
the `keras-capsules-presets` distribution (`keras_capsules_presets/NAME`), or,
where it is not installed, in Keras's cache, downloaded once from
`$KERAS_CAPSULES_PRESETS_URL/NAME/model.weights.h5`.
"""

import datetime
import json
import os
import warnings

import keras

from applications._transfer import transfer_weights
from applications._weights_file import copy_weights
from applications._weights_file import load_weights
from applications._weights_file import sha256
from keras_capsules import utils
from keras_capsules.utils import require
from keras_capsules.utils import write_json

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.weights.h5"
METADATA_FILE = "metadata.json"
PRESETS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "presets")
PRESETS_URL_VARIABLE = "KERAS_CAPSULES_PRESETS_URL"
"""The environment variable naming where the shipped presets' weights can be downloaded."""
_WEIGHTS_DTYPES = (None, "float32", "float16")


def _shipped():
    """Names of the presets shipped with the package, sorted."""
    if not os.path.isdir(PRESETS_DIR):
        return []
    return sorted(
        name
        for name in os.listdir(PRESETS_DIR)
        if os.path.isfile(os.path.join(PRESETS_DIR, name, METADATA_FILE))
    )


def _read_json(path):
    """The JSON object (a dict) in `path`; a `ValueError` naming the file otherwise."""
    try:
        with open(path) as f:
            value = json.load(f)
    except FileNotFoundError:
        raise ValueError(f"The preset has no {os.path.basename(path)}: {path}") from None
    except RecursionError:  # Python's parser recurses once per level of nesting
        raise ValueError(
            f"Cannot read {path}: it nests its lists or objects deeper than Python's JSON "
            "parser can follow; a preset's file is a few levels deep, so this one is damaged "
            "or not a preset's. Write the preset with save_to_preset()."
        ) from None
    except (OSError, ValueError) as error:
        raise ValueError(f"Cannot read {path}: {error}") from None
    if not isinstance(value, dict):
        raise ValueError(
            f"{path} holds a JSON {type(value).__name__}, not an object: the file is not a "
            "preset's; write the preset with save_to_preset()."
        )
    return value


def list_presets():
    """The presets shipped with keras-capsules, one dict each.

    Returns:
        A list sorted by name of dicts with `"name"`, `"model"` (the class to
        call `from_preset` on), `"data"` (the data set it was trained on),
        `"test_accuracy"` (on the full test set, with the weights as stored),
        `"parameters"`, `"size"` (bytes of the weights file) and
        `"description"`.

    Example:

    >>> import applications
    >>> names = [preset["name"] for preset in applications.list_presets()]
    """
    presets = []
    for name in _shipped():
        folder = os.path.join(PRESETS_DIR, name)
        metadata = _read_json(os.path.join(folder, METADATA_FILE))
        presets.append(
            {
                "name": name,
                "model": metadata.get("class_name"),
                "data": (metadata.get("data") or {}).get("name"),
                "test_accuracy": metadata.get("test_accuracy"),
                "parameters": metadata.get("parameter_count"),
                "size": metadata.get("weights_bytes"),
                "description": metadata.get("description", ""),
            }
        )
    return presets


def _hub_download(preset):
    """A local folder for an `hf://` or `kaggle://` handle, through the hub's own client."""
    scheme, handle = preset.split("://", 1)
    if scheme == "hf":
        hub = require("huggingface_hub", f"Loading the preset {preset!r}")
        return hub.snapshot_download(repo_id=handle)
    kagglehub = require("kagglehub", f"Loading the preset {preset!r}")
    return kagglehub.model_download(handle)


def preset_folder(preset):
    """The local folder of `preset`: a shipped name, a folder, or an `hf://`/`kaggle://` handle.

    A preset folder in the working directory named like a shipped preset
    (`save_to_preset("capsnet_mnist")`) is the one loaded, with a warning
    naming both: the user's own files are never passed over in silence.
    """
    if not isinstance(preset, (str, os.PathLike)):
        raise ValueError(
            f"`preset` must be a preset name, a folder or an hf:// or kaggle:// handle. "
            f"Received: preset={preset!r}"
        )
    preset = os.fspath(preset)
    if preset.startswith(("hf://", "kaggle://")):
        return _hub_download(preset)
    if preset in _shipped():
        if os.path.isfile(os.path.join(preset, METADATA_FILE)):  # the user's own, saved here
            warnings.warn(
                f"Loading the preset folder {os.path.abspath(preset)}, which is named like the "
                f"shipped preset {preset!r}: rename the folder, or load from another working "
                "directory, for the shipped one.",
                stacklevel=3,
            )
            return preset
        return os.path.join(PRESETS_DIR, preset)
    if os.path.isdir(preset):
        return preset
    if "://" in preset:
        raise ValueError(
            f"Unknown preset scheme in {preset!r}: use hf:// (Hugging Face) or kaggle:// (Kaggle)."
        )
    raise ValueError(
        f"No preset {preset!r}: not a shipped preset ({', '.join(_shipped()) or 'none'}) "
        "and not a folder."
    )


def shipped_weights(name, metadata):
    """The weights file of the shipped preset `name`: installed, cached, or downloaded now."""
    installed = utils.installed_folder("keras_capsules_presets", name)
    if installed is not None and os.path.isfile(os.path.join(installed, WEIGHTS_FILE)):
        return os.path.join(installed, WEIGHTS_FILE)
    base = os.environ.get(PRESETS_URL_VARIABLE)
    hint = utils.install_hint(utils.PRESETS_DISTRIBUTION)
    if not base:
        raise ValueError(
            f"The weights of the preset {name!r} are not installed: {hint}; or set "
            f"{PRESETS_URL_VARIABLE} to a server holding NAME/{WEIGHTS_FILE}."
        )
    try:
        return utils.download(
            f"{base.rstrip('/')}/{name}/{WEIGHTS_FILE}",
            WEIGHTS_FILE,
            os.path.join("models", "keras_capsules", name),
            sha256=metadata.get("weights_sha256"),
        )
    except OSError as error:
        raise ValueError(
            f"The weights of the preset {name!r} are not installed and {error}. "
            f"Install them: {hint}."
        ) from None


def check_weights(folder, metadata):
    """Raise a `ValueError` naming the weights file unless its SHA-256 is the recorded one."""
    path = os.path.join(folder, WEIGHTS_FILE)
    expected = metadata.get("weights_sha256")
    shipped = os.path.dirname(os.path.abspath(folder)) == PRESETS_DIR
    if not os.path.isfile(path) and shipped and expected:
        path = shipped_weights(os.path.basename(os.path.abspath(folder)), metadata)
    if not os.path.isfile(path):
        raise ValueError(f"The preset has no weights file: {path}")
    if not expected:
        raise ValueError(
            f"{os.path.join(folder, METADATA_FILE)} records no weights_sha256, so {path} "
            "cannot be checked; write the preset with save_to_preset()."
        )
    actual = sha256(path)
    if actual != expected:
        raise ValueError(
            f"{path} is not the file this preset was saved with: its SHA-256 is {actual}, "
            f"metadata.json records {expected}. The file is truncated or altered; "
            "download or copy the preset again."
        )
    return path


def read_metadata(folder):
    """The `metadata.json` of the preset folder `folder`, as a dict."""
    return _read_json(os.path.join(folder, METADATA_FILE))


def preset_metadata(preset):
    """What a preset's `metadata.json` records: how it was made, and on what data.

    Args:
        preset: the name of a shipped preset (`applications.list_presets()`),
            a folder written by `save_to_preset`, or an `hf://` or `kaggle://`
            handle, downloaded by the hub's own client (as `from_preset` does).

    Returns:
        A dict: the `metadata` given to `save_to_preset` (the shipped presets
        record the data set as `"data"`, their recipe and test accuracy) and
        what it adds: the class, the parameter count, the weights' dtype, size
        and SHA-256, and the Keras and keras-capsules versions.

    Example:

    >>> import applications
    >>> metadata = applications.preset_metadata("capsnet_mnist")
    >>> data = metadata["data"]
    >>> data["name"], metadata["class_name"]
    ('mnist', 'CapsNet')
    """
    return read_metadata(preset_folder(preset))


def load_preset(cls, preset, **kwargs):
    """A `cls` built from `preset`'s config (updated with `kwargs`) with its checked weights."""
    folder = preset_folder(preset)
    metadata = read_metadata(folder)
    weights = check_weights(folder, metadata)
    config_path = os.path.join(folder, CONFIG_FILE)
    config = _read_json(config_path)
    if not isinstance(config.get("config"), dict):
        raise ValueError(
            f'{config_path} has no "config" object (the model\'s arguments): the file is not '
            "a preset's; write the preset with save_to_preset()."
        )
    registered = config.get("registered_name")
    stored = keras.saving.get_registered_object(registered) if registered else None
    if stored is None:
        raise ValueError(
            f"{config_path} names the class {registered!r}, which is no model Keras knows: "
            "import the module that registers it (applications registers its own) or "
            "check the file."
        )
    if not issubclass(stored, cls):
        raise ValueError(
            f"The preset {preset!r} holds a {stored.__name__}, not a {cls.__name__}: load it "
            f"with applications.{stored.__name__}.from_preset({preset!r})."
        )
    own = config["config"]
    if not any(key in kwargs for key in _RESHAPING):
        model = stored.from_config(_replaced(stored, own, kwargs))
        load_weights(model, weights)
        return model
    replaced = _replaced(stored, own, kwargs)
    # Classes given by count or by names alone: the preset's other value described its own.
    for given, other in (("num_classes", "class_names"), ("class_names", "num_classes")):
        if given in kwargs and other not in kwargs:
            replaced[other] = None
    model = stored.from_config(replaced)
    same_names = list(model.class_names or []) == list(own.get("class_names") or [])
    new_classes = model.num_classes != own.get("num_classes") or not same_names
    source = stored.from_config({**own, "compile": False})
    load_weights(source, weights)
    model.preset_layers = tuple(transfer_weights(source, model, new_head=new_classes))
    return model


def _replaced(stored, own, kwargs):
    """The config `own` with the arguments `kwargs`; the backbone's go into the backbone's.

    A family's classifier (`stored.BACKBONE`) holds its backbone's config,
    with the images' `input_shape`; a new `input_shape` also resizes to it
    in the image converter.
    """
    replaced = {**own, **kwargs}
    converter = own.get("image_converter")
    if "input_shape" in kwargs and "image_converter" not in kwargs and isinstance(converter, dict):
        # The converter's size and colour follow the new images; its scale stays.
        sized = {**converter["config"], "image_size": None, "channels": None}
        replaced["image_converter"] = {**converter, "config": sized}
    backbone = own.get("backbone")
    if stored.BACKBONE is None or not isinstance(backbone, dict):
        return replaced
    if "input_shape" in kwargs:
        inner = {**backbone.get("config", {}), "input_shape": replaced.pop("input_shape")}
        replaced["backbone"] = {**backbone, "config": inner}
    return replaced


_RESHAPING = ("num_classes", "class_names", "input_shape")
"""`from_preset` arguments that start a model of other sizes or classes from the preset's layers."""


def save_preset(model, preset_dir, metadata=None, weights_dtype=None):
    """Write `model` as a preset folder; see `save_to_preset`."""
    if weights_dtype not in _WEIGHTS_DTYPES:
        raise ValueError(
            "`weights_dtype` must be None, 'float32' or 'float16'. "
            f"Received: weights_dtype={weights_dtype!r}"
        )
    if metadata is not None and not isinstance(metadata, dict):
        raise ValueError(f"`metadata` must be a dict or None. Received: metadata={metadata!r}")
    import keras_capsules

    # Everything is checked before anything is written: an existing preset stays whole.
    config = keras.saving.serialize_keras_object(model)
    config.pop("compile_config", None)
    config.pop("build_config", None)
    for name, value in (("metadata", metadata), ("the model's config", config)):
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as error:
            raise ValueError(
                f"{'`metadata`' if name == 'metadata' else name.capitalize()} cannot be written "
                f"as JSON ({error}), so nothing was written. Give JSON values: strings, "
                "numbers, lists and dicts."
            ) from None
    preset_dir = os.fspath(preset_dir)
    os.makedirs(preset_dir, exist_ok=True)
    weights = os.path.join(preset_dir, WEIGHTS_FILE)
    # Keras wants the `.weights.h5` suffix, which `replacing`'s temporary name lacks.
    saved = os.path.join(preset_dir, f".{os.getpid()}.saved.weights.h5")
    partial = os.path.join(preset_dir, f".{os.getpid()}.partial.weights.h5")
    try:
        model.save_weights(saved)
        copy_weights(saved, partial, float16=weights_dtype == "float16")
        os.replace(partial, weights)
    finally:
        for path in (saved, partial):
            if os.path.exists(path):
                os.remove(path)
    write_json(os.path.join(preset_dir, CONFIG_FILE), config)
    write_json(
        os.path.join(preset_dir, METADATA_FILE),
        {
            **(metadata or {}),
            "class_name": type(model).__name__,
            "parameter_count": int(model.count_params()),
            "weights_dtype": weights_dtype or "float32",
            "weights_sha256": sha256(weights),
            "weights_bytes": os.path.getsize(weights),
            "keras_version": keras.__version__,
            "keras_capsules_version": keras_capsules.__version__,
            "date_saved": datetime.datetime.now(datetime.timezone.utc).isoformat(
                timespec="seconds"
            ),
        },
    )
    return preset_dir


class PresetMixin:
    """`from_preset` and `save_to_preset` for the applications.

    Every application is a `PresetMixin`: `from_preset` on an application's
    class loads presets of that class (or of a subclass), and on
    `PresetMixin` itself a preset of any application.

    Example:

    >>> import applications
    >>> model = applications.PresetMixin.from_preset("capsnet_mnist")
    >>> type(model).__name__
    'CapsNet'
    """

    @classmethod
    def from_preset(cls, preset, **kwargs):
        """A trained model from a preset: a shipped name, a folder, or a hub handle.

        The weights file's SHA-256 is checked against the preset's
        `metadata.json` before it is loaded: a truncated or altered file is a
        `ValueError` naming it. Weights stored as float16 are cast back to the
        model's dtype.

        Args:
            preset: the name of a shipped preset (`applications.list_presets()`),
                a folder written by `save_to_preset`, or a handle
                `hf://OWNER/REPO` (needs `pip install "keras-capsules[hf]"`) or
                `kaggle://OWNER/MODEL/FRAMEWORK/VARIATION[/VERSION]` (needs
                `pip install "keras-capsules[kaggle]"`), downloaded by
                huggingface_hub's or kagglehub's own client.
            **kwargs: constructor arguments that replace the preset's config,
                e.g. `compile=False` or `dtype="mixed_bfloat16"`. With
                `num_classes` or `class_names` for other classes, or
                `input_shape` for other images, the model is built anew and
                takes from the preset every layer that still fits (same
                name, same weight shapes; a grey first convolution is spread
                over colour channels); with other classes the class capsules
                and the decoder start untrained. `model.preset_layers` names
                the layers taken, and `model.backbone.trainable = False`
                freezes the feature extractor before `fit`.

        Returns:
            The model, of the class the preset was saved from, which must be
            this class or a subclass of it.

        Example:

        >>> import tempfile, applications
        >>> model = applications.EfficientCapsNet(conv_filters=(4, 4, 4, 32),
        ...                                       primary_capsule_types=4, decoder_units=None)
        >>> folder = model.save_to_preset(tempfile.mkdtemp())
        >>> same = applications.EfficientCapsNet.from_preset(folder)
        >>> model.count_params() == same.count_params()
        True

        For other classes, keeping the trained feature extractor:

        >>> pets = applications.EfficientCapsNet.from_preset(folder, class_names=["cat", "dog"])
        >>> pets.preset_layers[:2]
        ('backbone/conv1', 'backbone/batch_norm1')
        >>> pets.backbone.trainable = False  # train the class capsules alone
        """
        return load_preset(cls, preset, **kwargs)

    def save_to_preset(self, preset_dir, metadata=None, weights_dtype=None):
        """Write this model as a preset folder that `from_preset` loads.

        Writes `config.json` (the model's config, without its compile state),
        `model.weights.h5` and `metadata.json`: `metadata` plus the class, the
        parameter count, the weights' dtype, size and SHA-256, and the Keras
        and keras-capsules versions. Each file is written under a temporary
        name and renamed into place, the metadata last.

        Args:
            preset_dir: the folder to write (created if needed).
            metadata: a dict of JSON values to record, e.g. the data set and
                the test accuracy.
            weights_dtype: `"float16"` stores float32 weights as float16 (half
                the bytes; `from_preset` casts them back); `None` or
                `"float32"` stores them as they are.

        Returns:
            `preset_dir`.
        """
        return save_preset(self, preset_dir, metadata=metadata, weights_dtype=weights_dtype)

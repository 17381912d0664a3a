"""Weights files: a checksum, loading one with one line per fault, writing a preset's lean."""

import hashlib
import os
import tempfile
import warnings

import numpy as np


def sha256(path):
    """The SHA-256 of the file at `path`, as hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def load_weights(model, weights):
    """Load `weights` into `model`; one line if they are damaged or not its config's weights."""
    _check_readable(weights, "The preset's weights file", "Download or copy the preset again.")
    with warnings.catch_warnings():
        # A preset holds no optimizer state (a compiled model's optimizer is new).
        warnings.filterwarnings("ignore", "Skipping variable loading for optimizer")
        # What Keras says of a nested model whose weights do not fit: the error says it.
        warnings.filterwarnings("ignore", "Skipping nested container")
        try:
            model.load_weights(weights)
        except OSError as error:
            raise ValueError(
                f"The preset's weights file {weights} is damaged: it opens but cannot be read "
                f"({first_line(error)}); download or copy the preset again."
            ) from None
        except ValueError as error:
            raise ValueError(
                f"{weights} does not hold the weights of the model its config.json "
                f"describes: {_mismatch(model, weights, error)}. The preset's files come from "
                "different models; write the preset again with save_to_preset()."
            ) from None


def _mismatch(model, weights, error):
    """The first weight of `model` whose shape `weights` (a `.weights.h5` file) does not hold.

    Keras's own error on a nested model names no shape, so the files are
    compared: `model`'s weights are set to their index and saved, which tells
    which variable each dataset of Keras's layout is, and the datasets of
    `weights` at the same places are read for their shapes.
    """
    import h5py

    for index, variable in enumerate(model.weights):
        variable.assign(np.full(tuple(variable.shape), index, dtype=variable.dtype))
    with tempfile.TemporaryDirectory() as folder:
        marked = os.path.join(folder, "marked.weights.h5")
        model.save_weights(marked)
        with h5py.File(marked, "r") as want, h5py.File(weights, "r") as got:
            places = {}  # the index of each variable -> its dataset in Keras's layout

            def mark(key, item):
                if isinstance(item, h5py.Dataset) and item.size and not key.startswith("optimizer"):
                    places.setdefault(int(item[()].flat[0]), key)

            want.visititems(mark)
            for index, variable in enumerate(model.weights):  # in the model's order
                if index not in places:
                    continue
                stored, shape = got.get(places[index]), tuple(variable.shape)
                if not isinstance(stored, h5py.Dataset):
                    return f"{variable.path} of the shape {shape} is not in the file"
                if tuple(stored.shape) != shape:
                    return (
                        f"{variable.path} has the shape {shape} in the model and "
                        f"{tuple(stored.shape)} in the file"
                    )
    return str(error).strip().splitlines()[0][:300]


def load_weights_file(model, path, what):
    """Load the Keras weights file `path` into `model`, or say in one line why it cannot be.

    A file that cannot be read as HDF5 (empty, truncated, random bytes, another
    format) is damaged; an HDF5 file without Keras's layout is not a weights
    file; a weights file whose variables do not fit `model` (another
    backbone's) holds another model's weights. Each is a `ValueError` naming
    `what` and `path`, without Keras's warnings.

    Args:
        model: a built Keras model.
        path: the weights file: `.weights.h5`, or a Keras 2 `.h5` (as
            `keras.applications` downloads).
        what: what the file is to the user, for the message, e.g.
            `"The backbone weights file"`.
    """
    import h5py

    path = os.fspath(path)
    _check_readable(path, what)
    with h5py.File(path, "r") as f:
        legacy = "layer_names" in f.attrs
        keras_layout = legacy or any(key in f for key in ("layers", "vars"))
    if not keras_layout:
        raise ValueError(
            f"{what} {path} is an HDF5 file but not a Keras weights file (it holds no layers); "
            "save one with model.save_weights('NAME.weights.h5')."
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Keras warns once per layer that does not fit
        try:
            model.load_weights(path)
        except OSError as error:
            raise ValueError(
                f"{what} {path} is damaged: it opens but cannot be read ({first_line(error)}); "
                "copy or download it again."
            ) from None
        except (ValueError, KeyError) as error:
            # Keras 2's files (`layer_names`) are compared by Keras's own message.
            detail = first_line(error) if legacy else _mismatch(model, path, error)
            raise ValueError(
                f"{what} {path} holds the weights of another model, not of {model.name}: "
                f"{detail}. Pass the weights of this model."
            ) from None


def _check_readable(path, what, again="Copy or download it again."):
    """A `ValueError` naming `path` (`what`, then `again`) unless every part of it reads."""
    import h5py

    if not os.path.isfile(path):
        raise ValueError(f"{what} {path} does not exist.")
    if os.path.getsize(path) == 0:
        raise ValueError(f"{what} {path} is damaged: it is empty. {again}")
    try:
        with h5py.File(path, "r"):
            pass
    except OSError as error:
        detail = first_line(error).replace("Unable to synchronously open file ", "")
        raise ValueError(
            f"{what} {path} is damaged: it is not a readable HDF5 weights file {detail}; it "
            f"is truncated or corrupt, or another format. {again}"
        ) from None
    try:  # every group and array: a file damaged inside opens, and loads in part
        with h5py.File(path, "r") as f:
            f.visititems(_read)
    except (OSError, RuntimeError, KeyError, ValueError) as error:
        raise ValueError(
            f"{what} {path} is damaged: it opens, but part of it cannot be read "
            f"({first_line(error)}). {again}"
        ) from None


def _read(name, item):
    """Read the array `item` whole (for `visititems`)."""
    import h5py

    if isinstance(item, h5py.Dataset):
        item[()]


def first_line(error):
    """The first line of `error`'s message, at most 200 characters."""
    text = str(error).strip()
    return text.splitlines()[0][:200] if text else type(error).__name__


def copy_weights(source, target, float16=False):
    """Copy the Keras weights file `source` to `target` without the optimizer's state.

    A preset is the model, not a training run: Adam's two moments would
    triple the file. With `float16`, float32 arrays are stored as float16.
    """
    import h5py

    def copy(src, dst):
        dst.attrs.update(src.attrs)
        for key, item in src.items():
            if isinstance(item, h5py.Group):
                if not (src.name == "/" and key == "optimizer"):
                    copy(item, dst.create_group(key))
                continue
            values = item[()]
            if float16 and values.dtype == np.float32:
                values = values.astype(np.float16)
                if not np.all(np.isfinite(values)):
                    raise ValueError(
                        f"The weights {item.name!r} overflow float16; "
                        "save them with weights_dtype='float32'."
                    )
            dst.create_dataset(key, data=values)
            dst[key].attrs.update(item.attrs)

    with h5py.File(source, "r") as src, h5py.File(target, "w") as dst:
        copy(src, dst)

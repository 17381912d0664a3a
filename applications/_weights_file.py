"""A preset's weights file: its checksum, loading it in one line per fault, writing it lean."""

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
    """Load `weights` into `model`; one line if they are not the weights of its config."""
    with warnings.catch_warnings():
        # A preset holds no optimizer state (a compiled model's optimizer is new).
        warnings.filterwarnings("ignore", "Skipping variable loading for optimizer")
        # What Keras says of a nested model whose weights do not fit: the error says it.
        warnings.filterwarnings("ignore", "Skipping nested container")
        try:
            model.load_weights(weights)
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

"""Keras's internals: backups written whole, nested layers, models built unallocated.

`keras-capsules train` writes `BackupAndRestore`'s files whole or not at all
(a full disk must not leave a half-written HDF5 file): `backup_and_restore`
overrides the callback's `_save_model`, reads the names of the files and of the epoch and
batch it records (`BACKUP_ATTRIBUTES`), and builds the weights file in memory
with Keras's saving library (`weights_file_bytes`).

The layers nested in a model are walked with `Layer._flatten_layers`
(`flatten_layers`).

A model is built without allocating its weights (`unallocated`) in a
`keras.StatelessScope` that leaves its variables uninitialized; Keras keeps
them in its global list `uninitialized_variables` (`keras.src.backend.common.
global_state`), which the scope's caller must empty again, or the next scope
to close would allocate them.
"""

import contextlib
import io
import json
import os
import shutil

from keras_capsules._compat import changed
from keras_capsules._compat import internal

_LIBRARY = "keras"


BACKUP_ATTRIBUTES = (
    "_save_model",
    "_weights_path",
    "_training_metadata_path",
    "_current_epoch",
    "_last_batch_seen",
)
"""What `keras.callbacks.BackupAndRestore` has that the command's backup overrides or reads."""


def weights_file_bytes(model):
    """The bytes of the `.weights.h5` file `model.save_weights` writes, made in memory.

    Raises:
        InternalChanged: Keras's saving library is not the one this was written for.
    """
    store_class = internal(_LIBRARY, "keras.src.saving.saving_lib", "H5IOStore")
    save_state = internal(_LIBRARY, "keras.src.saving.saving_lib", "_save_state")
    buffer = io.BytesIO()
    store = store_class(buffer, mode="w")
    try:
        save_state(model, store, None, "", set())
    finally:
        store.close()
    return buffer.getvalue()


def flatten_layers(layer, include_self=True):
    """Every layer inside `layer`, nested models' layers included, once each.

    Keras has no public way to walk nested layers; its `Layer._flatten_layers`
    does it.

    Raises:
        InternalChanged: Keras's layers no longer have `_flatten_layers`.
    """
    walk = getattr(layer, "_flatten_layers", None)
    if not callable(walk):
        raise changed(_LIBRARY, "keras.layers.Layer._flatten_layers")
    return list(walk(include_self=include_self))


def check_backup_and_restore(callback):
    """Raise `InternalChanged` unless the `BackupAndRestore` `callback` has `BACKUP_ATTRIBUTES`."""
    for name in BACKUP_ATTRIBUTES:
        if not hasattr(callback, name):
            raise changed(_LIBRARY, f"keras.callbacks.BackupAndRestore.{name}")


def backup_and_restore(backup_dir):
    """Keras's `BackupAndRestore` into `backup_dir`, its files made in memory and renamed.

    Keras writes the weights with HDF5 straight into `latest.weights.h5`: on a
    full disk that leaves a truncated file, and HDF5 a file it can neither
    flush nor close, which it reports as it is collected and on which it
    crashes the interpreter at exit. Here the weights file is made in memory
    and each file (the weights, the metadata, their `.bkp` copies) is written
    under a temporary name and renamed into place: a failed write leaves the
    previous epoch's backup whole and raises a plain `OSError`.
    """
    import keras

    from keras_capsules._atomic import replacing
    from keras_capsules._atomic import write_bytes

    class BackupAndRestore(keras.callbacks.BackupAndRestore):
        """Keras's `BackupAndRestore`, each file written whole or not at all."""

        def _save_model(self):
            check_backup_and_restore(self)
            weights = weights_file_bytes(self.model)
            metadata = {"epoch": self._current_epoch, "batch": self._last_batch_seen}
            made = not os.path.isdir(self.backup_dir)
            os.makedirs(self.backup_dir, exist_ok=True)
            try:
                if self.double_checkpoint:
                    for path in (self._weights_path, self._training_metadata_path):
                        if os.path.exists(path):
                            with replacing(f"{path}.bkp") as temporary:
                                shutil.copyfile(path, temporary)
                write_bytes(self._weights_path, weights)
                write_bytes(self._training_metadata_path, json.dumps(metadata).encode())
            except BaseException:
                if made:  # an empty backup would stand for a run interrupted before an epoch
                    shutil.rmtree(self.backup_dir, ignore_errors=True)
                raise

    return BackupAndRestore(backup_dir, double_checkpoint=True, delete_checkpoint=False)


@contextlib.contextmanager
def unallocated():
    """Build models inside: their variables have shapes and no values, nothing is allocated.

    For what the shapes tell (parameters, the sizes of the layers' outputs);
    the models built inside cannot run, and are to be dropped.

    Raises:
        InternalChanged: Keras no longer keeps its uninitialized variables where this reads.
    """
    import keras

    state = internal(_LIBRARY, "keras.src.backend.common.global_state")
    before = state.get_global_attribute("uninitialized_variables")
    if not isinstance(before, (list, type(None))):
        raise changed(_LIBRARY, "global_state's uninitialized_variables", "not a list")
    kept = list(before or [])
    try:
        with keras.StatelessScope(initialize_variables=False):
            yield
    finally:
        state.set_global_attribute("uninitialized_variables", kept)


def check():
    """Make sure the Keras internals that keras-capsules uses are there.

    Raises:
        InternalChanged: one is gone; the message names it and Keras's version.
    """
    import keras

    internal(_LIBRARY, "keras.src.saving.saving_lib", "H5IOStore")
    internal(_LIBRARY, "keras.src.saving.saving_lib", "_save_state")
    internal(_LIBRARY, "keras.src.backend.common.global_state", "set_global_attribute")
    if not callable(getattr(keras.layers.Layer, "_flatten_layers", None)):
        raise changed(_LIBRARY, "keras.layers.Layer._flatten_layers")
    if not callable(getattr(keras.callbacks.BackupAndRestore, "_save_model", None)):
        raise changed(_LIBRARY, "keras.callbacks.BackupAndRestore._save_model")

"""Keras's internals: backups written whole, nested layers, models built unallocated.

`keras-capsules train` writes `BackupAndRestore`'s files whole or not at all
(a full disk must not leave a half-written HDF5 file): it overrides the
callback's `_save_model`, reads the names of the files and of the epoch and
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

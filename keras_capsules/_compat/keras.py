"""Keras's internals: the optimizer's step in JAX's training step; backups written whole.

On JAX, the compiled training step holds the optimizer's variables as
arguments: Keras's trainer gives their values to
`Model.compute_loss_and_updates` as `optimizer_variables`, in the order of
`optimizer.variables`, while `optimizer.iterations` read there is the value it
had when the step was traced. A model whose loss depends on the step (the
spread margin of `applications.MatrixCapsNet`) takes it from there.

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
import inspect
import io

from keras_capsules._compat import changed
from keras_capsules._compat import internal

_LIBRARY = "keras"


def optimizer_step(optimizer, optimizer_variables):
    """The value of `optimizer.iterations` among `optimizer_variables` (JAX's training step).

    Args:
        optimizer: the model's optimizer.
        optimizer_variables: the values of `optimizer.variables`, in their
            order, that the JAX backend gives `Model.compute_loss_and_updates`.

    Raises:
        InternalChanged: the values do not match the optimizer's variables.
    """
    variables = optimizer.variables
    if len(variables) != len(optimizer_variables):
        raise changed(
            _LIBRARY,
            "compute_loss_and_updates's optimizer_variables",
            f"{len(optimizer_variables)} values for the optimizer's {len(variables)} variables",
        )
    for variable, value in zip(variables, optimizer_variables):
        if variable is optimizer.iterations:
            return value
    raise changed(_LIBRARY, "optimizer.variables", "the step, optimizer.iterations, is not one")


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
    if keras.backend.backend() != "jax":
        return
    parameters = inspect.signature(keras.Model.compute_loss_and_updates).parameters
    if "optimizer_variables" not in parameters:
        raise changed(_LIBRARY, "the JAX trainer's compute_loss_and_updates(optimizer_variables)")

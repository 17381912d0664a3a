"""The Keras internal keras-capsules uses (JAX's training step) is there, or fails by name."""

import keras
import numpy as np
import pytest

from keras_capsules._compat import InternalChanged
from keras_capsules._compat import keras as compat


def test_keras_internals_are_there():
    compat.check()


def test_the_weights_file_made_in_memory_is_the_one_save_weights_writes(tmp_path):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    data = compat.weights_file_bytes(model)
    (tmp_path / "a.weights.h5").write_bytes(data)
    other = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    other.load_weights(tmp_path / "a.weights.h5")
    for got, want in zip(other.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(got, want)


def test_a_backup_callback_without_what_the_command_reads_is_named():
    compat.check_backup_and_restore(keras.callbacks.BackupAndRestore("unused"))
    with pytest.raises(InternalChanged, match=r"BackupAndRestore\._save_model.*keras"):
        compat.check_backup_and_restore(object())


def test_flatten_layers_walks_nested_models_or_names_the_internal():
    inner = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="inner_dense")])
    outer = keras.Sequential([keras.Input((3,)), inner, keras.layers.Dense(1, name="top")])
    names = {layer.name for layer in compat.flatten_layers(outer)}
    assert {"inner_dense", "top", inner.name, outer.name} <= names
    assert outer.name not in {layer.name for layer in compat.flatten_layers(outer, False)}
    with pytest.raises(InternalChanged, match=r"_flatten_layers.*keras"):
        compat.flatten_layers(object())

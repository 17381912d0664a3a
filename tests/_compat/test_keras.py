"""The Keras internal keras-capsules uses (JAX's training step) is there, or fails by name."""

import re
import types

import keras
import numpy as np
import pytest

from keras_capsules._compat import InternalChanged
from keras_capsules._compat import keras as compat
from tests.conftest import BACKEND


def _optimizer():
    optimizer = keras.optimizers.Adam(0.01)
    optimizer.build([keras.Variable(np.zeros(3, "float32"))])
    optimizer.iterations.assign(7)
    return optimizer


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


def test_finds_the_step_among_the_values_of_the_optimizers_variables():
    optimizer = _optimizer()
    values = [variable.value for variable in optimizer.variables]
    assert int(keras.ops.convert_to_numpy(compat.optimizer_step(optimizer, values))) == 7


def test_values_that_are_not_the_optimizers_variables_are_named():
    optimizer = _optimizer()
    values = [variable.value for variable in optimizer.variables]
    with pytest.raises(InternalChanged, match="optimizer_variables.*3 values for the optimizer"):
        compat.optimizer_step(optimizer, values[:3])
    # An optimizer whose variables would no longer hold its step.
    without_step = types.SimpleNamespace(
        variables=optimizer.variables[1:], iterations=optimizer.iterations
    )
    with pytest.raises(InternalChanged, match="optimizer.iterations, is not one"):
        compat.optimizer_step(without_step, values[1:])


@pytest.mark.skipif(BACKEND != "jax", reason="the JAX trainer's internal")
def test_the_jax_training_step_gives_the_optimizer_variables():
    given = []

    class Model(keras.Model):
        def compute_loss_and_updates(self, *args, optimizer_variables=None, **kwargs):
            given.append(optimizer_variables is not None)  # when the step is traced
            return super().compute_loss_and_updates(
                *args, optimizer_variables=optimizer_variables, **kwargs
            )

    inputs = keras.Input((3,))
    model = Model(inputs, keras.layers.Dense(1)(inputs))
    model.compile(optimizer="sgd", loss="mse")
    model.fit(np.ones((4, 3), "float32"), np.ones((4, 1), "float32"), epochs=1, verbose=0)
    assert given and all(given)


@pytest.mark.skipif(BACKEND != "jax", reason="the JAX trainer's internal")
def test_a_jax_trainer_without_it_is_named_with_keras_version(monkeypatch):
    def compute_loss_and_updates(self, trainable_variables, non_trainable_variables, x, y):
        pass

    monkeypatch.setattr(keras.Model, "compute_loss_and_updates", compute_loss_and_updates)
    with pytest.raises(
        InternalChanged, match=rf"optimizer_variables.*keras {re.escape(keras.__version__)}"
    ):
        compat.check()

import dataclasses
import json
import os

import keras
import numpy as np
import pytest

import applications
from applications import _preset
from applications import recipe as recipe_module
from keras_capsules.callbacks import SpreadMarginSchedule

TINY = dict(conv_filters=8, primary_capsule_types=2, capsule_dim=4, decoder_units=None)
OPTIMIZER_ARGUMENTS = ("learning_rate", "decay_steps", "decay_rate")


def _schedule(model):
    return model.optimizer.get_config()["learning_rate"]["config"]


@pytest.mark.parametrize(
    "build, expected",
    [
        (lambda: applications.CapsNetMNIST(**TINY), (1e-3, 2000, 0.96)),
        (lambda: applications.EfficientCapsNet(decoder_units=None), (5e-4, 3750, 0.97)),
        (lambda: applications.MatrixCapsNet(A=8, B=2, C=2, D=2, iterations=1), (3e-3, 2000, 0.96)),
        (lambda: applications.BaselineCNN(), (1e-3, 2000, 0.96)),
    ],
)
def test_compile_with_no_arguments_is_the_recipe_and_the_config_holds_no_optimizer(build, expected):
    model = build()
    schedule = _schedule(model)
    got = (schedule["initial_learning_rate"], schedule["decay_steps"], schedule["decay_rate"])
    assert got == pytest.approx(expected)
    recipe = type(model).RECIPE
    assert (recipe.learning_rate, recipe.decay_steps, recipe.decay_rate) == pytest.approx(expected)
    assert not set(OPTIMIZER_ARGUMENTS) & set(model.get_config())
    assert model.get_compile_config()["metrics"] == ["accuracy"]


def test_optimizer_arguments_are_no_model_arguments():
    for name in OPTIMIZER_ARGUMENTS:
        with pytest.raises(ValueError, match=name):
            applications.CapsNet(**TINY, **{name: 1})


def test_a_capsule_classifier_refuses_another_loss_a_cnn_takes_it():
    with pytest.raises(ValueError, match=r"computes its own loss.*loss='mse'"):
        applications.CapsNetMNIST(**TINY).compile(loss="mse")
    with pytest.raises(ValueError, match="own loss"):
        applications.MatrixCapsNet(A=8, B=2, C=2, D=2, iterations=1).compile(loss="mse")
    cnn = applications.BaselineCNN()
    assert cnn.loss == "sparse_categorical_crossentropy"
    cnn.compile(optimizer="sgd", loss="categorical_crossentropy")
    assert cnn.loss == "categorical_crossentropy"


def test_a_given_optimizer_replaces_the_recipes_and_survives_a_round_trip(tmp_path):
    model = applications.CapsNetMNIST(**TINY)
    model.compile(optimizer=keras.optimizers.SGD(0.05))
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (8, 28, 28, 1)).astype("uint8")
    model.fit(x, np.arange(8), batch_size=4, verbose=0)
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded.optimizer, keras.optimizers.SGD)
    assert float(loaded.optimizer.learning_rate) == pytest.approx(0.05)
    assert int(loaded.optimizer.iterations) == 2
    assert loaded.get_compile_config()["metrics"] == ["accuracy"]


def test_the_recipe_decays_per_epoch_only_where_it_says_so():
    efficient = applications.EfficientCapsNet.RECIPE
    assert efficient.decay_every_epoch and efficient.batch_size == 16
    per_epoch = efficient.optimizer(steps_per_epoch=7).get_config()["learning_rate"]
    assert per_epoch["config"]["decay_steps"] == 7
    fixed = applications.CapsNet.RECIPE.optimizer(steps_per_epoch=7).get_config()
    assert fixed["learning_rate"]["config"]["decay_steps"] == 2000


def test_the_spread_margin_rises_in_the_recipes_callbacks_only_for_em_routing():
    (schedule,) = applications.MatrixCapsNet.RECIPE.callbacks(steps=50)
    assert isinstance(schedule, SpreadMarginSchedule)
    assert (schedule.start, schedule.end, schedule.steps) == (0.2, 0.9, 50)
    assert applications.CapsNet.RECIPE.callbacks(steps=50) == []


def test_a_variation_is_a_replace_and_json():
    varied = dataclasses.replace(applications.MatrixCapsNet.RECIPE, learning_rate=1e-3)
    config = varied.get_config()
    assert json.loads(json.dumps(config)) == config
    assert config["learning_rate"] == 1e-3 and config["spread_margin"] == [0.2, 0.9]
    assert applications.MatrixCapsNet.RECIPE.learning_rate == 3e-3


@pytest.mark.parametrize(
    "changes, name",
    [
        ({"batch_size": 0}, "batch_size"),
        ({"learning_rate": -1.0}, "learning_rate"),
        ({"decay_rate": 0}, "decay_rate"),
        ({"decay_steps": 1.5}, "decay_steps"),
        ({"max_shift": -1}, "max_shift"),
        ({"spread_margin": (0.2, 1.5)}, "spread_margin"),
        ({"spread_margin": (0.2,)}, "spread_margin"),
        ({"bfloat16_on_cpu": "yes"}, "bfloat16_on_cpu"),
    ],
)
def test_a_bad_recipe_names_its_argument(changes, name):
    with pytest.raises(ValueError, match=name):
        dataclasses.replace(applications.CapsNet.RECIPE, **changes)


@pytest.mark.parametrize("name", [preset["name"] for preset in applications.list_presets()])
def test_no_shipped_preset_stores_an_optimizer_argument(name):
    with open(os.path.join(_preset.PRESETS_DIR, name, _preset.CONFIG_FILE)) as f:
        config = json.load(f)["config"]
    assert not set(OPTIMIZER_ARGUMENTS) & set(config), name


@pytest.fixture
def machine(monkeypatch):
    """Set the backend's name, the CPU's native bfloat16 and a visible accelerator."""

    def set_machine(backend="tensorflow", native=True, accelerator=False):
        monkeypatch.setattr(recipe_module.keras.backend, "backend", lambda: backend)
        monkeypatch.setattr(recipe_module, "native_bfloat16", lambda: native)
        monkeypatch.setattr(recipe_module, "has_accelerator", lambda: accelerator)

    return set_machine


@pytest.mark.parametrize(
    "machine_kind, expected",
    [
        ({}, "mixed_bfloat16"),
        ({"native": False}, "float32"),  # emulated bfloat16: several times slower
        ({"native": None}, "float32"),  # not known: no guess
        ({"accelerator": True}, "float32"),  # measured on CPUs only
        ({"backend": "jax"}, "float32"),
        ({"backend": "torch"}, "float32"),
    ],
)
def test_auto_precision_is_bfloat16_only_where_measured(machine, machine_kind, expected):
    machine(**machine_kind)
    assert applications.CapsNet.RECIPE.auto_precision() == expected
    assert applications.EfficientCapsNet.RECIPE.auto_precision() == expected


def test_auto_precision_keeps_float32_where_bfloat16_did_not_pay(machine):
    machine()
    assert applications.MatrixCapsNet.RECIPE.auto_precision() == "float32"  # EM: float32 inside
    assert applications.BaselineCNN.RECIPE.auto_precision() == "float32"  # not measured
    assert applications.BackboneCapsNet.RECIPE.auto_precision() == "float32"

import inspect

import keras
import pytest

import applications
from applications import MatrixCapsNetHyperModel
from keras_capsules import routing
from keras_capsules.callbacks import SpreadMarginSchedule
from tests.tuning.helpers import TINY_MATRIX
from tests.tuning.helpers import FitRecorder
from tests.tuning.helpers import fixed

MNIST = {"input_shape": (28, 28, 1), "num_classes": 10, "scale": 1 / 255}


# The search space's names of the models' arguments.
ARGUMENT = dict(
    A="conv_filters", B="primary_capsule_types", C="conv_caps1_types", D="conv_caps2_types"
)


def test_search_space_ranges():
    space = {hp.name: hp for hp in MatrixCapsNetHyperModel().search_space().space}
    assert (space["iterations"].min_value, space["iterations"].max_value) == (1, 5)
    assert list(space["A"].values) == [32, 64]
    for name in "BCD":
        assert list(space[name].values) == [8, 16, 32]
    assert (space["learning_rate"].min_value, space["learning_rate"].max_value) == (1e-4, 1e-2)
    assert list(space["decay_rate"].values) == [0.9, 0.96, 1.0]
    temperature = space["inverse_temperature"]
    assert (temperature.min_value, temperature.max_value, temperature.sampling) == (
        1e-3,
        1e-1,
        "log",
    )
    tempering = space["tempering"]
    assert (tempering.min_value, tempering.max_value, tempering.sampling) == (0.03, 1.0, "log")
    assert (space["margin_start"].min_value, space["margin_start"].max_value) == (0.1, 0.3)
    assert (space["margin_end"].min_value, space["margin_end"].max_value) == (0.8, 0.95)
    assert (space["max_shift"].min_value, space["max_shift"].max_value) == (0, 3)
    assert len(space) == 12


def test_defaults_are_the_papers_settings():
    defaults = MatrixCapsNetHyperModel().search_space().values
    signature = {  # the model's arguments and its backbone's, which it hands on
        **inspect.signature(applications.MatrixCapsNetBackbone).parameters,
        **inspect.signature(applications.MatrixCapsNet).parameters,
    }
    for name in ("iterations", "A", "B", "C", "D", "tempering"):
        assert defaults[name] == signature[ARGUMENT.get(name, name)].default, name
    recipe = applications.MatrixCapsNet.RECIPE
    for name in ("learning_rate", "decay_rate"):
        assert defaults[name] == getattr(recipe, name), name
    assert (defaults["margin_start"], defaults["margin_end"]) == recipe.spread_margin
    assert defaults["inverse_temperature"] == routing.INVERSE_TEMPERATURE
    schedule = inspect.signature(SpreadMarginSchedule).parameters
    assert defaults["margin_start"] == schedule["start"].default == 0.2
    assert defaults["margin_end"] == schedule["end"].default == 0.9
    assert "val_spread_loss" in MatrixCapsNetHyperModel.objectives()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"input_shape": (16, 16, 1)}, "input_shape"),
        ({"input_shape": (32, 32, 2, 1)}, "input_shape"),
        ({"num_classes": 1}, "num_classes"),
        ({"batch_size": -2}, "batch_size"),
        ({"scale": 0}, "scale"),
        ({"variance_epsilon": 0}, "variance_epsilon"),
        ({"weight_decay": -1e-4}, "weight_decay"),
        ({"decay_steps": 0}, "decay_steps"),
        ({"normalization": "types"}, "normalization"),
        ({"inverse_temperature_schedule": "paper"}, "inverse_temperature_schedule"),
    ],
)
def test_constructor_rejects_bad_fixed_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MatrixCapsNetHyperModel(**kwargs)


def test_build_follows_the_hyperparameters():
    if keras.backend.backend() != "tensorflow":
        pytest.skip("building EM routing traces slowly on JAX; CI's time budget runs it on TF")
    hp = fixed(**TINY_MATRIX, inverse_temperature=0.05, tempering=0.3, learning_rate=1e-3)
    hypermodel = MatrixCapsNetHyperModel(**MNIST, weight_decay=0, normalization="positions")
    model = hypermodel.build(hp)
    config = {**model.get_config(), **model.get_config()["backbone"]["config"]}
    for name, value in {**TINY_MATRIX, "inverse_temperature": 0.05, "tempering": 0.3}.items():
        assert config[ARGUMENT.get(name, name)] == value, name
    assert config["normalization"] == "positions"
    assert config["input_shape"] == (28, 28, 1) and model.image_converter.scale == 1 / 255
    assert model.backbone.get_layer("conv_caps2").inverse_temperature == 0.05
    schedule = model.optimizer.get_config()["learning_rate"]["config"]
    assert (schedule["initial_learning_rate"], schedule["decay_steps"]) == (1e-3, 2000)


def test_fit_schedules_the_spread_margin(mnist_data):
    (x, y), _ = mnist_data
    recorder = FitRecorder()
    hp = fixed(margin_start=0.25, margin_end=0.85, max_shift=1)
    hypermodel = MatrixCapsNetHyperModel(**MNIST, batch_size=16)
    hypermodel.fit(hp, recorder, x[:100], y[:100], validation_split=0.2, epochs=3, initial_epoch=1)
    schedule = recorder.kwargs["callbacks"][0]
    assert isinstance(schedule, SpreadMarginSchedule)
    assert (schedule.start, schedule.end) == (0.25, 0.85)
    assert schedule.steps == 2 * 5  # the epochs of this call x ceil(80 / 16) steps

import inspect

import keras
import keras_tuner as kt
import numpy as np
import pytest

import applications
from applications import CapsNetHyperModel
from tests.tuning.helpers import TINY_CAPSNET
from tests.tuning.helpers import FitRecorder
from tests.tuning.helpers import fixed


def shifts(image, max_shift):
    """`image` shifted by every offset of up to `max_shift` pixels, zero padded."""
    padded = np.pad(image, max_shift)
    size = 2 * max_shift + 1
    height, width = image.shape
    return [padded[i : i + height, j : j + width] for i in range(size) for j in range(size)]


def test_search_space_ranges():
    space = {hp.name: hp for hp in CapsNetHyperModel().search_space().space}
    assert sorted(space) == sorted(
        [
            "iterations",
            "conv_filters",
            "primary_capsule_types",
            "primary_capsule_dim",
            "capsule_dim",
            "learning_rate",
            "decay_rate",
            "reconstruction_weight",
            "max_shift",
        ]
    )
    assert (space["iterations"].min_value, space["iterations"].max_value) == (1, 3)
    assert list(space["conv_filters"].values) == [64, 128, 256]
    assert list(space["primary_capsule_types"].values) == [8, 16, 32]
    assert list(space["primary_capsule_dim"].values) == [4, 8, 16]
    assert list(space["capsule_dim"].values) == [8, 16, 32]
    learning_rate = space["learning_rate"]
    assert (learning_rate.min_value, learning_rate.max_value) == (1e-4, 1e-2)
    assert learning_rate.sampling == "log"
    assert list(space["decay_rate"].values) == [0.9, 0.96, 1.0]
    assert list(space["reconstruction_weight"].values) == [0.0, 1e-4, 5e-4, 2e-3]
    assert (space["max_shift"].min_value, space["max_shift"].max_value) == (0, 3)
    names = [hp.name for hp in CapsNetHyperModel(decoder_units=None).search_space().space]
    assert "reconstruction_weight" not in names  # nothing to weigh without a decoder


def test_defaults_are_the_papers_settings():
    defaults = CapsNetHyperModel().search_space().values
    # The model's arguments, its base classes' (which it hands the shared ones on
    # to) and its backbone's.
    classes = [applications.CapsNetBackbone, *reversed(applications.CapsNet.__mro__)]
    signature = {}
    for cls in classes:
        if cls.__module__.startswith("applications") and "__init__" in vars(cls):
            signature.update(inspect.signature(cls.__init__).parameters)
    recipe = applications.CapsNet.RECIPE
    for name, value in defaults.items():
        if name in ("learning_rate", "decay_rate", "max_shift"):
            assert value == getattr(recipe, name), name
        else:
            assert value == signature[name].default, name
    assert defaults["max_shift"] == 2  # shifts of up to 2 pixels, as the paper
    assert CapsNetHyperModel.objectives()[:2] == ("loss", "accuracy")
    assert "val_accuracy" in CapsNetHyperModel.objectives()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"input_shape": (28, 28)}, "input_shape"),
        ({"input_shape": (16, 16, 1)}, "input_shape"),  # too small for two 9x9 convolutions
        ({"num_classes": 1}, "num_classes"),
        ({"num_classes": 10.0}, "num_classes"),
        ({"batch_size": 0}, "batch_size"),
        ({"decoder_units": (64, 0)}, "decoder_units"),
        ({"decoder_units": ()}, "decoder_units"),
        ({"conv_kernel_size": 0}, "conv_kernel_size"),
        ({"primary_strides": 1.5}, "primary_strides"),
        ({"decay_steps": -1}, "decay_steps"),
    ],
)
def test_constructor_rejects_bad_fixed_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        CapsNetHyperModel(**kwargs)


def test_build_follows_the_hyperparameters():
    hypermodel = CapsNetHyperModel(decoder_units=(16,))
    hp = fixed(iterations=1, learning_rate=5e-3, decay_rate=1.0, reconstruction_weight=0.0)
    model = hypermodel.build(fixed(**TINY_CAPSNET, **hp.values))
    config = {**model.get_config(), **model.get_config()["backbone"]["config"]}
    for name, value in {**TINY_CAPSNET, "iterations": 1}.items():
        assert config[name] == value, name
    assert model.decoder is None and config["decoder_units"] is None  # weight 0: no decoder
    assert float(keras.ops.convert_to_numpy(model.optimizer.learning_rate)) == pytest.approx(5e-3)
    schedule = model.optimizer.get_config()["learning_rate"]["config"]
    assert (schedule["decay_rate"], schedule["decay_steps"]) == (1.0, 2000)
    model = hypermodel.build(fixed(**TINY_CAPSNET, reconstruction_weight=2e-3))
    assert model.decoder is not None and model.get_config()["decoder_units"] == (16,)
    assert model.reconstruction_loss.weight == 2e-3


def test_fit_holds_out_the_last_examples_and_shifts_the_rest(mnist_data):
    (x, y), _ = mnist_data
    hypermodel = CapsNetHyperModel(batch_size=20)
    recorder = FitRecorder()
    callback = keras.callbacks.Callback()
    result = hypermodel.fit(
        fixed(max_shift=2),
        recorder,
        x[:100],
        y[:100],
        validation_split=0.2,
        epochs=3,
        callbacks=[callback],
        shuffle=False,
    )
    assert result == "history"
    x_val, y_val = recorder.kwargs["validation_data"]
    assert x_val.shape == (20, 28, 28, 1)
    np.testing.assert_array_equal(x_val[..., 0], x[80:100])
    np.testing.assert_array_equal(y_val, y[80:100])
    assert recorder.kwargs["epochs"] == 3 and recorder.kwargs["callbacks"] == [callback]
    assert recorder.kwargs["validation_split"] == 0.0 and recorder.y is None
    batches = list(recorder.x)
    assert [len(images) for images, _ in batches] == [20, 20, 20, 20]
    images = np.concatenate([np.asarray(images) for images, _ in batches])[..., 0]
    labels = np.concatenate([np.asarray(labels) for _, labels in batches])
    np.testing.assert_array_equal(labels, y[:80])  # not shuffled here
    for image, original in zip(images, x[:80]):
        assert any(np.array_equal(image, shifted) for shifted in shifts(original, 2))
    assert (images != x[:80]).any(axis=(1, 2)).mean() > 0.5

    hypermodel.fit(fixed(max_shift=0), recorder, x[:100], y[:100], shuffle=False)
    images = np.concatenate([np.asarray(images) for images, _ in recorder.x])[..., 0]
    np.testing.assert_array_equal(images, x[:100])  # max_shift 0: the images as they are
    assert recorder.kwargs["validation_data"] is None


def test_issue_example_hyperband_search(mnist_data, tmp_path):
    """The issue's snippet, with tiny sizes: search, then load the best model."""
    (x_train, y_train), _ = mnist_data
    tuner = kt.Hyperband(
        CapsNetHyperModel(input_shape=(28, 28, 1), num_classes=10),
        objective="val_accuracy",
        max_epochs=1,
        directory=str(tmp_path / "tune"),
        hyperparameters=fixed(**TINY_CAPSNET, reconstruction_weight=0.0),
    )
    tuner.search(x_train[:200], y_train[:200], validation_split=0.25, batch_size=50, verbose=0)
    (trial,) = tuner.oracle.trials.values()
    assert trial.status == "COMPLETED"
    best = tuner.get_best_models(1)[0]
    probabilities = best.predict(x_train[150:200], verbose=0)["probabilities"]
    assert probabilities.shape == (50, 10) and np.all((probabilities >= 0) & (probabilities <= 1))
    # The best model carries the trained weights: it scores what the trial recorded
    # on the validation images (the last quarter).
    accuracy = np.mean(probabilities.argmax(axis=1) == y_train[150:200])
    assert accuracy == pytest.approx(trial.score, abs=1e-6)

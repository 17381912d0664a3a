import os
import subprocess
import sys

import keras
import numpy as np
import pytest
from keras import ops

import applications
from keras_capsules.layers import ImageConverter
from keras_capsules.losses import MarginLoss
from keras_capsules.losses import ReconstructionLoss
from tests._model_testing import run_classifier_test
from tests.conftest import requires_tensorflow

SMALL = dict(conv_filters=16, primary_capsule_types=4, capsule_dim=8, decoder_units=(32,))


def test_paper_model_has_8215568_parameters():
    model = applications.CapsNet(compile=False)
    assert model.count_params() == 8_215_568
    assert model.backbone.get_layer("conv1").count_params() == 20_992
    assert model.backbone.get_layer("primary_caps").count_params() == 5_308_672
    assert model.get_layer("digit_caps").count_params() == 1_474_560
    assert model.decoder.count_params() == 1_411_344
    assert applications.CapsNet(decoder_units=None, compile=False).count_params() == 6_804_224


def test_outputs_predict_and_reconstructions():
    model = applications.CapsNet(**SMALL)
    x = np.random.default_rng(0).integers(0, 256, size=(5, 28, 28)).astype("uint8")
    outputs = model.predict(x, verbose=0)
    assert sorted(outputs) == ["poses", "probabilities"]
    probabilities, poses = outputs["probabilities"], outputs["poses"]
    assert probabilities.shape == (5, 10) and np.all((probabilities >= 0) & (probabilities < 1))
    assert poses.shape == (5, 10, 8)
    np.testing.assert_allclose(np.linalg.norm(poses, axis=-1), probabilities, atol=1e-3)
    # (n, 28, 28, 1) as (n, 28, 28); one rank per model, as Keras traces `predict`
    # once and a second rank would leave TensorFlow's trace of unknown shape.
    again = applications.CapsNet.from_config(model.get_config())
    again.set_weights(model.get_weights())
    both = again.predict(x[..., None], verbose=0)
    np.testing.assert_allclose(both["probabilities"], probabilities, atol=1e-6)
    np.testing.assert_allclose(both["poses"], poses, atol=1e-6)
    assert model.reconstruct(x).shape == (5, 28, 28, 1)
    one = model.decode(poses, labels=np.full(5, 3))
    assert not np.allclose(one, model.decode(poses, labels=np.full(5, 4)))


def test_loss_is_margin_plus_reconstruction_of_the_true_capsule():
    model = applications.CapsNet(**SMALL)
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, size=(6, 28, 28, 1)).astype("float32")
    y = rng.integers(0, 10, size=6)
    y_pred = model(x)
    total = float(model.compute_loss(x, y, y_pred))
    poses = ops.convert_to_numpy(y_pred["poses"])
    masked = np.zeros_like(poses)
    masked[np.arange(6), y] = poses[np.arange(6), y]
    recon = model.decoder(masked)
    expected = float(MarginLoss()(y, y_pred["probabilities"])) + float(
        ReconstructionLoss()(x / 255.0, recon)
    )
    np.testing.assert_allclose(total, expected, rtol=1e-5)
    one_hot = float(model.compute_loss(x, np.eye(10)[y], y_pred))
    np.testing.assert_allclose(one_hot, total, rtol=1e-6)
    column = float(model.compute_loss(x, y[:, None], y_pred))
    np.testing.assert_allclose(column, total, rtol=1e-6)


@pytest.mark.parametrize("one_hot", [False, True], ids=["indices", "one-hot"])
def test_fit_takes_integer_or_one_hot_labels(one_hot):
    model = applications.CapsNet(**SMALL)
    rng = np.random.default_rng(2)
    x = rng.integers(0, 256, size=(40, 28, 28)).astype("uint8")
    y = rng.integers(0, 10, size=40)
    history = model.fit(x, np.eye(10)[y] if one_hot else y, batch_size=20, epochs=2, verbose=0)
    logs = history.history
    assert {"loss", "margin_loss", "reconstruction_loss", "accuracy"} <= set(logs)
    assert all(np.isfinite(logs["loss"]))
    results = model.evaluate(x, y if not one_hot else np.eye(10)[y], verbose=0, return_dict=True)
    assert 0 <= results["accuracy"] <= 1


def test_passes_the_classifier_checks(tmp_path):
    x = np.random.default_rng(3).integers(0, 256, size=(4, 28, 28, 1)).astype("float32")
    run_classifier_test(applications.CapsNet, dict(SMALL, iterations=2), x, np.arange(4), tmp_path)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"input_shape": (28, 28)}, "input_shape"),
        ({"iterations": 0}, "iterations"),
        ({"num_classes": 0}, "num_classes"),
        ({"class_names": "cat"}, "class_names"),
        ({"class_names": ["cat", ""]}, "class_names"),
        ({"class_names": ["cat", "cat"]}, "distinct"),
        ({"class_names": ["cat", "dog"], "num_classes": 3}, "names 2 classes"),
        ({"reconstruction_weight": -1}, "reconstruction_weight"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        applications.CapsNet(**kwargs)


def test_images_of_another_size_are_resized_and_no_images_are_an_error():
    model = applications.CapsNet(**SMALL)
    converter = ImageConverter(image_size=(28, 28), channels=1, scale=1 / 255)
    photos = np.random.default_rng(3).integers(0, 256, (2, 45, 33, 3)).astype("uint8")
    np.testing.assert_allclose(
        model.predict(photos, verbose=0)["probabilities"],
        model.predict(np.asarray(converter(photos)) * 255, verbose=0)["probabilities"],
        atol=1e-5,
    )
    with pytest.raises(ValueError):
        model.predict(np.zeros((2, 28), "float32"), verbose=0)


@requires_tensorflow
def test_savedmodel_reproduces_predict(tmp_path):
    import tensorflow as tf

    model = applications.CapsNet(**SMALL)
    x = np.random.default_rng(5).integers(0, 256, size=(7, 28, 28, 1)).astype("float32")
    export_dir = str(tmp_path / "savedmodel")
    model.export(export_dir, verbose=False)
    reloaded = tf.saved_model.load(export_dir)
    served = reloaded.signatures["serving_default"](tf.constant(x))
    np.testing.assert_allclose(
        served["probabilities"].numpy(), model.predict(x, verbose=0)["probabilities"], atol=1e-5
    )
    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    shown = subprocess.run(
        [cli, "show", "--dir", export_dir, "--all"], capture_output=True, text=True, check=True
    ).stdout
    assert "serving_default" in shown and "probabilities" in shown


@pytest.mark.slow
def test_learns_real_mnist(mnist_data):
    """3,000 real training images, one pass: a working model passes 75% on 1,000 test images.

    Measured: 87.4% (this reduced model, 60 steps of 50, W std 0.02; 85.6% with
    the former 0.05). Chance is 10%; a model
    whose routing softmax runs over the wrong axis, whose squash or mask is broken,
    or whose capsule weights start too small to give lengths above ~1e-3 (as the
    most used Keras implementation does) is still near chance after 60 steps.
    """
    (x_train, y_train), (x_test, y_test) = mnist_data
    model = applications.CapsNet(conv_filters=64, primary_capsule_types=16)
    model.fit(x_train[:3000], y_train[:3000], batch_size=50, epochs=1, verbose=0)
    accuracy = model.evaluate(x_test[:1000], y_test[:1000], verbose=0, return_dict=True)["accuracy"]
    assert accuracy >= 0.75, accuracy


def test_dtype_policy_argument_is_used_and_saved(tmp_path):
    model = applications.CapsNet(dtype="mixed_float16", **SMALL)
    assert keras.mixed_precision.dtype_policy().name == "float32"  # global policy untouched
    assert model.get_layer("digit_caps").dtype_policy.name == "mixed_float16"
    assert model.decoder.dtype_policy.name == "mixed_float16"
    assert model.get_layer("probabilities").dtype_policy.name == "float32"
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    model.save(str(tmp_path / "m.keras"))
    loaded = keras.saving.load_model(str(tmp_path / "m.keras"))
    assert loaded.backbone.get_layer("conv1").dtype_policy.name == "mixed_float16"


def test_the_image_converter_is_the_input_convention():
    raw = np.random.default_rng(4).integers(0, 256, size=(6, 28, 28)).astype("uint8")
    model = applications.CapsNet(**SMALL)
    scaled_model = applications.CapsNet(**SMALL, image_converter=ImageConverter())
    scaled_model.set_weights(model.get_weights())
    expected = model.predict(raw, verbose=0)["probabilities"]
    scaled = scaled_model.predict(raw / 255.0, verbose=0)["probabilities"]
    np.testing.assert_allclose(scaled, expected, atol=1e-5)
    assert scaled_model.get_config()["image_converter"]["config"]["scale"] is None
    again = applications.CapsNet.from_config(model.get_config()).image_converter
    assert (again.scale, again.image_size, again.channels) == (1 / 255, (28, 28), 1)
    with pytest.raises(ValueError, match="image_converter"):
        applications.CapsNet(**SMALL, image_converter=1 / 255)
    with pytest.raises(ValueError, match=r"image_size=\(32, 32\).*\(28, 28, 1\)"):
        applications.CapsNet(**SMALL, image_converter=ImageConverter(image_size=(32, 32)))
    with pytest.raises(ValueError, match="channels=3"):
        applications.CapsNet(**SMALL, image_converter=ImageConverter(channels=3))


def test_any_image_size_and_colour_with_class_names(tmp_path):
    model = applications.CapsNet(**SMALL, input_shape=(40, 36, 3), class_names=["cat", "dog"])
    assert (model.num_classes, model.class_names) == (2, ("cat", "dog"))
    x = np.random.default_rng(7).integers(0, 256, (3, 40, 36, 3)).astype("uint8")
    assert model.predict(x, verbose=0)["probabilities"].shape == (3, 2)
    assert model.reconstruct(x).shape == (3, 40, 36, 3)
    model.fit(x, np.array([0, 1, 0]), epochs=1, verbose=0)
    path = str(tmp_path / "pets.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.class_names == ("cat", "dog") and loaded.get_config() == model.get_config()
    assert model.get_config()["class_names"] == ["cat", "dog"]


@pytest.mark.parametrize(
    "cls, kwargs, match",
    [
        ("CapsNet", {"primary_capsules": 4}, r"`primary_capsules` \(did you mean `primary_capsule"),
        ("CapsNetMNIST", {"iteration": 2}, r"`iteration` \(did you mean `iterations`\?\)"),
        ("EfficientCapsNet", {"decoder_unit": None}, r"did you mean `decoder_units`"),
        ("MatrixCapsNet", {"b": 8}, r"unknown argument\(s\): `b`"),
        ("BaselineCNN", {"filter": 3}, r"unknown argument\(s\): `filter`"),
    ],
)
def test_unknown_arguments_are_refused_with_the_closest_known_one(cls, kwargs, match):
    with pytest.raises(ValueError, match=match):
        getattr(applications, cls)(**kwargs)
    assert not getattr(applications, cls)(compile=False, trainable=False).trainable

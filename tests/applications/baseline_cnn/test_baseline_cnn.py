import keras
import numpy as np
import pytest

import applications
from tests._model_testing import run_classifier_test

SMALL = dict(filters=(8, 8, 4), dense_units=(16, 8))


def test_paper_baseline_has_35_4m_parameters():
    model = applications.BaselineCNN(compile=False)
    assert model.count_params() == 35_445_522  # the paper: 35.4M
    counts = {layer.name: layer.count_params() for layer in model.layers}
    assert counts["conv1"] == 5 * 5 * 1 * 256 + 256
    assert counts["conv2"] == 5 * 5 * 256 * 256 + 256
    assert counts["conv3"] == 5 * 5 * 256 * 128 + 128
    assert counts["fc1"] == 28 * 28 * 128 * 328 + 328  # "same" padding, no pooling
    assert counts["fc2"] == 328 * 192 + 192
    assert counts["probabilities"] == 192 * 10 + 10
    assert model.get_layer("conv3").output.shape == (None, 28, 28, 128)


def test_affnist_baseline_with_max_pooling_on_40x40():
    model = applications.BaselineCNN(input_shape=(40, 40, 1), pooling="max", compile=False)
    assert model.count_params() == 3_579_666
    assert model.get_layer("pool3").output.shape == (None, 5, 5, 128)
    assert model.get_layer("fc1").count_params() == 5 * 5 * 128 * 328 + 328


def test_outputs_are_probabilities_of_scaled_pixels():
    model = applications.BaselineCNN(input_shape=(40, 40, 1), num_classes=7, **SMALL)
    assert model.output.shape == (None, 7)
    assert model.get_layer("probabilities").activation is keras.activations.softmax
    assert model.get_layer("image_converter").scale == pytest.approx(1 / 255)
    assert model.get_layer("dropout").rate == 0.5


def test_short_training_lowers_the_loss(mnist_data):
    (x_train, y_train), _ = mnist_data
    x, y = x_train[:200], y_train[:200]
    model = applications.BaselineCNN(filters=(16, 16, 8), dense_units=(32, 16), dropout=0.1)
    history = model.fit(x, y, batch_size=50, epochs=10, verbose=0).history
    assert {"loss", "accuracy"} <= set(history)
    # Chance is a loss of ln(10) = 2.30 and an accuracy of 0.1.
    assert history["loss"][-1] < 0.6 * history["loss"][0], history
    assert history["accuracy"][-1] > 0.4, history

    probabilities = model.predict(x[:50], verbose=0)  # (n, 28, 28) uint8, as load_data gives
    assert probabilities.shape == (50, 10) and probabilities.dtype == np.float32
    np.testing.assert_allclose(probabilities.sum(-1), 1.0, rtol=1e-5)


def test_passes_the_classifier_checks(tmp_path):
    x = np.random.default_rng(0).integers(0, 256, (4, 28, 28, 1)).astype("float32")
    run_classifier_test(applications.BaselineCNN, SMALL, x, np.arange(4), tmp_path)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"input_shape": (28, 28)}, "input_shape"),
        ({"pooling": "avg"}, "pooling"),
        ({"dropout": 1.0}, "dropout"),
        ({"filters": (256, 0)}, "filters"),
        ({"num_classes": 0}, "num_classes"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        applications.BaselineCNN(**kwargs)

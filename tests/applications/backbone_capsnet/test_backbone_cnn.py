import keras
import numpy as np
import pytest

import applications
from keras_capsules.datasets import mnist
from tests._model_testing import run_classifier_test


def _backbone():
    return keras.Sequential(
        [
            keras.Input((28, 28, 1)),
            keras.layers.Conv2D(8, 5, strides=2, activation="relu"),
            keras.layers.Conv2D(16, 3, strides=2, activation="relu"),
        ]
    )


@pytest.mark.parametrize("routing", ["dynamic", "em", "self_attention"])
def test_head_parameters_match_a_capsule_head(routing):
    capsnet = applications.BackboneCapsNet(
        _backbone(), 10, routing=routing, primary_capsule_types=4, compile=False
    )
    target = capsnet.head_parameters()
    cnn = applications.BackboneCNN(_backbone(), 10, head_parameters=target, compile=False)
    # Layer norm 2 * 16, hidden 16 * h + h, output 10 * h + 10: within half a unit's 27.
    assert abs(cnn.head_parameters() - target) <= 27 // 2 + 1
    assert cnn.head_parameters() == cnn.count_params() - cnn.backbone.count_params()
    assert cnn.get_layer("hidden").units == cnn.get_config()["hidden_units"]


def test_learns_mnist():
    (x, y), (x_test, y_test) = mnist.load_data()
    keras.utils.set_random_seed(0)
    model = applications.BackboneCNN(_backbone(), 10, hidden_units=64)
    model.compile(optimizer=keras.optimizers.Adam(3e-3))
    model.fit(x[:3000], y[:3000], batch_size=50, epochs=1, verbose=0)
    accuracy = np.mean(np.argmax(model.predict(x_test[:1000], verbose=0), -1) == y_test[:1000])
    # 60 steps of a pooled head on 16 channels: about 0.45 (chance is 0.1).
    assert accuracy > 0.3, accuracy


def test_passes_the_classifier_checks(tmp_path):
    x = np.random.default_rng(0).integers(0, 256, (4, 28, 28, 1)).astype("float32")
    kwargs = dict(backbone=_backbone(), num_classes=3, hidden_units=8)
    run_classifier_test(applications.BackboneCNN, kwargs, x, np.arange(4) % 3, tmp_path)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"hidden_units": 8, "head_parameters": 1000}, "not both"),
        ({"head_parameters": 10}, "head_parameters"),
        ({"head_parameters": 1e4}, "head_parameters"),
        ({"hidden_units": 0}, "hidden_units"),
        ({"num_classes": 0}, "num_classes"),
        ({"backbone": "resnet"}, "backbone"),
        ({"input_shape": (32, 32, 1)}, "input_shape"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        applications.BackboneCNN(**{"backbone": _backbone(), "num_classes": 10, **kwargs})

import keras
import numpy as np
import pytest
from keras import ops

import applications
from keras_capsules import attacks
from keras_capsules.datasets import mnist
from keras_capsules.layers import ImageConverter


@pytest.fixture(scope="module")
def trained():
    """A small softmax CNN trained on 6,000 MNIST digits (about 95% on the test images)."""
    (x, y), (x_test, y_test) = mnist.load_data()
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((28, 28, 1)),
            ImageConverter(scale=1 / 255),
            keras.layers.Conv2D(16, 3, strides=2, activation="relu"),
            keras.layers.Conv2D(32, 3, strides=2, activation="relu"),
            keras.layers.Flatten(),
            keras.layers.Dense(10, activation="softmax"),
        ]
    )
    model.image_converter = model.layers[0]  # pixels in [0, 255], as the applications say
    model.compile("adam", "sparse_categorical_crossentropy")
    model.fit(x[:6000, ..., None], y[:6000], batch_size=50, epochs=1, verbose=0)
    return model, x_test[:300, ..., None].astype("float32"), y_test[:300]


def _accuracy(model, x, y):
    return float(np.mean(np.argmax(model.predict(x, verbose=0), -1) == y))


def test_attacks_lower_the_accuracy_of_a_trained_model(trained):
    model, x, y = trained
    clean = _accuracy(model, x, y)
    assert clean > 0.85, clean
    fgsm = {eps: _accuracy(model, attacks.fgsm(model, x, y, eps), y) for eps in (0.05, 0.2)}
    pgd = {eps: _accuracy(model, attacks.pgd(model, x, y, eps, seed=0), y) for eps in (0.05, 0.2)}
    assert fgsm[0.05] < clean - 0.05 and fgsm[0.2] < fgsm[0.05], (clean, fgsm)
    assert pgd[0.05] <= fgsm[0.05] and pgd[0.2] < 0.1, (fgsm, pgd)  # PGD is the stronger
    noise = np.clip(x + np.random.default_rng(0).choice([-51.0, 51.0], x.shape), 0, 255)
    assert _accuracy(model, noise, y) > fgsm[0.2] + 0.3  # not just any change of 0.2


@pytest.mark.parametrize("attack", ["fgsm", "pgd"])
def test_perturbations_stay_in_the_ball_and_the_pixel_range(trained, attack):
    model, x, y = trained
    x, y = x[:20], y[:20]
    run = getattr(attacks, attack)
    adversarial = run(model, x, y, 0.1, batch_size=7)
    assert adversarial.shape == x.shape and adversarial.dtype == np.float32
    assert np.abs(adversarial - x).max() <= 25.5 + 1e-3
    assert adversarial.min() >= 0 and adversarial.max() <= 255
    assert np.abs(adversarial - x).max() > 20  # the sign steps move pixels to the ball's edge
    np.testing.assert_array_equal(run(model, x, y, 0.0), x)


def test_capsule_networks_are_attacked_through_their_own_loss():
    model = applications.CapsNetMNIST(conv_filters=16, primary_capsule_types=4)
    x = np.random.default_rng(0).integers(0, 256, (8, 28, 28, 1)).astype("float32")
    y = np.arange(8)
    loss = model.margin_loss  # what the attacks raise by default

    def margin(images):
        return float(ops.convert_to_numpy(loss(y, model(images)["probabilities"])))

    adversarial = attacks.pgd(model, x, y, 0.1, steps=3, seed=0)
    assert margin(adversarial) > margin(x)


def test_models_without_an_image_converter_take_pixels_in_the_unit_interval():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])
    x = np.random.default_rng(1).uniform(size=(5, 4)).astype("float32")
    adversarial = attacks.fgsm(model, x, np.zeros(5, "int32"), 0.1)
    assert np.abs(adversarial - x).max() <= 0.1 + 1e-6 and adversarial.max() <= 1


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"epsilon": 2.0}, "epsilon"),
        ({"epsilon": -0.1}, "epsilon"),
        ({"steps": 0}, "steps"),
        ({"step_size": -1.0}, "step_size"),
        ({"batch_size": 0}, "batch_size"),
        ({"labels": [0, 1]}, "labels"),
        ({"labels": [0, 1, 3]}, r"class indices in \[0, 3\). Received: \[3\]"),
        ({"labels": [0, -1, 2]}, r"Received: \[-1\]"),
        ({"labels": [0.5, 1, 2]}, "class indices"),
        ({"step_size": float("nan")}, "finite non-negative"),
        ({"epsilon": float("inf")}, "epsilon"),
        ({"epsilon": True}, "epsilon"),
    ],
)
def test_bad_arguments(kwargs, match):
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])
    arguments = {"images": np.zeros((3, 4), "float32"), "labels": [0, 1, 2], "epsilon": 0.1}
    with pytest.raises(ValueError, match=match):
        attacks.pgd(model, **{**arguments, **kwargs})


def test_fgsm_refuses_labels_outside_the_classes_and_takes_numpy_scalars():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(10, activation="softmax")])
    images = np.random.default_rng(0).uniform(0, 1, (4, 4)).astype("float32")
    with pytest.raises(ValueError, match=r"\[0, 10\). Received: \[10, 11, -1, 99\]"):
        attacks.fgsm(model, images, [10, 11, -1, 99], 0.1)
    moved = attacks.fgsm(model, images, np.array([1, 2, 3, 4]), np.float32(0.1))
    assert np.allclose(np.abs(moved - images).max(), 0.1, atol=1e-6)
    stepped = attacks.pgd(model, images, [1, 2, 3, 4], np.float64(0.1), step_size=np.float32(0.05))
    assert np.all(np.abs(stepped - images) <= 0.1 + 1e-6)

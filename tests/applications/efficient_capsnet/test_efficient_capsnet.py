import numpy as np
import pytest

import applications
from tests._model_testing import run_classifier_test

SMALL = dict(
    conv_filters=(8, 8, 8, 16),
    primary_capsule_types=4,
    primary_capsule_dim=4,
    capsule_dim=8,
    decoder_units=(32,),
)


def _images(seed, n=4, shape=(28, 28, 1)):
    return np.random.default_rng(seed).integers(0, 256, size=(n,) + shape).astype("float32")


def test_paper_model_has_161824_trainable_parameters():
    model = applications.EfficientCapsNet(compile=False)
    classifier = [w for w in model.trainable_weights if not w.path.startswith("decoder")]
    assert sum(int(np.prod(w.shape)) for w in classifier) == 161_824
    assert model.backbone.get_layer("primary_caps").count_params() == 9 * 9 * 128 + 128
    assert model.get_layer("digit_caps").count_params() == 10 * 16 * 8 * 16 + 16 * 10
    assert model.decoder.count_params() == 1_411_344
    # count_params() adds the 2 x (32 + 64 + 64 + 128) moving statistics of batch norm.
    assert model.count_params() == 161_824 + 576 + 1_411_344
    assert model.backbone.get_layer("primary_caps").output.shape == (None, 16, 8)


def test_outputs_loss_and_fit():
    model = applications.EfficientCapsNet(**SMALL)
    x, y = _images(0), np.array([0, 1, 2, 3])
    outputs = model.predict(x, verbose=0)
    assert outputs["probabilities"].shape == (4, 10) and outputs["poses"].shape == (4, 10, 8)
    np.testing.assert_allclose(
        outputs["probabilities"], np.linalg.norm(outputs["poses"], axis=-1), rtol=1e-4, atol=1e-4
    )
    assert np.all(outputs["probabilities"] < 1)
    history = model.fit(x, y, epochs=2, verbose=0).history
    assert set(history) >= {"loss", "margin_loss", "reconstruction_loss", "accuracy"}
    assert np.all(np.isfinite(history["loss"]))
    assert model.reconstruct(x).shape == (4, 28, 28, 1)


def test_other_image_sizes_and_class_counts():
    model = applications.EfficientCapsNet(input_shape=(32, 32, 3), num_classes=5, **SMALL)
    assert model.backbone.get_layer("primary_caps").output.shape == (
        None,
        4,
        4,
    )  # the whole 11x11 map
    x = _images(1, shape=(32, 32, 3))
    assert model.predict(x, verbose=0)["probabilities"].shape == (4, 5)
    model.fit(x, np.array([0, 1, 4, 4]), epochs=1, verbose=0)
    assert model.reconstruct(x).shape == (4, 32, 32, 3)


def test_photo_sized_images_keep_the_decoder_and_its_loss_small():
    model = applications.EfficientCapsNet(input_shape=(128, 128, 3), compile=False)
    # The decoder draws 28x28x3 values and resizes them: 51.6M parameters if it drew all.
    assert model.decoder.resolution == (28, 28)
    assert model.decoder.count_params() == 3_018_544
    assert model.count_params() == 3_617_744
    # Each drawn value weighs 0.0005, as each pixel in the paper: the loss keeps its scale.
    np.testing.assert_allclose(model.reconstruction_loss.weight, 0.0005 * 28 * 28 / 128**2)
    small = applications.EfficientCapsNet(input_shape=(64, 48, 3), num_classes=3, **SMALL)
    x = _images(2, shape=(64, 48, 3))
    history = small.fit(x, np.array([0, 1, 2, 0]), epochs=1, verbose=0).history
    assert np.isfinite(history["reconstruction_loss"][0])
    reconstructions = small.reconstruct(x)
    assert reconstructions.shape == (4, 64, 48, 3)
    assert reconstructions.min() >= 0 and reconstructions.max() <= 1


def test_passes_the_classifier_checks(tmp_path):
    run_classifier_test(applications.EfficientCapsNet, SMALL, _images(3), np.arange(4), tmp_path)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"input_shape": (28, 28)}, "input_shape"),
        ({"input_shape": (10, 10, 1)}, "too small"),
        ({"num_classes": 0}, "num_classes"),
        ({"conv_filters": (32, 64, 64, 64)}, "conv_filters"),
        ({"conv_kernel_sizes": (5, 3, 3)}, "conv_kernel_sizes"),
        ({"conv_strides": (1, 1, 0, 2)}, "conv_strides"),
        ({"reconstruction_weight": -1}, "reconstruction_weight"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        applications.EfficientCapsNet(**kwargs)


@pytest.mark.slow
def test_learns_real_mnist(mnist_data):
    """3,000 real training images, one pass in batches of 16: above 80% on 1,000 test images.

    Measured on TensorFlow: 91.0%. Chance is 10%. The floor catches a model
    that does not learn: non-finite losses, capsules that collapse to zero
    (a coupling of zeros, a squash that returns zero), gradients cut off
    before the convolutions, a decoder fed the wrong capsule. It does not
    catch a subtly wrong routing: the convolutions carry this model, and one
    pass with the softmax over the inputs instead of the outputs still
    reached 86.1%, one without the squash 92.4%; the comparisons with the
    paper's equations in `tests/routing/test_self_attention.py` catch those.
    """
    (x_train, y_train), (x_test, y_test) = mnist_data
    model = applications.EfficientCapsNet()
    model.fit(x_train[:3000], y_train[:3000], batch_size=16, epochs=1, verbose=0)
    accuracy = model.evaluate(x_test[:1000], y_test[:1000], verbose=0, return_dict=True)["accuracy"]
    assert accuracy >= 0.8, accuracy

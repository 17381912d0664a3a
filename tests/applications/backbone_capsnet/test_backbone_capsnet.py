import keras
import numpy as np
import pytest
from keras import ops

import applications
from applications.backbone_capsnet.backbone_capsnet import ROUTINGS
from keras_capsules.layers import ImageConverter
from tests._model_testing import run_classifier_test

SMALL = dict(primary_capsule_types=4, decoder_units=(8,))


def _backbone(input_shape=(32, 32, 3)):
    """Two strided convolutions: 32x32x3 -> 7x7x16."""
    return keras.Sequential(
        [
            keras.Input(input_shape),
            keras.layers.Conv2D(8, 3, strides=2, activation="relu"),
            keras.layers.Conv2D(16, 3, strides=2, activation="relu"),
        ]
    )


def _images(seed, n=8, shape=(32, 32, 3)):
    return np.random.default_rng(seed).integers(0, 256, size=(n,) + shape).astype("float32")


@pytest.mark.parametrize("routing", ROUTINGS)
def test_each_routing_fits_predicts_and_round_trips(routing, tmp_path):
    model = applications.BackboneCapsNet(_backbone(), num_classes=5, routing=routing, **SMALL)
    x, y = _images(0), np.array([0, 1, 2, 3, 4, 0, 1, 2])
    history = model.fit(x, y, batch_size=4, epochs=1, verbose=0).history  # two steps
    assert np.all(np.isfinite(history["loss"])) and history["reconstruction_loss"][0] > 0
    assert ("spread_loss" if routing == "em" else "margin_loss") in history
    outputs = model.predict(x, verbose=0)
    scores, poses = outputs["probabilities"], outputs["poses"]
    assert scores.shape == (8, 5) and poses.shape == (8, 5, 16)
    assert np.all(np.isfinite(scores)) and np.all((scores >= 0) & (scores <= 1))
    if routing not in ("em", "inverted_dot_product"):  # squashed capsules: scores are lengths
        np.testing.assert_allclose(scores, np.linalg.norm(poses, axis=-1), rtol=1e-4, atol=1e-5)
    assert model.decode(poses).shape == (8, 32, 32, 3)
    full = routing == "dynamic"  # mixed precision and presets once: the head is the same
    run_classifier_test(
        applications.BackboneCapsNet,
        dict(backbone=_backbone(), num_classes=5, routing=routing, **SMALL),
        x,
        y,
        tmp_path,
        mixed_precision=full,
        preset=full,
    )


def test_keras_applications_backbone_on_grey_images(tmp_path, recwarn):
    # As the tutorial does: grey 28x28 images made RGB and 32x32 inside the model,
    # then MobileNetV3Small (weights=None here; "imagenet" with a network), frozen.
    grey = keras.Input((28, 28, 1))
    rgb = keras.layers.Concatenate()([grey, grey, grey])
    rgb = keras.layers.Resizing(32, 32)(rgb)
    base = keras.applications.MobileNetV3Small(
        input_shape=(32, 32, 3), include_top=False, weights=None, minimalistic=True
    )
    base.trainable = False
    backbone = keras.Model(grey, base(rgb), name="rgb_mobilenet")
    model = applications.BackboneCapsNet(backbone, num_classes=3, image_converter=ImageConverter())
    assert model.image_shape == (28, 28, 1)  # from the backbone
    assert model.get_layer("primary_caps").output.shape == (None, 32, 8)  # 1x1x576 features
    assert all(not w.path.startswith("rgb_mobilenet") for w in model.trainable_weights)
    x = _images(1, n=4, shape=(28, 28))  # raw pixels, MobileNetV3 rescales them itself
    model.fit(x, np.array([0, 1, 2, 0]), epochs=1, verbose=0)
    assert not [w for w in recwarn if "image converter" in str(w.message)]
    assert model.predict(x, verbose=0)["probabilities"].shape == (4, 3)

    path = str(tmp_path / "mobilenet.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.backbone.name == "rgb_mobilenet"
    assert not loaded.backbone.get_layer("MobileNetV3Small").trainable
    np.testing.assert_array_equal(
        ops.convert_to_numpy(loaded(x[..., None])["probabilities"]),
        ops.convert_to_numpy(model(x[..., None])["probabilities"]),
    )


def test_backbones_without_an_input_shape_take_input_shape():
    layer = keras.layers.Conv2D(8, 3, strides=2)
    model = applications.BackboneCapsNet(
        layer,
        num_classes=4,
        input_shape=(24, 20, 3),
        primary_capsule_types=2,
        normalize_features=False,
        compile=False,
    )
    assert model.get_layer("primary_caps").output.shape == (None, 11 * 9 * 2, 8)
    assert "feature_norm" not in [layer.name for layer in model.layers]
    assert model.decoder is None
    with pytest.raises(ValueError, match="decoder_units=None"):
        model.decode(np.zeros((1, 4, 16), "float32"))
    sequential = keras.Sequential([keras.layers.Conv2D(8, 3, strides=2)])
    model = applications.BackboneCapsNet(
        sequential, num_classes=4, input_shape=(24, 20, 3), routing="em", compile=False
    )
    assert model.get_layer("class_caps").output[0].shape == (None, 4, 16)


def _pooled():
    return keras.Sequential(
        [keras.Input((32, 32, 3)), keras.layers.Conv2D(4, 3), keras.layers.GlobalAveragePooling2D()]
    )


@pytest.mark.parametrize(
    "backbone, kwargs, match",
    [
        (_backbone, {"routing": "attention"}, "routing"),
        (lambda: "resnet50", {}, "backbone"),
        (_pooled, {}, "feature map"),
        (lambda: keras.Sequential([keras.layers.Conv2D(4, 3)]), {}, "input_shape"),
        (_backbone, {"input_shape": (64, 64, 3)}, "input_shape"),
        (_backbone, {"input_shape": (32, 32)}, "input_shape"),
        (_backbone, {"routing": "self_attention", "iterations": 3}, "iterations"),
        (_backbone, {"routing": "uniform", "iterations": 3}, "iterations"),
        (_backbone, {"routing": "self_attention_uniform", "iterations": 1}, "iterations"),
        (_backbone, {"routing": "random", "iterations": 1}, "iterations"),
        (_backbone, {"routing": "dynamic", "iterations": 0}, "iterations"),
        (_backbone, {"routing": "em", "capsule_dim": 8}, "capsule_dim"),
        (_backbone, {"routing": "em", "primary_capsule_dim": 8}, "primary_capsule_dim"),
        (_backbone, {"routing": "dynamic", "spread_margin": 0.2}, "spread_margin"),
        (_backbone, {"routing": "em", "spread_margin": 1.5}, "spread_margin"),
        (_backbone, {"num_classes": 0}, "num_classes"),
        (_backbone, {"primary_kernel_size": 0}, "primary_kernel_size"),
        (_backbone, {"reconstruction_weight": -1}, "reconstruction_weight"),
        (_backbone, {"image_converter": 1 / 255}, "image_converter"),
    ],
)
def test_bad_arguments(backbone, kwargs, match):
    with pytest.raises(ValueError, match=match):
        applications.BackboneCapsNet(backbone(), **{"num_classes": 5, **kwargs})


def test_the_controls_without_routing():
    """`"uniform"` is dynamic routing's single iteration; `"random"` a fixed random coupling;
    `"self_attention_uniform"` self-attention's layer without attention."""
    from keras_capsules.layers import CapsuleLayer
    from keras_capsules.layers import RandomCouplingCapsule

    uniform = applications.BackboneCapsNet(_backbone(), 5, routing="uniform", compile=False)
    assert isinstance(uniform.get_layer("class_caps"), CapsuleLayer)
    assert uniform.get_layer("class_caps").iterations == 1
    random = applications.BackboneCapsNet(_backbone(), 5, routing="random", compile=False)
    layer = random.get_layer("class_caps")
    assert isinstance(layer, RandomCouplingCapsule)
    assert [w.name for w in layer.non_trainable_weights] == ["coupling_logits"]
    attention = applications.BackboneCapsNet(
        _backbone(), 5, routing="self_attention_uniform", compile=False
    )
    assert attention.get_layer("class_caps").uniform_coupling
    assert (
        not applications.BackboneCapsNet(_backbone(), 5, routing="self_attention", compile=False)
        .get_layer("class_caps")
        .uniform_coupling
    )

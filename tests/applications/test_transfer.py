"""Starting a model for other classes or images from a preset, and `model.backbone`."""

import numpy as np
import pytest

import applications

SMALL = {
    "CapsNet": dict(conv_filters=16, primary_capsule_types=4, decoder_units=(32,)),
    "EfficientCapsNet": dict(conv_filters=(8, 8, 8, 32), primary_capsule_types=4),
    "MatrixCapsNet": dict(A=8, B=2, C=3, D=2, iterations=1),
}
BACKBONES = {
    "CapsNet": ["backbone/conv1", "backbone/primary_caps"],
    "EfficientCapsNet": [
        *(f"backbone/{kind}{i}" for i in range(1, 5) for kind in ("conv", "batch_norm")),
        "backbone/primary_caps",
    ],
    "MatrixCapsNet": [
        f"backbone/{name}" for name in ("conv1", "primary_caps", "conv_caps1", "conv_caps2")
    ],
}
DIGITS = [str(d) for d in range(10)]


def _weights(layer):
    return [np.asarray(w) for w in layer.get_weights()]


def _layer(model, path):
    """The layer at `path` (`"backbone/conv1"`) of `model`."""
    for name in path.split("/"):
        model = model.get_layer(name)
    return model


def _preset(tmp_path, name):
    model = getattr(applications, name)(**SMALL[name], class_names=DIGITS)
    return model, model.save_to_preset(str(tmp_path / name))


@pytest.mark.parametrize("name", sorted(SMALL))
def test_new_classes_keep_the_backbone_and_build_a_new_head(tmp_path, name):
    preset, folder = _preset(tmp_path, name)
    cls = getattr(applications, name)
    model = cls.from_preset(folder, class_names=["cat", "dog", "bird"])
    assert model.num_classes == 3 and model.class_names == ("cat", "dog", "bird")
    assert list(model.preset_layers) == BACKBONES[name]
    for layer in model.preset_layers:
        for got, expected in zip(_weights(_layer(model, layer)), _weights(_layer(preset, layer))):
            np.testing.assert_array_equal(got, expected)
    head = "class_caps" if name == "MatrixCapsNet" else "digit_caps"
    assert model.get_layer(head).weights[0].shape != preset.get_layer(head).weights[0].shape
    x = np.random.default_rng(0).integers(0, 256, (2, 28, 28, 1)).astype("float32")
    assert model.predict(x, verbose=0)["poses"].shape[1] == 3
    # num_classes alone: the preset's digit names do not follow.
    counted = cls.from_preset(folder, num_classes=4)
    assert counted.num_classes == 4 and counted.class_names is None


def test_the_same_classes_keep_the_whole_model_and_other_names_do_not(tmp_path):
    preset, folder = _preset(tmp_path, "CapsNet")
    same = applications.CapsNet.from_preset(folder, class_names=DIGITS, input_shape=(28, 28, 1))
    assert list(same.preset_layers) == [*BACKBONES["CapsNet"], "digit_caps", "decoder"]
    x = np.random.default_rng(1).integers(0, 256, (3, 28, 28, 1)).astype("float32")
    np.testing.assert_allclose(
        same.predict(x, verbose=0)["poses"], preset.predict(x, verbose=0)["poses"], atol=1e-6
    )
    renamed = applications.CapsNet.from_preset(folder, class_names=list("abcdefghij"))
    assert "digit_caps" not in renamed.preset_layers and renamed.class_names[0] == "a"


def test_a_grey_preset_starts_a_colour_model_of_another_size(tmp_path):
    preset, folder = _preset(tmp_path, "CapsNet")
    model = applications.CapsNet.from_preset(
        folder, input_shape=(36, 40, 3), class_names=["a", "b"]
    )
    assert list(model.preset_layers) == BACKBONES["CapsNet"]
    grey, _ = _weights(_layer(preset, "backbone/conv1"))
    colour, bias = _weights(_layer(model, "backbone/conv1"))
    assert colour.shape == (9, 9, 3, 16)
    np.testing.assert_allclose(colour, np.repeat(grey, 3, axis=2) / 3)
    np.testing.assert_array_equal(bias, _weights(_layer(preset, "backbone/conv1"))[1])
    # A grey image repeated over three channels gives the grey model's features.
    x = np.random.default_rng(2).integers(0, 256, (2, 36, 40, 1)).astype("float32")
    grey_model = applications.CapsNet.from_preset(folder, input_shape=(36, 40, 1), num_classes=2)
    np.testing.assert_allclose(
        model.backbone.predict(np.repeat(x, 3, axis=-1), verbose=0),
        grey_model.backbone.predict(x, verbose=0),
        atol=1e-4,
    )
    assert model.reconstruct(np.repeat(x, 3, axis=-1)).shape == (2, 36, 40, 3)


def test_training_from_a_preset_with_a_frozen_backbone_changes_only_the_head(tmp_path):
    preset, folder = _preset(tmp_path, "EfficientCapsNet")
    model = applications.EfficientCapsNet.from_preset(folder, class_names=["even", "odd"])
    model.backbone.trainable = False
    rng = np.random.default_rng(3)
    x = rng.integers(0, 256, (32, 28, 28, 1)).astype("float32")
    head_before = [np.asarray(w).copy() for w in model.get_layer("digit_caps").weights]
    model.fit(x, np.arange(32) % 2, batch_size=8, epochs=1, verbose=0)
    for name in BACKBONES["EfficientCapsNet"]:  # batch normalisation's statistics too
        for got, expected in zip(_weights(_layer(model, name)), _weights(_layer(preset, name))):
            np.testing.assert_array_equal(got, expected)
    head_after = [np.asarray(w) for w in model.get_layer("digit_caps").weights]
    assert any(not np.array_equal(a, b) for a, b in zip(head_after, head_before))


@pytest.mark.parametrize("name", sorted(SMALL))
def test_the_backbone_is_a_submodel_the_model_saves_once(tmp_path, name):
    model = getattr(applications, name)(**SMALL[name], compile=False)
    backbone = model.backbone
    assert backbone is model.get_layer("backbone")
    assert type(backbone).__name__ == f"{name}Backbone"
    names = [f"backbone/{layer.name}" for layer in backbone.layers if layer.weights]
    assert names == BACKBONES[name]
    # The backbone alone, from its config, is the same network.
    again = type(backbone).from_config(backbone.get_config())
    assert again.count_params() == backbone.count_params()
    path = str(tmp_path / "m.weights.h5")
    model.save_weights(path)
    import h5py

    with h5py.File(path) as f:
        datasets = []
        f.visititems(lambda key, item: datasets.append(key) if hasattr(item, "dtype") else None)
    assert len(datasets) == len(model.weights)

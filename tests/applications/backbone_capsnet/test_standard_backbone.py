import re
import sys

import keras
import numpy as np
import pytest

import applications
from applications.backbone_capsnet.standard_backbone import STANDARD_BACKBONES
from tests._model_testing import assert_saves_and_loads


def test_every_name_is_a_keras_application_with_its_preprocessing():
    for name, module in STANDARD_BACKBONES.items():
        assert callable(getattr(keras.applications, name)), name
        assert callable(getattr(keras.applications, module).preprocess_input), name
    public = {n for n in dir(keras.applications) if n[0].isupper()}
    assert public == set(STANDARD_BACKBONES)  # none left out


def test_the_models_own_preprocessing_runs_inside():
    # ResNet50 was trained on Caffe's BGR images less the ImageNet means.
    backbone = applications.standard_backbone("resnet50", (32, 32, 3), weights=None)
    x = np.random.default_rng(0).uniform(0, 1, (2, 32, 32, 3)).astype("float32")
    inner = backbone.get_layer("resnet50")
    want = inner(keras.applications.resnet.preprocess_input(x * 255.0))
    got = keras.ops.convert_to_numpy(backbone(x))
    np.testing.assert_allclose(got, keras.ops.convert_to_numpy(want), rtol=1e-5, atol=1e-5)
    assert backbone.output.shape == (None, 1, 1, 2048)
    assert not [layer for layer in backbone.layers if type(layer).__name__ == "Lambda"]


def test_a_weights_file(tmp_path):
    model = keras.applications.MobileNetV3Small(
        include_top=False, weights=None, input_shape=(32, 32, 3)
    )
    path = str(tmp_path / "mobilenet.weights.h5")
    model.save_weights(path)
    backbone = applications.standard_backbone("MobileNetV3Small", (32, 32, 3), weights=path)
    for got, want in zip(backbone.get_layer("MobileNetV3Small").weights, model.weights):
        np.testing.assert_array_equal(got, want)


@pytest.fixture(scope="module")
def mobilenet_weights(tmp_path_factory):
    """MobileNetV3Small's weights file for 32x32 images, and its bytes."""
    model = keras.applications.MobileNetV3Small(
        include_top=False, weights=None, input_shape=(32, 32, 3)
    )
    path = str(tmp_path_factory.mktemp("weights") / "mobilenet.weights.h5")
    model.save_weights(path)
    with open(path, "rb") as f:
        return path, f.read()


def _damaged(data, damage):
    """`data`, a weights file's bytes, damaged as `damage` says."""
    if damage == "truncated":
        return data[: len(data) // 2]
    if damage == "random":
        return np.random.default_rng(0).bytes(5000)
    if damage == "empty":
        return b""
    middle = len(data) // 2  # "inside": the header whole, the middle of the file zeroed
    return data[: middle - 200_000] + bytes(400_000) + data[middle + 200_000 :]


@pytest.mark.parametrize(
    "damage, detail",
    [
        ("truncated", r"not a readable HDF5 weights file \(truncated file: eof = "),
        ("random", r"not a readable HDF5 weights file \(file signature not found\)"),
        ("empty", r"it is empty"),
        ("inside", r"it opens, but part of it cannot be read"),  # loaded in part, before
    ],
)
def test_a_damaged_weights_file_is_named_in_one_line(mobilenet_weights, tmp_path, damage, detail):
    path = str(tmp_path / "mobilenet.weights.h5")
    with open(path, "wb") as f:
        f.write(_damaged(mobilenet_weights[1], damage))
    with pytest.raises(ValueError) as raised:
        applications.standard_backbone("MobileNetV3Small", (32, 32, 3), weights=path)
    message = str(raised.value)
    assert message.startswith(f"The backbone weights file {path} is damaged: "), message
    assert re.search(detail, message) and "\n" not in message, message


def test_another_backbones_weights_file_is_named_in_one_line(tmp_path, recwarn):
    other = keras.applications.MobileNetV2(include_top=False, weights=None, input_shape=(32, 32, 3))
    path = str(tmp_path / "mobilenet_v2.weights.h5")
    other.save_weights(path)
    recwarn.clear()
    with pytest.raises(ValueError) as raised:
        applications.standard_backbone("MobileNetV3Small", (32, 32, 3), weights=path)
    assert str(raised.value) == (
        f"The backbone weights file {path} holds the weights of another model, not of "
        "MobileNetV3Small: conv/kernel has the shape (3, 3, 3, 16) in the model and "
        "(3, 3, 3, 32) in the file. Pass the weights of this model."
    )
    assert not [w for w in recwarn if "could not be loaded" in str(w.message).lower()]
    assert len(recwarn) < 5, [str(w.message)[:100] for w in recwarn]  # not one per layer


def test_an_hdf5_file_that_holds_no_weights_is_named(tmp_path):
    import h5py

    path = str(tmp_path / "data.weights.h5")
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.zeros(3))
    with pytest.raises(ValueError, match=r"data\.weights\.h5 is an HDF5 file but not a Keras"):
        applications.standard_backbone("MobileNetV3Small", (32, 32, 3), weights=path)


def test_a_failed_download_says_what_to_do(monkeypatch):
    from keras.src.applications import mobilenet_v3

    def offline(*args, **kwargs):
        raise Exception("URL fetch failure on https://example.invalid: None -- no network")

    monkeypatch.setattr(mobilenet_v3.file_utils, "get_file", offline)
    with pytest.raises(ValueError, match=r"Could not download MobileNetV3Small's.*weights=None"):
        applications.standard_backbone("MobileNetV3Small", (32, 32, 3))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"name": "ResNet51"}, "backbone"),
        ({"name": "MobileNetV3Small", "input_shape": (32, 32, 1)}, "3 channels"),
        ({"name": "MobileNetV3Small", "weights": "no/such/file.h5"}, "weights"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        applications.standard_backbone(**kwargs)


def test_a_capsule_head_on_a_named_backbone(tmp_path):
    model = applications.BackboneCapsNet(
        "MobileNetV3Small", class_names=["a", "b"], input_shape=(32, 32, 1), backbone_weights=None
    )
    assert model.image_shape == (32, 32, 3)  # ImageNet models take colour; grey is converted
    grey = np.random.default_rng(1).integers(0, 256, (4, 40, 36, 1)).astype("uint8")
    model.fit(grey, np.array([0, 1, 0, 1]), epochs=1, verbose=0)
    assert_saves_and_loads(model, grey, tmp_path)
    dense = applications.BackboneCNN(
        "MobileNetV3Small", num_classes=2, input_shape=(32, 32, 3), backbone_weights=None
    )
    assert dense.backbone.name == "mobilenetv3small"


def test_backbone_weights_are_for_a_name():
    backbone = keras.Sequential([keras.Input((16, 16, 3)), keras.layers.Conv2D(4, 3)])
    with pytest.raises(ValueError, match="backbone_weights"):
        applications.BackboneCapsNet(backbone, num_classes=2, backbone_weights=None)


def test_without_keras_hub_a_name_is_a_keras_application(monkeypatch):
    module = sys.modules["applications.backbone_capsnet.standard_backbone"]
    monkeypatch.setattr(module, "hub_installed", lambda: False)
    with pytest.raises(ValueError, match=r"MobileNetV3Small.*pip install keras-hub"):
        applications.standard_backbone("resnet_18_imagenet", (32, 32, 3))


def test_a_preset_on_a_named_backbone_takes_new_classes(tmp_path):
    model = applications.BackboneCapsNet(
        "MobileNetV3Small",
        num_classes=3,
        input_shape=(32, 32, 3),
        backbone_weights=None,
        routing="self_attention",
    )
    folder = str(tmp_path / "preset")
    model.save_to_preset(folder)
    # The preset is read twice (the new model, then the weights' source): a functional
    # backbone's config must survive the first reading.
    new = applications.BackboneCapsNet.from_preset(folder, class_names=["a", "b"])
    assert new.class_names == ("a", "b")
    inner, kept = new.backbone.get_layer("MobileNetV3Small"), model.backbone
    for got, want in zip(inner.weights, kept.get_layer("MobileNetV3Small").weights):
        np.testing.assert_array_equal(
            keras.ops.convert_to_numpy(got), keras.ops.convert_to_numpy(want)
        )

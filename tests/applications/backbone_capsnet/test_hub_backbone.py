"""keras-hub image presets as backbones, from preset folders the tests write (no download)."""

import os

import keras
import numpy as np
import pytest

import applications
from tests._keras_hub import keras_hub_or_skip
from tests._keras_hub import tiny_resnet
from tests._model_testing import assert_saves_and_loads

keras_hub = keras_hub_or_skip()

_MEAN = np.array([0.485, 0.456, 0.406])
_STD = np.array([0.229, 0.224, 0.225])


@pytest.fixture(scope="module")
def preset(tmp_path_factory):
    """A small ResNet preset folder with ImageNet's per-channel normalisation, and its backbone."""
    folder = str(tmp_path_factory.mktemp("hub") / "tiny_resnet")
    backbone = tiny_resnet()
    converter = keras_hub.layers.ResNetImageConverter(
        image_size=(48, 40), scale=list(1 / (255 * _STD)), offset=list(-_MEAN / _STD)
    )
    backbone.save_to_preset(folder)
    converter.save_to_preset(folder)
    return folder, backbone


def _pixels(shape, seed=0):
    return np.random.default_rng(seed).uniform(0, 1, shape).astype("float32")


def test_the_presets_weights_behind_its_converters_normalisation(preset):
    folder, saved = preset
    model = applications.standard_backbone(folder, (32, 32, 3))
    x = _pixels((2, 32, 32, 3))
    want = saved((x - _MEAN) / _STD)  # 255 x times the scale, plus the offset
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(model(x)),
        keras.ops.convert_to_numpy(want),
        rtol=1e-4,
        atol=1e-4,
    )
    assert model.name == "tiny_resnet" and model.output.shape == (None, 4, 4, 64)
    assert not [layer for layer in model.layers if type(layer).__name__ == "Lambda"]


def test_the_converters_image_size_by_default(preset):
    model = applications.standard_backbone(preset[0])
    assert model.input_shape == (None, 48, 40, 3)


def test_random_weights_and_a_weights_file(preset, tmp_path):
    folder, saved = preset
    random = applications.standard_backbone(folder, (32, 32, 3), weights=None)
    inner = random.layers[-1]
    assert any(
        not np.array_equal(keras.ops.convert_to_numpy(got), keras.ops.convert_to_numpy(want))
        for got, want in zip(inner.weights, saved.weights)
    )
    other = tiny_resnet()
    path = str(tmp_path / "other.weights.h5")
    other.save_weights(path)
    loaded = applications.standard_backbone(folder, (32, 32, 3), weights=path).layers[-1]
    for got, want in zip(loaded.weights, other.weights):
        np.testing.assert_array_equal(
            keras.ops.convert_to_numpy(got), keras.ops.convert_to_numpy(want)
        )


def test_a_capsule_head_on_a_hub_preset_saves_and_loads(preset, tmp_path):
    model = applications.BackboneCapsNet(
        preset[0], class_names=["a", "b"], input_shape=(32, 32, 1), routing="self_attention"
    )
    assert model.image_shape == (32, 32, 3)
    grey = np.random.default_rng(1).integers(0, 256, (4, 32, 32, 1)).astype("uint8")
    model.fit(grey, np.array([0, 1, 0, 1]), epochs=1, batch_size=2, verbose=0)
    assert_saves_and_loads(model, grey, tmp_path)


def test_what_is_not_a_hub_image_preset(preset, tmp_path):
    with pytest.raises(ValueError, match="keras.applications model .* or a keras-hub"):
        applications.standard_backbone("resnet_51_imagenet", (32, 32, 3))
    bare = str(tmp_path / "backbone_only")
    preset[1].save_to_preset(bare)  # no image converter: how it takes pixels is unknown
    with pytest.raises(ValueError, match="image converter"):
        applications.standard_backbone(bare, (32, 32, 3))


def test_a_preset_folder_holding_another_resnets_weights_is_named(preset, tmp_path):
    import shutil

    folder = str(tmp_path / "tiny_resnet")
    shutil.copytree(preset[0], folder)
    other = keras_hub.models.ResNetBackbone(
        input_conv_filters=[64],
        input_conv_kernel_sizes=[3],
        stackwise_num_filters=[64, 128],  # the tiny ResNet's second stage has 64
        stackwise_num_blocks=[1, 1],
        stackwise_num_strides=[1, 2],
        block_type="basic_block",
        use_pre_activation=False,
        image_shape=(None, None, 3),
    )
    weights = os.path.join(folder, "model.weights.h5")
    other.save_weights(weights)
    with pytest.raises(ValueError) as raised:
        applications.standard_backbone(folder, (32, 32, 3))
    message = str(raised.value)
    assert message.startswith(
        f"The keras-hub preset's weights file {weights} holds the weights of another model, not of "
    ), message
    assert "has the shape" in message and "\n" not in message, message


def test_a_damaged_weights_file_for_a_hub_preset_is_named(preset, tmp_path):
    path = str(tmp_path / "resnet.weights.h5")
    preset[1].save_weights(path)
    with open(path, "r+b") as f:
        f.seek(0)
        f.write(b"GIF89a")  # the file's signature overwritten
    with pytest.raises(ValueError) as raised:
        applications.standard_backbone(preset[0], (32, 32, 3), weights=path)
    message = str(raised.value)
    assert message.startswith(f"The backbone weights file {path} is damaged: "), message
    assert "\n" not in message

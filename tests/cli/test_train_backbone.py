"""`train backbone-capsnet`: a capsule head on a standard backbone, from the shell."""

import os

import keras
import numpy as np
import pytest
from PIL import Image

from keras_capsules import cli
from tests._keras_hub import keras_hub_or_skip
from tests._keras_hub import tiny_resnet
from tests.conftest import requires_tensorflow

pytestmark = requires_tensorflow


def _photos(root):
    """Two classes of 6 RGB PNG photos of 40x36 pixels, dark and light."""
    rng = np.random.default_rng(0)
    for value, name in ((40, "dark"), (200, "light")):
        os.makedirs(root / name)
        for i in range(6):
            pixels = np.clip(rng.integers(-30, 30, (40, 36, 3)) + value, 0, 255)
            Image.fromarray(pixels.astype("uint8")).save(root / name / f"{i}.png")
    return root


def test_a_frozen_backbone_from_a_weights_file_trains_its_head(tmp_path):
    base = keras.applications.MobileNetV3Small(
        include_top=False, weights=None, input_shape=(32, 32, 3)
    )
    weights = str(tmp_path / "mobilenet.weights.h5")
    base.save_weights(weights)
    output = tmp_path / "run"
    cli.main(
        ["train", "backbone-capsnet", "--backbone", "mobilenetv3small"]
        + ["--backbone-weights", weights, "--freeze-backbone", "--routing", "self_attention"]
        + ["--images", str(_photos(tmp_path / "photos")), "--image-size", "32", "32"]
        + ["--epochs", "1", "--batch-size", "4", "--verbose", "0", "--output", str(output)]
    )
    model = keras.saving.load_model(output / "model.keras")
    assert type(model).__name__ == "BackboneCapsNet" and model.routing == "self_attention"
    assert model.class_names == ("dark", "light") and not model.backbone.trainable
    for got, want in zip(model.backbone.get_layer("MobileNetV3Small").weights, base.weights):
        np.testing.assert_array_equal(got, want)  # loaded from the file, and frozen


def test_a_truncated_backbone_weights_file_is_named_not_the_disk(tmp_path):
    base = keras.applications.MobileNetV3Small(
        include_top=False, weights=None, input_shape=(32, 32, 3)
    )
    weights = str(tmp_path / "mobilenet.weights.h5")
    base.save_weights(weights)
    with open(weights, "r+b") as f:
        f.truncate(os.path.getsize(weights) // 2)
    with pytest.raises(SystemExit) as stopped:
        cli.main(
            ["train", "backbone-capsnet", "--backbone", "mobilenetv3small"]
            + ["--backbone-weights", weights]
            + ["--images", str(_photos(tmp_path / "photos")), "--image-size", "32", "32"]
            + ["--epochs", "1", "--output", str(tmp_path / "run")]
        )
    message = str(stopped.value)
    assert message.startswith(
        f"keras-capsules train: The backbone weights file {weights} is damaged: it is not a "
        "readable HDF5 weights file (truncated file: "
    ), message
    assert "\n" not in message and "cannot write" not in message and "space" not in message


@pytest.mark.parametrize(
    "options, message",
    [
        ([], "backbone-capsnet needs --backbone NAME"),
        (["--backbone", "ResNet50", "--from-preset", "x"], "not both"),
        (["--backbone", "ResNet51"], "`backbone` names a keras.applications model"),
        (["--backbone", "ResNet50", "--routing", "self_attention", "--iterations", "2"], "pass"),
    ],
)
def test_backbone_capsnet_options_in_one_line(tmp_path, options, message):
    folder = str(_photos(tmp_path / "photos"))
    argv = ["train", "backbone-capsnet", "--backbone-weights", "none", "--images", folder]
    with pytest.raises(SystemExit) as stopped:
        cli.main(argv + options + ["--output", str(tmp_path / "run")])
    assert message in str(stopped.value) and "\n" not in str(stopped.value)


def test_an_unknown_routing_is_a_usage_error_naming_the_choices(tmp_path, capsys):
    argv = ["train", "backbone-capsnet", "--backbone", "ResNet50", "--routing", "magic"]
    with pytest.raises(SystemExit) as stopped:
        cli.main(argv + ["--output", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and "--routing: invalid choice: 'magic'" in err
    assert "self_attention" in err and not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "options, message",
    [
        (["--backbone", "ResNet50"], "--backbone is an option of backbone-capsnet, not of capsnet"),
        (["--backbone-weights", "none"], "--backbone-weights is an option of backbone-capsnet"),
    ],
)
def test_backbone_options_belong_to_backbone_capsnet(tmp_path, capsys, options, message):
    with pytest.raises(SystemExit) as stopped:
        cli.main(["train", "capsnet", *options, "--output", str(tmp_path / "run")])
    assert stopped.value.code == 2 and message in capsys.readouterr().err


def test_a_keras_hub_preset_folder_as_the_backbone(tmp_path):
    keras_hub = keras_hub_or_skip()
    preset = str(tmp_path / "tiny_resnet")
    tiny_resnet().save_to_preset(preset)
    keras_hub.layers.ResNetImageConverter(image_size=(32, 32), scale=1 / 255).save_to_preset(preset)
    output = tmp_path / "run"
    cli.main(
        ["train", "backbone-capsnet", "--backbone", preset, "--routing", "self_attention"]
        + ["--images", str(_photos(tmp_path / "photos")), "--image-size", "32", "32"]
        + ["--epochs", "1", "--batch-size", "4", "--verbose", "0", "--output", str(output)]
    )
    model = keras.saving.load_model(output / "model.keras")
    assert model.backbone.name == "tiny_resnet" and model.class_names == ("dark", "light")
    assert type(model.backbone.layers[-1]) is keras_hub.models.ResNetBackbone


def test_a_preset_on_a_named_backbone_trains_on_new_classes(tmp_path):
    import applications

    preset = str(tmp_path / "preset")
    applications.BackboneCapsNet(
        "MobileNetV3Small",
        class_names=["x", "y", "z"],
        input_shape=(32, 32, 3),
        backbone_weights=None,
        routing="self_attention",
    ).save_to_preset(preset)
    output = tmp_path / "run"
    cli.main(
        ["train", "backbone-capsnet", "--from-preset", preset, "--freeze-backbone"]
        + ["--images", str(_photos(tmp_path / "photos")), "--image-size", "32", "32"]
        + ["--epochs", "1", "--batch-size", "4", "--verbose", "0", "--output", str(output)]
    )
    model = keras.saving.load_model(output / "model.keras")
    assert model.class_names == ("dark", "light") and model.routing == "self_attention"

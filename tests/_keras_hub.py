"""keras-hub for the tests: imported where CI requires it, else skipped; small presets."""

import os

import pytest


def keras_hub_or_skip():
    """keras-hub; with `KERAS_CAPSULES_REQUIRE_KERAS_HUB=1` (CI) a missing one fails."""
    if os.environ.get("KERAS_CAPSULES_REQUIRE_KERAS_HUB") == "1":
        import keras_hub

        return keras_hub
    return pytest.importorskip("keras_hub")


def tiny_resnet():
    """A two-stage keras-hub ResNet for images of any size (155K parameters)."""
    keras_hub = keras_hub_or_skip()
    return keras_hub.models.ResNetBackbone(
        input_conv_filters=[64],
        input_conv_kernel_sizes=[3],
        stackwise_num_filters=[64, 64],
        stackwise_num_blocks=[1, 1],
        stackwise_num_strides=[1, 2],
        block_type="basic_block",
        use_pre_activation=False,
        image_shape=(None, None, 3),
    )

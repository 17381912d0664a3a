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


def keras_hub_checks(temp_dir):
    """An instance of keras-hub's `TestCase` whose `run_*_test` checks the tests call.

    keras-hub's test helpers (`keras_hub.src.tests.test_case`) import `grain`
    at module level for their preprocessing checks, none of which applies to
    this library (it has no tokenizer or preprocessor). `grain` is not
    installed: its import pulls JAX into every process (1.6 s, whichever the
    backend), and with it installed `import keras_hub` would import it too
    (keras-hub's pipelines look for it), so every keras-hub test would run
    against another keras-hub than the users'. Instead, an empty stand-in
    module named `grain` is in `sys.modules` only while those helpers import,
    after keras-hub itself has imported (and found no `grain`); a check that
    reached it would fail with an `AttributeError` naming `grain`, not pass.
    An installed `grain` is used as it is.

    Args:
        temp_dir: the folder of the files the checks write (pytest's `tmp_path`).
    """
    import sys
    import types

    keras_hub_or_skip()
    pytest.importorskip("tensorflow")  # the helpers' `tf.test.TestCase`
    try:
        import grain  # noqa: F401
    except ImportError:
        stand_in = sys.modules.setdefault("grain", types.ModuleType("grain"))
        try:
            from keras_hub.src.tests import test_case
        finally:
            if sys.modules.get("grain") is stand_in:
                del sys.modules["grain"]
    else:
        from keras_hub.src.tests import test_case

    class Checks(test_case.TestCase):
        def get_temp_dir(self):
            return str(temp_dir)

    return Checks("run_layer_test")

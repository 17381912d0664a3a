"""The matrix capsule backbone: Conv1 to ConvCaps2, poses and activations."""

import numpy as np
import pytest
from keras import ops

import applications
from tests._model_testing import run_backbone_test

SMALL = dict(conv_filters=4, primary_capsule_types=2, conv_caps1_types=2, conv_caps2_types=2)


def test_passes_the_backbone_checks(tmp_path):
    images = np.random.default_rng(0).uniform(0, 1, (2, 28, 28, 1)).astype("float32")
    run_backbone_test(
        applications.MatrixCapsNetBackbone, SMALL, images, [(3, 3, 2, 16), (3, 3, 2)], tmp_path
    )


def test_takes_its_smallest_image_and_refuses_one_pixel_less():
    backbone = applications.MatrixCapsNetBackbone(input_shape=(17, 17, 1), **SMALL)
    outputs = backbone(np.zeros((1, 17, 17, 1)))
    for output in outputs if isinstance(outputs, (list, tuple)) else [outputs]:
        assert np.all(np.isfinite(ops.convert_to_numpy(output)))
    pattern = r"`input_shape` \(16, 17, 1\) is too small.*at least 17x17"
    with pytest.raises(ValueError, match=pattern):
        applications.MatrixCapsNetBackbone(input_shape=(16, 17, 1), **SMALL)


def test_colour_images():
    backbone = applications.MatrixCapsNetBackbone(input_shape=(28, 28, 3), **SMALL)
    assert backbone.image_shape == (28, 28, 3)
    assert backbone.count_params() > applications.MatrixCapsNetBackbone(**SMALL).count_params()

"""The Efficient-CapsNet backbone: four convolutions and the depthwise primary capsules."""

import numpy as np
import pytest
from keras import ops

import applications
from tests._model_testing import run_backbone_test

SMALL = dict(conv_filters=(4, 4, 4, 16), primary_capsule_types=2)


def test_passes_the_backbone_checks(tmp_path):
    images = np.random.default_rng(0).uniform(0, 1, (2, 28, 28, 1)).astype("float32")
    run_backbone_test(applications.EfficientCapsNetBackbone, SMALL, images, [(2, 8)], tmp_path)


def test_takes_its_smallest_image_and_refuses_one_pixel_less():
    backbone = applications.EfficientCapsNetBackbone(input_shape=(11, 11, 1), **SMALL)
    outputs = backbone(np.zeros((1, 11, 11, 1)))
    for output in outputs if isinstance(outputs, (list, tuple)) else [outputs]:
        assert np.all(np.isfinite(ops.convert_to_numpy(output)))
    pattern = r"`input_shape` \(10, 11, 1\) is too small.*at least 11x11"
    with pytest.raises(ValueError, match=pattern):
        applications.EfficientCapsNetBackbone(input_shape=(10, 11, 1), **SMALL)


def test_colour_images():
    backbone = applications.EfficientCapsNetBackbone(input_shape=(28, 28, 3), **SMALL)
    assert backbone.image_shape == (28, 28, 3)
    assert backbone.count_params() > applications.EfficientCapsNetBackbone(**SMALL).count_params()

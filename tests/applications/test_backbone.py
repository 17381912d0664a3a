"""The families' backbones: what each is alone, beside the classifier that holds it."""

import numpy as np
import pytest
from keras import ops

import applications

SMALL = {
    "CapsNetBackbone": dict(conv_filters=8, primary_capsule_types=2),
    "EfficientCapsNetBackbone": dict(conv_filters=(4, 4, 4, 16), primary_capsule_types=2),
    "MatrixCapsNetBackbone": dict(
        conv_filters=4, primary_capsule_types=2, conv_caps1_types=2, conv_caps2_types=2
    ),
}
SMALLEST = {"CapsNetBackbone": 17, "EfficientCapsNetBackbone": 11, "MatrixCapsNetBackbone": 17}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_a_backbone_round_trips_and_refuses_unknown_arguments(name):
    cls = getattr(applications, name)
    backbone = cls(input_shape=(28, 28, 3), **SMALL[name])
    assert isinstance(backbone, applications.Backbone) and backbone.image_shape == (28, 28, 3)
    config = backbone.get_config()
    again = cls.from_config(config)
    assert again.get_config() == config and again.count_params() == backbone.count_params()
    with pytest.raises(ValueError, match="not_an_argument"):
        cls(**SMALL[name], not_an_argument=1)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_a_backbone_takes_its_smallest_image_and_refuses_one_pixel_less(name):
    cls, side = getattr(applications, name), SMALLEST[name]
    outputs = cls(input_shape=(side, side, 1), **SMALL[name])(np.zeros((1, side, side, 1)))
    for output in outputs if isinstance(outputs, (list, tuple)) else [outputs]:
        assert np.all(np.isfinite(ops.convert_to_numpy(output)))
    pattern = rf"`input_shape` \({side - 1}, {side}, 1\) is too small.*at least {side}x{side}"
    with pytest.raises(ValueError, match=pattern):
        cls(input_shape=(side - 1, side, 1), **SMALL[name])


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_a_backbone_computes_in_a_mixed_policy(policy):
    backbone = applications.CapsNetBackbone(**SMALL["CapsNetBackbone"], dtype=policy)
    assert backbone.get_config()["dtype"] == policy
    capsules = backbone(np.ones((2, 28, 28, 1), "float32"))
    assert np.all(np.isfinite(ops.convert_to_numpy(capsules)))

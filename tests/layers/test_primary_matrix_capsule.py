import numpy as np
import pytest
from keras import ops

from keras_capsules.layers import PrimaryMatrixCapsule
from tests._layer_testing import run_layer_test


def test_layer_checks():
    run_layer_test(
        PrimaryMatrixCapsule,
        {"capsule_types": 2, "kernel_size": 3, "strides": 2, "padding": "valid"},
        np.random.default_rng(0).normal(size=(2, 5, 5, 3)).astype("float32"),
        expected_output_shape=((2, 2, 2, 2, 16), (2, 2, 2, 2)),
        expected_num_trainable_weights=2,
    )


def test_poses_and_activations_split_one_convolution():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 6, 5, 7)).astype("float32")
    layer = PrimaryMatrixCapsule(3)
    poses, acts = layer(x)
    assert poses.shape == (2, 6, 5, 3, 16) and acts.shape == (2, 6, 5, 3)
    kernel, bias = (ops.convert_to_numpy(w) for w in layer.conv.weights)
    features = x @ kernel[0, 0] + bias  # a 1x1 convolution
    np.testing.assert_allclose(
        ops.convert_to_numpy(poses),
        features[..., :48].reshape(2, 6, 5, 3, 16),
        rtol=1e-5,
        atol=1e-5,
    )
    np.testing.assert_allclose(
        ops.convert_to_numpy(acts), 1 / (1 + np.exp(-features[..., 48:])), rtol=1e-5, atol=1e-6
    )
    assert layer.count_params() == 7 * 3 * 17 + 3 * 17


def test_output_shape_and_errors():
    layer = PrimaryMatrixCapsule(4, kernel_size=3, strides=2)
    assert layer.compute_output_shape((None, 9, 9, 8)) == ((None, 4, 4, 4, 16), (None, 4, 4, 4))
    assert not layer.built and not layer.weights  # asking for a shape builds nothing
    with pytest.raises(ValueError, match="capsule_types"):
        PrimaryMatrixCapsule(0)
    with pytest.raises(ValueError, match="padding"):
        PrimaryMatrixCapsule(2, padding="full")
    with pytest.raises(ValueError):
        PrimaryMatrixCapsule(2)(np.zeros((2, 8, 8), "float32"))

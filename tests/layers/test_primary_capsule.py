import numpy as np
import pytest
from keras import ops

from keras_capsules.layers import PrimaryCapsule
from tests import _references as ref
from tests._layer_testing import run_layer_test


def test_layer_checks():
    run_layer_test(
        PrimaryCapsule,
        {"capsule_types": 4, "capsule_dim": 3, "kernel_size": 3, "strides": 2, "padding": "same"},
        np.random.default_rng(0).normal(size=(2, 5, 5, 3)).astype("float32"),
        expected_output_shape=(2, 3 * 3 * 4, 3),
        expected_num_trainable_weights=2,
    )


def test_shape_and_values_are_the_squashed_convolution():
    layer = PrimaryCapsule(4, 3, kernel_size=3, strides=2)
    x = np.random.normal(size=(2, 9, 9, 5)).astype("float32")
    y = ops.convert_to_numpy(layer(x))
    assert y.shape == (2, 4 * 4 * 4, 3) == layer.compute_output_shape(x.shape)
    conv = ops.convert_to_numpy(layer.conv(x)).reshape(2, -1, 3)
    np.testing.assert_allclose(y, ref.squash(conv), rtol=1e-4, atol=1e-6)


def test_compute_output_shape_builds_nothing():
    layer = PrimaryCapsule(32, 8, 9, strides=2)
    assert layer.compute_output_shape((None, 20, 20, 256)) == (None, 1152, 8)
    assert layer.compute_output_shape((None, None, None, 3)) == (None, None, 8)
    assert not layer.built and not layer.weights


def test_paper_sizes_and_parameters():
    layer = PrimaryCapsule(32, 8, 9, strides=2)
    layer.build((None, 20, 20, 256))  # its output shape: test_compute_output_shape_builds_nothing
    assert layer.count_params() == 5_308_672


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"capsule_types": 0, "capsule_dim": 8, "kernel_size": 3}, "capsule_types"),
        ({"capsule_types": 2, "capsule_dim": 0, "kernel_size": 3}, "capsule_dim"),
        ({"capsule_types": 2, "capsule_dim": 8, "kernel_size": 3, "padding": "full"}, "padding"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PrimaryCapsule(**kwargs)


def test_bad_input_rank():
    with pytest.raises(ValueError):
        PrimaryCapsule(2, 4, 3)(np.zeros((2, 9, 9), "float32"))

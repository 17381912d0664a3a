import keras
import numpy as np
import pytest
from keras import ops

from keras_capsules.layers.inverted_dot_product_capsule import InvertedDotProductCapsule
from tests import _references as ref
from tests._layer_testing import run_layer_test
from tests.conftest import gradient


def test_layer_checks():
    run_layer_test(
        InvertedDotProductCapsule,
        {"capsule_types": 3, "capsule_dim": 4, "iterations": 2, "name": "classes"},
        np.random.default_rng(0).normal(size=(2, 5, 3)).astype("float32"),
        expected_output_shape=(2, 3, 4),
        expected_num_trainable_weights=3,
    )


def test_returns_the_coupling():
    layer = InvertedDotProductCapsule(3, 4, iterations=3)
    poses, coupling = layer(keras.Input((5, 3)), return_coupling=True)
    assert tuple(poses.shape) == (None, 3, 4) and tuple(coupling.shape) == (None, 5, 3)
    for iterations in (1, 3):
        layer = InvertedDotProductCapsule(3, 4, iterations=iterations)
        x = np.random.default_rng(1).normal(size=(2, 5, 3)).astype("float32")
        poses, coupling = layer(x, return_coupling=True)
        assert tuple(poses.shape) == (2, 3, 4) and tuple(coupling.shape) == (2, 5, 3)
        assert ops.dtype(coupling) == "float32"
        np.testing.assert_allclose(ops.convert_to_numpy(coupling).sum(axis=-1), 1.0, atol=1e-6)


def test_one_matrix_per_input_and_output_capsule_and_a_layer_norm():
    layer = InvertedDotProductCapsule(10, 16)
    layer.build((None, 50, 8))
    assert layer.count_params() == 50 * 8 * 10 * 16 + 2 * 16


def test_default_kernel_as_the_official_code():
    layer = InvertedDotProductCapsule(10, 16)
    layer.build((None, 200, 8))
    std = float(np.std(ops.convert_to_numpy(layer.kernel)))
    np.testing.assert_allclose(std, np.sqrt(10 / (200 * 8)), rtol=0.02)


@pytest.mark.parametrize("iterations", [1, 3])
def test_values_match_numpy_votes_and_procedure_1(iterations):
    layer = InvertedDotProductCapsule(4, 6, iterations=iterations, agreement_scale=0.5)
    u = np.random.default_rng(iterations).normal(size=(2, 7, 5)).astype("float32")
    layer.build(u.shape)
    rng = np.random.default_rng(0)
    layer.gamma.assign(rng.uniform(0.5, 1.5, size=6).astype("float32"))
    layer.beta.assign(rng.normal(size=6).astype("float32"))
    kernel = ops.convert_to_numpy(layer.kernel).reshape(7, 5, 4, 6)  # W[i] maps u_i to all j
    votes = ref.capsule_votes(u, kernel)
    gamma, beta = ops.convert_to_numpy(layer.gamma), ops.convert_to_numpy(layer.beta)
    expected, coupling = ref.inverted_dot_product_routing(
        votes, iterations, gamma, beta, agreement_scale=0.5
    )
    votes_got = ref.swap_parents_and_children(ops.convert_to_numpy(layer.votes(u)))
    np.testing.assert_allclose(votes_got, votes, rtol=1e-5, atol=1e-5)
    outputs, c = layer(u, return_coupling=True)
    np.testing.assert_allclose(ops.convert_to_numpy(outputs), expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ops.convert_to_numpy(c), coupling, rtol=1e-4, atol=1e-6)


def test_gradients_reach_the_inputs_and_are_finite():
    layer = InvertedDotProductCapsule(10, 16, iterations=3)
    weights = np.random.default_rng(3).normal(size=(10, 16)).astype("float32")
    for scale in (0.0, 1.0, 1e20):
        x = np.full((2, 20, 8), scale, "float32")
        if scale == 1.0:
            x = np.random.default_rng(2).normal(size=x.shape).astype("float32")
        g = gradient(lambda x: ops.multiply(layer(x), weights), x)
        assert np.all(np.isfinite(g)), scale
        if scale == 1.0:
            assert np.abs(g).max() > 1e-4


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"capsule_types": 0, "capsule_dim": 16}, "capsule_types"),
        ({"capsule_types": 10, "capsule_dim": -1}, "capsule_dim"),
        ({"capsule_types": 10, "capsule_dim": 16, "iterations": 0}, "iterations"),
        ({"capsule_types": 10, "capsule_dim": 16, "epsilon": 0.0}, "epsilon"),
        ({"capsule_types": 10, "capsule_dim": 16, "agreement_scale": -1.0}, "agreement_scale"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        InvertedDotProductCapsule(**kwargs)


def test_bad_input_shapes():
    with pytest.raises(ValueError):
        InvertedDotProductCapsule(10, 16)(np.zeros((2, 8), "float32"))
    with pytest.raises(ValueError, match="num_inputs"):
        InvertedDotProductCapsule(10, 16)(keras.Input((None, 8)))
    layer = InvertedDotProductCapsule(10, 16)
    layer(np.zeros((2, 20, 8), "float32"))
    with pytest.raises(ValueError):
        layer(np.zeros((2, 21, 8), "float32"))


@pytest.mark.parametrize("mixed_precision", ["mixed_float16", "mixed_bfloat16"], indirect=True)
def test_mixed_precision_is_finite(mixed_precision):
    layer = InvertedDotProductCapsule(10, 16)
    for scale in (0.0, 1e-8, 1e4):
        x = np.full((2, 30, 8), scale, "float32")
        y = layer(x)
        assert ops.dtype(y) == keras.mixed_precision.dtype_policy().compute_dtype
        assert np.all(np.isfinite(ops.convert_to_numpy(ops.cast(y, "float32"))))
    assert layer.gamma.dtype == "float32" and layer.kernel.dtype == "float32"


def test_empty_batch_and_huge_inputs():
    layer = InvertedDotProductCapsule(10, 16)
    assert tuple(layer(np.zeros((0, 32, 8), "float32")).shape) == (0, 10, 16)
    x = np.random.default_rng(4).normal(size=(2, 32, 8)).astype("float32") * 1e20
    out = ops.convert_to_numpy(layer(x))
    assert np.all(np.isfinite(out))
    # Agreements of 1e20 and more route each input to one output: every pose is
    # normalised, or 0 (beta) where no input is routed to it.
    spread = out.std(axis=-1)
    assert np.all((np.abs(spread - 1) < 1e-4) | (spread < 1e-4)), spread

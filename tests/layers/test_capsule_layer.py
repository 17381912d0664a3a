import keras
import numpy as np
import pytest
from keras import ops

from keras_capsules.layers import CapsuleLayer
from tests import _references as ref
from tests._layer_testing import run_layer_test
from tests.conftest import gradient


def test_layer_checks():
    run_layer_test(
        CapsuleLayer,
        {"capsule_types": 3, "capsule_dim": 4, "iterations": 2, "name": "digits"},
        np.random.default_rng(0).normal(size=(2, 5, 3)).astype("float32"),
        expected_output_shape=(2, 3, 4),
        expected_num_trainable_weights=1,
    )


def test_one_matrix_per_input_and_output_capsule():
    layer = CapsuleLayer(10, 16, iterations=2)
    layer.build((None, 50, 8))
    assert layer.count_params() == 50 * 8 * 10 * 16


def test_values_match_numpy_votes_and_procedure_1():
    layer = CapsuleLayer(4, 6, iterations=3)
    u = np.random.default_rng(0).normal(size=(2, 7, 5)).astype("float32")
    layer.build(u.shape)
    kernel = ops.convert_to_numpy(layer.kernel).reshape(7, 5, 4, 6)  # W[i] maps u_i to all j
    votes = ref.capsule_votes(u, kernel)
    expected, coupling = ref.dynamic_routing(votes, 3)
    votes_got = ref.swap_parents_and_children(ops.convert_to_numpy(layer.votes(u)))
    np.testing.assert_allclose(votes_got, votes, rtol=1e-5, atol=1e-5)
    outputs, c = layer(u, return_coupling=True)
    np.testing.assert_allclose(ops.convert_to_numpy(outputs), expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ops.convert_to_numpy(c), coupling, rtol=1e-4, atol=1e-5)


def test_shared_weights_accept_any_number_of_inputs():
    layer = CapsuleLayer(3, 4, share_weights=True)
    assert layer(np.ones((2, 11, 5), "float32")).shape == (2, 3, 4)
    assert layer(np.ones((2, 29, 5), "float32")).shape == (2, 3, 4)
    assert layer.count_params() == 5 * 3 * 4


def test_gradients_reach_the_kernel_and_are_finite_at_zero():
    layer = CapsuleLayer(10, 16)
    x = np.zeros((2, 20, 8), "float32")
    layer.build(x.shape)
    assert np.all(np.isfinite(gradient(layer, x)))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"capsule_types": 0, "capsule_dim": 16}, "capsule_types"),
        ({"capsule_types": 10, "capsule_dim": -1}, "capsule_dim"),
        ({"capsule_types": 10, "capsule_dim": 16, "iterations": 0}, "iterations"),
        ({"capsule_types": 10, "capsule_dim": 16, "gradient": "exact"}, "gradient"),
        (
            dict(capsule_types=10, capsule_dim=16, stop_gradient=True, gradient="structured"),
            "stop_gradient",
        ),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        CapsuleLayer(**kwargs)


def test_bad_input_shapes():
    with pytest.raises(ValueError):
        CapsuleLayer(10, 16)(np.zeros((2, 8), "float32"))
    layer = CapsuleLayer(10, 16)
    layer(np.zeros((2, 20, 8), "float32"))
    with pytest.raises(ValueError):
        layer(np.zeros((2, 21, 8), "float32"))


@pytest.mark.parametrize("mixed_precision", ["mixed_float16", "mixed_bfloat16"], indirect=True)
def test_mixed_precision_is_finite(mixed_precision):
    layer = CapsuleLayer(10, 16)
    for scale in (0.0, 1e-8, 1e4):
        x = np.full((2, 30, 8), scale, "float32")
        y = layer(x)
        assert ops.dtype(y) == keras.mixed_precision.dtype_policy().compute_dtype
        assert np.all(np.isfinite(ops.convert_to_numpy(ops.cast(y, "float32"))))


@pytest.mark.parametrize("stop_gradient", [False, True])
def test_stop_gradient_reaches_routing(stop_gradient):
    """The layer hands `stop_gradient` to routing (the votes and values are checked above)."""
    from keras_capsules.routing import dynamic_routing

    layer = CapsuleLayer(3, 5, iterations=3, stop_gradient=stop_gradient)
    u = np.random.default_rng(4).normal(size=(2, 9, 4)).astype("float32")
    layer.build(u.shape)
    expected = gradient(
        lambda x: dynamic_routing(layer.votes(x), 3, stop_gradient=stop_gradient), u
    )
    other = gradient(
        lambda x: dynamic_routing(layer.votes(x), 3, stop_gradient=not stop_gradient), u
    )
    assert not np.allclose(expected, other)
    np.testing.assert_allclose(gradient(layer, u), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("iterations", [1, 2, 5])
def test_gradient_of_each_method_matches_finite_differences_of_procedure_1(iterations):
    """Both gradient methods against float64 NumPy (on PyTorch both are autodiff)."""
    rng = np.random.default_rng(iterations)
    u = rng.normal(size=(2, 9, 4))
    layers = [CapsuleLayer(3, 5, iterations=iterations, gradient=g) for g in ("auto", "autodiff")]
    for layer in layers:
        layer.build(u.shape)
    layers[1].set_weights(layers[0].get_weights())
    assert CapsuleLayer.from_config(layers[1].get_config()).gradient == "autodiff"
    kernel = ops.convert_to_numpy(layers[0].kernel).astype("float64").reshape(9, 4, 3, 5)
    weights = rng.normal(size=(2, 3, 5))

    def objective(x):
        return np.sum(ref.dynamic_routing(ref.capsule_votes(x, kernel), iterations)[0] * weights)

    expected = np.zeros_like(u)
    step = 1e-6
    for index in np.ndindex(u.shape):
        shift = np.zeros_like(u)
        shift[index] = step
        expected[index] = (objective(u + shift) - objective(u - shift)) / (2 * step)
    assert np.abs(expected).max() > 1e-3
    scale = ops.convert_to_tensor(weights.astype("float32"))
    for layer in layers:
        got = gradient(lambda x, layer=layer: layer(x) * scale, u.astype("float32"))
        np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-4 * np.abs(expected).max())


def test_empty_batch_and_huge_inputs():
    layer = CapsuleLayer(10, 16)
    assert tuple(layer(np.zeros((0, 32, 8), "float32")).shape) == (0, 10, 16)
    # The squared norms of these votes leave float32: the capsules stay finite.
    out = ops.convert_to_numpy(layer(np.full((2, 32, 8), 1e20, "float32")))
    assert np.all(np.isfinite(out)) and np.all(np.linalg.norm(out, axis=-1) <= 1 + 1e-6)

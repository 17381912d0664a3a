import keras
import numpy as np
import pytest
from keras import ops

from keras_capsules import routing
from tests import _references as ref
from tests.conftest import gradient

inverted_dot_product_routing = ref.in_reference_layout(routing.inverted_dot_product_routing)

SHAPE = (2, 6, 3, 5)
"""The votes' shape of most tests: JAX compiles each operation once per shape."""


def _votes(shape, seed=0, scale=1.0):
    return (scale * np.random.default_rng(seed).normal(size=shape)).astype("float32")


def _numpy(x):
    return ops.convert_to_numpy(ops.cast(x, "float32"))


@pytest.mark.parametrize("iterations", [1, 2, 3, 5])
def test_values_match_procedure_1(iterations):
    votes = _votes(SHAPE, seed=iterations, scale=0.7)
    rng = np.random.default_rng(10 + iterations)
    gamma = rng.uniform(0.5, 1.5, size=5).astype("float32")
    beta = rng.normal(size=5).astype("float32") * 0.1
    expected, coupling = ref.inverted_dot_product_routing(votes, iterations, gamma, beta)
    poses, c = inverted_dot_product_routing(
        votes, iterations=iterations, gamma=gamma, beta=beta, return_coupling=True
    )
    assert tuple(poses.shape) == (2, 3, 5) and tuple(c.shape) == (2, 6, 3)
    np.testing.assert_allclose(_numpy(poses), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(_numpy(c), coupling, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_numpy(c).sum(axis=-1), 1.0, atol=1e-6)


def test_per_parent_layer_norm_weights_and_agreement_scale():
    votes = _votes(SHAPE, seed=3)
    rng = np.random.default_rng(3)
    gamma, beta = rng.normal(size=(3, 5)), rng.normal(size=(3, 5))
    expected, _ = ref.inverted_dot_product_routing(votes, 3, gamma, beta, 1e-3, agreement_scale=0.5)
    poses = inverted_dot_product_routing(
        votes, 3, gamma=gamma, beta=beta, epsilon=1e-3, agreement_scale=0.5
    )
    np.testing.assert_allclose(_numpy(poses), expected, rtol=1e-5, atol=1e-5)


def test_routing_by_agreement_sharpens_the_coefficients():
    """Children agreeing on a parent's pose are routed to it (here: parent 0)."""
    rng = np.random.default_rng(5)
    votes = rng.normal(size=(1, 12, 3, 8)).astype("float32")
    votes[:, :8, 0] = rng.normal(size=8) * 3 + 0.1 * votes[:, :8, 0]  # 8 children agree
    _, first = inverted_dot_product_routing(votes, 1, return_coupling=True)
    _, later = inverted_dot_product_routing(votes, 3, return_coupling=True)
    np.testing.assert_allclose(_numpy(first), 1 / 3)
    assert _numpy(later)[0, :8, 0].min() > 0.9


@pytest.mark.parametrize("scale", [0.0, 1e-30, 1e-8, 1e4, 1e20, 1e35])
def test_zero_tiny_and_huge_votes(scale):
    votes = _votes(SHAPE, seed=1, scale=scale)
    poses, c = inverted_dot_product_routing(votes, 3, beta=np.full(5, 0.25), return_coupling=True)
    poses, c = _numpy(poses), _numpy(c)
    assert np.all(np.isfinite(poses)) and np.all(np.isfinite(c))
    np.testing.assert_allclose(c.sum(axis=-1), 1.0, atol=1e-6)
    expected, coupling = ref.inverted_dot_product_routing(votes, 3, beta=np.full(5, 0.25))
    np.testing.assert_allclose(poses, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(c, coupling, rtol=1e-5, atol=1e-6)


def test_votes_near_the_float32_maximum():
    votes = np.random.default_rng(8).uniform(-3e38, 3e38, size=SHAPE).astype("float32")
    poses, c = inverted_dot_product_routing(votes, 3, return_coupling=True)
    expected, coupling = ref.inverted_dot_product_routing(votes, 3)
    np.testing.assert_allclose(_numpy(poses), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(_numpy(c), coupling, rtol=1e-5, atol=1e-6)
    assert np.all(np.isfinite(gradient(lambda v: inverted_dot_product_routing(v, 3), votes)))


@pytest.mark.parametrize("value", [1e20, 3e38])
def test_constant_huge_votes_give_the_offset(value):
    votes = np.full((2, 4, 3, 5), value, "float32")
    poses = inverted_dot_product_routing(votes, 3, beta=np.arange(5.0))
    np.testing.assert_allclose(_numpy(poses), np.broadcast_to(np.arange(5.0), (2, 3, 5)))


@pytest.mark.parametrize("shift", [10.0, 1e3, 1e6])
def test_shifted_votes(shift):
    """A common offset of the votes, which the layer norm removes from the poses.

    Not from the agreements: `p . (v + shift)` adds `shift * sum(p)`, zero in
    exact arithmetic but `shift` times the float32 rounding of the poses here
    (about 1e-4 * shift^2 in the poses after 3 iterations, as in any float32
    implementation: routing is ill-conditioned there). The poses stay finite,
    and normalised while the agreements are accurate to about 1.
    """
    votes = _votes(SHAPE, seed=2) + np.float32(shift)
    poses = _numpy(inverted_dot_product_routing(votes, 3))
    assert np.all(np.isfinite(poses))
    if shift <= 1e3:
        np.testing.assert_allclose(poses.mean(axis=-1), 0.0, atol=1e-3)
        np.testing.assert_allclose(poses.std(axis=-1), 1.0, atol=1e-3)
    if shift == 10.0:
        expected, _ = ref.inverted_dot_product_routing(votes, 3)
        np.testing.assert_allclose(poses, expected, atol=2e-4)


def test_empty_batch():
    poses, c = inverted_dot_product_routing(
        np.zeros((0, 5, 3, 4), "float32"), 3, return_coupling=True
    )
    assert tuple(poses.shape) == (0, 3, 4) and tuple(c.shape) == (0, 5, 3)


@pytest.mark.parametrize("dtype, tolerance", [("float16", 2e-2), ("bfloat16", 1e-1)])
def test_low_precision_routes_in_float32(dtype, tolerance):
    votes = _votes(SHAPE, seed=4)
    expected = _numpy(inverted_dot_product_routing(votes, 3))
    for scale in (1.0, 0.0, 1e-6, 1e4):
        low = ops.cast(votes * scale, dtype)
        poses, c = inverted_dot_product_routing(low, 3, return_coupling=True)
        assert ops.dtype(poses) == dtype and ops.dtype(c) == dtype
        assert np.all(np.isfinite(_numpy(poses))) and np.all(np.isfinite(_numpy(c)))
    poses = inverted_dot_product_routing(ops.cast(votes, dtype), 3)
    np.testing.assert_allclose(_numpy(poses), expected, atol=tolerance)


@pytest.mark.parametrize("scale", [0.0, 1.0, 1e20, 1e35])
def test_gradients_are_finite(scale):
    votes = _votes(SHAPE, seed=6, scale=scale)
    weights = np.random.default_rng(6).normal(size=(3, 5)).astype("float32")
    g = gradient(lambda v: ops.multiply(inverted_dot_product_routing(v, 3), weights), votes)
    assert np.all(np.isfinite(g))
    if scale == 1.0:
        assert np.abs(g).max() > 1e-3


def test_gradient_matches_finite_differences_of_the_reference():
    """The rescaled layer norm and the shifted agreements differentiate as Procedure 1."""
    votes = _votes(SHAPE, seed=7, scale=3.0)  # poses above 1: the rescaling runs
    weights = np.random.default_rng(7).normal(size=(3, 5))
    got = gradient(
        lambda v: ops.multiply(inverted_dot_product_routing(v, 3), weights.astype("float32")),
        votes,
    )

    def f(v):
        return float(np.sum(ref.inverted_dot_product_routing(v, 3)[0] * weights))

    step = 1e-4
    for flat in range(0, votes.size, 5):  # every fifth entry: central differences
        index = np.unravel_index(flat, votes.shape)
        up, down = votes.astype(np.float64), votes.astype(np.float64)
        up[index] += step
        down[index] -= step
        expected = (f(up) - f(down)) / (2 * step)
        np.testing.assert_allclose(got[index], expected, rtol=1e-3, atol=1e-3, err_msg=index)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"iterations": 0}, "iterations"),
        ({"iterations": 2.0}, "iterations"),
        ({"iterations": True}, "iterations"),
        ({"epsilon": 0.0}, "epsilon"),
        ({"agreement_scale": -1.0}, "agreement_scale"),
        ({"gamma": np.ones(5)}, "gamma"),
        ({"beta": np.ones((4, 4))}, "beta"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        inverted_dot_product_routing(np.zeros((2, 5, 3, 4), "float32"), **kwargs)


def test_bad_votes_shape():
    with pytest.raises(ValueError, match="votes"):
        inverted_dot_product_routing(np.zeros((2, 5, 12), "float32"))


def test_symbolic_votes():
    votes = keras.Input((5, 3, 4))
    assert tuple(inverted_dot_product_routing(votes, 2).shape) == (None, 3, 4)


def test_one_iteration_is_uniform_coupling():
    """The control without routing: the layer norm of each parent's evenly weighted votes."""
    votes = _votes((2, 3, 6, 5), seed=4)
    poses, coupling = routing.inverted_dot_product_routing(
        votes, iterations=1, return_coupling=True
    )
    s = votes.sum(axis=2) / 3
    centred = s - s.mean(axis=-1, keepdims=True)
    expected = centred / np.sqrt((centred**2).mean(axis=-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(_numpy(poses), expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(_numpy(coupling), 1 / 3, rtol=1e-6)

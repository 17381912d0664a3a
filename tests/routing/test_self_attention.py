import numpy as np
import pytest
from keras import ops

from keras_capsules.routing import self_attention_routing
from tests import _references as ref
from tests._references import swap_parents_and_children as swap
from tests.conftest import gradient


@pytest.mark.parametrize("shape", [(2, 16, 10, 16), (1, 7, 3, 4), (3, 30, 1, 2)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_matches_the_papers_attention_matrices(shape, with_bias):
    rng = np.random.default_rng(sum(shape))
    votes = rng.normal(size=shape).astype("float32")
    bias = rng.normal(scale=0.1, size=shape[1:3]).astype("float32") if with_bias else None
    expected, expected_coupling = ref.self_attention_routing(votes, bias)
    bias_t = None if bias is None else bias.T  # (num_outputs, num_inputs)
    outputs, coupling = self_attention_routing(swap(votes), bias=bias_t, return_coupling=True)
    np.testing.assert_allclose(ops.convert_to_numpy(outputs), expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(
        swap(ops.convert_to_numpy(coupling)), expected_coupling, rtol=1e-4, atol=1e-5
    )


def test_coupling_is_a_softmax_over_outputs_that_follows_agreement():
    rng = np.random.default_rng(0)
    votes = rng.normal(size=(2, 5, 12, 8)).astype("float32")
    votes[:, 3, :8] += 2.0  # most children agree on parent 3
    _, coupling = self_attention_routing(votes, return_coupling=True)
    coupling = ops.convert_to_numpy(coupling)
    np.testing.assert_allclose(coupling.sum(1), 1.0, atol=1e-5)
    assert coupling[:, 3, :8].mean() > 0.9 and coupling[:, 3, 8:].mean() < 0.9


@pytest.mark.parametrize("scale", [0.0, 1e-30, 1e-8, 1e4, 1e15, 1e30])
def test_finite_and_accurate_for_tiny_and_huge_votes(scale):
    votes = np.random.default_rng(1).normal(size=(2, 9, 4, 6)).astype("float32") * scale
    expected, _ = ref.self_attention_routing(votes.astype("float64"))
    outputs = ops.convert_to_numpy(self_attention_routing(swap(votes)))
    assert np.all(np.isfinite(outputs))
    np.testing.assert_allclose(outputs, expected, rtol=1e-4, atol=1e-6)
    assert np.all(np.isfinite(gradient(self_attention_routing, votes)))


def test_shifted_votes_keep_their_agreement():
    rng = np.random.default_rng(2)
    votes = (rng.normal(size=(2, 10, 4, 8)) + 50.0).astype("float32")
    expected, _ = ref.self_attention_routing(votes.astype("float64"))
    outputs = ops.convert_to_numpy(self_attention_routing(swap(votes)))
    np.testing.assert_allclose(outputs, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_low_precision_votes_route_in_float32(dtype):
    votes = np.random.default_rng(3).normal(size=(2, 16, 10, 16)).astype("float32")
    outputs = self_attention_routing(ops.cast(swap(votes), dtype))
    assert ops.dtype(outputs) == dtype
    expected, _ = ref.self_attention_routing(votes)
    np.testing.assert_allclose(
        ops.convert_to_numpy(ops.cast(outputs, "float32")), expected, atol=2e-2
    )


def test_bad_shapes_are_named():
    with pytest.raises(ValueError, match="votes"):
        self_attention_routing(np.zeros((2, 3, 4), "float32"))
    with pytest.raises(ValueError, match="bias"):
        self_attention_routing(np.zeros((2, 3, 4, 5), "float32"), bias=np.zeros((4, 3)))


def test_empty_batch():
    poses, c = self_attention_routing(np.zeros((0, 3, 5, 4), "float32"), return_coupling=True)
    assert tuple(poses.shape) == (0, 3, 4) and tuple(c.shape) == (0, 3, 5)


def test_empty_batch_through_the_layer():
    from keras_capsules.layers import SelfAttentionCapsule

    layer = SelfAttentionCapsule(3, 4)
    layer.build((None, 5, 8))
    assert tuple(layer(np.zeros((0, 5, 8), "float32")).shape) == (0, 3, 4)

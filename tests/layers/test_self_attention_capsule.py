import numpy as np
import pytest
from keras import ops

from keras_capsules.layers import SelfAttentionCapsule
from tests import _references as ref
from tests._layer_testing import run_layer_test
from tests.conftest import gradient


def test_layer_checks():
    run_layer_test(
        SelfAttentionCapsule,
        {"capsule_types": 3, "capsule_dim": 4, "name": "digits"},
        np.random.default_rng(0).normal(size=(2, 5, 3)).astype("float32"),
        expected_output_shape=(2, 3, 4),
        expected_num_trainable_weights=2,
    )


def test_the_papers_sizes():
    layer = SelfAttentionCapsule(10, 16)
    layer.build((None, 16, 8))
    assert tuple(layer.kernel.shape) == (10, 16, 8, 16)
    assert layer.count_params() == 10 * 16 * 8 * 16 + 16 * 10  # W and the priors B


def test_values_match_numpy_votes_and_routing():
    layer = SelfAttentionCapsule(4, 6)
    rng = np.random.default_rng(0)
    u = rng.normal(size=(2, 7, 5)).astype("float32")
    layer.build(u.shape)
    layer.bias.assign(rng.normal(scale=0.1, size=(7, 4)).astype("float32"))
    kernel = ops.convert_to_numpy(layer.kernel)  # (outputs, inputs, input_dim, dim)
    votes = ref.capsule_votes(u, np.transpose(kernel, (1, 2, 0, 3)))
    expected, coupling = ref.self_attention_routing(votes, ops.convert_to_numpy(layer.bias))
    votes_got = ref.swap_parents_and_children(ops.convert_to_numpy(layer.votes(u)))
    np.testing.assert_allclose(votes_got, votes, rtol=1e-5, atol=1e-5)
    outputs, c = layer(u, return_coupling=True)
    np.testing.assert_allclose(ops.convert_to_numpy(outputs), expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ops.convert_to_numpy(c), coupling, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("scale", [0.0, 1.0, 1e20])
def test_gradients_are_finite(scale):
    layer = SelfAttentionCapsule(10, 16)
    x = np.full((2, 16, 8), scale, "float32")
    layer.build(x.shape)
    assert np.all(np.isfinite(ops.convert_to_numpy(layer(x))))
    assert np.all(np.isfinite(gradient(layer, x)))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"capsule_types": 0, "capsule_dim": 16}, "capsule_types"),
        ({"capsule_types": 10}, "capsule_dim"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SelfAttentionCapsule(**kwargs)


def test_bad_input_shapes():
    with pytest.raises(ValueError, match="num_inputs, input_dim"):
        SelfAttentionCapsule(10, 16).build((None, 16))
    with pytest.raises(ValueError, match="known num_inputs"):
        SelfAttentionCapsule(10, 16).build((None, None, 8))


def test_uniform_coupling_leaves_the_attention_out():
    """The control without routing: `c = 1 / capsule_types + B` for every child."""
    layer = SelfAttentionCapsule(4, 6, uniform_coupling=True)
    rng = np.random.default_rng(1)
    u = rng.normal(size=(2, 7, 5)).astype("float32")
    layer.build(u.shape)
    bias = rng.normal(scale=0.1, size=(7, 4)).astype("float32")
    layer.bias.assign(bias)
    votes = ref.swap_parents_and_children(ops.convert_to_numpy(layer.votes(u)))  # (b, i, j, d)
    coupling = 0.25 + bias  # (inputs, outputs)
    expected = ref.exponential_squash(np.einsum("ij,bijd->bjd", coupling, votes))
    outputs, c = layer(u, return_coupling=True)
    np.testing.assert_allclose(ops.convert_to_numpy(outputs), expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ops.convert_to_numpy(c), np.broadcast_to(coupling, (2, 7, 4)))
    assert SelfAttentionCapsule.from_config(layer.get_config()).uniform_coupling
    with pytest.raises(ValueError, match="uniform_coupling"):
        SelfAttentionCapsule(4, 6, uniform_coupling="yes")

import keras
import numpy as np
import pytest
from keras import ops

from keras_capsules.layers import RandomCouplingCapsule
from tests import _references as ref
from tests._layer_testing import run_layer_test


def test_layer_checks():
    run_layer_test(
        RandomCouplingCapsule,
        {"capsule_types": 3, "capsule_dim": 4, "seed": 1, "name": "random"},
        np.random.default_rng(0).normal(size=(2, 5, 3)).astype("float32"),
        expected_output_shape=(2, 3, 4),
        expected_num_trainable_weights=1,  # W; the coupling's logits are not trained
    )


def test_values_are_the_squashed_sums_under_the_fixed_softmax_coupling():
    layer = RandomCouplingCapsule(4, 6, seed=3)
    u = np.random.default_rng(0).normal(size=(2, 7, 5)).astype("float32")
    layer.build(u.shape)
    kernel = ops.convert_to_numpy(layer.kernel).reshape(7, 5, 4, 6)
    votes = ref.capsule_votes(u, kernel).astype("float64")  # (batch, inputs, outputs, dim)
    logits = ops.convert_to_numpy(layer.coupling_logits).astype("float64")  # (outputs, inputs)
    coupling = np.exp(logits) / np.exp(logits).sum(0, keepdims=True)  # over the parents
    expected = ref.squash(np.einsum("ji,bijd->bjd", coupling, votes))
    outputs, c = layer(u, return_coupling=True)
    np.testing.assert_allclose(ops.convert_to_numpy(outputs), expected, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(
        ops.convert_to_numpy(c), np.broadcast_to(coupling.T, (2, 7, 4)), rtol=1e-5
    )
    assert not np.allclose(coupling, 0.25)  # not uniform


def test_the_coupling_is_fixed_by_the_seed_and_untouched_by_training():
    def logits(seed):
        layer = RandomCouplingCapsule(3, 4, seed=seed)
        layer.build((None, 6, 2))
        return ops.convert_to_numpy(layer.coupling_logits)

    np.testing.assert_array_equal(logits(5), logits(5))
    assert not np.allclose(logits(5), logits(6))
    model = keras.Sequential([keras.Input((6, 2)), RandomCouplingCapsule(3, 4, seed=0)])
    before = ops.convert_to_numpy(model.layers[0].coupling_logits).copy()
    kernel = ops.convert_to_numpy(model.layers[0].kernel).copy()
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss="mse")
    x = np.random.default_rng(1).normal(size=(8, 6, 2)).astype("float32")
    model.fit(x, np.ones((8, 3, 4), "float32"), epochs=2, verbose=0)
    np.testing.assert_array_equal(ops.convert_to_numpy(model.layers[0].coupling_logits), before)
    assert not np.allclose(ops.convert_to_numpy(model.layers[0].kernel), kernel)


@pytest.mark.parametrize("seed", [-1, 1.5, "0", True])
def test_bad_seed(seed):
    with pytest.raises(ValueError, match="seed"):
        RandomCouplingCapsule(3, 4, seed=seed)

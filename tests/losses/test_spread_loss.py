import keras
import numpy as np
import pytest
from keras import ops

from keras_capsules.losses import SpreadLoss
from tests import _references as ref
from tests.conftest import gradient


@pytest.mark.parametrize("margin", [0.2, 0.55, 0.9])
def test_matches_the_paper_formula(margin):
    rng = np.random.default_rng(0)
    activations = rng.uniform(size=(16, 5)).astype("float32")
    labels = rng.integers(0, 5, size=16)
    expected = ref.spread_loss(labels, activations, margin)
    loss = SpreadLoss(margin=margin)
    np.testing.assert_allclose(float(loss(labels, activations)), expected, rtol=1e-5)
    one_hot = np.eye(5, dtype="float32")[labels]
    np.testing.assert_allclose(float(loss(one_hot, activations)), expected, rtol=1e-5)


@pytest.mark.parametrize("margin", [0.2, 0.9])
def test_several_targets_each_against_every_non_target(margin):
    rng = np.random.default_rng(1)
    activations = rng.uniform(size=(16, 10)).astype("float32")
    pairs = np.stack([rng.choice(10, size=2, replace=False) for _ in range(16)])
    multi_hot = np.zeros((16, 10), "float32")
    np.put_along_axis(multi_hot, pairs, 1.0, axis=-1)
    loss = SpreadLoss(margin=margin)
    expected = ref.spread_loss(pairs, activations, margin)
    np.testing.assert_allclose(float(loss(multi_hot, activations)), expected, rtol=1e-5)


def test_two_targets_are_both_raised_and_not_set_against_each_other():
    loss = SpreadLoss(margin=0.5)
    two = np.array([[1.0, 1.0, 0.0]], "float32")
    # Both targets lead the non-target by the margin: nothing to learn, whatever their gap.
    assert float(loss(two, np.array([[0.95, 0.55, 0.05]], "float32"))) == 0.0
    grad = gradient(lambda a: loss(two, a), np.array([[0.5, 0.4, 0.3]], "float32"))
    assert grad[0, 0] < 0 and grad[0, 1] < 0 < grad[0, 2]


def test_zero_when_target_leads_by_the_margin_and_gradient_pushes_apart():
    loss = SpreadLoss(margin=0.5)
    assert float(loss(np.array([1]), np.array([[0.1, 0.9, 0.39]], "float32"))) == 0.0
    grad = gradient(lambda a: loss(np.array([1]), a), np.array([[0.5, 0.6, 0.1]], "float32"))
    assert grad[0, 1] < 0 < grad[0, 0]  # raise the target, lower the close wrong class
    assert grad[0, 2] == 0  # far enough below


def test_variable_margin_and_config():
    margin = keras.Variable(0.2, trainable=False)
    loss = SpreadLoss(margin=margin)
    acts = np.array([[0.6, 0.5]], "float32")
    before = float(loss(np.array([0]), acts))
    margin.assign(0.9)
    after = float(loss(np.array([0]), acts))
    np.testing.assert_allclose([before, after], [0.01, 0.64], rtol=1e-5)
    assert loss.get_config()["margin"] == pytest.approx(0.9)
    assert SpreadLoss.from_config(loss.get_config()).margin == pytest.approx(0.9)
    with pytest.raises(ValueError, match="margin"):
        SpreadLoss(margin=0.0)
    with pytest.raises(ValueError, match="Labels"):
        loss(np.zeros((2, 3, 1)), acts)
    assert np.isfinite(float(ops.convert_to_numpy(loss(np.array([0]), np.zeros((1, 2))))))

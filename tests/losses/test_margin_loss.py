import numpy as np
import pytest
from keras import ops

from keras_capsules.losses import MarginLoss
from tests import _references as ref


def test_matches_equation_4_for_indices_and_one_hot():
    rng = np.random.default_rng(0)
    lengths = rng.uniform(size=(8, 10)).astype("float32")
    labels = rng.integers(0, 10, size=8)
    expected = ref.margin_loss(labels, lengths)
    for y in (labels, labels[:, None], np.eye(10, dtype="float32")[labels]):
        np.testing.assert_allclose(float(MarginLoss()(y, lengths)), expected, rtol=1e-5)


def test_custom_margins_and_config():
    loss = MarginLoss(m_plus=0.8, m_minus=0.2, down_weight=0.25)
    lengths = np.random.default_rng(1).uniform(size=(4, 3)).astype("float32")
    labels = np.array([0, 1, 2, 0])
    np.testing.assert_allclose(
        float(loss(labels, lengths)), ref.margin_loss(labels, lengths, 0.8, 0.2, 0.25), rtol=1e-5
    )
    assert MarginLoss.from_config(loss.get_config()).get_config() == loss.get_config()


def test_zero_when_confident_and_right():
    assert float(MarginLoss()(np.array([1]), np.array([[0.05, 0.95]], "float32"))) == 0.0


def test_bad_arguments_and_labels():
    with pytest.raises(ValueError, match="m_minus"):
        MarginLoss(m_plus=0.1, m_minus=0.9)
    with pytest.raises(ValueError, match="down_weight"):
        MarginLoss(down_weight=-1)
    with pytest.raises(ValueError, match="Labels"):
        MarginLoss()(np.zeros((2, 3, 4)), np.zeros((2, 10), "float32"))
    assert np.isfinite(float(ops.convert_to_numpy(MarginLoss()(np.array([0]), np.zeros((1, 2))))))

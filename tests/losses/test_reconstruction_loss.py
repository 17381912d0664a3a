import numpy as np
import pytest

from keras_capsules.losses import ReconstructionLoss
from tests import _references as ref


def test_scaled_sum_of_squares_averaged_over_batch():
    rng = np.random.default_rng(0)
    images = rng.uniform(size=(4, 28, 28, 1)).astype("float32")
    recon = rng.uniform(size=(4, 784)).astype("float32")
    expected = ref.reconstruction_loss(images, recon)
    np.testing.assert_allclose(float(ReconstructionLoss()(images, recon)), expected, rtol=1e-5)
    assert ReconstructionLoss(weight=0.1).get_config()["weight"] == 0.1


def test_is_0392_times_mse_on_784_pixels():
    images = np.ones((1, 784), "float32")
    mse = float(np.mean(images**2))
    np.testing.assert_allclose(
        float(ReconstructionLoss()(images, np.zeros((1, 784)))), 0.392 * mse, rtol=1e-5
    )


def test_bad_arguments():
    with pytest.raises(ValueError, match="weight"):
        ReconstructionLoss(weight=-1)
    with pytest.raises(ValueError, match="same number"):
        ReconstructionLoss()(np.zeros((2, 10)), np.zeros((2, 12), "float32"))

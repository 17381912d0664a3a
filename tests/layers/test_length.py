import numpy as np
import pytest
from keras import ops

from keras_capsules.layers import Length
from tests._layer_testing import run_layer_test
from tests.conftest import gradient


def test_layer_checks():
    run_layer_test(
        Length,
        {"epsilon": 1e-5},
        np.random.default_rng(0).normal(size=(2, 3, 4)).astype("float32"),
        expected_output_shape=(2, 3),
    )


def test_values_and_shape():
    x = np.random.normal(size=(4, 10, 16)).astype("float32")
    layer = Length()
    np.testing.assert_allclose(
        ops.convert_to_numpy(layer(x)), np.linalg.norm(x, axis=-1), rtol=1e-5
    )
    assert layer.compute_output_shape((4, 10, 16)) == (4, 10)


def test_finite_gradient_at_zero():
    assert np.all(np.isfinite(gradient(Length(), np.zeros((2, 10, 16), "float32"))))


def test_bad_epsilon():
    with pytest.raises(ValueError, match="epsilon"):
        Length(epsilon=0)

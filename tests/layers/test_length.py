import numpy as np
import pytest
from keras import ops

from keras_capsules.layers import Length
from tests.conftest import gradient


def test_values_shape_and_config():
    x = np.random.normal(size=(4, 10, 16)).astype("float32")
    layer = Length()
    np.testing.assert_allclose(
        ops.convert_to_numpy(layer(x)), np.linalg.norm(x, axis=-1), rtol=1e-5
    )
    assert layer.compute_output_shape((4, 10, 16)) == (4, 10)
    assert Length.from_config(layer.get_config()).epsilon == layer.epsilon


def test_finite_gradient_at_zero():
    assert np.all(np.isfinite(gradient(Length(), np.zeros((2, 10, 16), "float32"))))


def test_bad_epsilon():
    with pytest.raises(ValueError, match="epsilon"):
        Length(epsilon=0)

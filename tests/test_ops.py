import numpy as np
import pytest
from keras import ops

from keras_capsules.ops import length
from keras_capsules.ops import squash
from tests.conftest import gradient


def numpy_squash(s):
    norm = np.linalg.norm(s, axis=-1, keepdims=True)
    return np.where(norm > 0, norm**2 / (1 + norm**2) * s / np.maximum(norm, 1e-30), 0.0)


def test_squash_matches_the_paper_formula():
    s = np.random.normal(size=(4, 7, 16)).astype("float32") * 3
    np.testing.assert_allclose(
        ops.convert_to_numpy(squash(s)), numpy_squash(s), rtol=1e-5, atol=1e-6
    )


def test_squash_keeps_direction_and_bounds_length():
    s = np.random.normal(size=(32, 8)).astype("float32") * np.logspace(-3, 3, 32)[:, None]
    v = ops.convert_to_numpy(squash(s))
    lengths = np.linalg.norm(v, axis=-1)
    assert np.all(lengths < 1) and np.all(lengths >= 0)
    cosine = np.sum(v * s, -1) / (np.linalg.norm(s, axis=-1) * lengths)
    np.testing.assert_allclose(cosine, 1.0, atol=1e-5)


def test_squash_other_axis():
    s = np.random.normal(size=(3, 16, 5)).astype("float32")
    expected = np.moveaxis(numpy_squash(np.moveaxis(s, 1, -1)), -1, 1)
    np.testing.assert_allclose(ops.convert_to_numpy(squash(s, axis=1)), expected, atol=1e-6)


def test_length_matches_norm():
    s = np.random.normal(size=(5, 10, 16)).astype("float32")
    np.testing.assert_allclose(
        ops.convert_to_numpy(length(s)), np.linalg.norm(s, axis=-1), rtol=1e-5
    )


@pytest.mark.parametrize("scale", [0.0, 1e-8, 1e4])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("fn", [squash, length], ids=["squash", "length"])
def test_finite_values_and_gradients(fn, dtype, scale):
    x = ops.cast(np.full((3, 16), scale, "float32"), dtype)
    y = ops.convert_to_numpy(ops.cast(fn(x), "float32"))
    assert np.all(np.isfinite(y))
    assert ops.dtype(fn(x)) == dtype
    g = gradient(fn, x)
    assert np.all(np.isfinite(g)), g


def test_squash_at_zero_is_zero():
    assert np.all(ops.convert_to_numpy(squash(np.zeros((2, 8), "float32"))) == 0)

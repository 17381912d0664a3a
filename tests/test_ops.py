import numpy as np
import pytest
from keras import ops

from keras_capsules.ops import exponential_squash
from keras_capsules.ops import length
from keras_capsules.ops import squash
from tests import _references as ref
from tests.conftest import gradient


def test_squash_matches_the_paper_formula():
    s = np.random.normal(size=(4, 7, 16)).astype("float32") * 3
    np.testing.assert_allclose(ops.convert_to_numpy(squash(s)), ref.squash(s), rtol=1e-5, atol=1e-6)


def test_squash_keeps_direction_and_bounds_length():
    s = np.random.normal(size=(32, 8)).astype("float32") * np.logspace(-3, 3, 32)[:, None]
    v = ops.convert_to_numpy(squash(s))
    lengths = np.linalg.norm(v, axis=-1)
    assert np.all(lengths < 1) and np.all(lengths >= 0)
    cosine = np.sum(v * s, -1) / (np.linalg.norm(s, axis=-1) * lengths)
    np.testing.assert_allclose(cosine, 1.0, atol=1e-5)


def test_squash_other_axis():
    s = np.random.normal(size=(3, 16, 5)).astype("float32")
    expected = np.moveaxis(ref.squash(np.moveaxis(s, 1, -1)), -1, 1)
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


@pytest.mark.parametrize("scale", [1e10, 1e19, 1e20, 1e30, 1e37])
def test_huge_finite_capsules_are_squashed_and_measured_exactly(scale):
    # The squared norm of these capsules leaves float32 (> 3.4e38) from about 1e19;
    # the results are compared with float64.
    s = (np.random.default_rng(0).normal(size=(4, 16)) * scale).astype("float32")
    s64 = s.astype("float64")
    v = ops.convert_to_numpy(squash(s))
    assert np.all(np.isfinite(v))
    np.testing.assert_allclose(v, ref.squash(s64), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(
        ops.convert_to_numpy(length(s)), np.linalg.norm(s64, axis=-1), rtol=1e-5
    )
    g = gradient(squash, s)
    assert np.all(np.isfinite(g)), g


def test_squash_of_a_capsule_near_the_largest_float():
    s = np.zeros((2, 16), "float32")
    s[0, 3] = np.finfo("float32").max
    s[1, :] = -np.finfo("float32").max  # its length is beyond float32: still squashed
    v = ops.convert_to_numpy(squash(s))
    np.testing.assert_allclose(v[0], np.eye(16)[3], atol=1e-7)
    np.testing.assert_allclose(v[1], np.full(16, -0.25), rtol=1e-6)
    lengths = ops.convert_to_numpy(length(s))
    assert lengths[0] == np.finfo("float32").max and lengths[1] == np.inf


def test_rescaling_leaves_small_capsules_untouched():
    # Capsules whose entries are all within [-1, 1] take exactly the unscaled formula.
    s = np.random.default_rng(1).uniform(-1, 1, size=(64, 16)).astype("float32")
    n2 = np.sum(np.square(s), -1, keepdims=True)
    expected = s * (n2 / (1 + n2) / np.sqrt(n2 + 1e-7))
    np.testing.assert_allclose(ops.convert_to_numpy(squash(s)), expected, rtol=1e-6, atol=0)


def test_exponential_squash_matches_the_efficient_capsnet_formula():
    s = np.random.default_rng(5).normal(size=(6, 10, 8)).astype("float32") * 2
    expected = ref.exponential_squash(s.astype("float64"))
    np.testing.assert_allclose(
        ops.convert_to_numpy(exponential_squash(s)), expected, rtol=1e-5, atol=1e-7
    )
    np.testing.assert_allclose(  # capsules along axis 1
        ops.convert_to_numpy(exponential_squash(np.moveaxis(s, -1, 1), axis=1)),
        np.moveaxis(expected, -1, 1),
        rtol=1e-5,
        atol=1e-7,
    )


@pytest.mark.parametrize("scale", [0.0, 1e-30, 1e-6, 1e6, 1e20, 1e37])
def test_exponential_squash_is_finite_and_accurate_for_any_size(scale):
    s = np.random.default_rng(6).normal(size=(4, 16)).astype("float32") * np.float32(scale)
    v = ops.convert_to_numpy(exponential_squash(s))
    np.testing.assert_allclose(v, ref.exponential_squash(s.astype("float64")), rtol=1e-5, atol=1e-7)
    assert np.all(np.linalg.norm(v, axis=-1) < 1 + 1e-6)
    assert np.all(np.isfinite(gradient(exponential_squash, s)))


def test_exponential_squash_has_slope_one_at_zero():
    # Unlike squash (slope 0), a short capsule keeps almost its own length.
    s = np.array([[1e-3, 0.0]], "float32")
    np.testing.assert_allclose(ops.convert_to_numpy(exponential_squash(s))[0, 0], 1e-3, rtol=2e-3)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_exponential_squash_of_low_precision_computes_in_float32(dtype):
    s = ops.cast(np.full((2, 16), 300.0, "float32"), dtype)  # |s|^2 overflows float16
    v = exponential_squash(s)
    assert ops.dtype(v) == dtype
    assert np.all(np.isfinite(ops.convert_to_numpy(ops.cast(v, "float32"))))

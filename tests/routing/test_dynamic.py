import numpy as np
import pytest
from keras import ops

from keras_capsules.routing import dynamic_routing
from tests._references import dynamic_routing as numpy_procedure_1
from tests._references import swap_parents_and_children as swap
from tests.conftest import BACKEND
from tests.conftest import gradient


@pytest.mark.parametrize("iterations", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("shape", [(2, 12, 3, 4), (1, 30, 10, 16), (3, 5, 1, 2)])
def test_matches_numpy_procedure_1(shape, iterations):
    votes = np.random.default_rng(iterations).normal(size=shape).astype("float32")
    expected, expected_coupling = numpy_procedure_1(votes, iterations)
    outputs, coupling = dynamic_routing(swap(votes), iterations=iterations, return_coupling=True)
    np.testing.assert_allclose(ops.convert_to_numpy(outputs), expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(
        swap(ops.convert_to_numpy(coupling)), expected_coupling, rtol=1e-4, atol=1e-5
    )


def test_coupling_sums_to_one_over_outputs_and_follows_agreement():
    rng = np.random.default_rng(0)
    votes = rng.normal(size=(2, 6, 40, 8)).astype("float32")
    votes[:, 2, :20] += 3.0  # half the children agree strongly on parent 2
    _, coupling = dynamic_routing(votes, iterations=3, return_coupling=True)
    coupling = ops.convert_to_numpy(coupling)
    np.testing.assert_allclose(coupling.sum(1), 1.0, atol=1e-5)
    assert coupling[:, 2, :20].mean() > coupling[:, 2, 20:].mean()


def test_stop_gradient_changes_gradients_not_outputs():
    votes = np.random.default_rng(1).normal(size=(2, 9, 4, 5)).astype("float32")
    a = dynamic_routing(votes, iterations=3, stop_gradient=False)
    b = dynamic_routing(votes, iterations=3, stop_gradient=True)
    np.testing.assert_allclose(ops.convert_to_numpy(a), ops.convert_to_numpy(b), atol=1e-6)
    ga = gradient(lambda v: dynamic_routing(v, 3, stop_gradient=False), votes)
    gb = gradient(lambda v: dynamic_routing(v, 3, stop_gradient=True), votes)
    assert not np.allclose(ga, gb)
    g1 = gradient(lambda v: dynamic_routing(v, 1), votes)
    gb1 = gradient(lambda v: dynamic_routing(v, 1, stop_gradient=True), votes)
    np.testing.assert_allclose(g1, gb1, atol=1e-6)  # one iteration: nothing to stop


@pytest.mark.parametrize("iterations", [1, 3])
def test_gradient_matches_finite_differences_of_procedure_1(iterations):
    """The votes' gradient (the default method of each backend) against float64 NumPy."""
    rng = np.random.default_rng(3)
    votes = rng.normal(size=(2, 5, 3, 4))
    w_out = rng.normal(size=(2, 3, 4))
    w_coupling = rng.normal(size=(2, 5, 3))

    def objective(v):
        outputs, coupling = numpy_procedure_1(v, iterations)
        return np.sum(outputs * w_out) + np.sum(coupling * w_coupling)

    expected = np.zeros_like(votes)
    step = 1e-6
    for index in np.ndindex(votes.shape):
        shift = np.zeros_like(votes)
        shift[index] = step
        expected[index] = (objective(votes + shift) - objective(votes - shift)) / (2 * step)

    weights = [ops.convert_to_tensor(w.astype("float32")) for w in (w_out, swap(w_coupling))]

    def fn(v):
        outputs, coupling = dynamic_routing(v, iterations, return_coupling=True)
        return ops.sum(outputs * weights[0]) + ops.sum(coupling * weights[1])

    got = swap(gradient(fn, swap(votes).astype("float32")))
    np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-4 * np.abs(expected).max())


def _votes_gradient(method, votes, w_out, w_coupling, iterations):
    def fn(v):
        outputs, coupling = dynamic_routing(v, iterations, return_coupling=True, gradient=method)
        return ops.sum(outputs * w_out) + ops.sum(coupling * w_coupling)

    return gradient(fn, votes)


@pytest.mark.skipif(BACKEND == "torch", reason="the structured gradient is for TF and JAX")
@pytest.mark.parametrize("iterations", [2, 3, 5])
def test_structured_gradient_equals_automatic_differentiation(iterations):
    # From 2 iterations on (one is a uniform sum, differentiated automatically).
    rng = np.random.default_rng(iterations)
    votes = rng.normal(size=(2, 4, 30, 6)).astype("float32")  # (batch, outputs, inputs, dim)
    w_out = rng.normal(size=(2, 4, 6)).astype("float32")
    w_coupling = rng.normal(size=(2, 4, 30)).astype("float32")
    args = (votes, w_out, w_coupling, iterations)
    expected = _votes_gradient("autodiff", *args)
    assert np.abs(expected).max() > 1e-3  # the comparison is not vacuous
    got = _votes_gradient("structured", *args)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5 * np.abs(expected).max())
    a, b = (
        dynamic_routing(votes, iterations, return_coupling=True, gradient=method)
        for method in ("autodiff", "structured")
    )
    for x, y in zip(a, b):
        np.testing.assert_allclose(ops.convert_to_numpy(x), ops.convert_to_numpy(y), rtol=1e-6)


def test_gradient_method_is_checked():
    votes = np.zeros((1, 2, 3, 4), "float32")
    with pytest.raises(ValueError, match="gradient"):
        dynamic_routing(votes, 3, gradient="exact")
    with pytest.raises(ValueError, match="stop_gradient"):
        dynamic_routing(votes, 3, stop_gradient=True, gradient="structured")


@pytest.mark.parametrize("iterations", [1, 3, 5])
@pytest.mark.parametrize("scale", [0.0, 1e-8, 1e4])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_finite_for_extreme_inputs(dtype, scale, iterations):
    votes = ops.cast(
        np.random.default_rng(2).normal(size=(2, 16, 10, 16)).astype("float32") * scale, dtype
    )
    out = dynamic_routing(votes, iterations=iterations)
    assert ops.dtype(out) == dtype
    assert np.all(np.isfinite(ops.convert_to_numpy(ops.cast(out, "float32"))))
    assert np.all(np.isfinite(gradient(lambda v: dynamic_routing(v, iterations), votes)))


@pytest.mark.parametrize("scale", [1e20, 1e30])
def test_huge_votes_route_like_their_directions(scale):
    # Votes beyond 1e19 have squared norms beyond float32; the outputs are still
    # finite. Agreements of 1e20 and more make the coupling hard: a parent gets
    # huge inputs (length 1 after squashing) or none at all (length 0).
    votes = np.random.default_rng(3).normal(size=(2, 10, 16, 16)) * scale
    out = ops.convert_to_numpy(dynamic_routing(votes.astype("float32"), iterations=3))
    lengths = np.linalg.norm(out, axis=-1)
    assert np.all(np.isfinite(out)) and np.any(lengths > 0)
    assert np.all((np.abs(lengths - 1) < 1e-5) | (lengths == 0)), lengths


@pytest.mark.parametrize("iterations", [1, 3])
def test_an_empty_batch_gives_an_empty_output(iterations):
    out, coupling = dynamic_routing(
        np.zeros((0, 10, 16, 8), "float32"), iterations=iterations, return_coupling=True
    )
    assert tuple(out.shape) == (0, 10, 8) and tuple(coupling.shape)[0] == 0


@pytest.mark.parametrize("iterations", [0, -1, 2.5, True])
def test_bad_iterations(iterations):
    with pytest.raises(ValueError, match="iterations"):
        dynamic_routing(np.zeros((1, 2, 3, 4), "float32"), iterations=iterations)


def test_bad_votes_shape():
    with pytest.raises(ValueError, match="votes"):
        dynamic_routing(np.zeros((2, 3, 4), "float32"))


def test_one_iteration_is_uniform_coupling():
    """The control without routing: every child split evenly, `v_j = squash(mean_i u_hat)`."""
    votes = np.random.default_rng(3).normal(size=(2, 4, 9, 6)).astype("float32")
    outputs, coupling = dynamic_routing(votes, iterations=1, return_coupling=True)
    s = votes.sum(axis=2) / 4
    norm = np.linalg.norm(s, axis=-1, keepdims=True)
    expected = norm**2 / (1 + norm**2) * s / norm
    np.testing.assert_allclose(ops.convert_to_numpy(outputs), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ops.convert_to_numpy(coupling), 0.25, rtol=1e-6)

import numpy as np
import pytest
from keras import ops

from keras_capsules import routing
from keras_capsules._em_route import EM_EPSILON
from keras_capsules._em_route import em_route
from keras_capsules._positions import convolution_sites
from keras_capsules._positions import normalize_over_outputs
from keras_capsules._positions import normalize_over_positions
from keras_capsules.routing import EMSettings
from keras_capsules.routing import inverse_temperatures
from tests import _references as ref
from tests.conftest import BACKEND
from tests.conftest import gradient

em_routing = ref.in_reference_layout(routing.em_routing)


def _routing_problem(seed, batch, num_in, num_out):
    rng = np.random.default_rng(seed)
    votes = rng.normal(size=(batch, num_in, num_out, 16)).astype("float32")
    votes[:, : num_in // 2, 0] += 1.5  # some agreement to route on
    activations = rng.uniform(0.2, 1.0, size=(batch, num_in)).astype("float32")
    beta_v = rng.normal(size=num_out).astype("float32")
    beta_a = rng.normal(size=num_out).astype("float32")
    return votes, activations, beta_v, beta_a


def test_the_reference_floors_the_denominators_as_the_library():
    assert ref.EM_EPSILON == EM_EPSILON


@pytest.mark.parametrize("iterations", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("shape", [(2, 12, 3), (1, 40, 5), (2, 7, 1)])
@pytest.mark.parametrize("tempering", [1.0, 0.1])
def test_matches_numpy_procedure(shape, iterations, tempering):
    """Procedure 1 as the paper writes it (tempering 1) and with the tempered E-step."""
    votes, activations, beta_v, beta_a = _routing_problem(iterations, *shape)
    # A large final lambda makes the activations depend strongly on the costs.
    expected = ref.em_routing_fully_connected(
        votes, activations, beta_v, beta_a, iterations, 0.1, 1e-4, [tempering] * (iterations - 1)
    )
    got = em_routing(
        votes,
        activations,
        beta_v,
        beta_a,
        iterations,
        inverse_temperature=0.1,
        variance_epsilon=1e-4,
        return_coupling=True,
        tempering=tempering,
    )
    for g, e in zip(got, expected):
        np.testing.assert_allclose(ops.convert_to_numpy(g), e, rtol=2e-4, atol=2e-5)


def test_tempering_per_e_step_and_the_authors_schedule():
    votes, activations, beta_v, beta_a = _routing_problem(7, 2, 20, 4)
    # The authors' schedule, 0.2 (1 - 0.95 ** (t + 1)), written out.
    lambdas = [0.2 * 0.05, 0.2 * (1 - 0.95**2), 0.2 * (1 - 0.95**3)]
    expected = ref.em_routing_fully_connected(
        votes, activations, beta_v, beta_a, 3, None, 1e-4, [0.05, 0.5], lambdas=lambdas
    )
    got = em_routing(
        votes,
        activations,
        beta_v,
        beta_a,
        3,
        inverse_temperature=0.2,
        return_coupling=True,
        tempering=[0.05, 0.5],
        inverse_temperature_schedule="authors",
    )
    for g, e in zip(got, expected):
        np.testing.assert_allclose(ops.convert_to_numpy(g), e, rtol=2e-4, atol=2e-5)


def test_tempering_softens_the_responsibilities():
    votes, activations, beta_v, beta_a = _routing_problem(8, 2, 30, 5)
    spread = {}
    for tau in (1.0, 0.1):
        *_, resp = em_routing(
            votes, activations, beta_v, beta_a, 3, return_coupling=True, tempering=tau
        )
        spread[tau] = ops.convert_to_numpy(resp).max(-1).mean()
    # The literal E-step gives every child almost wholly to one parent.
    assert spread[1.0] > 0.85 and spread[0.1] < 0.5, spread  # uniform: 0.2


def test_responsibilities_sum_to_one_and_activations_in_unit_interval():
    rng = np.random.default_rng(0)
    votes = rng.normal(size=(3, 30, 6, 16)).astype("float32")
    _, acts, resp = em_routing(
        votes,
        np.ones((3, 30), "float32"),
        np.zeros(6),
        np.zeros(6),
        iterations=3,
        return_coupling=True,
    )
    np.testing.assert_allclose(ops.convert_to_numpy(resp).sum(-1), 1.0, atol=1e-5)
    acts = ops.convert_to_numpy(acts)
    assert np.all((acts > 0) & (acts < 1))


def test_inverse_temperature_schedules():
    # The authors' 0.01 (1 - 0.95 ** (t + 1)) (OpenReview answer), written out.
    authors = inverse_temperatures(3, 0.01, schedule="authors")
    np.testing.assert_allclose(authors, [0.0005, 0.000975, 0.00142625])
    # The library's default: the same growth, scaled so that the last one is the final value.
    rescaled = inverse_temperatures(3, 0.01)
    assert rescaled[2] == pytest.approx(0.01)
    np.testing.assert_allclose(np.array(rescaled) / authors, 0.01 / 0.00142625)
    with pytest.raises(ValueError, match="schedule"):
        inverse_temperatures(3, 0.01, schedule="paper")
    votes, activations, beta_v, beta_a = _routing_problem(0, 1, 4, 2)
    with pytest.raises(ValueError, match="inverse_temperature_schedule"):
        em_routing(votes, activations, beta_v, beta_a, inverse_temperature_schedule="paper")


@pytest.mark.parametrize(
    "tempering, iterations",
    [
        (0.0, 3),
        (-1.0, 2),
        (float("inf"), 3),
        (float("nan"), 3),
        ("soft", 3),
        (True, 3),
        ([0.1], 3),
        ([0.1, 0.2, 0.3], 3),
        ([0.1, 0], 3),
    ],
)
def test_bad_tempering_is_named(tempering, iterations):
    votes, activations, beta_v, beta_a = _routing_problem(0, 1, 4, 2)
    with pytest.raises(ValueError, match="tempering"):
        em_routing(votes, activations, beta_v, beta_a, iterations, tempering=tempering)


@pytest.mark.parametrize("scale", [0.0, 1e-8, 1.0, 1e4])
@pytest.mark.parametrize("iterations", [1, 3, 5])
@pytest.mark.parametrize("tempering", [0.1, 1.0])
def test_finite_values_and_gradients(scale, iterations, tempering):
    rng = np.random.default_rng(2)
    votes = (scale * rng.normal(size=(2, 20, 4, 16))).astype("float32")
    activations = rng.uniform(size=(2, 20)).astype("float32")
    zeros = np.zeros(4, "float32")

    def routed(v):
        poses, acts = em_routing(
            v, activations, zeros, zeros, iterations=iterations, tempering=tempering
        )
        return ops.sum(poses, axis=-1) + acts

    values = ops.convert_to_numpy(routed(votes))
    assert np.all(np.isfinite(values))
    assert np.all(np.isfinite(gradient(routed, votes)))


def test_huge_votes_stay_finite_and_match_a_float64_reference():
    """Votes near float32's square root of its largest number no longer overflow.

    Where float32 resolves the result, it matches the float64 reference; at
    1e20 and beyond, the costs (dim log|V| per unit of responsibility) make
    the responsibilities of some children exponentially small, which float32
    cannot hold as float64 does: there the activations still match and the
    poses are finite, of the votes' size.
    """
    votes, activations, beta_v, beta_a = _routing_problem(12, 2, 32, 5)
    for scale, atol in ((1e10, 1e-4), (1e20, None), (1e30, None)):
        huge = (votes.astype("float64") * scale).astype("float32")
        poses, acts = em_routing(huge, activations, beta_v, beta_a, 3, inverse_temperature=0.1)
        poses, acts = ops.convert_to_numpy(poses), ops.convert_to_numpy(acts)
        ref_poses, ref_acts, _ = ref.em_routing_fully_connected(
            huge.astype("float64"), activations, beta_v, beta_a, 3, 0.1, 1e-4, [0.1, 0.1]
        )
        assert np.all(np.isfinite(poses)) and np.all(np.isfinite(acts)), scale
        np.testing.assert_allclose(acts, ref_acts, atol=1e-5)
        if atol is not None:
            np.testing.assert_allclose(poses / scale, ref_poses / scale, atol=atol)
        assert np.max(np.abs(poses)) <= 10 * np.max(np.abs(huge))

        def routed(v, scale=scale):
            p, a = em_routing(v, activations, beta_v, beta_a, 3)
            return ops.sum(p, axis=-1) / scale + a

        assert np.all(np.isfinite(gradient(routed, huge))), scale


LARGEST_FLOAT32 = float(np.finfo("float32").max)


@pytest.mark.parametrize(
    "largest, offset",
    [
        (1e38, 0.0),
        (LARGEST_FLOAT32 / 4, 0.0),
        (LARGEST_FLOAT32, 0.0),
        # Normal float32 numbers (CPU kernels flush the subnormal ones, below 1.2e-38, to
        # zero), whose squares are not; the floor (1e-4) makes every parent as likely.
        (1e-33, 0.0),
        (1e37, LARGEST_FLOAT32 / 2),  # votes that share an offset near float32's largest
    ],
)
def test_votes_across_float32s_range_route_as_ordinary_votes_scaled(largest, offset):
    """Routing is scale- and shift-equivariant; float32 routing holds it to the extremes.

    Votes `offset + c V` with `beta_v` route as `V` with `beta_v + log c` and
    the floor divided by c^2 (the costs shift by `dim log c` per unit of
    responsibility, the E-step's log-densities by the same for every parent):
    the poses are `offset + c` times the reference's, the activations and
    responsibilities the same. Huge votes come with `beta_v - log c`, so that
    the reference routes ordinary votes with ordinary costs. The sums of such
    votes and the squares of their deviations lie beyond float32's range, the
    squares of tiny ones below it.
    """
    votes, activations, beta_v, beta_a = _routing_problem(14, 2, 32, 5)
    c = largest / float(np.abs(votes).max())
    routed = (offset + c * votes.astype("float64")).astype("float32")
    assert np.all(np.isfinite(routed))
    # The float32 votes, back in the reference's units.
    ordinary = (routed.astype("float64") - offset) / c
    routed_beta_v = (beta_v - np.log(c) if c > 1 else beta_v).astype("float32")
    ref_poses, ref_acts, ref_resp = ref.em_routing_fully_connected(
        ordinary, activations, routed_beta_v + np.log(c), beta_a, 3, 0.1, 1e-4 / c**2, [0.1, 0.1]
    )
    poses, acts, resp = (
        ops.convert_to_numpy(x)
        for x in em_routing(
            routed,
            activations,
            routed_beta_v,
            beta_a,
            3,
            inverse_temperature=0.1,
            return_coupling=True,
        )
    )
    assert np.all(np.isfinite(poses)) and np.all(np.isfinite(acts)) and np.all(np.isfinite(resp))
    np.testing.assert_allclose((poses.astype("float64") - offset) / c, ref_poses, atol=2e-4)
    np.testing.assert_allclose(acts, ref_acts, rtol=2e-4, atol=2e-5)
    np.testing.assert_allclose(resp, ref_resp, rtol=2e-4, atol=2e-5)

    def loss(v):
        p, a = em_routing(v, activations, routed_beta_v, beta_a, 3)
        return ops.sum(p / np.float32(max(largest, offset)), axis=-1) + a

    assert np.all(np.isfinite(gradient(loss, routed)))


@pytest.mark.parametrize("scale", [1.0, 1e20, 1e37])
@pytest.mark.parametrize("iterations, tempering", [(3, 1.0), (2, 0.1)])
def test_active_children_that_agree_exactly_among_huge_inactive_ones(scale, iterations, tempering):
    """Every parent's variance at its floor, and children far beyond it, stay finite.

    The active children vote alike, so each parent's variance is its floor;
    the inactive ones (activation 0, as a saturated layer gives) vote far off,
    their squared distances over that floor beyond float32's range at large
    scales. Each parent that holds responsibility sits on the common vote.
    """
    rng = np.random.default_rng(15)
    votes = rng.normal(size=(2, 32, 3, 16))
    votes[:, :16] = votes[:, :1]
    activations = np.concatenate([rng.uniform(0.2, 1, (2, 16)), np.zeros((2, 16))], axis=1)
    activations = activations.astype("float32")
    votes = (scale * votes).astype("float32")
    zeros = np.zeros(3, "float32")
    poses, acts, resp = (
        ops.convert_to_numpy(x)
        for x in em_routing(
            votes, activations, zeros, zeros, iterations, tempering=tempering, return_coupling=True
        )
    )
    assert np.all(np.isfinite(poses)) and np.all(np.isfinite(acts)) and np.all(np.isfinite(resp))
    assert np.all((acts >= 0) & (acts <= 1))
    np.testing.assert_allclose(resp.sum(-1), 1.0, atol=1e-5)
    held = np.einsum("bij,bi->bj", resp, activations) > 0.1  # what the last M-step weighs
    assert held.any()
    np.testing.assert_allclose(poses[held] / scale, votes[:, 0][held] / scale, atol=1e-5)


@pytest.mark.skipif(BACKEND == "torch", reason="a compiled step: tf.function or jax.jit")
def test_compiled_routing_of_ordinary_and_huge_votes_matches_eager():
    """Both ways a compiled step takes: votes routed as they are, or divided first."""
    votes, activations, beta_v, beta_a = _routing_problem(13, 2, 32, 5)
    for scale in (1.0, 1e20):
        huge = (votes.astype("float64") * scale).astype("float32")

        def routed(v, scale=scale):
            p, a = em_routing(v, activations, beta_v, beta_a, 3)
            return ops.sum(p) / scale + ops.sum(a)

        if BACKEND == "tensorflow":
            import tensorflow as tf

            @tf.function
            def compiled(v):
                with tf.GradientTape() as tape:
                    tape.watch(v)
                    value = routed(v)
                return value, tape.gradient(value, v)

        else:
            import jax

            compiled = jax.jit(jax.value_and_grad(routed))
        value, grad = (ops.convert_to_numpy(x) for x in compiled(ops.convert_to_tensor(huge)))
        np.testing.assert_allclose(value, ops.convert_to_numpy(routed(huge)), rtol=1e-5)
        np.testing.assert_allclose(grad, gradient(routed, huge), rtol=1e-4, atol=1e-6)


def test_zero_activations_stay_finite():
    votes = np.random.default_rng(3).normal(size=(1, 10, 3, 16)).astype("float32")
    poses, acts = em_routing(votes, np.zeros((1, 10), "float32"), np.zeros(3), np.zeros(3))
    assert np.all(np.isfinite(ops.convert_to_numpy(poses)))
    assert np.all(np.isfinite(ops.convert_to_numpy(acts)))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_low_precision_votes_route_in_float32(dtype):
    rng = np.random.default_rng(4)
    votes = rng.normal(size=(2, 16, 3, 16)).astype("float32")
    activations = rng.uniform(size=(2, 16)).astype("float32")
    low = ops.cast(votes, dtype)
    poses, acts = em_routing(low, ops.cast(activations, dtype), np.zeros(3), np.zeros(3))
    assert ops.dtype(poses) == dtype and ops.dtype(acts) == dtype
    ref_poses, _ = em_routing(ops.cast(low, "float32"), activations, np.zeros(3), np.zeros(3))
    np.testing.assert_allclose(
        ops.convert_to_numpy(ops.cast(poses, "float32")),
        ops.convert_to_numpy(ref_poses),
        rtol=0.05,
        atol=0.05,
    )
    assert np.all(
        np.isfinite(
            gradient(lambda v: em_routing(v, activations, np.zeros(3), np.zeros(3))[1], low)
        )
    )


def test_bad_shapes_name_the_argument():
    with pytest.raises(ValueError, match="votes"):
        em_routing(np.zeros((2, 3, 16)), np.zeros((2, 3)), np.zeros(1), np.zeros(1))
    with pytest.raises(ValueError, match="activations"):
        em_routing(np.zeros((2, 3, 4, 16)), np.zeros((2, 4)), np.zeros(4), np.zeros(4))
    with pytest.raises(ValueError, match="iterations"):
        em_routing(np.zeros((2, 3, 4, 16)), np.zeros((2, 3)), np.zeros(4), np.zeros(4), 0)
    votes = np.random.default_rng(0).normal(size=(2, 32, 5, 16)).astype("float32")
    ones = np.ones((2, 32), "float32")
    for name, beta_v, beta_a in (("beta_v", np.zeros(3), np.zeros(5)), ("beta_a", 0.0, np.ones(2))):
        with pytest.raises(
            ValueError, match=rf"`{name}` must have shape \(num_outputs,\) = \(5,\)"
        ):
            em_routing(votes, ones, beta_v, beta_a)
    scalar, _ = em_routing(votes, ones, 0.5, 0.5)
    vector, _ = em_routing(votes, ones, np.full(5, 0.5, "float32"), np.full(5, 0.5, "float32"))
    np.testing.assert_allclose(scalar, vector, rtol=1e-6)


def test_bad_pose_size_and_activation_range_name_the_argument():
    with pytest.raises(ValueError, match="votes"):
        em_routing(np.zeros((2, 3, 4, 9)), np.zeros((2, 3)), np.zeros(4), np.zeros(4))
    for bad in (1.5, -0.1, np.nan):
        activations = np.full((2, 3), 0.5, "float32")
        activations[1, 2] = bad
        with pytest.raises(ValueError, match="activations"):
            em_routing(np.zeros((2, 3, 4, 16)), activations, np.zeros(4), np.zeros(4))
        with pytest.raises(ValueError, match="activations"):
            em_routing(
                np.zeros((2, 3, 4, 16)),
                ops.convert_to_tensor(activations),
                np.zeros(4),
                np.zeros(4),
            )


@pytest.mark.parametrize("offset", [0.0, 1e2, 1e3, 1e4])
def test_shifted_votes_move_the_poses_and_keep_the_activations(offset):
    """Routing is shift-equivariant; float32 keeps close to a float64 two-pass reference."""
    votes, activations, beta_v, beta_a = _routing_problem(11, 2, 24, 4)
    shifted = (votes + offset).astype("float32")
    poses, acts = em_routing(shifted, activations, beta_v, beta_a, 3, inverse_temperature=0.1)
    ref_poses, ref_acts, _ = ref.em_routing_fully_connected(
        shifted, activations, beta_v, beta_a, 3, 0.1, 1e-4, [0.1, 0.1]
    )
    # float32 holds votes near 1e4 to about 5e-4, which bounds what any float32
    # computation can reach; expanded squares without centring were off by 1.3 in
    # the poses and 1.0 in the activations at 1e4 (2.9e-4 in the activations at 1e2).
    atol = 1e-5 + 2e-7 * offset
    np.testing.assert_allclose(ops.convert_to_numpy(poses), ref_poses, rtol=0, atol=atol)
    np.testing.assert_allclose(ops.convert_to_numpy(acts), ref_acts, rtol=0, atol=2e-5)
    # Against the unshifted votes, which the shift rounds: a looser bound.
    base_poses, base_acts = em_routing(
        votes, activations, beta_v, beta_a, 3, inverse_temperature=0.1
    )
    np.testing.assert_allclose(
        ops.convert_to_numpy(poses) - offset, ops.convert_to_numpy(base_poses), atol=atol
    )
    np.testing.assert_allclose(
        ops.convert_to_numpy(acts), ops.convert_to_numpy(base_acts), atol=2e-5 + 1e-8 * offset
    )


def test_convolution_sites_lists_every_reader_of_every_child():
    children, parents_of, counts, (out_h, out_w) = convolution_sites(7, 6, 3, 2)
    assert (out_h, out_w) == (3, 2)
    # Brute force: patch entry (oy, ox, ky, kx) reads child (2 oy + ky, 2 ox + kx).
    expected_children, readers = ref.convolution_readers(7, 6, 3, 2)
    assert list(children) == expected_children
    for child in range(42):
        listed = sorted(p for p in parents_of[child] if p < len(children))
        assert listed == readers.get(child, [])
        assert counts[child] == len(listed)
    with pytest.raises(ValueError, match="kernel_size"):
        convolution_sites(2, 2, 3, 1)


def _gradients(fn, inputs):
    """Gradients of the scalar `fn(*inputs)` with respect to every input."""
    inputs = [ops.convert_to_tensor(x) for x in inputs]
    if BACKEND == "tensorflow":
        import tensorflow as tf

        with tf.GradientTape() as tape:
            for x in inputs:
                tape.watch(x)
            value = fn(*inputs)
        return [ops.convert_to_numpy(g) for g in tape.gradient(value, inputs)]
    import jax

    grads = jax.jit(jax.grad(fn, argnums=tuple(range(len(inputs)))))(*inputs)
    return [np.asarray(g) for g in grads]


def _conv_normalizer(grid, kernel_size, strides):
    children, parents_of, counts, (out_h, out_w) = convolution_sites(
        grid, grid, kernel_size, strides
    )
    return children, parents_of, counts, out_h * out_w


@pytest.mark.skipif(BACKEND == "torch", reason="the structured gradient is for TF and JAX")
@pytest.mark.parametrize("layout", ["fully_connected", "convolutional", "per_type"])
@pytest.mark.parametrize("iterations", [1, 3])
@pytest.mark.parametrize("tempering", [1.0, 0.1])
def test_structured_gradient_equals_automatic_differentiation(layout, iterations, tempering):
    rng = np.random.default_rng(5)
    outputs, types = 3, 2
    if layout == "fully_connected":
        sites, inputs = 1, 10
        initial = 1.0 / outputs
        normalize = normalize_over_outputs
    else:
        children, parents_of, counts, sites = _conv_normalizer(4, 3, 1)
        patch = 9
        inputs = patch * types
        initial = np.repeat(1.0 / (counts[children] * outputs), types).astype("float32")
        initial = initial.reshape(1, sites, 1, inputs)

        normalization = "positions" if layout == "per_type" else "types_and_positions"

        def normalize(logits):
            logits = ops.reshape(logits, (2, sites, outputs, patch, types))
            log_r = normalize_over_positions(logits, children, parents_of, normalization)
            return ops.reshape(log_r, (2, sites, outputs, inputs))

    votes = rng.normal(size=(2, sites, outputs, inputs, 16)).astype("float32")
    activations = rng.uniform(size=(2, sites, inputs)).astype("float32")
    beta_v = rng.normal(size=outputs).astype("float32")
    beta_a = rng.normal(size=outputs).astype("float32")
    # Arbitrary weights on every output, the responsibilities included.
    w_poses = rng.normal(size=(2, sites, outputs, 16)).astype("float32")
    w_acts = rng.normal(size=(2, sites, outputs)).astype("float32")
    w_resp = rng.normal(size=(2, sites, outputs, inputs)).astype("float32")

    def loss(method):
        def fn(v, a, bv, ba):
            settings = EMSettings(iterations, 0.05, 1e-4, tempering)
            poses, acts, resp = em_route(v, a, bv, ba, settings, initial, normalize, method)
            total = ops.sum(poses * w_poses) + ops.sum(acts * w_acts)
            return total if resp is None else total + ops.sum(resp * w_resp)

        return fn

    args = [votes, activations, beta_v, beta_a]
    expected = _gradients(loss("autodiff"), args)
    structured = _gradients(loss("structured"), args)
    for name, want, got in zip(["votes", "activations", "beta_v", "beta_a"], expected, structured):
        assert np.all(np.isfinite(got)), name
        assert np.abs(want).max() > 1e-3, name  # the comparison is not vacuous
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * np.abs(want).max())
    # Same values either way.
    settings = EMSettings(iterations, 0.05, 1e-4)
    a = em_route(*args, settings, initial, normalize, gradient="autodiff")
    b = em_route(*args, settings, initial, normalize, gradient="structured")
    for x, y in zip(a[:2], b[:2]):
        np.testing.assert_allclose(ops.convert_to_numpy(x), ops.convert_to_numpy(y), rtol=1e-6)


def test_gradient_method_is_checked():
    args = (np.zeros((1, 1, 2, 3, 16), "float32"), np.ones((1, 1, 3), "float32"))
    with pytest.raises(ValueError, match="gradient"):
        em_route(*args, np.zeros(2), np.zeros(2), EMSettings(2), 0.5, None, gradient="exact")
    if BACKEND == "torch":
        with pytest.raises(NotImplementedError, match="torch"):
            em_route(
                *args,
                np.zeros(2),
                np.zeros(2),
                EMSettings(2),
                0.5,
                normalize_over_outputs,
                gradient="structured",
            )


def test_one_iteration_is_one_m_step_on_even_assignments():
    """The control without routing: `R = 1 / num_outputs`, one M-step, no E-step."""
    votes, activations, beta_v, beta_a = _routing_problem(11, 2, 12, 3)
    poses, acts, coupling = routing.em_routing(
        np.swapaxes(votes, 1, 2),
        activations,
        beta_v,
        beta_a,
        iterations=1,
        inverse_temperature=0.1,
        variance_epsilon=1e-4,
        return_coupling=True,
    )
    r = activations[:, :, None] / 3  # (batch, inputs, outputs): R times the child's activation
    total = r.sum(axis=1)[..., None]  # (batch, outputs, 1)
    mean = np.einsum("bij,bijh->bjh", r, votes) / (total + EM_EPSILON)
    deviation = (votes - mean[:, None]) ** 2
    variance = np.maximum(np.einsum("bij,bijh->bjh", r, deviation) / (total + EM_EPSILON), 1e-4)
    cost = (16 * beta_v + 0.5 * np.log(variance).sum(-1)) * total[..., 0]
    expected_acts = 1 / (1 + np.exp(-0.1 * (beta_a - cost)))
    np.testing.assert_allclose(ops.convert_to_numpy(poses), mean, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ops.convert_to_numpy(acts), expected_acts, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(ops.convert_to_numpy(coupling), 1 / 3, rtol=1e-6)


def test_an_empty_batch_gives_empty_outputs():
    votes = np.zeros((0, 3, 5, 16), "float32")
    beta = np.zeros((3,), "float32")
    poses, activations = routing.em_routing(
        votes, np.zeros((0, 5), "float32"), beta, beta, iterations=2
    )
    assert tuple(poses.shape) == (0, 3, 16) and tuple(activations.shape) == (0, 3)

import numpy as np
import pytest
from keras import ops

from keras_capsules.layers import MatrixCapsule
from keras_capsules.routing import EMSettings
from tests import _references as ref
from tests._layer_testing import run_layer_test
from tests.conftest import gradient


def brute_force(layer, poses, activations):
    """The layer's EM routing, every (child, parent) edge enumerated by position."""
    return ref.convolutional_em_routing(
        poses,
        activations,
        ops.convert_to_numpy(layer.kernel),
        ops.convert_to_numpy(layer.beta_v),
        ops.convert_to_numpy(layer.beta_a),
        layer.kernel_size,
        layer.strides,
        ref.inverse_temperatures(
            layer.iterations, layer.inverse_temperature, layer.inverse_temperature_schedule
        ),
        layer.variance_epsilon,
        ref.tempering_schedule(layer.tempering, layer.iterations),
        per_type=layer.normalization == "positions",
    )


PROCEDURES = {
    "tempered": {},  # the defaults
    "paper": {"tempering": 1.0},  # Procedure 1 as written
    "authors": {  # the authors' code: per-type normalisation and their schedule
        "tempering": 1.0,
        "normalization": "positions",
        "inverse_temperature_schedule": "authors",
    },
    "authors-tempered": {"normalization": "positions", "tempering": [0.2, 0.5]},
}


@pytest.mark.parametrize("procedure", list(PROCEDURES))
@pytest.mark.parametrize("iterations", [1, 2, 3])
@pytest.mark.parametrize("grid,kernel_size,strides", [(5, 3, 1), (7, 3, 2), (4, 2, 2)])
def test_matches_brute_force_over_positions(grid, kernel_size, strides, iterations, procedure):
    rng = np.random.default_rng(grid + iterations)
    poses = rng.normal(size=(2, grid, grid, 2, 16)).astype("float32")
    activations = rng.uniform(0.2, 1.0, size=(2, grid, grid, 2)).astype("float32")
    settings = dict(PROCEDURES[procedure])
    if isinstance(settings.get("tempering"), list):
        settings["tempering"] = settings["tempering"][: iterations - 1] + [0.3] * (
            iterations - 1 - len(settings["tempering"])
        )
    layer = MatrixCapsule(
        3, kernel_size, strides, iterations=iterations, inverse_temperature=0.3, **settings
    )
    layer.build([poses.shape, activations.shape])
    layer.beta_v.assign(rng.normal(size=3).astype("float32"))
    layer.beta_a.assign(rng.normal(size=3).astype("float32"))
    out_poses, out_acts, resp = layer((poses, activations), return_responsibilities=True)
    exp_poses, exp_acts, exp_resp = brute_force(layer, poses, activations)
    np.testing.assert_allclose(ops.convert_to_numpy(out_poses), exp_poses, rtol=2e-4, atol=2e-5)
    np.testing.assert_allclose(ops.convert_to_numpy(out_acts), exp_acts, rtol=2e-4, atol=2e-5)
    if iterations > 1:
        np.testing.assert_allclose(ops.convert_to_numpy(resp), exp_resp, rtol=2e-4, atol=2e-5)


def test_responsibilities_sum_to_one_over_types_and_positions():
    rng = np.random.default_rng(0)
    poses = rng.normal(size=(2, 7, 7, 3, 16)).astype("float32")
    activations = rng.uniform(size=(2, 7, 7, 3)).astype("float32")
    layer = MatrixCapsule(4, 3, 2, iterations=3)
    _, acts, resp = layer((poses, activations), return_responsibilities=True)
    resp = ops.convert_to_numpy(resp)  # (2, 3, 3, 3, 3, 3 types, 4)
    totals = np.zeros((2, 7, 7, 3))
    for oy in range(3):
        for ox in range(3):
            for ky in range(3):
                for kx in range(3):
                    totals[:, 2 * oy + ky, 2 * ox + kx] += resp[:, oy, ox, ky, kx].sum(-1)
    np.testing.assert_allclose(totals, 1.0, atol=1e-5)  # every child of a 7x7 grid is read
    # Per position alone they do not: children at shared borders split between positions.
    assert not np.allclose(resp.sum(-1), 1.0, atol=1e-3)
    acts = ops.convert_to_numpy(acts)
    assert np.all((acts > 0) & (acts < 1))


def test_positions_normalisation_splits_each_child_per_type():
    rng = np.random.default_rng(5)
    poses = rng.normal(size=(2, 7, 7, 3, 16)).astype("float32")
    activations = rng.uniform(size=(2, 7, 7, 3)).astype("float32")
    layer = MatrixCapsule(4, 3, 2, iterations=3, normalization="positions", tempering=1.0)
    _, _, resp = layer((poses, activations), return_responsibilities=True)
    resp = ops.convert_to_numpy(resp)
    totals = np.zeros((2, 7, 7, 3, 4))
    for oy in range(3):
        for ox in range(3):
            totals[:, 2 * oy : 2 * oy + 3, 2 * ox : 2 * ox + 3] += resp[:, oy, ox]
    np.testing.assert_allclose(totals, 1.0, atol=1e-5)  # per child and output type


def test_shapes_and_output_shape():
    layer = MatrixCapsule(16, 3, 2)
    shapes = [(None, 14, 14, 8, 16), (None, 14, 14, 8)]
    assert layer.compute_output_shape(shapes) == ((None, 6, 6, 16, 16), (None, 6, 6, 16))
    layer.build(shapes)  # that a call's outputs have those shapes, run_layer_test checks
    assert layer.kernel.shape == (72, 16, 4, 4)  # one W per kernel position and type pair


@pytest.mark.parametrize("scale", [0.0, 1.0, 1e20])
def test_vote_mean_and_bound_come_from_the_poses_and_kernel(scale):
    """What the layer hands routing in place of two passes over its votes."""
    rng = np.random.default_rng(7)
    poses = (scale * rng.normal(size=(2, 5, 5, 3, 16))).astype("float32")
    activations = rng.uniform(size=(2, 5, 5, 3)).astype("float32")
    layer = MatrixCapsule(4, 3, 2)
    layer.build([poses.shape, activations.shape])
    child_poses, _ = layer._patches(
        ops.convert_to_tensor(poses), ops.convert_to_tensor(activations)
    )
    child = ops.convert_to_numpy(child_poses).astype("float64")  # (batch, sites, inputs, 4, 4)
    kernel = ops.convert_to_numpy(layer.kernel).astype("float64")  # (inputs, types, 4, 4)
    votes = np.einsum("bsikl,ijlm->bsjikm", child, kernel)
    votes = votes.reshape(votes.shape[:4] + (16,))  # (batch, sites, types, inputs, 16)
    largest = np.abs(votes).max(axis=(1, 2, 3, 4))
    np.testing.assert_allclose(
        ops.convert_to_numpy(layer._vote_reference(child_poses)),
        votes.mean(axis=3),
        atol=1e-6 * max(largest.max(), 1.0),
    )
    assert np.all(ops.convert_to_numpy(layer._vote_bound(poses)) >= largest)


@pytest.mark.parametrize("scale", [0.0, 1e-8, 1e4, 1e20])
def test_finite_values_and_gradients(scale):
    rng = np.random.default_rng(1)
    poses = (scale * rng.normal(size=(1, 5, 5, 2, 16))).astype("float32")
    activations = rng.uniform(size=(1, 5, 5, 2)).astype("float32")
    layer = MatrixCapsule(2, 3, 1, iterations=3)

    def run(p):
        out, acts = layer((p, activations))
        return ops.sum(out, axis=-1) + acts

    assert np.all(np.isfinite(ops.convert_to_numpy(run(poses))))
    assert np.all(np.isfinite(gradient(run, poses)))


def test_layer_checks():
    rng = np.random.default_rng(3)
    run_layer_test(
        MatrixCapsule,
        {
            "capsule_types": 2,
            "kernel_size": 3,
            "strides": 2,
            "iterations": 2,
            "inverse_temperature": 0.05,
            "tempering": [0.1],
            "normalization": "positions",
            "inverse_temperature_schedule": "authors",
            "name": "caps",
        },
        (
            rng.normal(size=(2, 5, 5, 2, 16)).astype("float32"),
            rng.uniform(size=(2, 5, 5, 2)).astype("float32"),
        ),
        expected_output_shape=((2, 2, 2, 2, 16), (2, 2, 2, 2)),
        expected_num_trainable_weights=3,
    )


def test_bad_arguments_and_shapes():
    for kwargs, name in [
        ({"capsule_types": 0}, "capsule_types"),
        ({"capsule_types": 2, "kernel_size": 0}, "kernel_size"),
        ({"capsule_types": 2, "strides": -1}, "strides"),
        ({"capsule_types": 2, "iterations": 0}, "iterations"),
        ({"capsule_types": 2, "inverse_temperature": 0}, "inverse_temperature"),
        ({"capsule_types": 2, "tempering": 0}, "tempering"),
        ({"capsule_types": 2, "tempering": [0.1, 0.2, 0.3]}, "tempering"),
        ({"capsule_types": 2, "normalization": "types"}, "normalization"),
        ({"capsule_types": 2, "inverse_temperature_schedule": "x"}, "schedule"),
    ]:
        with pytest.raises(ValueError, match=name):
            MatrixCapsule(**kwargs)
    with pytest.raises(ValueError, match="poses"):
        MatrixCapsule(2).build([(None, 5, 5, 2, 9), (None, 5, 5, 2)])
    with pytest.raises(ValueError, match="height and width"):
        MatrixCapsule(2).build([(None, None, None, 2, 16), (None, None, None, 2)])
    with pytest.raises(ValueError, match="kernel"):
        MatrixCapsule(2, kernel_size=3).build([(None, 2, 2, 2, 16), (None, 2, 2, 2)])


def test_em_settings_are_held_as_given_and_written_as_arguments():
    settings = EMSettings(iterations=2, inverse_temperature=0.05, tempering=[0.3])
    layer = MatrixCapsule(2, em_settings=settings, normalization="positions", name="caps")
    assert layer.settings is settings
    same = MatrixCapsule(
        2,
        iterations=2,
        inverse_temperature=0.05,
        tempering=[0.3],
        normalization="positions",
        name="caps",
    )
    assert layer.get_config() == same.get_config()
    assert "em_settings" not in layer.get_config()
    assert MatrixCapsule.from_config(layer.get_config()).settings == settings
    # The settings come as one value or as arguments, not both.
    with pytest.raises(ValueError, match=r"set `iterations`, `tempering` in it.*iterations=4"):
        MatrixCapsule(2, em_settings=settings, iterations=4, tempering=0.5)
    with pytest.raises(ValueError, match="must be a keras_capsules.routing.EMSettings"):
        MatrixCapsule(2, em_settings=settings.get_config())

import numpy as np
import pytest
from keras import ops

from keras_capsules.layers import ClassMatrixCapsule
from tests import _references as ref
from tests._layer_testing import run_layer_test
from tests.conftest import gradient


def reference(layer, poses, activations):
    """Votes M @ W[type, class] plus the scaled cell centre, routed by the NumPy procedure."""
    return ref.class_capsules(
        poses,
        activations,
        ops.convert_to_numpy(layer.kernel),
        ops.convert_to_numpy(layer.beta_v),
        ops.convert_to_numpy(layer.beta_a),
        ref.inverse_temperatures(
            layer.iterations, layer.inverse_temperature, layer.inverse_temperature_schedule
        ),
        layer.variance_epsilon,
        ref.tempering_schedule(layer.tempering, layer.iterations),
        coordinate_addition=layer.coordinate_addition,
    )


@pytest.mark.parametrize(
    "settings",
    [{}, {"tempering": 1.0}, {"tempering": 1.0, "inverse_temperature_schedule": "authors"}],
)
@pytest.mark.parametrize("coordinate_addition", [True, False])
@pytest.mark.parametrize("iterations", [1, 3])
def test_matches_numpy_reference(coordinate_addition, iterations, settings):
    rng = np.random.default_rng(iterations)
    poses = rng.normal(size=(2, 3, 4, 2, 16)).astype("float32")
    activations = rng.uniform(0.2, 1, size=(2, 3, 4, 2)).astype("float32")
    layer = ClassMatrixCapsule(
        4,
        iterations=iterations,
        coordinate_addition=coordinate_addition,
        inverse_temperature=0.2,
        **settings,
    )
    layer.build([poses.shape, activations.shape])
    layer.beta_a.assign(rng.normal(size=4).astype("float32"))
    out_poses, out_acts, resp = layer((poses, activations), return_responsibilities=True)
    exp_poses, exp_acts, exp_resp = reference(layer, poses, activations)
    np.testing.assert_allclose(ops.convert_to_numpy(out_poses), exp_poses, rtol=2e-4, atol=2e-5)
    np.testing.assert_allclose(ops.convert_to_numpy(out_acts), exp_acts, rtol=2e-4, atol=2e-5)
    resp = ops.convert_to_numpy(resp).reshape(exp_resp.shape)
    np.testing.assert_allclose(resp, exp_resp, rtol=2e-4, atol=2e-5)
    np.testing.assert_allclose(resp.sum(-1), 1.0, atol=1e-5)


def test_coordinate_addition_changes_the_poses_by_position():
    poses = np.zeros((1, 2, 2, 1, 16), "float32")
    activations = np.ones((1, 2, 2, 1), "float32")
    layer = ClassMatrixCapsule(1, iterations=1)
    out, _ = layer((poses, activations))
    out = ops.convert_to_numpy(out)[0, 0]
    # Zero poses: the votes are the coordinates alone; their mean is the grid centre.
    np.testing.assert_allclose(out[[3, 7]], [0.5, 0.5], atol=1e-6)
    np.testing.assert_allclose(np.delete(out, [3, 7]), 0.0, atol=1e-6)


def test_shapes_finite_gradients_and_errors():
    layer = ClassMatrixCapsule(5)
    shapes = [(None, 4, 4, 8, 16), (None, 4, 4, 8)]
    assert layer.compute_output_shape(shapes) == ((None, 5, 16), (None, 5))
    activations = np.random.default_rng(0).uniform(size=(2, 4, 4, 8)).astype("float32")
    poses = np.random.default_rng(1).normal(size=(2, 4, 4, 8, 16)).astype("float32")
    grad = gradient(lambda p: layer((p, activations))[1], poses)
    assert np.all(np.isfinite(grad)) and np.any(grad != 0)
    assert layer.kernel.shape == (8, 5, 4, 4)  # shared across the 4x4 positions
    with pytest.raises(ValueError, match="capsule_types"):
        ClassMatrixCapsule(0)
    with pytest.raises(ValueError, match="tempering"):
        ClassMatrixCapsule(5, tempering=[0.1])
    with pytest.raises(ValueError, match="inverse_temperature_schedule"):
        ClassMatrixCapsule(5, inverse_temperature_schedule="paper")
    with pytest.raises(ValueError, match="poses"):
        ClassMatrixCapsule(5).build([(None, 4, 8, 16), (None, 4, 8)])


def test_layer_checks():
    rng = np.random.default_rng(5)
    run_layer_test(
        ClassMatrixCapsule,
        {
            "capsule_types": 3,
            "iterations": 2,
            "coordinate_addition": False,
            "tempering": [0.3],
            "inverse_temperature_schedule": "authors",
            "name": "cls",
        },
        (
            rng.normal(size=(2, 2, 2, 2, 16)).astype("float32"),
            rng.uniform(size=(2, 2, 2, 2)).astype("float32"),
        ),
        expected_output_shape=((2, 3, 16), (2, 3)),
        expected_num_trainable_weights=3,
    )

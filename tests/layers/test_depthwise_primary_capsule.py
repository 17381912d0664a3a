import numpy as np
import pytest
from keras import ops

from keras_capsules.layers import DepthwisePrimaryCapsule
from tests import _references as ref
from tests._layer_testing import run_layer_test


def test_layer_checks():
    run_layer_test(
        DepthwisePrimaryCapsule,
        {"capsule_types": 2, "capsule_dim": 3, "name": "primary"},
        np.random.default_rng(0).normal(size=(2, 5, 4, 6)).astype("float32"),
        expected_output_shape=(2, 2, 3),
        expected_num_trainable_weights=2,
    )


def test_the_papers_sizes():
    layer = DepthwisePrimaryCapsule(16, 8)
    assert layer.compute_output_shape((None, 9, 9, 128)) == (None, 16, 8)
    layer.build((None, 9, 9, 128))
    assert layer.count_params() == 9 * 9 * 128 + 128  # one 9x9 filter and a bias per channel


def test_values_match_a_numpy_depthwise_convolution():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 6, 7, 4)).astype("float32")
    layer = DepthwisePrimaryCapsule(2, 2, kernel_size=(3, 2), strides=2, bias_initializer="ones")
    outputs = ops.convert_to_numpy(layer(x))
    kernel, bias = ops.convert_to_numpy(layer.kernel)[..., 0], ops.convert_to_numpy(layer.bias)
    rows, cols = (6 - 3) // 2 + 1, (7 - 2) // 2 + 1
    features = np.zeros((2, rows, cols, 4))
    for r in range(rows):
        for c in range(cols):
            patch = x[:, 2 * r : 2 * r + 3, 2 * c : 2 * c + 2, :]
            features[:, r, c, :] = np.sum(patch * kernel, axis=(1, 2)) + bias
    expected = ref.exponential_squash(features.reshape(2, rows * cols * 2, 2))
    assert outputs.shape == (2, rows * cols * 2, 2)
    np.testing.assert_allclose(outputs, expected, rtol=1e-4, atol=1e-5)


def test_bad_arguments_and_shapes():
    with pytest.raises(ValueError, match="capsule_dim"):
        DepthwisePrimaryCapsule(16, 0)
    with pytest.raises(ValueError, match="kernel_size"):
        DepthwisePrimaryCapsule(16, 8, kernel_size=(3, 0))
    with pytest.raises(ValueError, match="capsule_types \\* capsule_dim = 128"):
        DepthwisePrimaryCapsule(16, 8).build((None, 9, 9, 64))
    with pytest.raises(ValueError, match="known height and width"):
        DepthwisePrimaryCapsule(16, 8).build((None, None, None, 128))
    with pytest.raises(ValueError, match="larger than the feature map"):
        DepthwisePrimaryCapsule(16, 8, kernel_size=11).build((None, 9, 9, 128))


def test_weights_round_trip_as_the_layers_own_variables(tmp_path):
    # The shipped Efficient-CapsNet presets hold the kernel and the bias as the
    # layer's own variables 0 and 1: a weights file keeps that layout.
    import h5py
    import keras

    def model():
        inputs = keras.Input((6, 7, 4))
        layer = DepthwisePrimaryCapsule(2, 2, kernel_size=(3, 2), strides=2, name="primary")
        return keras.Model(inputs, layer(inputs))

    layer_group = "layers/depthwise_primary_capsule"  # Keras names a layer's weights by its class
    x = np.random.default_rng(2).normal(size=(2, 6, 7, 4)).astype("float32")
    source = model()
    source.layers[-1].bias.assign(np.arange(4, dtype="float32"))
    path = str(tmp_path / "primary.weights.h5")
    source.save_weights(path)
    with h5py.File(path, "r") as f:
        group = f[f"{layer_group}/vars"]
        stored = {name: group[name].shape for name in group}
        assert "conv" not in f[layer_group]
    assert stored == {"0": (3, 2, 4, 1), "1": (4,)}
    target = model()
    target.load_weights(path)
    np.testing.assert_array_equal(ops.convert_to_numpy(target(x)), ops.convert_to_numpy(source(x)))


def test_config_keeps_its_arguments():
    layer = DepthwisePrimaryCapsule(2, 3, kernel_size=4, strides=(1, 2), name="primary")
    config = layer.get_config()
    assert {key: config[key] for key in ("capsule_types", "capsule_dim", "kernel_size")} == {
        "capsule_types": 2,
        "capsule_dim": 3,
        "kernel_size": (4, 4),
    }
    assert config["strides"] == (1, 2) and "padding" not in config
    assert DepthwisePrimaryCapsule.from_config(config).get_config() == config


def _whole_map_layer_and_depthwise_convolution(x, kernel_size=None):
    """The layer over the whole map of `x`, and a `DepthwiseConv2D` with its weights."""
    import keras

    layer = DepthwisePrimaryCapsule(2, 3, kernel_size=kernel_size, bias_initializer="ones")
    layer.build(x.shape)
    convolution = keras.layers.DepthwiseConv2D(x.shape[1:3])
    convolution.build(x.shape)
    convolution.set_weights(layer.get_weights())
    return layer, convolution


def _through_the_convolution(convolution, x, variables=None):
    from keras_capsules.ops import exponential_squash

    if variables is None:
        features = convolution(x)
    else:
        features, _ = convolution.stateless_call(variables, [], x)
    return exponential_squash(ops.reshape(features, (x.shape[0], 2, 3)))


@pytest.mark.parametrize("kernel_size", [None, (5, 4)])
def test_whole_map_values_match_numpy_and_a_depthwise_convolution(kernel_size):
    rng = np.random.default_rng(3)
    x = rng.normal(size=(3, 5, 4, 6)).astype("float32")
    layer, convolution = _whole_map_layer_and_depthwise_convolution(x, kernel_size)
    outputs = ops.convert_to_numpy(layer(x))
    kernel, bias = ops.convert_to_numpy(layer.kernel)[..., 0], ops.convert_to_numpy(layer.bias)
    features = np.einsum("bhwc,hwc->bc", x.astype("float64"), kernel) + bias
    np.testing.assert_allclose(
        outputs, ref.exponential_squash(features.reshape(3, 2, 3)), rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(
        outputs, ops.convert_to_numpy(_through_the_convolution(convolution, x)), atol=1e-6
    )


def test_whole_map_gradients_match_a_depthwise_convolution():
    from tests.conftest import gradient

    rng = np.random.default_rng(4)
    x = rng.normal(size=(3, 5, 4, 6)).astype("float32")
    weights = ops.convert_to_tensor(rng.normal(size=(3, 2, 3)).astype("float32"))
    layer, convolution = _whole_map_layer_and_depthwise_convolution(x)
    kernel, bias = layer.get_weights()

    def check(ours, theirs, at):
        np.testing.assert_allclose(gradient(ours, at), gradient(theirs, at), atol=1e-5)

    check(
        lambda v: layer(v) * weights,
        lambda v: _through_the_convolution(convolution, v) * weights,
        x,
    )
    check(
        lambda k: layer.stateless_call([k, bias], [], x)[0] * weights,
        lambda k: _through_the_convolution(convolution, x, [k, bias]) * weights,
        kernel,
    )
    check(
        lambda b: layer.stateless_call([kernel, b], [], x)[0] * weights,
        lambda b: _through_the_convolution(convolution, x, [kernel, b]) * weights,
        bias,
    )


@pytest.mark.parametrize("mixed_precision", ["mixed_bfloat16"], indirect=True)
def test_whole_map_is_finite_under_mixed_bfloat16(mixed_precision):
    import keras

    from tests.conftest import gradient

    x = np.random.default_rng(5).normal(size=(2, 9, 9, 128)).astype("float32")
    layer = DepthwisePrimaryCapsule(16, 8)
    outputs = layer(x)
    assert keras.backend.standardize_dtype(outputs.dtype) == "bfloat16"
    values = ops.convert_to_numpy(ops.cast(outputs, "float32"))
    assert np.all(np.isfinite(values)) and np.any(values != 0)
    grads = gradient(layer, x)
    assert np.all(np.isfinite(grads)) and np.any(grads != 0)

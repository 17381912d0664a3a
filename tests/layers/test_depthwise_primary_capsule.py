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

import numpy as np
import pytest
from keras import ops

from keras_capsules.layers import ReconstructionDecoder
from tests._layer_testing import run_layer_test
from tests._references import bilinear_resize
from tests._references import sigmoid


def test_paper_decoder_shape_range_and_parameters():
    decoder = ReconstructionDecoder((28, 28, 1))
    y = ops.convert_to_numpy(decoder(np.random.normal(size=(2, 10, 16)).astype("float32")))
    assert y.shape == (2, 28, 28, 1) == decoder.compute_output_shape((2, 10, 16))
    assert np.all((y >= 0) & (y <= 1))
    assert decoder.count_params() == 1_411_344


def test_a_resolution_draws_small_and_resizes_bilinearly():
    decoder = ReconstructionDecoder((20, 12, 3), hidden_units=(8,), resolution=(5, 3))
    capsules = np.random.default_rng(1).normal(size=(2, 4, 6)).astype("float32")
    got = ops.convert_to_numpy(decoder(capsules))
    (k1, b1), (k2, b2) = [
        [ops.convert_to_numpy(w) for w in layer.weights]
        for layer in decoder.hidden_layers + [decoder.output_layer]
    ]
    drawn = sigmoid(np.maximum(capsules.reshape(2, -1) @ k1 + b1, 0) @ k2 + b2)
    want = bilinear_resize(drawn.reshape(2, 5, 3, 3), 20, 12)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert got.shape == (2, 20, 12, 3) and got.min() >= 0 and got.max() <= 1


def test_with_a_resolution_the_size_does_not_grow_with_the_image():
    counts = set()
    for side in (64, 128, 224, 512):
        shape = (side, side, 3)
        resolution = ReconstructionDecoder.resolution_for(shape)
        assert resolution == (28, 28)
        decoder = ReconstructionDecoder(shape, resolution=resolution)
        decoder.build((None, 10, 16))
        counts.add(decoder.count_params())
    assert counts == {3_018_544}


@pytest.mark.parametrize(
    "shape, resolution",
    [
        ((28, 28, 1), None),  # MNIST: the paper's decoder
        ((36, 36, 1), None),  # MultiMNIST
        ((40, 40, 1), None),  # affNIST
        ((32, 32, 2), None),  # smallNORB's stereo pair
        ((28, 28, 3), None),  # the largest drawn whole
        ((32, 32, 3), (28, 28)),
        ((64, 64, 1), (48, 48)),
        ((120, 60, 3), (39, 19)),  # the aspect ratio kept
    ],
)
def test_resolution_for_keeps_the_papers_sizes_and_caps_the_rest(shape, resolution):
    assert ReconstructionDecoder.resolution_for(shape) == resolution
    if resolution is not None:
        height, width = resolution
        assert height * width * shape[2] <= ReconstructionDecoder.MAX_VALUES
        assert (height + 1) * (width + 1) * shape[2] > ReconstructionDecoder.MAX_VALUES


def test_layer_checks():
    run_layer_test(
        ReconstructionDecoder,
        {"target_shape": (6, 5), "hidden_units": (7,)},
        np.random.default_rng(0).normal(size=(2, 3, 4)).astype("float32"),
        expected_output_shape=(2, 6, 5),
        expected_num_trainable_weights=4,
    )
    run_layer_test(
        ReconstructionDecoder,
        {"target_shape": (6, 5, 2), "hidden_units": (7,), "resolution": (3, 2)},
        np.random.default_rng(0).normal(size=(2, 3, 4)).astype("float32"),
        expected_output_shape=(2, 6, 5, 2),
        expected_num_trainable_weights=4,
    )


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"target_shape": (0, 28)}, "target_shape"),
        ({"target_shape": (4,), "hidden_units": (0,)}, "hidden_units"),
        ({"target_shape": (8, 8, 1), "resolution": (4, 0)}, "resolution"),
        ({"target_shape": (8, 8), "resolution": (4, 4)}, "resolution"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ReconstructionDecoder(**kwargs)

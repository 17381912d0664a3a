import numpy as np
import pytest
from keras import ops

from keras_capsules.layers import ReconstructionDecoder
from tests._layer_testing import run_layer_test


def test_paper_decoder_shape_range_and_parameters():
    decoder = ReconstructionDecoder((28, 28, 1))
    y = ops.convert_to_numpy(decoder(np.random.normal(size=(2, 10, 16)).astype("float32")))
    assert y.shape == (2, 28, 28, 1) == decoder.compute_output_shape((2, 10, 16))
    assert np.all((y >= 0) & (y <= 1))
    assert decoder.count_params() == 1_411_344


def test_layer_checks():
    run_layer_test(
        ReconstructionDecoder,
        {"target_shape": (6, 5), "hidden_units": (7,)},
        np.random.default_rng(0).normal(size=(2, 3, 4)).astype("float32"),
        expected_output_shape=(2, 6, 5),
        expected_num_trainable_weights=4,
    )


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"target_shape": (0, 28)}, "target_shape"),
        ({"target_shape": (4,), "hidden_units": (0,)}, "hidden_units"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ReconstructionDecoder(**kwargs)

import numpy as np
import pytest
from keras import ops

from keras_capsules.layers import ReconstructionDecoder


def test_paper_decoder_shape_range_and_parameters():
    decoder = ReconstructionDecoder((28, 28, 1))
    y = ops.convert_to_numpy(decoder(np.random.normal(size=(2, 10, 16)).astype("float32")))
    assert y.shape == (2, 28, 28, 1) == decoder.compute_output_shape((2, 10, 16))
    assert np.all((y >= 0) & (y <= 1))
    assert decoder.count_params() == 1_411_344


def test_config_round_trip_gives_same_outputs():
    decoder = ReconstructionDecoder((6, 5), hidden_units=(7,))
    x = np.random.normal(size=(2, 3, 4)).astype("float32")
    y = decoder(x)
    clone = ReconstructionDecoder.from_config(decoder.get_config())
    clone.build(x.shape)
    clone.set_weights(decoder.get_weights())
    np.testing.assert_allclose(ops.convert_to_numpy(clone(x)), ops.convert_to_numpy(y), atol=1e-6)


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

import keras
import numpy as np
import pytest
from keras import ops

from keras_capsules.layers import ImageConverter
from keras_capsules.layers.image_converter import LUMA
from tests._layer_testing import run_layer_test
from tests.conftest import BACKEND


def _photos(shape, seed=0):
    return np.random.default_rng(seed).integers(0, 256, size=shape).astype("uint8")


def _numpy(x):
    return ops.convert_to_numpy(x)


def test_standard_layer_checks():
    run_layer_test(
        ImageConverter,
        dict(image_size=(6, 4), channels=1, scale=1 / 255),
        _photos((2, 12, 8, 3)).astype("float32"),
        (2, 6, 4, 1),
    )


def test_colour_to_grey_is_the_luma_pillow_and_tensorflow_use():
    photos = _photos((3, 5, 7, 3))
    grey = _numpy(ImageConverter(channels=1)(photos))
    expected = (photos.astype("float64") * np.array(LUMA)).sum(-1, keepdims=True)
    np.testing.assert_allclose(grey, expected, rtol=1e-5)
    assert LUMA == (0.299, 0.587, 0.114) and sum(LUMA) == pytest.approx(1.0)


def test_grey_to_colour_repeats_and_alpha_is_dropped():
    grey = _photos((2, 4, 4))  # (batch, height, width), as MNIST's arrays come
    colour = _numpy(ImageConverter(channels=3)(grey))
    assert colour.shape == (2, 4, 4, 3)
    for channel in range(3):
        np.testing.assert_array_equal(colour[..., channel], grey)
    rgba = _photos((2, 4, 4, 4))
    np.testing.assert_array_equal(_numpy(ImageConverter()(rgba)), rgba[..., :3])
    np.testing.assert_array_equal(_numpy(ImageConverter(channels=3)(rgba)), rgba[..., :3])
    stereo = _photos((2, 4, 4, 2))  # smallNORB's pairs: kept as they are without `channels`
    np.testing.assert_array_equal(_numpy(ImageConverter(scale=1.0)(stereo)), stereo)


def test_halving_averages_each_two_by_two_block_and_scale_offset_follow():
    photos = _photos((2, 8, 6, 1)).astype("float64")
    halved = _numpy(ImageConverter(image_size=(4, 3), scale=2 / 255, offset=-1)(photos))
    blocks = photos.reshape(2, 4, 2, 3, 2, 1).mean(axis=(2, 4))
    np.testing.assert_allclose(halved, blocks * 2 / 255 - 1, atol=1e-5)
    same = _numpy(ImageConverter(image_size=(8, 6))(photos))
    np.testing.assert_allclose(same, photos, atol=1e-3)


def test_crop_to_aspect_ratio_takes_the_centre():
    photos = np.zeros((1, 4, 8, 1), "float32")
    photos[:, :, 2:6] = 200  # the centre square, between black sides
    cropped = _numpy(ImageConverter(image_size=(4, 4), crop_to_aspect_ratio=True)(photos))
    np.testing.assert_allclose(cropped, 200, atol=1e-3)
    squeezed = _numpy(ImageConverter(image_size=(4, 4))(photos))
    assert squeezed.min() < 100  # the whole width, black sides included


def test_a_model_with_the_converter_takes_any_size_and_colour(tmp_path):
    images = keras.Input((None, None, None))
    grey = ImageConverter(image_size=(8, 8), channels=1, scale=1 / 255)(images)
    model = keras.Model(images, keras.layers.GlobalAveragePooling2D()(grey))
    white = np.full((1, 20, 30, 3), 255, "uint8")
    np.testing.assert_allclose(_numpy(model(white)), [[1.0]], atol=1e-5)
    np.testing.assert_allclose(_numpy(model(np.full((1, 5, 5, 1), 255.0))), [[1.0]], atol=1e-5)
    path = str(tmp_path / "converter.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_allclose(_numpy(loaded(white)), [[1.0]], atol=1e-5)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"image_size": (28,)}, "image_size"),
        ({"image_size": (28, 0)}, "image_size"),
        ({"image_size": 28}, "image_size"),
        ({"channels": 2}, "channels"),
        ({"scale": "1/255"}, "scale"),
        ({"offset": [1]}, "offset"),
        ({"interpolation": "linear"}, "interpolation"),
        ({"crop_to_aspect_ratio": True}, "image_size"),
        ({"size": (28, 28)}, "size"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        ImageConverter(**kwargs)


def test_bad_inputs_name_the_shape():
    with pytest.raises(ValueError, match=r"shape=\(2, 4\)"):
        ImageConverter()(np.zeros((2, 4)))
    with pytest.raises(ValueError, match="1, 3 or 4 channels"):
        ImageConverter(channels=1)(np.zeros((1, 4, 4, 2)))


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("other", [2, 5, 6])
def test_a_grey_or_colour_converter_refuses_other_channel_counts(channels, other):
    """Built on grey images, a later call of another channel count is refused too."""
    converter = ImageConverter(image_size=(4, 4), channels=channels)
    converter(_photos((1, 6, 6, 1)))
    with pytest.raises(ValueError, match=rf"1, 3 or 4 channels.*shape=\(2, 6, 6, {other}\)"):
        converter(_photos((2, 6, 6, other)))
    kept = _numpy(ImageConverter()(_photos((2, 6, 6, other))))  # no `channels`: any count
    assert kept.shape == (2, 6, 6, other)


@pytest.mark.skipif(BACKEND != "tensorflow", reason="graphs of unknown shapes are TensorFlow's")
def test_a_graph_of_any_channels_refuses_the_others_when_it_runs():
    """As in the exports: the channel count is only known when the graph runs."""
    import tensorflow as tf

    converter = ImageConverter(image_size=(4, 4), channels=1, scale=1 / 255)
    graph = tf.function(
        converter, input_signature=[tf.TensorSpec((None, None, None, None), tf.float32)]
    )
    for channels in (1, 3, 4):
        photos = _photos((2, 6, 5, channels)).astype("float32")
        np.testing.assert_allclose(graph(photos), converter(photos), atol=1e-6)
        assert graph(photos[:0]).shape == (0, 4, 4, 1)
    for channels in (2, 5):
        for n in (2, 0):  # an empty batch too
            with pytest.raises(tf.errors.InvalidArgumentError, match="reshape"):
                graph(np.zeros((n, 6, 5, channels), "float32"))

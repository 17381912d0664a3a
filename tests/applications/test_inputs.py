"""What every classifier's `predict` takes: images, an empty batch included; nothing else."""

import keras
import numpy as np
import pytest

import applications

# name: a small classifier of each kind of output (capsules, EM capsules, softmax)
MODELS = {
    "capsnet": lambda: applications.CapsNet(
        conv_filters=8, primary_capsule_types=2, capsule_dim=4, decoder_units=(16,), compile=False
    ),
    "matrix_capsnet_norb": lambda: applications.MatrixCapsNet(
        A=8, B=2, C=3, D=2, iterations=2, input_shape=(20, 20, 2), num_classes=3, compile=False
    ),
    "baseline_cnn": lambda: applications.BaselineCNN(filters=(4,), dense_units=(8,), compile=False),
}


def shapes(outputs):
    return keras.tree.map_structure(lambda output: tuple(output.shape), outputs)


@pytest.fixture(scope="module", params=sorted(MODELS))
def fresh_and_loaded(request, tmp_path_factory):
    """A small classifier, and the same saved as .keras and loaded."""
    model = MODELS[request.param]()
    path = str(tmp_path_factory.mktemp("inputs") / "model.keras")
    model.save(path)
    return model, keras.saving.load_model(path)


def test_an_empty_batch_gets_every_output_with_no_rows(fresh_and_loaded):
    """Keras's predict loop runs no step for 0 images, and had nothing to answer with."""
    for model in fresh_and_loaded:
        height, width, channels = model.image_shape
        one = model.predict(np.zeros((1, height, width, channels), "float32"), verbose=0)
        for x in (
            np.zeros((0, height, width, channels), "float32"),
            np.zeros((0, 9, 7, channels), "uint8"),
        ):
            empty = model.predict(x, verbose=0)
            expected = keras.tree.map_structure(lambda a: (0, *a.shape[1:]), one)
            assert shapes(empty) == expected
            keras.tree.map_structure(
                lambda answer, first: np.testing.assert_equal(answer.dtype, first.dtype),
                empty,
                one,
            )


def test_a_scalar_is_refused_in_one_line(fresh_and_loaded):
    for model in fresh_and_loaded:
        for scalar in (np.float32(3), 3.0, np.array(7)):
            with pytest.raises(ValueError, match=r"Received: shape=\(\)$") as error:
                model.predict(scalar, verbose=0)
            assert "\n" not in str(error.value)


def test_an_image_of_other_channels_than_the_network_takes_is_refused(fresh_and_loaded):
    for model in fresh_and_loaded:
        height, width, channels = model.image_shape
        refused = (2, 5, 6) if channels in (1, 3) else (1, 3, 4)
        takes = "1, 3 or 4 channels" if channels in (1, 3) else f"with {channels} channels"
        for other in refused:
            x = np.zeros((2, height, width, other), "float32")
            shape = rf"Received: shape=\(2, {height}, {width}, {other}\)"
            with pytest.raises(ValueError, match=rf"{takes}.*{shape}$"):
                model.predict(x, verbose=0)
            with pytest.raises(ValueError, match=rf"\(2, {height}, {width}, {other}\)"):
                model(x)

"""`SavedModelPredictor` without HTTP: what reaches a client for answers that are not finite."""

import asyncio

import numpy as np
import pytest

from tests.conftest import BACKEND
from tests.serving.test_export import overflowing_model

pytestmark = pytest.mark.skipif(
    BACKEND != "tensorflow", reason="serving runs the SavedModel, the TensorFlow part"
)
pytest.importorskip("kserve")


@pytest.fixture(scope="module")
def predictor(tmp_path_factory):
    from keras_capsules.serving import export_saved_model
    from keras_capsules.serving.saved_model_predictor import SavedModelPredictor
    from tests.serving.test_export import SPEC

    base = str(tmp_path_factory.mktemp("predictor") / "overflow")
    export_saved_model(overflowing_model(), base, spec=SPEC, verbose=False)
    predictor = SavedModelPredictor("overflow", base)
    predictor.load()
    return predictor


def predict(predictor, images):
    return asyncio.run(predictor.predict({"instances": np.asarray(images).tolist()}))


def test_finite_answers_pass(predictor):
    answer = predict(predictor, np.ones((2, 8, 8, 1)))
    probabilities = np.array([p["probabilities"] for p in answer["predictions"]])
    np.testing.assert_allclose(probabilities, 1 / 3, rtol=1e-6)


def test_outputs_that_are_not_finite_are_a_bad_request(predictor):
    from kserve.errors import InvalidInput

    with pytest.raises(InvalidInput, match="out of the range the model can answer"):
        predict(predictor, np.full((1, 8, 8, 1), 1e10))


def test_models_exported_without_the_graph_check_are_caught_too(predictor, monkeypatch):
    """A SavedModel from before the graph checked its outputs: never a 200 with null."""
    import tensorflow as tf
    from kserve.errors import InvalidInput

    class Unchecked:
        structured_input_signature = predictor._signatures[
            "serving_default"
        ].structured_input_signature

        def __call__(self, images):
            return {"probabilities": tf.fill((tf.shape(images)[0], 3), np.nan)}

    monkeypatch.setitem(predictor._signatures, "serving_default", Unchecked())
    with pytest.raises(InvalidInput, match="out of the range"):
        predict(predictor, np.ones((1, 8, 8, 1)))


def test_an_integer_beyond_float_range_is_a_bad_request(predictor):
    """JSON parsers refuse such integers; a Python caller can still pass one."""
    from kserve.errors import InvalidInput

    image = np.ones((8, 8, 1), int).tolist()
    image[3][4][0] = 10**400
    with pytest.raises(InvalidInput, match="NaN or infinite pixels"):
        asyncio.run(predictor.predict({"instances": [image]}))


def test_an_efficient_capsnet_is_served_as_capsnet_mnist_is(efficient_capsnet_export):
    """What `keras-capsules serve` answers: its predictions, and InvalidInput (a 400)."""
    from kserve.errors import InvalidInput

    from keras_capsules.serving.saved_model_predictor import SavedModelPredictor

    model, path, x = efficient_capsnet_export
    served = SavedModelPredictor("efficient", path)
    served.load()
    assert served.image_shape == (28, 28, 1)
    predictions = predict(served, x)["predictions"]
    expected = {k: v.numpy() for k, v in model(x, training=False).items()}
    np.testing.assert_allclose(
        [p["probabilities"] for p in predictions], expected["probabilities"], atol=1e-5
    )
    assert [p["classes"] for p in predictions] == expected["probabilities"].argmax(-1).tolist()
    # A model without class names labels each row with its class index, as text.
    assert [p["labels"] for p in predictions] == [str(p["classes"]) for p in predictions]
    request = {
        "signature_name": "reconstruct_capsule",
        "instances": [{"images": x[i].tolist(), "capsules": c} for i, c in enumerate([7, 2])],
    }
    np.testing.assert_allclose(
        asyncio.run(served.predict(request))["predictions"],
        model.decode(expected["poses"][:2], labels=np.array([7, 2])),
        atol=1e-5,
    )
    with pytest.raises(InvalidInput, match=r"with 1 or 3 or 4 channels"):
        predict(served, np.zeros((2, 32, 32, 2)))
    request["instances"][0]["capsules"] = 10
    with pytest.raises(InvalidInput, match=r"class indices in \[0, 10\)"):
        asyncio.run(served.predict(request))


@pytest.fixture(scope="module")
def capsnet_export(tmp_path_factory):
    """Two small CapsNetMNIST exports: pixels in [0, 255] (the default) and in [0, 1]."""
    import applications
    from keras_capsules.layers import ImageConverter
    from keras_capsules.serving import export_saved_model

    root = tmp_path_factory.mktemp("ranges")
    small = dict(conv_filters=8, primary_capsule_types=2, decoder_units=None, compile=False)
    paths = {}
    for name, scale in (("pixels", 1 / 255), ("unit", None)):
        model = applications.CapsNetMNIST(**small, image_converter=ImageConverter(scale=scale))
        paths[name] = (model, export_saved_model(model, str(root / name), verbose=False))
    return paths


def _predictor(path, **kwargs):
    from keras_capsules.serving.saved_model_predictor import SavedModelPredictor

    predictor = SavedModelPredictor("capsnet", path, **kwargs)
    predictor.load()
    return predictor


@pytest.mark.parametrize("value", [1e30, 1e6, -1e6, 258.0, -3.0])
def test_pixels_outside_the_models_range_are_a_bad_request(capsnet_export, value):
    from kserve.errors import InvalidInput

    predictor = _predictor(capsnet_export["pixels"][1])
    assert predictor.pixel_range == (0.0, 255.0)
    images = np.zeros((1, 28, 28, 1))
    images[0, 5, 5, 0] = value
    with pytest.raises(InvalidInput, match=r"must lie in \[0, 255\].*--no-range-check"):
        predict(predictor, images)


def test_within_the_tolerance_or_with_the_check_off_pixels_are_answered(capsnet_export):
    model, path = capsnet_export["pixels"]
    images = np.full((1, 28, 28, 1), 257.0)  # 1% of the range above it
    answer = predict(_predictor(path), images)
    expected = model.predict(images, verbose=0)["probabilities"]
    np.testing.assert_allclose(answer["predictions"][0]["probabilities"], expected[0], atol=1e-5)
    answer = predict(_predictor(path, check_range=False), np.full((1, 28, 28, 1), 1e6))
    assert len(answer["predictions"]) == 1


def test_a_unit_range_model_takes_pngs_scaled_to_its_range(capsnet_export):
    import base64

    import tensorflow as tf
    from kserve.errors import InvalidInput

    model, path = capsnet_export["unit"]
    predictor = _predictor(path)
    assert predictor.pixel_range == (0.0, 1.0)
    with pytest.raises(InvalidInput, match=r"must lie in \[0, 1\]"):
        predict(predictor, np.full((1, 28, 28, 1), 255.0))
    pixels = np.random.default_rng(0).integers(0, 256, (28, 28, 1)).astype("uint8")
    png = base64.b64encode(tf.io.encode_png(pixels).numpy()).decode()
    answer = asyncio.run(predictor.predict({"instances": [{"b64": png}]}))
    expected = model.predict(pixels[None].astype("float32") / 255.0, verbose=0)["probabilities"]
    np.testing.assert_allclose(answer["predictions"][0]["probabilities"], expected[0], atol=1e-5)


def test_class_names_travel_to_the_servers_answers_and_metadata(tmp_path):
    import applications
    from keras_capsules.serving import export_saved_model
    from keras_capsules.serving.saved_model_predictor import SavedModelPredictor

    names = ["circle", "square", "triangle"]
    model = applications.CapsNet(
        input_shape=(12, 12, 3),
        class_names=names,
        conv_filters=4,
        conv_kernel_size=3,
        primary_capsule_types=2,
        primary_kernel_size=3,
        decoder_units=None,
    )
    path = export_saved_model(model, str(tmp_path / "shapes"), verbose=False)
    served = SavedModelPredictor("shapes", path)
    served.load()
    x = np.random.default_rng(4).integers(0, 256, (5, 12, 12, 3)).astype("float32")
    rows = predict(served, x)["predictions"]
    classes = model.predict(x, verbose=0)["probabilities"].argmax(-1)
    assert [row["labels"] for row in rows] == [names[c] for c in classes]
    assert [row["classes"] for row in rows] == classes.tolist()
    assert served.metadata()["metadata"]["class_names"] == names
    columns = asyncio.run(served.predict({"inputs": x.tolist()}))["outputs"]
    assert columns["labels"] == [names[c] for c in classes]


def _png(height, width, rows):
    """A greyscale 8-bit PNG of `height` x `width` whose image data is `rows` (filter bytes in)."""
    import struct
    import zlib

    def chunk(kind, data):
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows, 9))
        + chunk(b"IEND", b"")
    )


@pytest.mark.parametrize("height, width", [(1, 16777216), (16777216, 1)])
def test_a_png_longer_than_the_decoder_takes_is_refused_by_its_size(capsnet_export, height, width):
    """Within the server's pixel limit, but a side longer than libpng decodes: said so."""
    import base64

    from kserve.errors import InvalidInput

    predictor = _predictor(capsnet_export["pixels"][1])
    png = _png(height, width, bytes(height * (width + 1)))
    request = {"instances": [{"b64": base64.b64encode(png).decode()}]}
    with pytest.raises(InvalidInput) as raised:
        asyncio.run(predictor.predict(request))
    assert str(raised.value) == (
        f"instances[0]: the PNG is {height}x{width}; this server decodes PNGs whose sides are at "
        "most 1000000 pixels (and of at most 16777216 pixels)"
    )


def test_a_png_cut_short_is_named_damaged(capsnet_export):
    import base64

    from kserve.errors import InvalidInput

    predictor = _predictor(capsnet_export["pixels"][1])
    pixels = np.random.default_rng(0).integers(0, 256, (28, 28)).astype("uint8")
    rows = b"".join(b"\x00" + row.tobytes() for row in pixels)  # filter 0: the bytes as they are
    png = _png(28, 28, rows)
    request = {"instances": [{"b64": base64.b64encode(png[: len(png) // 2]).decode()}]}
    with pytest.raises(InvalidInput, match=r"the PNG \(28x28, as its header says\) is damaged"):
        asyncio.run(predictor.predict(request))

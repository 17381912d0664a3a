"""One image, one answer: Keras, the SavedModel, ONNX, LiteRT and the server agree.

Every classifier's image converter holds the rule (grey, RGB and RGBA taken,
alpha dropped, other channel counts refused), so each path that runs the
model applies it; the server's own PNG decoding follows it too.
"""

import asyncio
import base64

import keras
import numpy as np
import pytest

import applications
from tests.conftest import BACKEND

pytestmark = pytest.mark.skipif(
    BACKEND != "tensorflow", reason="the exports and the server go through TensorFlow"
)

SHAPES = {"grey": (17, 19, 1), "RGB": (20, 24, 3), "RGBA": (28, 28, 4)}
REFUSED = (2, 5, 7)


def photos(name, n=2):
    """uint8 images of `SHAPES[name]`; RGBA ones with every alpha level, as a photo has."""
    shape = SHAPES[name]
    rng = np.random.default_rng(len(name))
    return rng.integers(0, 256, (n,) + shape).astype("uint8")


@pytest.fixture(scope="module")
def runtimes(tmp_path_factory):
    """`(model, {runtime: run(images) -> probabilities})` for a tiny CapsNetMNIST."""
    pytest.importorskip("kserve")
    import tensorflow as tf

    from keras_capsules.serving import export_litert
    from keras_capsules.serving import export_onnx
    from keras_capsules.serving import export_saved_model
    from keras_capsules.serving.saved_model_predictor import SavedModelPredictor

    onnxruntime = pytest.importorskip("onnxruntime")
    interpreter = pytest.importorskip("ai_edge_litert.interpreter")
    pytest.importorskip("tf2onnx")

    keras.utils.set_random_seed(3)
    model = applications.CapsNetMNIST(
        conv_filters=8, primary_capsule_types=2, capsule_dim=4, decoder_units=None
    )
    root = tmp_path_factory.mktemp("one_image")
    export_saved_model(model, str(root / "saved"), verbose=False)
    onnx_path = export_onnx(model, str(root / "m.onnx"), verbose=False)
    litert_path = export_litert(model, str(root / "m.tflite"), verbose=False)
    signature = tf.saved_model.load(str(root / "saved" / "1")).signatures["serving_default"]
    session = onnxruntime.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    predictor = SavedModelPredictor("m", str(root / "saved"))
    predictor.load()

    def litert(x):
        runner = interpreter.Interpreter(model_path=litert_path).get_signature_runner()
        return runner(images=x)["probabilities"]

    def server(instances):
        answer = asyncio.run(predictor.predict({"instances": instances}))
        return np.array([p["probabilities"] for p in answer["predictions"]])

    run = {
        "keras": lambda x: model.predict(x, verbose=0)["probabilities"],
        "saved_model": lambda x: signature(images=tf.constant(x))["probabilities"].numpy(),
        "onnx": lambda x: session.run(["probabilities"], {"images": x})[0],
        "litert": litert,
        "server (list)": lambda x: server(x.tolist()),
        "server (PNG)": lambda x: server([png(image) for image in x.astype("uint8")]),
    }
    return model, run


def png(image):
    import tensorflow as tf

    return {"b64": base64.b64encode(tf.io.encode_png(image).numpy()).decode()}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_every_runtime_answers_an_image_as_keras_does(runtimes, name):
    model, run = runtimes
    x = photos(name).astype("float32")
    expected = model(x, training=False)["probabilities"]
    for runtime, answer in run.items():
        np.testing.assert_allclose(answer(x), expected, atol=1e-4, err_msg=runtime)


def test_alpha_is_dropped_for_a_png_as_for_a_list(runtimes):
    """A half-transparent photo: composited on black, its answer would differ."""
    model, run = runtimes
    rgba = photos("RGBA")
    rgba[..., 3] = 128
    x = rgba.astype("float32")
    from_png, from_list = run["server (PNG)"](x), run["server (list)"](x)
    np.testing.assert_allclose(from_png, from_list, atol=1e-5)
    opaque = np.concatenate([x[..., :3], np.full_like(x[..., 3:], 255)], -1)
    np.testing.assert_allclose(from_png, run["keras"](opaque), atol=1e-4)


@pytest.mark.parametrize("channels", REFUSED)
def test_other_channel_counts_are_refused_everywhere(runtimes, channels):
    import tensorflow as tf
    from kserve.errors import InvalidInput

    model, run = runtimes
    x = np.random.default_rng(channels).integers(0, 256, (2, 28, 28, channels)).astype("float32")
    shape = rf"shape=\(2, 28, 28, {channels}\)"
    with pytest.raises(ValueError, match=rf"1, 3 or 4 channels .*Received: {shape}"):
        run["keras"](x)
    with pytest.raises(ValueError, match=shape):
        model(x)
    with pytest.raises(tf.errors.InvalidArgumentError, match="with 1 or 3 or 4 channels"):
        run["saved_model"](x)
    with pytest.raises(Exception, match="Reshape"):  # ONNX Runtime's words, not ours
        run["onnx"](x)
    with pytest.raises(RuntimeError, match="RESHAPE"):  # LiteRT's
        run["litert"](x)
    with pytest.raises(InvalidInput, match=rf"1 or 3 or 4 channels .*\(28, 28, {channels}\)"):
        run["server (list)"](x)

"""Keras's own `model.export(path, format=...)` on a small classifier of each family.

Keras 3.15 exports, on TensorFlow, to `"tf_saved_model"`, `"onnx"`,
`"litert"` and `"openvino"` (`"torch"` needs the PyTorch backend). Each file
is loaded in its own runtime (TensorFlow, ONNX Runtime, LiteRT's interpreter,
OpenVINO) and must answer as `model.predict` does. OpenVINO is not among the
test requirements (a 59 MB wheel): its test runs where it is installed. The
project's own export (`keras_capsules.serving`) has its tests in
`tests/serving`.
"""

import os

import keras
import numpy as np
import pytest

import applications
from keras_capsules.layers import ImageConverter
from tests.conftest import requires_tensorflow

pytestmark = requires_tensorflow


def _feature_extractor():
    return keras.Sequential(
        [
            keras.Input((32, 32, 3)),
            keras.layers.Conv2D(8, 3, strides=2, activation="relu"),
            keras.layers.Conv2D(16, 3, strides=2, activation="relu"),
        ]
    )


# family: a small classifier of it
FAMILIES = {
    "capsnet": lambda: applications.CapsNetMNIST(
        conv_filters=16, primary_capsule_types=4, capsule_dim=8, decoder_units=(32,)
    ),
    "efficient_capsnet": lambda: applications.EfficientCapsNet(
        conv_filters=(8, 8, 8, 16),
        primary_capsule_types=4,
        primary_capsule_dim=4,
        capsule_dim=8,
        decoder_units=(32,),
    ),
    "matrix_capsnet": lambda: applications.MatrixCapsNet(
        A=8,
        B=2,
        C=3,
        D=2,
        iterations=2,
        input_shape=(20, 20, 2),
        num_classes=3,
        image_converter=ImageConverter(),
    ),
    "baseline_cnn": lambda: applications.BaselineCNN(filters=(8, 8, 4), dense_units=(16, 8)),
    "backbone_capsnet": lambda: applications.BackboneCapsNet(
        backbone=_feature_extractor(), num_classes=3, primary_capsule_types=4, decoder_units=(8,)
    ),
}

FILE_NAMES = {
    "tf_saved_model": "saved_model",
    "onnx": "model.onnx",
    "litert": "model.tflite",
    "openvino": "model.xml",
}

# 8 to 18 s each on two CPU cores (tf2onnx's einsum optimizer times every order of
# the matrix capsules' seven-letter einsum): these run with the slow tests.
SLOW = {("matrix_capsnet", "onnx"), ("matrix_capsnet", "litert"), ("matrix_capsnet", "openvino")}


def _cases():
    for format in FILE_NAMES:
        for family in FAMILIES:
            marks = [pytest.mark.slow] if (family, format) in SLOW else []
            yield pytest.param(family, format, marks=marks, id=f"{family}-{format}")


def _images(model):
    """Images in the model's pixel range: [0, 255] with a scale, else standardised."""
    top = 255.0 if model.image_converter.scale else 1.0
    shape = (3,) + tuple(model.image_shape)
    return np.random.default_rng(0).uniform(0, top, shape).astype("float32")


def _outputs(outputs):
    """`{name: array}` of a model's dict of outputs, or `{"output": array}` of its one tensor."""
    if isinstance(outputs, dict):
        return {name: np.asarray(value) for name, value in outputs.items()}
    return {"output": np.asarray(outputs)}


def _run(format, path, images):
    """The exported file's outputs on `images`, from its own runtime, as `_outputs` names them."""
    if format == "tf_saved_model":
        import tensorflow as tf

        loaded = tf.saved_model.load(path)  # held: `serve` needs the loaded variables alive
        return _outputs(loaded.serve(tf.constant(images)))
    if format == "onnx":
        import onnxruntime

        session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
        names = [output.name for output in session.get_outputs()]
        values = session.run(None, {session.get_inputs()[0].name: images})
        return dict(zip(names, values)) if len(values) > 1 else {"output": values[0]}
    if format == "litert":
        from ai_edge_litert.interpreter import Interpreter

        runner = Interpreter(model_path=path).get_signature_runner()
        (name,) = runner.get_input_details()
        values = runner(**{name: images})
        return values if len(values) > 1 else {"output": next(iter(values.values()))}
    if format == "openvino":
        import openvino

        compiled = openvino.Core().compile_model(path, "CPU")
        results = compiled([images])
        return {
            next(iter(sorted(port.get_names())), str(index)): results[port]
            for index, port in enumerate(compiled.outputs)
        }
    raise ValueError(format)


def _match(got, want):
    """`got` keyed as `want`: by name where the names agree, else by shape (OpenVINO's names)."""
    if set(got) == set(want):
        return got
    by_shape = {value.shape: value for value in got.values()}
    assert len(by_shape) == len(got) == len(want), (list(got), list(want))
    return {name: by_shape[value.shape] for name, value in want.items()}


@pytest.mark.parametrize("family, format", list(_cases()))
def test_keras_export_answers_as_predict(family, format, tmp_path):
    if format == "onnx":
        pytest.importorskip("onnxruntime")
        pytest.importorskip("tf2onnx")
    if format == "litert":
        pytest.importorskip("ai_edge_litert")
    if format == "openvino":
        pytest.importorskip("openvino")
    model = FAMILIES[family]()
    images = _images(model)
    want = _outputs(keras.tree.map_structure(np.asarray, model.predict(images, verbose=0)))
    path = os.path.join(str(tmp_path), FILE_NAMES[format])
    model.export(path, format=format, verbose=False)
    got = _match(_run(format, path, images), want)
    assert set(got) == set(want)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-4, err_msg=name)

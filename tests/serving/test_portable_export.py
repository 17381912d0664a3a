"""ONNX and LiteRT exports, run by ONNX Runtime and LiteRT's interpreter against Keras.

Every test of a model runs for every entry of MODELS and every format: a new
application is one line there.
"""

import json
import os
import re
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest

import applications
from keras_capsules import routing
from keras_capsules._autodiff import inference_only
from keras_capsules.layers import ImageConverter
from keras_capsules.serving import ServingSpec
from keras_capsules.serving import export_litert
from keras_capsules.serving import export_onnx
from keras_capsules.serving.export import VERIFY_TOLERANCE
from tests.conftest import BACKEND

requires_tensorflow = pytest.mark.skipif(
    BACKEND != "tensorflow", reason="ONNX and LiteRT export go through TensorFlow"
)

# name: a small model of the application (any model taking one image batch)
MODELS = {
    "capsnet_mnist": lambda: applications.CapsNetMNIST(
        conv_filters=16, primary_capsule_types=4, capsule_dim=8, decoder_units=(32,)
    ),
    # Inputs standardised, as the smallNORB configuration takes them (no scale).
    "matrix_capsnet_norb": lambda: applications.MatrixCapsNet(
        A=8,
        B=2,
        C=3,
        D=2,
        iterations=2,
        input_shape=(20, 20, 2),
        num_classes=3,
        image_converter=ImageConverter(),
    ),
    # Pixel values, as the em_capsnet_mnist preset takes them (scale 1/255).
    "matrix_capsnet_mnist": lambda: applications.MatrixCapsNet(
        A=8, B=2, C=3, D=2, iterations=2, input_shape=(28, 28, 1), num_classes=10
    ),
    "efficient_capsnet": lambda: applications.EfficientCapsNet(
        conv_filters=(8, 8, 8, 32), primary_capsule_types=4, capsule_dim=8, decoder_units=(32,)
    ),
}


SPEC = ServingSpec(image_shape=(8, 8, 1))
"""The spec of the small functional models below: one output, the class scores."""
SMALL_SPEC = ServingSpec(image_shape=(4, 4, 1))


def images(n, shape, seed=0):
    """Pixel values in [0, 255]."""
    return np.random.default_rng(seed).integers(0, 256, (n,) + shape).astype("float32")


def model_images(model, n, seed=0):
    """Images in the range `model` expects: pixel values, or standardised without a scale."""
    shape = model.image_shape
    if model.image_converter.scale is None:  # expects standardised inputs
        return np.random.default_rng(seed).normal(size=(n,) + shape).astype("float32")
    return images(n, shape, seed)


def run_onnx(path, x):
    onnxruntime = pytest.importorskip("onnxruntime")
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [output.name for output in session.get_outputs()]
    return dict(zip(names, session.run(None, {"images": x}), strict=True))


def run_litert(path, x):
    interpreter = pytest.importorskip("ai_edge_litert.interpreter")
    runner = interpreter.Interpreter(model_path=path).get_signature_runner("serving_default")
    return runner(images=x)


# format: (export function, file suffix, the runtime, the packages the export needs and
# those the runtime needs)
FORMATS = {
    "onnx": (export_onnx, ".onnx", run_onnx, ("onnx", "tf2onnx"), ("onnxruntime",)),
    "litert": (export_litert, ".tflite", run_litert, (), ("ai_edge_litert",)),
}


def needs(format_name, runtime=True):
    """Skip unless the packages that export (and run) `format_name` are installed."""
    _, _, _, export_packages, run_packages = FORMATS[format_name]
    for package in export_packages + (run_packages if runtime else ()):
        pytest.importorskip(package)


@pytest.fixture(scope="module")
def built_models():
    """One model per entry of MODELS, built on first use and shared by the formats."""
    models = {}

    def build(name):
        if name not in models:
            keras.utils.set_random_seed(7)
            models[name] = MODELS[name]()
        return models[name]

    return build


@pytest.fixture(scope="module", params=sorted(FORMATS))
def file_format(request):
    if BACKEND != "tensorflow":
        pytest.skip("ONNX and LiteRT export go through TensorFlow")
    needs(request.param)
    return request.param


@pytest.fixture(scope="module", params=sorted(MODELS))
def exported(request, file_format, built_models, tmp_path_factory):
    """(model, the exported file, its runtime), per model and format."""
    export, suffix, run, _, _ = FORMATS[file_format]
    model = built_models(request.param)
    path = str(tmp_path_factory.mktemp(file_format) / f"{request.param}{suffix}")
    assert export(model, path, verbose=False) == path
    return model, path, run


@requires_tensorflow
def test_runtime_reproduces_keras(exported):
    model, path, run = exported
    x = model_images(model, 5)
    expected = model.predict(x, verbose=0)
    scores = expected["probabilities"]
    served = run(path, x)
    assert set(served) == {"probabilities", "classes", "poses"}
    assert served["probabilities"].dtype == np.float32 and served["classes"].dtype == np.int64
    np.testing.assert_allclose(served["probabilities"], scores, atol=1e-4)
    np.testing.assert_allclose(served["poses"], expected["poses"], atol=1e-4)
    np.testing.assert_array_equal(served["classes"], scores.argmax(-1))


@requires_tensorflow
def test_batch_size_is_free(exported):
    model, path, run = exported
    for n in (1, 3):
        x = model_images(model, n, seed=n)
        outputs = model(x, training=False)  # eager: predict would trace each batch size
        scores = outputs["probabilities"]
        np.testing.assert_allclose(run(path, x)["probabilities"], scores, atol=1e-4)


@requires_tensorflow
def test_an_empty_batch_gets_empty_answers(exported):
    model, path, run = exported
    if path.endswith(".tflite"):
        pytest.skip("LiteRT's XNNPack delegate cannot resize its tensors to a batch of 0")
    served = run(path, model_images(model, 1)[:0])
    classes = model.num_classes
    assert served["probabilities"].shape == (0, classes) and served["classes"].shape == (0,)
    assert served["poses"].shape[:2] == (0, classes)


@requires_tensorflow
def test_huge_inputs_get_finite_answers_as_in_keras(exported):
    """Pixels of 1e22 give conv outputs whose squares overflow float32, if not scaled."""
    model, path, run = exported
    x = model_images(model, 3) * 1e22
    outputs = model(x, training=False)
    scores = keras.ops.convert_to_numpy(outputs["probabilities"])
    served = run(path, x)
    assert np.all(np.isfinite(scores)) and np.all(np.isfinite(served["probabilities"]))
    np.testing.assert_allclose(served["probabilities"], scores, atol=1e-4)


@requires_tensorflow
@pytest.mark.parametrize("gain", [1e23, 1e24])
def test_larger_inputs_get_finite_answers_and_the_classes_of_keras(exported, gain):
    """Up to 1e24 the answers stay finite and within the tolerance the export holds them to.

    EM routing turns such inputs into saturated capsules, whose answers
    amplify the runtimes' different rounding (to 2e-4); the classes must agree
    wherever Keras's top two probabilities are further apart than twice that
    tolerance.
    """
    model, path, run = exported
    x = model_images(model, 3) * np.float32(gain)
    outputs = model(x, training=False)
    scores = keras.ops.convert_to_numpy(outputs["probabilities"])
    served = run(path, x)
    assert np.all(np.isfinite(scores)) and np.all(np.isfinite(served["probabilities"]))
    np.testing.assert_allclose(served["probabilities"], scores, atol=VERIFY_TOLERANCE)
    top_two = np.sort(scores, axis=-1)[:, -2:]
    clear = top_two[:, 1] - top_two[:, 0] > 2 * VERIFY_TOLERANCE
    np.testing.assert_array_equal(served["classes"][clear], scores.argmax(-1)[clear])


@requires_tensorflow
@pytest.mark.parametrize("format_name", sorted(FORMATS))
def test_the_files_take_any_size_and_colour(format_name, tmp_path):
    needs(format_name)
    export, suffix, run, _, _ = FORMATS[format_name]
    model = MODELS["capsnet_mnist"]()
    path = export(model, str(tmp_path / f"m{suffix}"), verbose=False)
    for shape in ((40, 36, 3), (28, 28, 4), (17, 19, 1)):
        photos = images(2, shape, seed=sum(shape))
        np.testing.assert_allclose(
            run(path, photos)["probabilities"],
            model.predict(photos, verbose=0)["probabilities"],
            atol=1e-4,
            err_msg=str(shape),
        )


@requires_tensorflow
def test_onnx_runtime_refuses_a_wrong_image_size_where_the_model_takes_one(tmp_path):
    needs("onnx")
    import onnxruntime

    model = _softmax_model()
    path = export_onnx(model, str(tmp_path / "m.onnx"), spec=SPEC, verbose=False)
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    (images_input,) = session.get_inputs()
    assert images_input.name == "images" and images_input.shape[1:] == [8, 8, 1]
    with pytest.raises(Exception, match="Got invalid dimensions for input: images"):
        session.run(None, {"images": np.zeros((2, 9, 8, 1), "float32")})


@requires_tensorflow
@pytest.mark.parametrize("format_name", sorted(FORMATS))
def test_logits_are_exported_as_their_softmax(format_name, tmp_path):
    needs(format_name)
    export, suffix, run, _, _ = FORMATS[format_name]
    inputs = keras.Input((8, 8, 1))
    model = keras.Model(inputs, keras.layers.Dense(3)(keras.layers.Flatten()(inputs)))
    with pytest.raises(ValueError, match="output_kind='logits'"):
        export(model, str(tmp_path / f"refused{suffix}"), spec=SPEC, verbose=False)
    path = export(
        model, str(tmp_path / f"m{suffix}"), spec=SPEC, verbose=False, output_kind="logits"
    )
    x = images(4, (8, 8, 1))
    served = run(path, x)
    assert "poses" not in served
    expected = keras.ops.convert_to_numpy(keras.ops.softmax(model.predict(x, verbose=0)))
    np.testing.assert_allclose(served["probabilities"], expected, atol=1e-5)


@requires_tensorflow
@pytest.mark.parametrize("format_name", sorted(FORMATS))
def test_unconvertible_operations_are_named(format_name, tmp_path):
    import tensorflow as tf

    needs(format_name, runtime=False)
    export, suffix, _, _, _ = FORMATS[format_name]
    inputs = keras.Input((8, 8, 1))
    scores = keras.layers.Dense(3, activation="sigmoid")(keras.layers.Flatten()(inputs))
    # The regularised lower incomplete gamma function: in [0, 1], in neither format.
    model = keras.Model(inputs, keras.layers.Lambda(lambda s: tf.math.igamma(s + 1, s + 1))(scores))
    with pytest.raises(ValueError, match=r"operations of the model.*: Igamma\.$"):
        export(model, str(tmp_path / f"m{suffix}"), spec=SPEC, verbose=False)
    assert not list(tmp_path.iterdir())  # nothing written


@requires_tensorflow
def test_litert_names_a_mixed_precision_policy_and_the_way_out(tmp_path):
    needs("litert", runtime=False)
    model = applications.CapsNetMNIST(
        conv_filters=8, primary_capsule_types=2, decoder_units=None, dtype="mixed_bfloat16"
    )
    with pytest.raises(
        ValueError,
        match=r"do not take bfloat16.*mixed_bfloat16.*float32 copy: .*float32_copy\(model\), "
        r"or `keras-capsules export --float32`",
    ):
        export_litert(model, str(tmp_path / "m.tflite"), verbose=False)
    assert not list(tmp_path.iterdir())


@requires_tensorflow
def test_export_command_writes_a_float32_copy_of_a_mixed_precision_model(tmp_path):
    """`--float32`: the LiteRT file of a mixed_bfloat16 model, answering as it does in float32."""
    from keras_capsules import cli
    from keras_capsules.serving import float32_copy

    needs("litert")
    keras.utils.set_random_seed(7)
    model = applications.EfficientCapsNet(
        conv_filters=(8, 8, 8, 32),
        primary_capsule_types=4,
        decoder_units=None,
        dtype="mixed_bfloat16",
    )
    model.save(str(tmp_path / "m.keras"))
    output = str(tmp_path / "m.tflite")
    with pytest.raises(SystemExit, match=r"float32 copy: .*keras-capsules export --float32"):
        cli.main(["export", str(tmp_path / "m.keras"), output, "--format", "litert"])
    command = ["export", str(tmp_path / "m.keras"), output, "--format", "litert", "--float32"]
    assert cli.main(command) == 0
    copy = float32_copy(model)
    assert copy.dtype_policy.name == "float32" and copy is not model
    x = images(3, (28, 28, 1))
    answered = run_litert(output, x)["probabilities"]
    np.testing.assert_allclose(
        answered, copy.predict(x, verbose=0)["probabilities"], atol=VERIFY_TOLERANCE
    )
    # The copy computes what the mixed-precision model rounds: its answers, to bfloat16's precision.
    np.testing.assert_allclose(answered, model.predict(x, verbose=0)["probabilities"], atol=0.05)


@requires_tensorflow
def test_onnx_computes_expm1_to_float32_precision(tmp_path):
    """tf2onnx has no Expm1: the export spells it in ONNX without exp(x) - 1's cancellation."""
    needs("onnx")
    inputs = keras.Input((8, 8, 1))
    tiny = keras.initializers.RandomUniform(0, 1e-8, seed=0)  # scores of about 1e-6
    z = keras.layers.Dense(3, activation="relu", kernel_initializer=tiny)(
        keras.layers.Flatten()(inputs)
    )
    model = keras.Model(inputs, keras.layers.Lambda(lambda z: -keras.ops.expm1(-z))(z))
    x = images(4, (8, 8, 1))
    served = run_onnx(export_onnx(model, str(tmp_path / "m.onnx"), spec=SPEC, verbose=False), x)
    expected = model.predict(x, verbose=0)
    assert 1e-7 < expected.min() and expected.max() < 1e-4
    # 1 - exp(-z) in float32 would be off by up to percents at these sizes.
    np.testing.assert_allclose(served["probabilities"], expected, rtol=1e-5)


@requires_tensorflow
def test_arguments_are_checked_before_anything_is_converted(tmp_path):
    model = MODELS["capsnet_mnist"]()
    with pytest.raises(ValueError, match=r"must end in '\.onnx'"):
        export_onnx(model, str(tmp_path / "m.tflite"))
    with pytest.raises(ValueError, match=r"must end in '\.tflite'"):
        export_litert(model, str(tmp_path / "m"))
    with pytest.raises(ValueError, match="output_kind"):
        export_litert(model, str(tmp_path / "m.tflite"), output_kind="scores")


@requires_tensorflow
def test_a_missing_converter_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tf2onnx", None)  # as if not installed
    monkeypatch.setitem(sys.modules, "tf2onnx.convert", None)
    with pytest.raises(ImportError, match=r'pip install "keras-capsules\[onnx\]"'):
        export_onnx(MODELS["capsnet_mnist"](), str(tmp_path / "m.onnx"))


@requires_tensorflow
def test_exports_trace_the_routings_without_their_training_gradient():
    """The structured gradients' custom-gradient ops stay out of an exported graph."""
    import tensorflow as tf

    def custom_gradient_ops(function, *specs):
        graph = tf.function(function, autograph=False).get_concrete_function(*specs).graph
        return [op for op in graph.get_operations() if op.type == "IdentityN"]

    def dynamic(votes, gradient):
        return routing.dynamic_routing(votes, iterations=3, gradient=gradient)

    def em(votes, gradient):
        activations = tf.fill((votes.shape[0], votes.shape[2]), 0.5)
        beta = tf.zeros(votes.shape[1])
        # em_routing takes no `gradient`: "auto", the structured one on TensorFlow.
        return routing.em_routing(votes, activations, beta, beta, iterations=2)

    rng = np.random.default_rng(0)
    votes = tf.constant(rng.normal(size=(2, 6, 3, 4)), tf.float32)
    cases = [(dynamic, votes, "auto"), (dynamic, votes, "structured")]
    cases.append((em, tf.constant(rng.normal(size=(2, 6, 3, 16)), tf.float32), "auto"))
    for route, votes, gradient in cases:

        def function(v, route=route, gradient=gradient):
            return route(v, gradient)

        spec = tf.TensorSpec(votes.shape, tf.float32)
        assert custom_gradient_ops(function, spec)  # the training path
        with inference_only():
            assert not custom_gradient_ops(function, spec)
            plain = tf.function(function, autograph=False)(votes)
        for value, expected in zip(plain, function(votes), strict=True):
            np.testing.assert_allclose(value, expected, atol=1e-6)  # the same values


RUN_WITHOUT_TENSORFLOW = """
import importlib.abc, json, sys

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("tensorflow", "keras", "keras_capsules", "applications"):
            raise ImportError(f"blocked: {{name}}")

sys.meta_path.insert(0, Block())
import numpy as np

x = np.load({images!r})
{run}
print(json.dumps(np.asarray(probabilities).tolist()))
"""

RUNTIME_SCRIPTS = {
    "onnx": """
import onnxruntime
session = onnxruntime.InferenceSession({path!r}, providers=["CPUExecutionProvider"])
probabilities = session.run(["probabilities"], {{"images": x}})[0]
""",
    "litert": """
from ai_edge_litert.interpreter import Interpreter
runner = Interpreter(model_path={path!r}).get_signature_runner("serving_default")
probabilities = runner(images=x)["probabilities"]
""",
}


@requires_tensorflow
def test_runtimes_need_neither_tensorflow_nor_keras_capsules(exported, file_format, tmp_path):
    model, path, _ = exported
    x = model_images(model, 3)
    np.save(tmp_path / "x.npy", x)
    run = RUNTIME_SCRIPTS[file_format].format(path=path)
    script = RUN_WITHOUT_TENSORFLOW.format(images=str(tmp_path / "x.npy"), run=run)
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        cwd=str(tmp_path),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    probabilities = np.array(json.loads(result.stdout.strip().splitlines()[-1]))
    np.testing.assert_allclose(
        probabilities, model.predict(x, verbose=0)["probabilities"], atol=1e-4
    )


@pytest.mark.skipif(BACKEND == "tensorflow", reason="tests the error on other backends")
def test_other_backends_are_told_how_to_export(tmp_path):
    model = MODELS["capsnet_mnist"]()
    for export, name in ((export_onnx, "m.onnx"), (export_litert, "m.tflite")):
        with pytest.raises(RuntimeError, match="KERAS_BACKEND=tensorflow"):
            export(model, str(tmp_path / name))


@requires_tensorflow
@pytest.mark.parametrize("format_name", sorted(FORMATS))
def test_export_command_writes_the_file(format_name, tmp_path):
    from keras_capsules import cli

    needs(format_name)
    _, suffix, run, _, _ = FORMATS[format_name]
    model = MODELS["capsnet_mnist"]()
    model.save(str(tmp_path / "m.keras"))
    output = str(tmp_path / f"capsnet{suffix}")
    assert cli.main(["export", str(tmp_path / "m.keras"), output, "--format", format_name]) == 0
    x = images(2, (28, 28, 1))
    np.testing.assert_allclose(
        run(output, x)["probabilities"], model.predict(x, verbose=0)["probabilities"], atol=1e-4
    )


def test_export_command_refuses_what_a_file_format_cannot_take(tmp_path, capsys):
    from keras_capsules import cli

    model_path = str(tmp_path / "missing.keras")  # refused before the model is read
    with pytest.raises(SystemExit, match=r"ends in \.onnx; got .*capsnet$"):
        cli.main(["export", model_path, str(tmp_path / "capsnet"), "--format", "onnx"])
    with pytest.raises(SystemExit, match="--version numbers SavedModel folders"):
        cli.main(["export", model_path, "m.tflite", "--format", "litert", "--version", "2"])
    with pytest.raises(SystemExit) as error:
        cli.main(["export", model_path, "m.tflite", "--format", "tflite"])
    assert error.value.code == 2 and "invalid choice: 'tflite'" in capsys.readouterr().err
    # Where the file cannot go: one line naming the path, before the model is read.
    missing = str(tmp_path / "nodir" / "x.onnx")
    with pytest.raises(SystemExit, match=rf"the folder of {re.escape(missing)} does not exist"):
        cli.main(["export", model_path, missing, "--format", "onnx"])
    (tmp_path / "x.onnx").mkdir()
    with pytest.raises(SystemExit, match=r"x\.onnx is a folder; a onnx export is one file"):
        cli.main(["export", model_path, str(tmp_path / "x.onnx"), "--format", "onnx"])
    (tmp_path / "afile").write_text("")
    with pytest.raises(SystemExit, match=r"afile is a file, not a folder"):
        cli.main(["export", model_path, str(tmp_path / "afile")])
    if os.geteuid() != 0:  # root writes anywhere
        (tmp_path / "readonly").mkdir(mode=0o555)
        with pytest.raises(SystemExit, match=r"^keras-capsules export: cannot write to .*readonly"):
            cli.main(
                ["export", model_path, str(tmp_path / "readonly" / "m.onnx"), "--format", "onnx"]
            )


def _softmax_model():
    inputs = keras.Input((8, 8, 1))
    scores = keras.layers.Dense(3, activation="softmax")(keras.layers.Flatten()(inputs))
    return keras.Model(inputs, scores)


@requires_tensorflow
@pytest.mark.parametrize("format_name", sorted(FORMATS))
@pytest.mark.parametrize("failure", ["does not run", "other probabilities"])
def test_a_file_its_runtime_does_not_reproduce_is_not_written(
    format_name, failure, tmp_path, monkeypatch
):
    from keras_capsules.serving import portable

    needs(format_name)
    export, suffix, _, _, _ = FORMATS[format_name]
    runner = {"onnx": "_run_onnx", "litert": "_run_litert"}[format_name]
    real = getattr(portable, runner)

    def broken(path, images):
        if failure == "does not run":
            raise RuntimeError("[ONNXRuntimeError] : 1 : FAIL : Load model failed\nmore")
        answer = real(path, images)
        return {**answer, "probabilities": answer["probabilities"] + 0.01}

    monkeypatch.setattr(portable, runner, broken)
    message = {
        "does not run": r"does not run in .*so it was not written: \[ONNXRuntimeError\].*failed$",
        "other probabilities": r"other probabilities .* 4 probe images \(8, 8, 1\) \(up to 0.01",
    }[failure]
    with pytest.raises(ValueError, match=message):
        export(_softmax_model(), str(tmp_path / f"m{suffix}"), spec=SPEC, verbose=False)
    assert not list(tmp_path.iterdir())  # nothing written, no temporary left


@requires_tensorflow
def test_a_bfloat16_model_onnx_runtime_cannot_load_is_refused(tmp_path):
    needs("onnx")
    model = applications.EfficientCapsNet(
        conv_filters=(8, 8, 8, 32), primary_capsule_types=4, dtype="mixed_bfloat16"
    )
    with pytest.raises(ValueError, match=r"does not run in ONNX Runtime, so it was not written"):
        export_onnx(model, str(tmp_path / "m.onnx"), verbose=False)
    assert not list(tmp_path.iterdir())


class _Traced:
    """A stand-in for the traced serving function: probabilities of the probes' mean pixel."""

    def __init__(self, gain):
        self.gain = gain

    def __call__(self, images):
        mean = np.asarray(images, "float64").mean(axis=(1, 2, 3))[:, None]
        return {
            "probabilities": (0.5 + 0.4 * np.sin(self.gain * mean + np.arange(3))).astype("float32")
        }


@pytest.mark.parametrize(
    "gain, offset, accepted",
    [
        (0.0, 4e-3, False),  # an insensitive model: 1e-3 holds
        (30.0, 3e-3, True),  # moved ~1.5e-3 by a change of 1e-6: three times that holds
        (30.0, 5e-2, False),  # never beyond SENSITIVE_TOLERANCE
    ],
)
def test_the_file_is_held_to_the_models_own_sensitivity(gain, offset, accepted):
    from keras_capsules.serving import portable

    model = keras.Sequential([keras.Input((4, 4, 1)), keras.layers.Flatten()])
    function = _Traced(gain)

    def run(path, images):
        return {"probabilities": function(images)["probabilities"] + offset}

    if accepted:
        portable._verify(model, SMALL_SPEC, function, "file", "litert", run)
    else:
        with pytest.raises(ValueError, match="answers other probabilities"):
            portable._verify(model, SMALL_SPEC, function, "file", "litert", run)

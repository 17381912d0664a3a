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
from keras_capsules import layers
from keras_capsules import ops as capsule_ops
from keras_capsules.layers import ImageConverter
from keras_capsules.serving import ServingSpec
from keras_capsules.serving import export_saved_model
from keras_capsules.serving import latest_version_dir
from tests.conftest import BACKEND
from tests.conftest import requires_tensorflow

SMALL = dict(conv_filters=16, primary_capsule_types=4, capsule_dim=8, decoder_units=(32,))
# One EM iteration: the serving contract does not depend on routing, and each
# iteration adds seconds to every trace (test_matrix_capsnet_norb exports two).
TINY_EM = dict(
    A=8,
    B=2,
    C=3,
    D=2,
    iterations=1,
    input_shape=(20, 20, 2),
    num_classes=3,
    image_converter=ImageConverter(),
)


SPEC = ServingSpec(image_shape=(8, 8, 1))
"""The spec of the small functional models below: one output, the class scores."""


def images(n, shape=(28, 28, 1), seed=0):
    return np.random.default_rng(seed).integers(0, 256, (n,) + shape).astype("float32")


@pytest.fixture(scope="module")
def capsnet_export(tmp_path_factory):
    """A small CapsNetMNIST, its exported version directory and some images."""
    if BACKEND != "tensorflow":
        pytest.skip("SavedModel export is the TensorFlow part")
    keras.utils.set_random_seed(7)
    model = applications.CapsNetMNIST(**SMALL)
    base = str(tmp_path_factory.mktemp("export") / "capsnet")
    return model, export_saved_model(model, base, verbose=False), images(6)


def signatures(path):
    import tensorflow as tf

    return tf.saved_model.load(path).signatures


@requires_tensorflow
def test_versioned_layout(capsnet_export, tmp_path):
    model, path, _ = capsnet_export
    base = os.path.dirname(path)
    assert os.path.basename(path) == "1"
    assert os.path.isfile(os.path.join(path, "saved_model.pb"))
    second = export_saved_model(model, base, verbose=False)
    assert os.path.basename(second) == "2" and latest_version_dir(base) == second
    assert latest_version_dir(path) == path  # a SavedModel itself is served as is
    with pytest.raises(FileExistsError, match="Version 2 already exists"):
        export_saved_model(model, base, version=2, verbose=False)
    with pytest.raises(ValueError, match="`version`"):
        export_saved_model(model, base, version=0, verbose=False)
    with pytest.raises(FileNotFoundError, match="No SavedModel"):
        latest_version_dir(str(tmp_path))


@requires_tensorflow
def test_serving_default_reproduces_the_keras_model(capsnet_export):
    import tensorflow as tf

    model, path, x = capsnet_export
    served = signatures(path)["serving_default"](images=tf.constant(x))
    expected = model.predict(x, verbose=0)
    assert set(served) == {"probabilities", "classes", "labels", "poses"}
    np.testing.assert_allclose(served["probabilities"], expected["probabilities"], atol=1e-5)
    np.testing.assert_allclose(served["poses"], expected["poses"], atol=1e-5)
    assert served["classes"].dtype == tf.int64
    np.testing.assert_array_equal(served["classes"], expected["probabilities"].argmax(-1))
    # CapsNetMNIST's classes are the digits: each label is the class's name.
    labels = [model.class_names[c] for c in expected["probabilities"].argmax(-1)]
    assert [label.decode() for label in served["labels"].numpy()] == labels


@requires_tensorflow
def test_reconstruction_signatures(capsnet_export):
    import tensorflow as tf

    model, path, x = capsnet_export
    found = signatures(path)
    served = found["reconstruct"](images=tf.constant(x))
    np.testing.assert_allclose(served["reconstructions"], model.reconstruct(x), atol=1e-5)
    labels = np.array([3, 1, 4, 1, 5, 9])
    chosen = found["reconstruct_capsule"](images=tf.constant(x), capsules=tf.constant(labels))
    np.testing.assert_allclose(
        chosen["reconstructions"], model.reconstruct(x, labels=labels), atol=1e-5
    )
    # Other capsules than the longest give other images (untrained: close to 0.5).
    assert np.abs(chosen["reconstructions"] - served["reconstructions"]).max() > 1e-5
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"class indices in \[0, 10\)"):
        found["reconstruct_capsule"](
            images=tf.constant(x), capsules=tf.constant([0, 1, 2, 3, 4, 10], tf.int64)
        )
    with pytest.raises(tf.errors.InvalidArgumentError, match="one class index per image"):
        found["reconstruct_capsule"](images=tf.constant(x), capsules=tf.constant([0, 1], tf.int64))


@requires_tensorflow
@pytest.mark.parametrize(
    "shape, message",
    [
        ((2, 28, 28), r"with 1 or 3 or 4 channels; received shape\] \[2 28 28\]"),
        ((2, 32, 32, 2), r"with 1 or 3 or 4 channels; received shape\] \[2 32 32 2\]"),
        ((2, 0, 32, 1), r"received shape\] \[2 0 32 1\]"),
        ((28, 28, 1), r"received shape\] \[28 28 1\]"),
    ],
)
def test_wrong_shapes_fail_in_the_graph_naming_the_expected_shape(capsnet_export, shape, message):
    import tensorflow as tf

    _, path, _ = capsnet_export
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        signatures(path)["serving_default"](images=tf.zeros(shape))


@requires_tensorflow
def test_any_size_and_colour_is_answered_as_the_model_answers_it(capsnet_export):
    import tensorflow as tf

    model, path, _ = capsnet_export
    serving_default = signatures(path)["serving_default"]
    photos = images(3, (45, 33, 3), seed=2)
    served = serving_default(images=tf.constant(photos))
    np.testing.assert_allclose(
        served["probabilities"], model.predict(photos, verbose=0)["probabilities"], atol=1e-5
    )
    rgba = np.concatenate([photos, np.full_like(photos[..., :1], 255)], axis=-1)
    np.testing.assert_allclose(
        serving_default(images=tf.constant(rgba))["probabilities"],
        served["probabilities"],
        atol=1e-6,
    )


@requires_tensorflow
def test_nan_pixels_are_refused(capsnet_export):
    import tensorflow as tf

    _, path, x = capsnet_export
    x = x.copy()
    x[2, 5, 5, 0] = np.nan
    with pytest.raises(tf.errors.InvalidArgumentError, match="NaN or infinite pixels"):
        signatures(path)["serving_default"](images=tf.constant(x))


@requires_tensorflow
def test_tfsm_layer_reproduces_the_keras_model(capsnet_export):
    model, path, x = capsnet_export
    layer = keras.layers.TFSMLayer(path, call_endpoint="serving_default")
    served = layer(x)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(served["probabilities"]),
        model.predict(x, verbose=0)["probabilities"],
        atol=1e-5,
    )


@requires_tensorflow
def test_saved_model_cli_shows_and_runs_it(capsnet_export, tmp_path):
    model, path, x = capsnet_export
    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    np.save(tmp_path / "x.npy", x[:2])
    commands = {
        "show": [cli, "show", "--dir", path, "--all"],
        "run": [cli, "run", "--dir", path, "--tag_set", "serve"]
        + ["--signature_def", "serving_default", "--inputs", f"images={tmp_path / 'x.npy'}"]
        + ["--outdir", str(tmp_path / "out")],
    }
    # Both at once: each spends seconds importing TensorFlow, on one core.
    processes = {
        name: subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for name, command in commands.items()
    }
    outputs = {name: process.communicate() for name, process in processes.items()}
    for name, process in processes.items():
        assert process.returncode == 0, f"saved_model_cli {name}: {outputs[name][1][-2000:]}"
    for name in ("serving_default", "reconstruct", "reconstruct_capsule", "probabilities"):
        assert name in outputs["show"][0]
    probabilities = np.load(tmp_path / "out" / "probabilities.npy")
    np.testing.assert_allclose(
        probabilities, model.predict(x[:2], verbose=0)["probabilities"], atol=1e-5
    )


@requires_tensorflow
def test_loads_without_keras_capsules(capsnet_export, tmp_path):
    """A process that cannot import keras_capsules (nor applications) serves the export."""
    model, path, x = capsnet_export
    np.save(tmp_path / "x.npy", x)
    script = textwrap.dedent(
        f"""
        import importlib.abc, json, sys

        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("keras_capsules", "applications"):
                    raise ImportError(f"blocked: {{name}}")

        sys.meta_path.insert(0, Block())
        import numpy as np
        import tensorflow as tf

        loaded = tf.saved_model.load({path!r})
        x = tf.constant(np.load({str(tmp_path / "x.npy")!r}))
        out = loaded.signatures["serving_default"](images=x)
        assert "keras_capsules" not in sys.modules
        print(json.dumps(out["probabilities"].numpy().tolist()))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=str(tmp_path)
    )
    assert result.returncode == 0, result.stderr[-2000:]
    probabilities = np.array(json.loads(result.stdout.strip().splitlines()[-1]))
    np.testing.assert_allclose(
        probabilities, model.predict(x, verbose=0)["probabilities"], atol=1e-5
    )


@requires_tensorflow
def test_matrix_capsnet_norb_contract(tmp_path):
    import tensorflow as tf

    model = applications.MatrixCapsNet(**TINY_EM)
    x = np.random.default_rng(3).normal(size=(5, 20, 20, 2)).astype("float32")
    found = signatures(export_saved_model(model, str(tmp_path / "norb"), verbose=False))
    assert set(found) == {"serving_default"}  # no decoder, no reconstruction signature
    served = found["serving_default"](images=tf.constant(x))
    expected = model.predict(x, verbose=0)
    np.testing.assert_allclose(served["probabilities"], expected["probabilities"], atol=1e-5)
    np.testing.assert_allclose(served["poses"], expected["poses"], atol=1e-5)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"with 2 channels"):
        found["serving_default"](images=tf.zeros((1, 20, 20, 1)))
    larger = np.random.default_rng(4).normal(size=(2, 30, 26, 2)).astype("float32")
    np.testing.assert_allclose(
        found["serving_default"](images=tf.constant(larger))["probabilities"],
        model.predict(larger, verbose=0)["probabilities"],
        atol=1e-5,
    )


@requires_tensorflow
def test_efficient_capsnet_contract(efficient_capsnet_export):
    """CapsNetMNIST's contract: the same signatures, outputs and checks in the graph."""
    import tensorflow as tf

    model, path, x = efficient_capsnet_export
    found = signatures(path)
    assert set(found) == {"serving_default", "reconstruct", "reconstruct_capsule"}
    served = found["serving_default"](images=tf.constant(x))
    expected = {k: v.numpy() for k, v in model(x, training=False).items()}  # no predict trace
    assert set(served) == {"probabilities", "classes", "labels", "poses"}
    np.testing.assert_allclose(served["probabilities"], expected["probabilities"], atol=1e-5)
    np.testing.assert_allclose(served["poses"], expected["poses"], atol=1e-5)
    np.testing.assert_array_equal(served["classes"], expected["probabilities"].argmax(-1))
    reconstructed = found["reconstruct"](images=tf.constant(x))["reconstructions"]
    np.testing.assert_allclose(reconstructed, model.decode(expected["poses"]), atol=1e-5)
    labels = np.array([3, 1, 4, 1])
    chosen = found["reconstruct_capsule"](images=tf.constant(x), capsules=tf.constant(labels))
    np.testing.assert_allclose(
        chosen["reconstructions"], model.decode(expected["poses"], labels=labels), atol=1e-5
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"with 1 or 3 or 4 channels"):
        found["serving_default"](images=tf.zeros((1, 32, 32, 2)))
    x = x.copy()
    x[1, 5, 5, 0] = np.nan
    with pytest.raises(tf.errors.InvalidArgumentError, match="NaN or infinite pixels"):
        found["serving_default"](images=tf.constant(x))


@requires_tensorflow
def test_models_built_from_layers(tmp_path):
    """A spec says where the outputs are: a dict's keys, a list's indices."""
    import tensorflow as tf

    inputs = keras.Input((12, 12, 1))
    x = keras.layers.Conv2D(8, 3, activation="relu")(inputs)
    capsules = layers.CapsuleLayer(4, 6)(layers.PrimaryCapsule(2, 4, 3, strides=2)(x))
    lengths = layers.Length()(capsules)
    vector_model = keras.Model(inputs, {"probabilities": lengths, "poses": capsules})
    spec = ServingSpec(image_shape=(12, 12, 1), scores="probabilities", poses="poses")
    x = images(3, (12, 12, 1))
    path = export_saved_model(vector_model, str(tmp_path / "v"), spec=spec, verbose=False)
    served = signatures(path)["serving_default"](images=tf.constant(x))
    expected = vector_model.predict(x, verbose=0)
    np.testing.assert_allclose(served["poses"], expected["poses"], atol=1e-5)
    # The length is `ops.length`: sqrt(|v|^2 + epsilon), finite at zero.
    lengths = np.sqrt(np.sum(np.square(expected["poses"]), axis=-1) + capsule_ops.EPSILON)
    np.testing.assert_allclose(served["probabilities"], lengths, atol=1e-5)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"shape \(batch, 12, 12, 1\)"):
        signatures(path)["serving_default"](images=tf.zeros((1, 14, 12, 1)))  # one size only

    inputs = keras.Input((8, 8, 1))
    poses, activations = layers.PrimaryMatrixCapsule(2)(keras.layers.Conv2D(4, 1)(inputs))
    outputs = layers.ClassMatrixCapsule(3, iterations=1)([poses, activations])
    matrix_model = keras.Model(inputs, outputs)
    x = images(2, (8, 8, 1))
    spec = ServingSpec(image_shape=(8, 8, 1), scores=1, poses=0)
    path = export_saved_model(matrix_model, str(tmp_path / "m"), spec=spec, verbose=False)
    served = signatures(path)["serving_default"](images=tf.constant(x))
    expected_poses, expected_activations = matrix_model.predict(x, verbose=0)
    np.testing.assert_allclose(served["probabilities"], expected_activations, atol=1e-5)
    np.testing.assert_allclose(served["poses"], expected_poses, atol=1e-5)


@requires_tensorflow
def test_unservable_models_are_refused_with_a_reason(tmp_path):
    inputs = keras.Input((8, 8, 1))
    scores = keras.layers.Dense(3, activation="softmax")(keras.layers.Flatten()(inputs))
    model = keras.Model(inputs, {"scores": scores})
    with pytest.raises(ValueError, match=r"declares no serving spec: .*spec=keras_capsules"):
        export_saved_model(model, str(tmp_path / "none"), verbose=False)
    with pytest.raises(ValueError, match=r"several outputs: say which are the class scores"):
        export_saved_model(model, str(tmp_path / "which"), spec=SPEC, verbose=False)
    spec = ServingSpec(image_shape=(8, 8, 1), scores="probabilities")
    with pytest.raises(ValueError, match=r"no 'probabilities' for `scores`; they are \['scores'\]"):
        export_saved_model(model, str(tmp_path / "key"), spec=spec, verbose=False)
    with pytest.raises(ValueError, match="must be a keras_capsules.serving.ServingSpec"):
        export_saved_model(model, str(tmp_path / "dict"), spec={"image_shape": (8, 8, 1)})
    assert not os.listdir(tmp_path)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"image_shape": (8, 8)}, "image_shape"),
        ({"image_shape": (8, 0, 1)}, "image_shape"),
        ({"image_shape": (8, 8, 1), "scores": 1.5}, "scores"),
        ({"image_shape": (8, 8, 1), "pixel_range": (255, 0)}, "pixel_range"),
        ({"image_shape": (8, 8, 1), "mask": layers.Mask()}, "decoder` and `mask"),
    ],
)
def test_a_serving_spec_refuses_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ServingSpec(**kwargs)


@requires_tensorflow
def test_logits_are_refused_as_probabilities_and_served_as_their_softmax(tmp_path):
    import tensorflow as tf

    inputs = keras.Input((8, 8, 1))
    logits = keras.layers.Dense(3)(keras.layers.Flatten()(inputs))
    model = keras.Model(inputs, logits)
    with pytest.raises(ValueError, match="output_kind='logits'"):
        export_saved_model(model, str(tmp_path / "refused"), spec=SPEC, verbose=False)
    assert not os.path.exists(tmp_path / "refused")
    path = export_saved_model(
        model, str(tmp_path / "logits"), spec=SPEC, verbose=False, output_kind="logits"
    )
    x = images(4, (8, 8, 1))
    served = signatures(path)["serving_default"](images=tf.constant(x))
    expected = keras.ops.convert_to_numpy(keras.ops.softmax(model.predict(x, verbose=0)))
    np.testing.assert_allclose(served["probabilities"], expected, atol=1e-6)
    with pytest.raises(ValueError, match="output_kind"):
        export_saved_model(model, str(tmp_path / "x"), verbose=False, output_kind="scores")


def overflowing_model():
    """Softmax of a dense layer whose scores overflow to inf for pixels of 1e10."""
    inputs = keras.Input((8, 8, 1))
    dense = keras.layers.Dense(3, kernel_initializer=keras.initializers.Constant(1e30))
    return keras.Model(inputs, keras.layers.Softmax()(dense(keras.layers.Flatten()(inputs))))


@requires_tensorflow
def test_outputs_that_are_not_finite_fail_in_the_graph(tmp_path):
    import tensorflow as tf

    path = export_saved_model(overflowing_model(), str(tmp_path / "m"), spec=SPEC, verbose=False)
    serving_default = signatures(path)["serving_default"]
    assert np.all(
        np.isfinite(serving_default(images=tf.constant(images(2, (8, 8, 1))))["probabilities"])
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match="out of the range"):
        serving_default(images=tf.constant(np.full((1, 8, 8, 1), 1e10, "float32")))


@pytest.mark.skipif(BACKEND == "tensorflow", reason="tests the error on other backends")
def test_other_backends_are_told_how_to_export(tmp_path):
    model = applications.CapsNetMNIST(**SMALL)
    with pytest.raises(RuntimeError, match="KERAS_BACKEND=tensorflow"):
        export_saved_model(model, str(tmp_path / "x"))


@requires_tensorflow
@pytest.mark.parametrize("failure", ["does not load", "other probabilities"])
def test_a_saved_model_that_does_not_reproduce_the_model_is_not_written(
    tmp_path, monkeypatch, failure
):
    from keras_capsules.serving import export

    real = export._load

    def load(tf, path):
        if failure == "does not load":
            raise OSError("SavedModel file does not exist at: " + path)
        loaded = real(tf, path)
        serving = loaded.signatures["serving_default"]

        class Shifted:
            def __call__(self, **inputs):
                answer = dict(serving(**inputs))
                answer["probabilities"] = answer["probabilities"] + 0.01
                return answer

        return type("Loaded", (), {"signatures": {"serving_default": Shifted()}})()

    monkeypatch.setattr(export, "_load", load)
    inputs = keras.Input((8, 8, 1))
    model = keras.Model(
        inputs, keras.layers.Dense(3, activation="softmax")(keras.layers.Flatten()(inputs))
    )
    with pytest.raises(ValueError, match=rf"SavedModel .*{failure}.*not written"):
        export_saved_model(model, str(tmp_path / "m"), spec=SPEC, verbose=False)
    assert not os.path.exists(tmp_path / "m")  # no version, no temporary, no folder made for it


def _shifted_load(monkeypatch, shift):
    """Make the export's check load a SavedModel whose probabilities are `shift(probabilities)`."""
    from keras_capsules.serving import export

    real = export._load

    def load(tf, path):
        serving = real(tf, path).signatures["serving_default"]

        def shifted(**inputs):
            answer = dict(serving(**inputs))
            answer["probabilities"] = shift(answer["probabilities"])
            return answer

        return type("Loaded", (), {"signatures": {"serving_default": shifted}})()

    monkeypatch.setattr(export, "_load", load)


@requires_tensorflow
def test_a_saved_model_as_far_from_keras_as_em_routing_rounds_is_written(tmp_path, monkeypatch):
    """The shipped EM model's SavedModel lies 9.6e-4 from Keras, no class changed: written.

    Grappler's rewrites of the graph round float32 otherwise than Keras; EM
    routing amplifies that. A SavedModel 1e-5 from Keras was refused before.
    """
    _shifted_load(monkeypatch, lambda probabilities: probabilities + 9.6e-4)
    model = applications.MatrixCapsNet(**TINY_EM)
    path = export_saved_model(model, str(tmp_path / "em"), verbose=False)
    assert os.path.isfile(os.path.join(path, "saved_model.pb"))


@requires_tensorflow
def test_a_saved_model_beyond_the_tolerance_names_how_far_and_is_not_written(tmp_path, monkeypatch):
    _shifted_load(monkeypatch, lambda probabilities: probabilities + 3e-3)
    model = applications.MatrixCapsNet(**TINY_EM)
    with pytest.raises(
        ValueError,
        match=r"SavedModel answers other probabilities than the Keras model on 4 probe images "
        r"\(20, 20, 2\) \(up to 0\.003 apart, beyond 0\.001\), so it was not written\.$",
    ):
        export_saved_model(model, str(tmp_path / "em"), verbose=False)
    assert not os.path.exists(tmp_path / "em")


@pytest.mark.parametrize(
    "expected, answered, message",
    [
        # Within 1e-3 of each other, but the clear winner (by 1.5e-3) lost: refused.
        ([[0.5, 0.4985, 0.0]], [[0.4992, 0.4993, 0.0]], "the class of 1 of 1 changed"),
        # A tie at the model's precision (5e-4 apart) may go either way.
        ([[0.5, 0.4995, 0.0]], [[0.4996, 0.4999, 0.0]], None),
        ([[0.5, 0.2, 0.3]], [[0.5, 0.2, 0.3]], None),
        ([[0.5, 0.2, 0.3]], [[0.5, 0.2, 0.31]], r"up to 0\.01 apart, beyond 0\.001$"),
        ([[0.5, 0.2, 0.3]], [[0.5, 0.2]], r"shape \(1, 2\) against \(1, 3\)"),
        ([[0.5, 0.2, 0.3]], [[np.nan, 0.2, 0.3]], r"up to nan apart"),
    ],
)
def test_an_export_agrees_within_the_tolerance_and_with_the_same_classes(
    expected, answered, message
):
    from keras_capsules.serving.export import disagreement

    found = disagreement(np.array(expected), np.array(answered), 1e-3)
    if message is None:
        assert found is None
    else:
        assert found is not None and re.search(message, found), found

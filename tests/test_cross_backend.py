"""A model trained on JAX or PyTorch, saved as `.keras`, serves from TensorFlow.

Training runs in subprocesses (a process has one Keras backend); loading, the
comparison and the SavedModel export run in this TensorFlow test process.
"""

import importlib.util
import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

import applications  # noqa: F401  (registers the models that `load_model` rebuilds)
from tests.conftest import BACKEND

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TRAIN = """
import json
import sys

import keras
import numpy as np

import applications

data, output = np.load(sys.argv[1]), sys.argv[2]
keras.utils.set_random_seed(0)
model = applications.CapsNetMNIST(
    conv_filters=16, primary_capsule_types=4, capsule_dim=8, decoder_units=(32,)
)
history = model.fit(data["x_train"], data["y_train"], batch_size=50, epochs=1, verbose=0)
model.save(output + "/model.keras")
np.save(output + "/predictions.npy", model.predict(data["x_test"], verbose=0)["probabilities"])
info = {"backend": keras.backend.backend(), "steps": int(model.optimizer.iterations)}
info["loss"] = float(history.history["loss"][-1])
json.dump(info, open(output + "/info.json", "w"))
"""

TRAINED_ON = ["torch", "jax"]  # the quicker first: its checks overlap the other run


@pytest.fixture(scope="module")
def trained(mnist_data, tmp_path_factory):
    """Start training on PyTorch and JAX at once; map each backend to its output folder."""
    (x_train, y_train), (x_test, _) = mnist_data
    root = tmp_path_factory.mktemp("cross_backend")
    data = str(root / "data.npz")
    images = lambda x: x[..., None].astype("float32")  # noqa: E731
    np.savez(data, x_train=images(x_train[:300]), y_train=y_train[:300], x_test=images(x_test[:16]))
    runs = {}
    for backend in TRAINED_ON:
        if backend == "torch" and importlib.util.find_spec("torch") is None:
            continue
        output = root / backend
        output.mkdir()
        env = dict(os.environ, KERAS_BACKEND=backend)
        # Real images: XLA's optimised code runs these steps in a fifth of the time
        # that the code of the suite's unoptimised compiles (tests/conftest.py) takes.
        env["XLA_FLAGS"] = env.get("XLA_FLAGS", "").replace(
            "--xla_backend_optimization_level=0", "--xla_backend_optimization_level=1"
        )
        process = subprocess.Popen(
            [sys.executable, "-c", TRAIN, data, str(output)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        runs[backend] = (process, output)
    yield runs, data
    for process, _ in runs.values():
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.mark.skipif(BACKEND != "tensorflow", reason="loads and exports on TensorFlow")
@pytest.mark.parametrize("trained_on", TRAINED_ON)
def test_model_trained_elsewhere_loads_and_exports_on_tensorflow(trained, trained_on, tmp_path):
    import tensorflow as tf

    from keras_capsules.serving import export_saved_model

    runs, data = trained
    if trained_on not in runs:
        pytest.skip(f"{trained_on} is not installed")
    process, output = runs[trained_on]
    log, _ = process.communicate(timeout=300)
    assert process.returncode == 0, log
    info = json.load(open(output / "info.json"))
    assert info["backend"] == trained_on and info["steps"] == 6, info
    assert np.isfinite(info["loss"]), info
    expected = np.load(output / "predictions.npy")
    x_test = np.load(data)["x_test"]
    assert expected.shape == (16, 10) and np.all((expected >= 0) & (expected <= 1))

    model = keras.saving.load_model(str(output / "model.keras"))
    np.testing.assert_allclose(
        model.predict(x_test, verbose=0)["probabilities"], expected, atol=1e-5
    )

    path = export_saved_model(model, str(tmp_path / "savedmodel"), verbose=False)
    serving = tf.saved_model.load(path).signatures["serving_default"]
    assert list(serving.structured_input_signature[1]) == ["images"]
    served = serving(images=tf.constant(x_test))
    assert "probabilities" in served
    np.testing.assert_allclose(served["probabilities"].numpy(), expected, atol=1e-5)

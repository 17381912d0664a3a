"""keras_capsules on JAX where TensorFlow cannot be imported (as the GPU machines run it)."""

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Run once per model, `sys.argv[1]` naming it: both processes start at once, so
# that one compiles while the other does (JAX compiles on one core).
SCRIPT = textwrap.dedent(
    """
    import importlib.abc
    import json
    import os
    import sys

    BLOCKED = ("tensorflow", "tensorflow_datasets", "tf_keras")


    class NoTensorFlow(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)


    sys.meta_path.insert(0, NoTensorFlow())
    os.environ["KERAS_BACKEND"] = "jax"
    try:
        import tensorflow  # noqa: F401
        blocked = False
    except ImportError:
        blocked = True

    import keras

    import applications
    import keras_capsules
    from keras_capsules.datasets import mnist

    (x, y), _ = mnist.load_data()
    x, y = x[:16], y[:16]  # one step of each model
    report = {
        "blocked": blocked,
        "backend": keras.backend.backend(),
        "version": keras_capsules.__version__,
    }
    if sys.argv[1] == "capsnet":
        model = applications.CapsNetMNIST(
            conv_filters=8, primary_capsule_types=2, capsule_dim=4, decoder_units=(16,)
        )
        model.compile(optimizer="adam")
        report["losses"] = model.fit(x, y, batch_size=16, verbose=0).history["loss"]
        report["probabilities"] = model.predict(x[:2], verbose=0)["probabilities"].tolist()
        try:
            mnist.training_pipeline(x, y, batch_size=16)
            report["pipeline_error"] = None
        except ImportError as error:
            report["pipeline_error"] = str(error)
    else:
        model = applications.MatrixCapsNet(
            A=4, B=2, C=2, D=2, iterations=2, input_shape=(28, 28, 1), num_classes=10,
        )
        report["losses"] = model.fit(x, y, batch_size=16, verbose=0).history["loss"]
    report["tensorflow_modules"] = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
    print(json.dumps(report))
    """
)


def _start(model):
    return subprocess.Popen(
        [sys.executable, "-c", SCRIPT, model],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": ROOT},
    )


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="needs JAX")
def test_jax_user_without_tensorflow_loads_mnist_and_fits_both_papers_models():
    processes = {model: _start(model) for model in ("capsnet", "em")}
    reports = {}
    try:
        for model, process in processes.items():
            stdout, stderr = process.communicate(timeout=600)
            assert process.returncode == 0, f"{model}: {stderr[-3000:]}"
            reports[model] = json.loads(stdout.strip().splitlines()[-1])
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
                process.wait()
    for model, report in reports.items():
        assert report["blocked"], f"{model}: the import blocker let TensorFlow through"
        assert report["backend"] == "jax"
        assert report["tensorflow_modules"] == [], model
        losses = report["losses"]
        assert len(losses) == 1 and 0 < losses[0] < 1e3, (model, losses)
    probabilities = reports["capsnet"]["probabilities"]
    assert len(probabilities) == 2 and all(len(p) == 10 for p in probabilities)
    # What needs TensorFlow says which extra installs it, instead of a ModuleNotFoundError.
    error = reports["capsnet"]["pipeline_error"]
    assert 'pip install "keras-capsules[tensorflow-cpu]"' in error
    assert "mnist.training_pipeline" in error

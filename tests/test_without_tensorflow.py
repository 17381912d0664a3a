"""keras_capsules on JAX where TensorFlow cannot be imported (as the GPU machines run it)."""

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

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
    x, y = x[:64], y[:64]
    capsnet = applications.CapsNetMNIST(conv_filters=16, primary_capsule_types=4)
    capsnet.compile(optimizer="adam")
    capsnet_loss = capsnet.fit(x, y, batch_size=32, epochs=1, verbose=0).history["loss"]
    em = applications.MatrixCapsNetNORB(
        A=8, B=4, C=4, D=4, input_shape=(28, 28, 1), num_classes=10, rescale=1 / 255
    )
    em_loss = em.fit(x, y, batch_size=32, epochs=1, verbose=0).history["loss"]
    try:
        mnist.training_pipeline(x, y, batch_size=32)
        pipeline_error = None
    except ImportError as error:
        pipeline_error = str(error)
    print(json.dumps({
        "blocked": blocked,
        "backend": keras.backend.backend(),
        "version": keras_capsules.__version__,
        "losses": capsnet_loss + em_loss,
        "probabilities": capsnet.predict(x[:2], verbose=0).tolist(),
        "pipeline_error": pipeline_error,
        "tensorflow_modules": sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED),
    }))
    """
)


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="needs JAX")
def test_jax_user_without_tensorflow_loads_mnist_and_fits_both_papers_models():
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": ROOT},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["blocked"], "the import blocker let TensorFlow through"
    assert report["backend"] == "jax"
    assert report["tensorflow_modules"] == []
    assert len(report["losses"]) == 2 and all(0 < loss < 1e3 for loss in report["losses"])
    probabilities = report["probabilities"]
    assert len(probabilities) == 2 and all(len(p) == 10 for p in probabilities)
    # What needs TensorFlow says which extra installs it, instead of a ModuleNotFoundError.
    assert 'pip install "keras-capsules[tensorflow-cpu]"' in report["pipeline_error"]
    assert "mnist.training_pipeline" in report["pipeline_error"]

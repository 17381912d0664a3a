"""`experiments/presets.py`: a smoke run split over two starts, then its preset."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from keras_capsules.datasets import mnist

_SCRIPT = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    "experiments",
    "presets.py",
)


def _run(*args):
    return subprocess.run(
        [sys.executable, _SCRIPT, "efficient_capsnet_mnist", "--smoke", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "KERAS_BACKEND": "tensorflow"},
        timeout=600,
    )


@pytest.mark.slow
def test_smoke_run_resumes_and_writes_a_preset(tmp_path):
    runs, preset = str(tmp_path / "runs"), str(tmp_path / "preset")
    first = _run("--runs-dir", runs, "--output", preset, "--minutes", "0.001")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout.splitlines()[-1])["epochs_done"] == 1
    assert not os.path.exists(preset)

    second = _run("--runs-dir", runs, "--output", preset)
    assert second.returncode == 0, second.stderr
    assert "resuming efficient_capsnet_mnist after epoch 1" in second.stderr
    result = json.loads(second.stdout.splitlines()[-1])
    assert result["epochs_done"] == 2 and result["output"] == preset

    with open(os.path.join(preset, "metadata.json")) as f:
        metadata = json.load(f)
    assert [record["epoch"] for record in metadata["history"]] == [1, 2]
    assert len(metadata["sessions"]) == 2
    assert metadata["data"]["sha256"] == mnist.FILES
    assert metadata["data"]["test_images"] == 500
    assert metadata["test_accuracy"] == result["test_accuracy"]

    import applications

    model = applications.EfficientCapsNet.from_preset(preset)
    (_, _), (x_test, _) = mnist.load_data()
    probabilities = model.predict(x_test[:4, ..., None], verbose=0)
    assert probabilities.shape == (4, 10) and np.all(np.isfinite(probabilities))


def test_refuses_a_run_folder_of_another_recipe(tmp_path):
    folder = tmp_path / "runs" / "efficient_capsnet_mnist"
    folder.mkdir(parents=True)
    (folder / "recipe.json").write_text(json.dumps({"name": "efficient_capsnet_mnist"}))
    refused = _run("--runs-dir", str(tmp_path / "runs"))
    assert refused.returncode != 0
    assert "holds a run of another recipe" in refused.stderr
    assert "--fresh" in refused.stderr

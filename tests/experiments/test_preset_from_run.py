"""`experiments/preset_from_run.py`: a `keras-capsules train` run shipped as a preset.

The preset records the run's learning curve, the command that trains it again
and the test accuracy `keras-capsules evaluate` then measures on it.
"""

import json
import os
import subprocess
import sys

from keras_capsules import cli
from tests.conftest import requires_tensorflow

pytestmark = requires_tensorflow

_SCRIPT = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    "experiments",
    "preset_from_run.py",
)
SMALL = ["--train-size", "64", "--test-size", "48", "--batch-size", "16", "--seed", "3"]


def test_a_multimnist_run_becomes_a_preset_evaluate_agrees_with(tmp_path, capsys):
    run, preset = str(tmp_path / "run"), str(tmp_path / "preset")
    args = ["train", "efficient-capsnet", "--data", "multimnist", "--epochs", "2", *SMALL]
    assert cli.main([*args, "--verbose", "2", "--output", run]) == 0
    log = tmp_path / "run.log"
    log.write_text(capsys.readouterr().out)
    done = subprocess.run(
        [sys.executable, _SCRIPT, run, "tiny_multimnist", "--log", str(log), "--output", preset],
        capture_output=True,
        text=True,
        env={**os.environ, "KERAS_BACKEND": "tensorflow"},
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    metadata = json.load(open(os.path.join(preset, "metadata.json")))
    assert metadata["class_name"] == "EfficientCapsNetMultiMNIST"
    assert metadata["data"]["name"] == "multimnist" and metadata["data"]["test_images"] == 10_000
    assert metadata["command"] == (
        "keras-capsules train efficient-capsnet --data multimnist --epochs 2 --train-size 64 "
        "--batch-size 16 --seed 3 --output runs/tiny_multimnist"
    )
    assert metadata["epochs"] == 2 and metadata["examples_seen"] == 128
    curve = [row["val_multimnist_accuracy"] for row in metadata["history"]]
    assert len(curve) == 2 and all("seconds" in row for row in metadata["history"])
    assert metadata["train_wall_seconds"] == sum(row["seconds"] for row in metadata["history"])
    capsys.readouterr()
    assert cli.main(["evaluate", "--preset", preset, "--batch-size", "500"]) == 0
    out = capsys.readouterr().out
    assert f"MultiMNIST accuracy: {metadata['test_accuracy']:.4f} (10000 pairs" in out


def test_a_run_without_a_finished_epoch_is_refused(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"options": {}, "data": {}}))
    (run / "history.csv").write_text("")
    done = subprocess.run(
        [sys.executable, _SCRIPT, str(run), "x"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 1 and "has no finished epoch yet" in done.stderr
    assert "Traceback" not in done.stderr

"""`experiments/preset_curves.py`: one figure per preset, a run drawn only while it goes on."""

import importlib.util
import json
import os

import pytest

_SCRIPT = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    "experiments",
    "preset_curves.py",
)


@pytest.fixture
def curves():
    spec = importlib.util.spec_from_file_location("_preset_curves_script", _SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _history(epochs):
    epochs = range(1, epochs + 1)
    return [{"epoch": e, "loss": 1 / e, "test_accuracy": 0.9 + e / 1000} for e in epochs]


def _write(path, value):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(value, f)


def _run(runs, name, done, epochs):
    _write(str(runs / name / "recipe.json"), {"epochs": epochs})
    _write(str(runs / name / "progress.json"), {"epochs_done": done, "history": _history(done)})


def test_an_unfinished_run_is_drawn_and_a_finished_one_is_not(curves, tmp_path):
    runs = tmp_path / "runs"
    _run(runs, "going", done=3, epochs=5)
    _run(runs, "finished", done=5, epochs=5)
    assert [e["epoch"] for e in curves._unfinished_run(str(runs), "going")] == [1, 2, 3]
    assert curves._unfinished_run(str(runs), "finished") == []
    assert curves._unfinished_run(str(runs), "never_started") == []


def test_one_png_per_preset_with_metadata(curves, tmp_path, capsys):
    presets = tmp_path / "presets"
    _write(str(presets / "capsnet_mnist" / "metadata.json"), {"history": _history(4)})
    _write(str(presets / "no_metadata" / "config.json"), {})
    _run(tmp_path / "runs", "capsnet_mnist", done=2, epochs=4)
    out = tmp_path / "out"
    curves.main(
        ["--presets-dir", str(presets), "--runs-dir", str(tmp_path / "runs"), "--output", str(out)]
    )
    assert sorted(os.listdir(out)) == ["capsnet_mnist.png"]
    with open(out / "capsnet_mnist.png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert json.loads(capsys.readouterr().out)["figures"] == [str(out / "capsnet_mnist.png")]

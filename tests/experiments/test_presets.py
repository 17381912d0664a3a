"""`experiments/presets.py`: a smoke run split over two starts, then its preset."""

import dataclasses
import importlib.util
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


@pytest.fixture
def presets(monkeypatch):
    """The script as a module (its folder on `sys.path`, for `_training`)."""
    monkeypatch.syspath_prepend(os.path.dirname(_SCRIPT))
    spec = importlib.util.spec_from_file_location("_presets_script", _SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
    probabilities = model.predict(x_test[:4, ..., None], verbose=0)["probabilities"]
    assert probabilities.shape == (4, 10) and np.all(np.isfinite(probabilities))


@pytest.mark.slow
def test_a_mixed_precision_run_writes_a_float32_preset(tmp_path):
    runs = tmp_path / "runs"
    ran = _run("--runs-dir", str(runs), "--precision", "mixed_bfloat16")
    assert ran.returncode == 0, ran.stderr
    preset = runs / "efficient_capsnet_mnist-mixed_bfloat16" / "preset"
    assert json.loads(ran.stdout.splitlines()[-1])["output"] == str(preset)
    with open(preset / "metadata.json") as f:
        metadata = json.load(f)
    assert metadata["precision"] == "mixed_bfloat16"
    assert metadata["recipe"]["precision"] == "mixed_bfloat16"
    assert "--precision mixed_bfloat16" in metadata["command"]
    assert 0.0 <= metadata["test_accuracy_trained_precision"] <= 1.0

    import applications

    model = applications.EfficientCapsNet.from_preset(str(preset))
    assert {layer.dtype_policy.name for layer in model._flatten_layers()} == {"float32"}


def test_refuses_a_run_folder_of_another_recipe(tmp_path):
    folder = tmp_path / "runs" / "efficient_capsnet_mnist"
    folder.mkdir(parents=True)
    (folder / "recipe.json").write_text(json.dumps({"name": "efficient_capsnet_mnist"}))
    refused = _run("--runs-dir", str(tmp_path / "runs"))
    assert refused.returncode != 0
    assert "holds a run of another recipe" in refused.stderr
    assert "--fresh" in refused.stderr


def test_shifts_move_each_image_by_up_to_two_pixels(presets):
    rng = np.random.default_rng(0)
    images = np.zeros((200, 12, 10), np.uint8)
    images[:, 2:-2, 2:-2] = rng.integers(1, 256, (200, 8, 6))
    shifted = presets._shifted(images, 2, np.random.default_rng(7))
    assert shifted.shape == images.shape and shifted.dtype == np.uint8

    # Reference: the same draws, each image copied to its place on a zero canvas.
    starts = np.random.default_rng(7).integers(0, 5, size=(200, 2))
    seen = set()
    for image, moved, (row, column) in zip(images, shifted, starts):
        down, right = 2 - row, 2 - column
        expected = np.zeros_like(image)
        expected[2 + down : 10 + down, 2 + right : 8 + right] = image[2:-2, 2:-2]
        np.testing.assert_array_equal(moved, expected)
        seen.add((down, right))
    assert seen == {(a, b) for a in range(-2, 3) for b in range(-2, 3)}


def test_another_seed_trains_in_its_own_folder(presets, tmp_path):
    assert presets.recipe_for("capsnet_mnist")["seed"] == 0
    assert presets._run_name(presets.recipe_for("capsnet_mnist")) == "capsnet_mnist"
    recipe = presets.recipe_for("capsnet_mnist", seed=2)
    assert recipe["seed"] == 2 and recipe["name"] == "capsnet_mnist"
    assert presets._run_name(recipe) == "capsnet_mnist-seed2"
    with pytest.raises(SystemExit, match="--seed"):
        presets.recipe_for("capsnet_mnist", seed=-1)
    mixed = presets.recipe_for("capsnet_mnist", seed=2, precision="mixed_bfloat16")
    assert presets._run_name(mixed) == "capsnet_mnist-seed2-mixed_bfloat16"

    args = presets.parse_args(["capsnet_mnist", "--seed", "2", "--runs-dir", str(tmp_path)])
    folder, progress = presets._open_run(args, recipe)
    assert folder == str(tmp_path / "capsnet_mnist-seed2") and progress["epochs_done"] == 0
    with open(os.path.join(folder, "recipe.json")) as f:
        assert json.load(f)["seed"] == 2


def test_a_recipe_with_a_start_begins_after_its_preset(presets, tmp_path):
    from applications._weights_file import sha256

    recipe = presets.recipe_for("em_capsnet_mnist")
    args = presets.parse_args(["em_capsnet_mnist", "--runs-dir", str(tmp_path)])
    folder, progress = presets._open_run(args, recipe)

    # The preset the recipe names, as of its commit, counts as the run's first epochs.
    start = os.path.join(folder, "start")
    assert sha256(os.path.join(start, "model.weights.h5")) == recipe["start"]["weights_sha256"]
    with open(os.path.join(start, "metadata.json")) as f:
        held = json.load(f)
    assert progress["epochs_done"] == held["epochs"] == progress["start"]["epochs"]
    assert [r["epoch"] for r in progress["history"]] == list(range(1, held["epochs"] + 1))
    assert progress["train_seconds"] == held["train_seconds"]
    assert progress["start"]["recipe"] == held["recipe"]
    assert 0 < progress["epochs_done"] < recipe["epochs"]

    # Weights that are not the recipe's start are refused, not trained further.
    with open(os.path.join(start, "model.weights.h5"), "r+b") as f:
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last[0] ^ 1]))
    with pytest.raises(SystemExit, match="not the recipe's start"):
        presets._start_preset(recipe, folder)

    # It trains the start's seed only; a smoke run trains one epoch after the start.
    with pytest.raises(SystemExit, match="--seed"):
        presets.recipe_for("em_capsnet_mnist", seed=1)
    assert presets.recipe_for("em_capsnet_mnist", smoke=True)["epochs"] == held["epochs"] + 1


@pytest.mark.slow
def test_a_smoke_run_trains_the_start_preset_further(tmp_path):
    runs = tmp_path / "runs"
    done = subprocess.run(
        [sys.executable, _SCRIPT, "em_capsnet_mnist", "--smoke", "--runs-dir", str(runs)],
        capture_output=True,
        text=True,
        env={**os.environ, "KERAS_BACKEND": "tensorflow"},
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert "starting em_capsnet_mnist after epoch 10 from the preset" in done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    preset = str(runs / "em_capsnet_mnist" / "preset")
    assert result["epochs_done"] == 11 and result["output"] == preset

    with open(os.path.join(preset, "metadata.json")) as f:
        metadata = json.load(f)
    assert [record["epoch"] for record in metadata["history"]] == list(range(1, 12))
    assert metadata["start"]["epochs"] == 10
    # From the trained preset, one epoch of 600 images keeps it accurate; from
    # untrained weights it would be far from this.
    assert metadata["test_accuracy_float32"] > 0.95


@pytest.mark.parametrize("name", ["capsnet_mnist", "efficient_capsnet_mnist", "em_capsnet_mnist"])
def test_each_preset_trains_with_its_class_recipe_as_it_varies_it(presets, name):
    """The training recipe is the class's RECIPE varied by the preset's, and is how the
    shipped preset was trained (its metadata's batch size and learning rate)."""
    import applications

    recipe = presets.RECIPES[name]
    own = presets.training_recipe(recipe)
    assert own == dataclasses.replace(
        getattr(applications, recipe["model"]).RECIPE, **recipe.get("recipe", {})
    )
    with open(os.path.join(applications._preset.PRESETS_DIR, name, "metadata.json")) as f:
        shipped = json.load(f)["recipe"]
    assert own.batch_size == shipped["batch_size"]
    assert own.learning_rate == shipped["arguments"]["learning_rate"]
    assert own.decay_rate == shipped["arguments"]["decay_rate"]
    if "spread_margin" in shipped:
        assert list(own.spread_margin) == shipped["spread_margin"]

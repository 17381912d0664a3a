"""`train ARCH --data multimnist` and `evaluate --data multimnist`: the paper's protocol.

Pairs are drawn on the fly from the MNIST training digits (an epoch: one pass,
each digit the base of one pair); a resumed run reads on from the pass where
it stopped; the test set is the fixed, seeded one `evaluate` measures too.
"""

import argparse
import json
import os

import numpy as np
import pytest

from keras_capsules import cli
from keras_capsules.cli import _train_data
from keras_capsules.datasets import multimnist
from tests.conftest import requires_tensorflow

pytestmark = requires_tensorflow

SMALL = ["--train-size", "64", "--test-size", "48", "--batch-size", "16", "--seed", "3"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    output = str(tmp_path_factory.mktemp("multimnist") / "run")
    args = ["train", "efficient-capsnet", "--data", "multimnist", "--epochs", "2", *SMALL]
    assert cli.main([*args, "--verbose", "0", "--output", output]) == 0
    return output


def _arguments(**values):
    defaults = dict(data_dir=None, train_size=64, test_size=48, epochs=3, seed=3)
    return argparse.Namespace(**{**defaults, **values, "data": "multimnist"})


def _labels(dataset):
    return np.concatenate([batch["labels"].numpy() for batch in dataset])


def test_each_epoch_reads_the_next_pass_and_a_resume_reads_on(mnist_data):
    args = _arguments()
    train, test, per_epoch, tests, spec = _train_data.multimnist_datasets(args, 16)
    assert (per_epoch, tests, spec["steps_per_epoch"]) == (64, 48, 4)
    assert spec["input_shape"] == (36, 36, 1) and spec["metric"] == "multimnist_accuracy"
    (x_train, y_train), _ = mnist_data
    stream = multimnist.test_set(x_train[:64], y_train[:64], pairs_per_digit=3, seed=3)
    everything = _labels(train)
    np.testing.assert_array_equal(everything, stream["labels"])  # pass after pass
    resumed = _labels(_train_data.multimnist_datasets(args, 16, initial_epoch=2)[0])
    np.testing.assert_array_equal(resumed, stream["labels"][128:])
    # The test set: one pair per MNIST test digit, seeded, the same for every run.
    pairs = np.concatenate([batch["labels"].numpy() for batch in test])
    _, (x_test, y_test) = mnist_data
    fixed = multimnist.test_set(x_test, y_test, pairs_per_digit=1, seed=1)
    np.testing.assert_array_equal(pairs, fixed["labels"][:48])


def test_a_run_tests_after_every_epoch_and_records_the_curve(trained):
    metrics = json.load(open(os.path.join(trained, "metrics.json")))
    assert metrics["train_images"] == 64 and metrics["test_images"] == 48
    rows = open(os.path.join(trained, "history.csv")).read().splitlines()
    header = rows[0].split(",")
    assert "val_multimnist_accuracy" in header and len(rows) == 3  # the learning curve
    last = float(rows[-1].split(",")[header.index("val_multimnist_accuracy")])
    assert metrics["test_accuracy"] == pytest.approx(last)
    assert metrics["test_loss"] < float(rows[1].split(",")[header.index("val_loss")])
    options = json.load(open(os.path.join(trained, "run.json")))["options"]
    assert options["data"] == "multimnist" and options["batch_size"] == 16


def test_a_resumed_run_starts_after_the_epochs_its_backup_holds(tmp_path):
    import h5py

    from keras_capsules.cli import _training

    backup = tmp_path / "backup"
    assert _training.backup_epoch(str(backup)) == 0  # no backup: from the start
    backup.mkdir()
    with h5py.File(backup / "latest.weights.h5", "w"):
        pass
    (backup / "training_metadata.json").write_text(json.dumps({"epoch": 7, "batch": -1}))
    assert _training.backup_epoch(str(backup)) == 7


def test_evaluate_measures_the_same_test_set(trained, capsys):
    model = os.path.join(trained, "model.keras")
    metrics = json.load(open(os.path.join(trained, "metrics.json")))
    assert cli.main(["evaluate", model, "--test-size", "48"]) == 0  # implied by the model
    out = capsys.readouterr().out
    assert f"MultiMNIST accuracy: {metrics['test_accuracy']:.4f} (48 pairs" in out
    assert "CapsNet (Sabour et al. 2017) 5.2%" in out and "8.1%" in out


def test_capsnet_trains_the_papers_multimnist_network(tmp_path, capsys):
    output = str(tmp_path / "run")
    tiny = ["--conv-filters", "8", "--primary-capsule-types", "2", "--train-size", "32"]
    args = ["train", "capsnet", "--data", "multimnist", *tiny, "--test-size", "16"]
    assert cli.main([*args, "--batch-size", "16", "--verbose", "0", "--output", output]) == 0
    assert "(16 pairs: both digits right)" in capsys.readouterr().out
    from keras_capsules.cli._model import load_model

    model = load_model(os.path.join(output, "model.keras"))
    assert type(model).__name__ == "CapsNetMultiMNIST" and model.image_shape == (36, 36, 1)


def test_architectures_without_a_multimnist_network_say_so(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        cli.main(["train", "matrix-capsnet", "--data", "multimnist", "--output", str(tmp_path)])
    message = str(stopped.value)
    assert "--data multimnist needs an architecture with a network for it" in message
    assert "capsnet, efficient-capsnet" in message
    with pytest.raises(SystemExit) as stopped:
        cli.main(["train", "capsnet", "--data", "multimnist", "--max-shift", "2"])
    assert "--max-shift needs --data mnist or fashion-mnist" in str(stopped.value)


def test_the_shipped_preset_evaluates_to_its_recorded_accuracy(capsys):
    import applications

    name = "efficient_capsnet_multimnist"
    metadata = applications.preset_metadata(name)
    assert cli.main(["evaluate", "--preset", name, "--batch-size", "500"]) == 0
    out = capsys.readouterr().out
    assert f"MultiMNIST accuracy: {metadata['test_accuracy']:.4f} (10000 pairs" in out
    assert metadata["data"] == {**metadata["data"], "name": "multimnist", "test_images": 10_000}
    curve = [row["test_accuracy"] for row in metadata["history"]]
    assert len(curve) == metadata["epochs"]
    assert curve[-1] == pytest.approx(metadata["test_accuracy"], abs=5e-4)


def test_evaluate_refuses_multimnist_for_a_one_digit_model(tmp_path):
    with pytest.raises(SystemExit) as stopped:
        cli.main(["evaluate", "--preset", "capsnet_mnist", "--data", "multimnist"])
    assert "--data multimnist needs a MultiMNIST network" in str(stopped.value)

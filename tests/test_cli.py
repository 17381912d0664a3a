import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from keras_capsules import cli
from keras_capsules.cli import _model
from keras_capsules.cli import _training
from keras_capsules.cli import argument_types
from tests.conftest import BACKEND
from tests.conftest import requires_tensorflow

TINY = [
    "--train-size",
    "300",
    "--test-size",
    "200",
    "--conv-filters",
    "16",
    "--primary-capsule-types",
    "4",
    "--batch-size",
    "50",
    "--verbose",
    "2",
]


def run_cli(args, **kwargs):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)  # the command's own default
    return subprocess.Popen(
        [sys.executable, "-m", "keras_capsules.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        **kwargs,
    )


def epochs_logged(output):
    path = os.path.join(output, "history.csv")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [int(row["epoch"]) for row in csv.DictReader(f)]


def history_rows(output):
    path = os.path.join(output, "history.csv")
    with open(path) as f:
        return {int(row["epoch"]): row for row in csv.DictReader(f)}


def test_killed_run_resumes_without_losing_finished_epochs(tmp_path, capsys):
    output = str(tmp_path / "run")
    args = ["train", "capsnet", "--epochs", "4", "--output", output, *TINY]
    process = run_cli(args)
    deadline = time.time() + 300
    while len(epochs_logged(output)) < 2 and process.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    assert process.poll() is None, process.stdout.read()
    process.send_signal(signal.SIGKILL)  # killed in the third epoch or later, no clean-up
    process.wait()
    before = history_rows(output)
    assert sorted(before)[:2] == [0, 1] and len(before) < 4

    process = run_cli(args)
    log, _ = process.communicate(timeout=300)
    assert process.returncode == 0, log
    assert "Resuming" in log
    match = re.search(r"Resumed at epoch (\d+)", log)
    assert match, log
    restored = int(match.group(1)) - 1  # epochs the backup held
    # The backup is saved right after an epoch's row is written: at most the
    # epoch the kill interrupted there is trained again.
    assert len(before) - 1 <= restored <= len(before), (sorted(before), restored)
    after = history_rows(output)
    assert epochs_logged(output) == [0, 1, 2, 3]  # every epoch once, in order
    for epoch in range(restored):  # the restored epochs were not trained again
        assert after[epoch] == before[epoch]
    metrics = json.load(open(os.path.join(output, "metrics.json")))
    assert 0 <= metrics["test_accuracy"] <= 1 and metrics["test_images"] == 200
    assert "Test accuracy:" in log
    # Neither TensorFlow's info logs nor AutoGraph's warning about the pipeline's import.
    assert "cpu_feature_guard" not in log and "could not transform" not in log, log

    # In this process: the two runs above start the command's own process.
    assert cli.main(["evaluate", os.path.join(output, "model.keras"), "--test-size", "100"]) == 0
    assert "Test accuracy:" in capsys.readouterr().out


@requires_tensorflow
def test_export_command(tmp_path):
    import keras
    import tensorflow as tf

    import applications

    model = applications.CapsNetMNIST(conv_filters=16, primary_capsule_types=4)
    model.save(str(tmp_path / "m.keras"))
    assert cli.main(["export", str(tmp_path / "m.keras"), str(tmp_path / "sm")]) == 0
    assert cli.main(["export", str(tmp_path / "m.keras"), str(tmp_path / "sm")]) == 0
    assert sorted(os.listdir(tmp_path / "sm")) == ["1", "2"]  # TF Serving's versions
    with pytest.raises(SystemExit, match="already exists"):
        cli.main(["export", str(tmp_path / "m.keras"), str(tmp_path / "sm"), "--version", "2"])
    x = np.random.default_rng(0).uniform(0, 255, (3, 28, 28, 1)).astype("float32")
    reloaded = tf.saved_model.load(str(tmp_path / "sm" / "2"))
    served = reloaded.signatures["serving_default"](images=tf.constant(x))
    np.testing.assert_allclose(
        served["probabilities"].numpy(),
        keras.saving.load_model(str(tmp_path / "m.keras")).predict(x, verbose=0)["probabilities"],
        atol=1e-5,
    )


def test_serve_reports_a_missing_model(tmp_path):
    with pytest.raises(SystemExit, match="No SavedModel"):
        cli.main(["serve", str(tmp_path)])


def test_bad_arguments_are_usage_errors(tmp_path, capsys):
    with pytest.raises(SystemExit) as error:
        cli.main(["train", "capsnet", "--epochs", "0", "--output", str(tmp_path)])
    assert error.value.code == 2 and "--epochs" in capsys.readouterr().err
    for option in ("--learning-rate", "--inverse-temperature", "--variance-epsilon"):
        for bad in ("-1", "0", "nan", "inf"):
            with pytest.raises(SystemExit) as error:
                cli.main(["train", "matrix-capsnet", option, bad])
            assert error.value.code == 2 and option in capsys.readouterr().err
    for bad in ("0", "0.1,-1", "soft", "inf", "nan"):
        with pytest.raises(SystemExit) as error:
            cli.main(["train", "matrix-capsnet", "--tempering", bad])
        assert error.value.code == 2 and "--tempering" in capsys.readouterr().err
    assert argument_types.tempering("0.1,0.5") == [0.1, 0.5]
    assert argument_types.tempering("1") == 1.0
    # One tau per E-step: 3 iterations have 2. Refused before anything is written.
    output = tmp_path / "em"
    with pytest.raises(SystemExit, match=r"`tempering` must be .* one per E-step \(2 for 3"):
        cli.main(["train", "matrix-capsnet", "--tempering", "0.1,0.2,0.3", "--output", str(output)])
    assert not output.exists()
    with pytest.raises(SystemExit, match="no model"):
        cli.main(["evaluate", str(tmp_path / "missing.keras")])
    for option, bad in (("--seed", "-1"), ("--conv-filters", "0"), ("--max-shift", "-1")):
        with pytest.raises(SystemExit) as error:
            cli.main(["train", "capsnet", option, bad, "--output", str(output)])
        assert error.value.code == 2 and option in capsys.readouterr().err
    with pytest.raises(SystemExit, match="--max-shift must be at most 7"):
        cli.main(["train", "capsnet", "--max-shift", "100", "--output", str(output)])
    a_file = tmp_path / "a-file"
    a_file.write_text("kept")
    with pytest.raises(SystemExit, match="--output .*a-file is a file"):
        cli.main(["train", "capsnet", "--output", str(a_file)])
    assert a_file.read_text() == "kept" and not output.exists()


EM_TINY = ["-A", "8", "-B", "2", "-C", "2", "-D", "2", "--iterations", "2", "--verbose", "0"]


def test_train_matrix_capsnet_mnist(tmp_path, monkeypatch):
    from keras_capsules.routing import EMSettings

    made = []
    post_init = EMSettings.__post_init__
    monkeypatch.setattr(EMSettings, "__post_init__", lambda self: made.append(post_init(self)))
    output = str(tmp_path / "em")
    args = ["train", "matrix-capsnet", "--output", output, "--train-size", "64"]
    em_options = ["--variance-epsilon", "0.01", "--tempering", "0.3"]
    em_options += ["--normalization", "positions", "--inverse-temperature-schedule", "authors"]
    assert cli.main(args + ["--test-size", "32", *em_options, *EM_TINY]) == 0
    assert len(made) == 1  # the options' settings, checked once and shared by every layer
    metrics = json.load(open(os.path.join(output, "metrics.json")))
    saved = _model.load_model(os.path.join(output, "model.keras"))
    conv_caps2 = saved.backbone.get_layer("conv_caps2")
    assert conv_caps2.variance_epsilon == 0.01
    assert (conv_caps2.tempering, conv_caps2.normalization) == (0.3, "positions")
    assert saved.get_layer("class_caps").inverse_temperature_schedule == "authors"
    assert metrics["model"] == "matrix-capsnet" and metrics["batch_size"] == 32
    assert metrics["train_images"] == 64 and 0 <= metrics["test_accuracy"] <= 1
    assert metrics["train_steps_this_session"] == 2 and metrics["nonfinite_loss_steps"] == 0
    assert cli.main(["evaluate", os.path.join(output, "model.keras"), "--test-size", "32"]) == 0


@pytest.mark.skipif(BACKEND != "torch", reason="PyTorch runs one step per call")
def test_train_refuses_several_steps_per_call_on_torch(tmp_path):
    args = ["train", "capsnet", "--output", str(tmp_path), "--steps-per-execution", "2"]
    with pytest.raises(SystemExit, match="--steps-per-execution must be 1 on the PyTorch"):
        cli.main(args)


def test_train_matrix_capsnet_norb_on_official_files(tmp_path, capsys):
    from keras_capsules.datasets import smallnorb
    from tests.datasets.test_smallnorb import make_split
    from tests.datasets.test_smallnorb import write_matrix

    rng = np.random.default_rng(0)
    data_dir = tmp_path / "norb"
    data_dir.mkdir()
    for split, n in (("train", 12), ("test", 6)):
        for kind, array in zip(("dat", "cat", "info"), make_split(rng, n)):
            write_matrix(
                str(data_dir / (smallnorb.FILES[split][kind] + ".gz")), array, compress=True
            )
    output = str(tmp_path / "run")
    args = [
        "train",
        "matrix-capsnet",
        "--data",
        "smallnorb",
        "--data-dir",
        str(data_dir),
        "--output",
        output,
    ]
    # One EM iteration: the files are under test here, not routing (traced seconds faster).
    assert cli.main(args + ["--batch-size", "4", *EM_TINY, "--iterations", "1"]) == 0
    metrics = json.load(open(os.path.join(output, "metrics.json")))
    assert metrics["train_images"] == 12 and metrics["test_images"] == 6
    model_path = os.path.join(output, "model.keras")
    assert cli.main(["evaluate", model_path, "--data-dir", str(data_dir)]) == 0
    assert "Test accuracy:" in capsys.readouterr().out


def test_train_efficient_capsnet_mnist_and_continue_it(tmp_path, capsys):
    import applications

    output = str(tmp_path / "efficient")
    args = ["train", "efficient-capsnet", "--output", output, "--train-size", "32"]
    args += ["--test-size", "16", "--verbose", "0", "--seed", "3"]
    assert cli.main(args) == 0
    metrics = json.load(open(os.path.join(output, "metrics.json")))
    assert metrics["model"] == "efficient-capsnet" and metrics["batch_size"] == 16
    assert metrics["train_steps_this_session"] == 2 and metrics["nonfinite_loss_steps"] == 0
    # More epochs continue the finished run from its model and optimizer, here with one
    # step per call: how many steps a call runs does not change what the run trains.
    assert cli.main(args + ["--epochs", "2", "--steps-per-execution", "1"]) == 0
    assert "Continuing the finished run from epoch 2" in capsys.readouterr().out
    assert epochs_logged(output) == [0, 1]
    metrics = json.load(open(os.path.join(output, "metrics.json")))
    assert metrics["epochs"] == 2 and metrics["train_steps_this_session"] == 2
    saved = _model.load_model(os.path.join(output, "model.keras"))
    assert isinstance(saved, applications.EfficientCapsNet) and saved.steps_per_execution == 1
    assert int(saved.optimizer.iterations.numpy()) == 4
    schedule = saved.optimizer.get_config()["learning_rate"]["config"]
    # The paper's 5e-4, decayed by 0.97 per epoch: 2 steps of 16 of the 32 images.
    assert (schedule["initial_learning_rate"], schedule["decay_rate"]) == (5e-4, 0.97)
    assert schedule["decay_steps"] == 2


@pytest.mark.parametrize("precision", ["mixed_bfloat16", "mixed_float16"])
def test_train_with_mixed_precision_and_data_parallel(tmp_path, precision):
    import keras

    if keras.backend.backend() not in ("tensorflow", "jax"):
        pytest.skip("--distribute needs TensorFlow or JAX")
    output = str(tmp_path / "run")
    args = ["train", "capsnet", "--output", output, "--train-size", "100"]
    args += ["--test-size", "50", "--batch-size", "50", "--conv-filters", "8"]
    args += ["--primary-capsule-types", "2", "--verbose", "0", "--precision", precision]
    assert cli.main(args + ["--distribute"]) == 0
    assert keras.mixed_precision.dtype_policy().name == "float32"  # restored afterwards
    metrics = json.load(open(os.path.join(output, "metrics.json")))
    assert metrics["precision"] == precision and metrics["replicas"] == 1  # one CPU device
    assert metrics["nonfinite_loss_steps"] == 0 and 0 <= metrics["test_accuracy"] <= 1
    saved = _model.load_model(os.path.join(output, "model.keras"))
    assert saved.backbone.get_layer("conv1").dtype_policy.name == precision
    assert saved.get_layer("digit_caps").dtype_policy.name == precision
    assert saved.get_layer("probabilities").dtype_policy.name == "float32"


@pytest.mark.parametrize("native", [True, False])
def test_precision_auto_records_the_policy_it_chose(tmp_path, capsys, monkeypatch, native):
    import keras

    from applications import recipe

    monkeypatch.setattr(recipe, "native_bfloat16", lambda: native)
    monkeypatch.setattr(recipe, "has_accelerator", lambda: False)
    chosen = "mixed_bfloat16" if native and BACKEND == "tensorflow" else "float32"
    output = str(tmp_path / "run")
    args = ["train", "efficient-capsnet", "--output", output, "--train-size", "64"]
    args += ["--test-size", "32", "--batch-size", "32"]
    assert cli.main([*args, "--verbose", "0", "--precision", "auto"]) == 0
    said = capsys.readouterr().out
    assert f"--precision auto: {chosen} (" in said
    if chosen == "float32":
        assert "only for capsnet, efficient-capsnet on TensorFlow" in said
    assert keras.mixed_precision.dtype_policy().name == "float32"  # restored afterwards
    assert json.load(open(os.path.join(output, "metrics.json")))["precision"] == chosen
    assert json.load(open(os.path.join(output, "run.json")))["options"]["precision"] == chosen
    saved = _model.load_model(os.path.join(output, "model.keras"))
    assert saved.backbone.get_layer("primary_caps").dtype_policy.name == chosen
    # The policy it chose, named, is the same run; the other one is refused.
    assert cli.main([*args, "--verbose", "0", "--precision", chosen]) == 0
    assert "nothing to train" in capsys.readouterr().out
    other = "float32" if chosen == "mixed_bfloat16" else "mixed_bfloat16"
    with pytest.raises(SystemExit, match=f"--precision '{chosen}' -> '{other}'"):
        cli.main([*args, "--verbose", "0", "--precision", other])


def test_resumed_history_drops_the_rows_the_backup_lacks(tmp_path):
    # A run killed after writing epoch 2's row and before saving epoch 2 resumes
    # at epoch 2 (index): its row goes, as CSVLogger will write it again.
    path = tmp_path / "history.csv"
    path.write_text("epoch,loss\n0,0.5\n1,0.4\n2,0.3\n")
    keeper = _training.history_keeper(str(path))
    with open(path, "a") as appending:  # as CSVLogger holds it
        keeper.on_epoch_begin(2)
        keeper.on_epoch_begin(3)  # later epochs leave the file alone
        appending.write("2,0.25\n")
    assert path.read_text() == "epoch,loss\n0,0.5\n1,0.4\n2,0.25\n"
    fresh = tmp_path / "fresh.csv"
    _training.history_keeper(str(fresh)).on_epoch_begin(0)  # no file yet: nothing to do
    assert not fresh.exists()


def train_tiny(output, *extra, epochs=1):
    args = ["train", "capsnet", "--epochs", str(epochs), "--output", output, *TINY]
    return cli.main([*args, "--seed", "3", *extra])


def test_reruns_continue_a_finished_run_and_refuse_other_options(tmp_path, capsys):
    output = str(tmp_path / "run")
    assert train_tiny(output) == 0
    model_path = os.path.join(output, "model.keras")
    trained = open(model_path, "rb").read()
    assert not os.path.exists(os.path.join(output, "backup"))  # deleted once all is on disk
    # The same epochs again: nothing to do, and the trained model stays.
    assert train_tiny(output) == 0
    assert "nothing to train" in capsys.readouterr().out
    assert open(model_path, "rb").read() == trained
    # Other options: refused, naming them, and nothing is touched.
    with pytest.raises(SystemExit, match=r"--batch-size 50 -> 20.*--fresh"):
        train_tiny(output, "--batch-size", "20")
    with pytest.raises(SystemExit, match=r"--learning-rate 0.001 -> 0.01"):
        train_tiny(output, "--learning-rate", "0.01")
    assert open(model_path, "rb").read() == trained
    # A default passed explicitly is the same run.
    assert train_tiny(output, "--learning-rate", "0.001") == 0
    assert "nothing to train" in capsys.readouterr().out
    # A torn run.json: the options cannot be checked, so the run is refused, naming the file.
    run_json = os.path.join(output, "run.json")
    recorded = open(run_json).read()
    with open(run_json, "w") as f:
        f.write('{"options": {"bat')
    with pytest.raises(SystemExit, match=r"run.json is unreadable.*--fresh"):
        train_tiny(output, "--batch-size", "20", epochs=2)
    with open(run_json, "w") as f:
        f.write(recorded)
    assert open(model_path, "rb").read() == trained
    # More epochs: continues from the finished model.
    assert train_tiny(output, epochs=2) == 0
    assert "Continuing the finished run from epoch 2" in capsys.readouterr().out
    assert epochs_logged(output) == [0, 1]
    assert json.load(open(os.path.join(output, "metrics.json")))["epochs"] == 2
    # --fresh starts over in the folder, with the new options.
    assert train_tiny(output, "--batch-size", "20", "--fresh") == 0
    assert epochs_logged(output) == [0]
    assert json.load(open(os.path.join(output, "metrics.json")))["batch_size"] == 20


def _backup_of_a_killed_run(output):
    """Train 2 epochs and keep the backup, as a run killed after them leaves it."""
    import keras

    assert train_tiny(output, epochs=2) == 0
    backup = os.path.join(output, "backup")
    model = _model.load_model(os.path.join(output, "model.keras"))
    callback = keras.callbacks.BackupAndRestore(backup, double_checkpoint=True)
    callback.set_model(model)
    for epoch in (0, 1):  # two saves, so that .bkp files hold epoch 1
        callback.on_epoch_end(epoch)
    os.remove(os.path.join(output, "metrics.json"))  # it never finished
    return backup


@pytest.fixture(scope="module")
def killed_run(tmp_path_factory):
    """The folder of a run killed after 2 epochs, trained once: each test damages a copy."""
    output = str(tmp_path_factory.mktemp("killed") / "run")
    _backup_of_a_killed_run(output)
    return output


@pytest.mark.parametrize("damage", ["empty metadata", "truncated weights", "both copies"])
def test_an_unreadable_backup_falls_back_or_starts_over(tmp_path, capsys, damage, killed_run):
    output = str(tmp_path / "run")
    shutil.copytree(killed_run, output)
    backup = os.path.join(output, "backup")
    weights = os.path.join(backup, "latest.weights.h5")
    metadata = os.path.join(backup, "training_metadata.json")
    if damage == "empty metadata":
        open(metadata, "w").close()
    elif damage == "truncated weights":
        with open(weights, "r+b") as f:
            f.truncate(100)
    else:
        for path in (metadata, metadata + ".bkp"):
            open(path, "w").close()
    capsys.readouterr()
    assert train_tiny(output, epochs=3) == 0  # and so on every later resume
    log = capsys.readouterr().out
    if damage == "both copies":
        assert "unreadable" in log and "starting over" in log
        assert [n for n in os.listdir(output) if n.startswith("backup.unreadable-")]
        assert epochs_logged(output) == [0, 1, 2]
    else:
        assert "using the one before" in log and "Resumed at epoch 2" in log  # the .bkp: 1 epoch
    assert json.load(open(os.path.join(output, "metrics.json")))["epochs"] == 3


def test_replacing_leaves_the_old_file_or_the_new_one(tmp_path):
    from keras_capsules._atomic import replacing
    from keras_capsules._atomic import write_json

    path = tmp_path / "metrics.json"
    write_json(str(path), {"a": 1})
    with pytest.raises(RuntimeError):
        with replacing(str(path)) as temporary:
            with open(temporary, "w") as f:
                f.write('{"a": ')  # interrupted half way
            raise RuntimeError("killed")
    assert json.load(open(path)) == {"a": 1} and os.listdir(tmp_path) == ["metrics.json"]
    write_json(str(path), {"a": 2})
    assert json.load(open(path)) == {"a": 2} and os.listdir(tmp_path) == ["metrics.json"]


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs a folder no one can write")
def test_an_unwritable_output_folder_is_refused_before_training(capsys):
    with pytest.raises(SystemExit, match="cannot write to the output folder /proc/self"):
        train_tiny("/proc/self")
    assert "Epoch" not in capsys.readouterr().out


def test_an_output_folder_that_cannot_be_made_is_refused_in_one_line(read_only_folder, capsys):
    output = os.path.join(read_only_folder, "new", "run")
    with pytest.raises(SystemExit) as refused:
        train_tiny(output)  # was a traceback from os.makedirs
    message = str(refused.value.code)
    where = os.path.join(read_only_folder, "new")
    assert re.fullmatch(
        rf"keras-capsules train: cannot create the output folder {re.escape(output)} "
        rf"\({re.escape(where)}\): (Read-only file system|Permission denied)",
        message,
    )
    assert not os.path.exists(where) and "Epoch" not in capsys.readouterr().out


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs a folder no folder can be in")
def test_the_command_ends_with_one_line_and_status_1_where_no_folder_can_be_made(tmp_path):
    output = "/proc/self/new-folder/run"
    command = [sys.executable, "-m", "keras_capsules.cli", "train", "capsnet"]
    done = subprocess.run(
        [*command, "--output", output], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"keras-capsules train: cannot create the output folder {output} "
        "(/proc/self/new-folder): No such file or directory"
    )


def test_an_unreadable_model_file_is_named(tmp_path):
    import applications

    path = str(tmp_path / "m.keras")
    applications.CapsNetMNIST(conv_filters=16, primary_capsule_types=4).save(path)
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) // 2])  # truncated, as by a full disk
    for command in (["export", path, str(tmp_path / "sm")], ["evaluate", path]):
        with pytest.raises(SystemExit, match=r"m.keras is not a .keras archive.*truncated"):
            cli.main(command)
    open(path, "w").write("not a model")
    with pytest.raises(SystemExit, match="not a .keras archive"):
        cli.main(["evaluate", path])


def test_data_dirs_that_hold_no_data_are_one_line_errors(tmp_path, capsys, monkeypatch):
    from keras_capsules.datasets import smallnorb
    from tests.datasets.test_smallnorb import make_split
    from tests.datasets.test_smallnorb import write_matrix

    output = ["--output", str(tmp_path / "run")]
    for folder, message in (
        (tmp_path / "missing", "is not a folder"),
        (tmp_path, "holds no files"),
    ):
        with pytest.raises(SystemExit):
            cli.main(["train", "capsnet", "--data-dir", str(folder), *output])
        assert message in capsys.readouterr().err
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("no digits here")
    with pytest.raises(SystemExit, match=r"other holds none of the MNIST files"):
        cli.main(["train", "capsnet", "--data-dir", str(other), *output])
    # smallNORB files with no training examples.
    rng = np.random.default_rng(0)
    norb = tmp_path / "norb"
    norb.mkdir()
    for split, n in (("train", 0), ("test", 2)):
        for kind, array in zip(("dat", "cat", "info"), make_split(rng, n)):
            write_matrix(str(norb / smallnorb.FILES[split][kind]), array)
    with pytest.raises(SystemExit, match=r"norb holds no training images"):
        cli.main(
            ["train", "matrix-capsnet", "--data", "smallnorb", "--data-dir", str(norb), *output]
        )


def test_evaluate_a_preset_on_the_data_it_was_trained_on(tmp_path, capsys):
    import applications
    from keras_capsules.datasets import fashion_mnist

    model = applications.EfficientCapsNet(
        conv_filters=(8, 8, 8, 32), primary_capsule_types=4, decoder_units=None
    )
    _, (x_test, y_test) = fashion_mnist.load_data()
    expected = model.evaluate(x_test[:100, ..., None], y_test[:100], verbose=0, return_dict=True)
    folder = model.save_to_preset(
        str(tmp_path / "preset"), metadata={"data": {"name": "fashion_mnist"}}
    )
    assert cli.main(["evaluate", "--preset", folder, "--test-size", "100"]) == 0
    printed = capsys.readouterr().out
    assert f"Test accuracy: {expected['accuracy']:.4f} (100 images)" in printed
    with pytest.raises(SystemExit, match="not both"):
        cli.main(["evaluate", "model.keras", "--preset", folder])


def test_evaluate_with_no_model_evaluates_the_capsnet_mnist_preset(capsys):
    assert cli.main(["evaluate", "--test-size", "200", "--batch-size", "100"]) == 0
    accuracy = float(re.search(r"Test accuracy: ([0-9.]+)", capsys.readouterr().out).group(1))
    assert accuracy > 0.98


def test_a_kill_during_the_last_save_keeps_the_last_epoch(tmp_path, capsys, killed_run):
    """The backup holds both epochs, model.keras an older state, and its .partial is left."""
    import keras

    output = str(tmp_path / "run")
    shutil.copytree(killed_run, output)
    model_path = os.path.join(output, "model.keras")
    model = _model.load_model(model_path)
    last = [keras.ops.convert_to_numpy(w) for w in model.weights]
    for weight in model.trainable_weights:
        weight.assign(keras.ops.zeros_like(weight))
    model.save(model_path)
    with open(os.path.join(output, f".model.{os.getpid() + 1}.partial.keras"), "wb") as f:
        f.write(b"PK\x03\x04")
    assert train_tiny(output, epochs=2) == 0
    assert "Resuming" in capsys.readouterr().out
    restored = _model.load_model(model_path)
    for expected, weight in zip(last, restored.weights):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(weight), expected)
    assert not os.path.exists(os.path.join(output, "backup"))


def test_a_second_run_in_the_same_folder_is_refused_naming_the_holder(tmp_path):
    output = str(tmp_path / "run")
    os.makedirs(output)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from keras_capsules.cli import _training\n"
            "with _training.locked(sys.argv[1]):\n"
            "    print('held', flush=True)\n"
            "    time.sleep(60)\n",
            output,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(SystemExit, match=rf"in use by another run \(process {holder.pid} on"):
            train_tiny(output)
        assert not os.path.exists(os.path.join(output, "run.json"))  # nothing touched
    finally:
        holder.kill()
        holder.wait()
    assert train_tiny(output) == 0  # a killed holder leaves no stale lock


@pytest.mark.parametrize("where", ["fit", "metrics"])
def test_a_full_disk_is_one_line_and_the_run_resumes(tmp_path, monkeypatch, where):
    import errno

    from keras_capsules.cli import train

    output = str(tmp_path / "run")
    full = OSError(errno.ENOSPC, "No space left on device", os.path.join(output, "x"))

    def no_space(*args, **kwargs):
        raise full

    if where == "metrics":
        real = train.write_json

        def write_json(path, value):
            if path.endswith("metrics.json"):
                raise full
            return real(path, value)

        monkeypatch.setattr(train, "write_json", write_json)
    else:
        monkeypatch.setattr(_training, "fit_callbacks", no_space)
    with pytest.raises(SystemExit, match=r"cannot write .*No space left on device.*resume"):
        train_tiny(output)
    monkeypatch.undo()
    assert train_tiny(output) == 0
    assert json.load(open(os.path.join(output, "metrics.json")))["epochs"] == 1


def _image_folder(root, classes=("circle", "square", "triangle"), per_class=12, seed=0):
    """A user's folder: RGB PNG and JPEG, grey GIF and BMP, two sizes, one subfolder a class."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    for index, name in enumerate(classes):
        os.makedirs(os.path.join(root, name))
        for i in range(per_class):
            size = (24, 24) if i % 3 else (30, 26)
            pixels = rng.integers(0, 60, size[::-1] + (3,)).astype("uint8")
            pixels[..., index % 3] += 150  # each class its own colour
            image = Image.fromarray(pixels)
            kind = ("png", "jpg", "gif", "bmp")[i % 4]
            if kind in ("gif", "bmp"):
                image = image.convert("L")
            image.save(os.path.join(root, name, f"{i}.{kind}"))
    return root


IMAGES_TINY = ["--conv-filters", "8", "--primary-capsule-types", "2", "--verbose", "2"]


def test_train_on_a_folder_of_images_and_evaluate_by_class(tmp_path, capsys):
    import keras

    folder = _image_folder(str(tmp_path / "shapes"))
    output = str(tmp_path / "run")
    args = ["train", "capsnet", "--images", folder, "--image-size", "24", "24", *IMAGES_TINY]
    assert cli.main([*args, "--batch-size", "8", "--seed", "1", "--output", output]) == 0
    printed = capsys.readouterr().out
    assert "36 images of 3 classes: circle (12), square (12), triangle (12)" in printed
    assert "read as 24x24 rgb" in printed
    metrics = json.load(open(os.path.join(output, "metrics.json")))
    assert (metrics["train_images"], metrics["test_images"]) == (29, 7)  # 0.2 held out
    model = keras.saving.load_model(os.path.join(output, "model.keras"))
    assert model.class_names == ("circle", "square", "triangle")
    assert model.image_shape == (24, 24, 3) and model.reconstruct(
        np.zeros((1, 24, 24, 3))
    ).shape == (1, 24, 24, 3)
    run = json.load(open(os.path.join(output, "run.json")))["options"]
    assert run["images"] == folder and run["image_size"] == [24, 24]

    assert cli.main(["evaluate", os.path.join(output, "model.keras"), "--images", folder]) == 0
    printed = capsys.readouterr().out
    rows = re.findall(r"^(circle|square|triangle) +12 +([0-9.]+)", printed, re.M)
    assert [name for name, _ in rows] == ["circle", "square", "triangle"]
    scores = model.predict(
        np.stack([np.asarray(x) for x, _ in _folder_images(folder, (24, 24))]), verbose=0
    )["probabilities"]
    labels = np.array([y for _, y in _folder_images(folder, (24, 24))])
    expected = float(np.mean(scores.argmax(-1) == labels))
    assert f"Accuracy: {expected:.4f} (36 images)" in printed
    os.makedirs(os.path.join(folder, "hexagon"))
    shutil.copy(os.path.join(folder, "circle", "0.png"), os.path.join(folder, "hexagon"))
    with pytest.raises(SystemExit, match="class folders the model does not know: hexagon"):
        cli.main(["evaluate", os.path.join(output, "model.keras"), "--images", folder])


def _folder_images(folder, size):
    from keras_capsules.datasets import image_folder

    summary = image_folder.check_folder(folder, image_size=size, color_mode="rgb")
    train, _ = image_folder.load_folder(summary, batch_size=64, shuffle=False)
    return [(x, int(y)) for images, labels in train for x, y in zip(images, labels)]


def test_train_from_a_preset_on_other_classes_keeps_its_backbone(tmp_path, capsys):
    import keras

    import applications

    preset = applications.CapsNet(conv_filters=8, primary_capsule_types=2, decoder_units=(16,))
    preset_folder = preset.save_to_preset(str(tmp_path / "preset"))
    folder = _image_folder(str(tmp_path / "shapes"), classes=("a", "b"), per_class=8)
    output = str(tmp_path / "run")
    args = ["train", "capsnet", "--images", folder, "--image-size", "28", "28", "--verbose", "2"]
    args += ["--from-preset", preset_folder, "--freeze-backbone", "--color-mode", "grayscale"]
    assert cli.main([*args, "--batch-size", "4", "--output", output]) == 0
    assert "backbone/conv1, backbone/primary_caps kept" in capsys.readouterr().out
    model = keras.saving.load_model(os.path.join(output, "model.keras"))
    assert model.class_names == ("a", "b")
    for name in ("conv1", "primary_caps"):  # frozen: the preset's weights, unchanged
        for got, expected in zip(
            model.backbone.get_layer(name).get_weights(),
            preset.backbone.get_layer(name).get_weights(),
        ):
            np.testing.assert_array_equal(got, expected)
    head = model.get_layer("digit_caps").get_weights()[0]
    assert head.shape != preset.get_layer("digit_caps").get_weights()[0].shape  # 2 classes, new
    assert model.predict(np.zeros((1, 28, 28, 1)), verbose=0)["probabilities"].shape == (1, 2)


@pytest.mark.parametrize(
    "layout, match",
    [
        ("one_class", "holds one class folder"),
        ("corrupt", r"broken.png cannot be read as an image.*--skip-bad-images"),
        ("empty_class", "holds no images"),
    ],
)
def test_a_bad_image_folder_is_one_line_before_anything_is_written(tmp_path, layout, match):
    folder = str(tmp_path / "images")
    os.makedirs(os.path.join(folder, "a"))
    shutil.copy(_image_folder(str(tmp_path / "src"), ("x",), 1) + "/x/0.png", folder + "/a/0.png")
    if layout == "corrupt":
        os.makedirs(os.path.join(folder, "b"))
        with open(os.path.join(folder, "b", "broken.png"), "wb") as f:
            f.write(b"not a png")
    elif layout == "empty_class":
        os.makedirs(os.path.join(folder, "b"))
    output = str(tmp_path / "run")
    with pytest.raises(SystemExit, match=match):
        cli.main(["train", "capsnet", "--images", folder, "--output", output])
    assert not os.path.exists(output)


def test_skipped_images_are_counted_and_a_missing_folder_is_a_usage_error(tmp_path, capsys):
    folder = _image_folder(str(tmp_path / "shapes"), classes=("a", "b"), per_class=5)
    with open(os.path.join(folder, "b", "broken.jpg"), "wb") as f:
        f.write(b"\xff\xd8 not a jpeg")
    output = str(tmp_path / "run")
    args = ["train", "efficient-capsnet", "--images", folder, "--image-size", "24", "24"]
    args += ["--skip-bad-images", "--validation-split", "0.3", "--verbose", "0"]
    assert cli.main([*args, "--output", output]) == 0
    assert "Skipped 1 file(s) that cannot be decoded" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli.main(["train", "capsnet", "--images", str(tmp_path / "nowhere")])
    assert "no folder" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="give --images or --data, not both"):
        cli.main(["train", "capsnet", "--images", folder, "--data", "mnist", "--output", output])

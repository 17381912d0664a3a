"""`train` and `export` on a full disk, and the temporary files a killed run leaves.

A full disk is a file size limit (`RLIMIT_FSIZE`): a write past it fails as
on a full file system (`EFBIG` instead of `ENOSPC`), for Python, HDF5 and
TensorFlow alike, and needs no privileges.
"""

import contextlib
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from keras_capsules import cli
from tests.conftest import requires_tensorflow

resource = pytest.importorskip("resource", reason="file size limits are POSIX")

# The command in a process of its own whose files cannot grow past argv[1] bytes.
_LIMITED_COMMAND = """
import resource, runpy, sys
hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), hard))
sys.argv = ["keras-capsules", *sys.argv[2:]]
runpy.run_module("keras_capsules.cli", run_name="__main__", alter_sys=True)
"""


@contextlib.contextmanager
def _file_size_limit(size):
    """Limit the size of the files this process writes to `size` bytes within the block."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


def _image_folder(root):
    """Ten 28x28 grey PNG images of two classes, one subfolder each."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for label, name in enumerate(("dark", "light")):
        os.makedirs(os.path.join(root, name))
        for i in range(5):
            pixels = rng.integers(0, 100, (28, 28)) + 150 * label
            Image.fromarray(pixels.astype("uint8")).save(os.path.join(root, name, f"{i}.png"))
    return root


# What TensorFlow's native libraries write to stderr before absl's logging is
# set up, which TF_CPP_MIN_LOG_LEVEL does not filter: where oneDNN is on by
# default (CPUs with AVX512_VNNI or AVX512_BF16), its banner at every import.
_NATIVE_LOG = re.compile(
    r"WARNING: All log messages before absl::InitializeLog\(\) is called"
    r"|[IWEF]\d{4} [\d:.]+ +\d+ \S+:\d+\] "
)


def _command_lines(stderr):
    """The lines of `stderr` the command wrote, without TensorFlow's native logs."""
    return [line for line in stderr.splitlines() if not _NATIVE_LOG.match(line)]


def _temporary_names(folder):
    return [
        name
        for _, _, names in os.walk(folder)
        for name in names
        if ".partial" in name or name.startswith(".write-test")
    ]


def test_a_full_disk_ends_train_in_one_line(tmp_path):
    output = str(tmp_path / "run")
    args = ["train", "capsnet", "--images", _image_folder(str(tmp_path / "images"))]
    args += ["--conv-filters", "8", "--primary-capsule-types", "2", "--batch-size", "4"]
    args += ["--seed", "0", "--verbose", "0", "--output", output]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)  # the command's own default
    # 64 KiB: run.json and history.csv fit, the backup's weights do not.
    process = subprocess.run(
        [sys.executable, "-c", _LIMITED_COMMAND, str(64 * 1024), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    lines = _command_lines(process.stderr)
    assert process.returncode == 1, process.stderr  # HDF5 crashed at exit (-11) with tracebacks
    assert len(lines) == 1, process.stderr
    assert lines[0].startswith(f"keras-capsules train: cannot write {output}: File too large. ")
    assert "run the same command again to resume" in lines[0]
    assert _temporary_names(output) == []
    # No backup stands for an epoch: not an empty folder, nor a truncated file.
    assert not os.path.exists(os.path.join(output, "backup"))
    assert not os.path.exists(os.path.join(output, "model.keras"))


@requires_tensorflow
def test_a_full_disk_ends_export_in_one_line_and_keeps_the_versions(tmp_path, capfd):
    import applications

    model_path = str(tmp_path / "m.keras")
    small = dict(input_shape=(8, 8, 1), num_classes=3, filters=(2,), dense_units=(4,))
    applications.BaselineCNN(**small).save(model_path)
    served = tmp_path / "sm"
    assert cli.main(["export", model_path, str(served)]) == 0
    version_1 = {name: (served / "1" / name).stat().st_size for name in os.listdir(served / "1")}
    new = tmp_path / "new" / "models"
    capfd.readouterr()
    with _file_size_limit(16 * 1024):  # the graph (saved_model.pb) does not fit
        for output in (served, new):
            with pytest.raises(SystemExit) as error:
                cli.main(["export", model_path, str(output)])
            assert str(error.value) == (
                f"keras-capsules export: cannot write {output}: File too large"
            )
    assert capfd.readouterr().err == ""  # nor TensorFlow's logs of the write that failed
    assert os.listdir(served) == ["1"]  # no version 2, whole or half
    assert {name: (served / "1" / name).stat().st_size for name in os.listdir(served / "1")} == (
        version_1
    )
    assert not os.path.exists(tmp_path / "new")  # the folders made for it are removed


def test_a_killed_runs_temporary_files_are_removed_at_the_next_start(tmp_path, capsys):
    output = tmp_path / "run"
    (output / "backup").mkdir(parents=True)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    left = [
        f".model.{dead.pid}.partial.keras",
        f"backup/.latest.weights.{dead.pid}.partial.h5",
        f".write-test.{dead.pid}",
    ]
    kept = [f".metrics.{live.pid}.partial.json", f".2.{dead.pid}.notes", "notes.txt"]
    try:
        for name in left + kept:
            (output / name).write_bytes(b"\0" * 1000)
        (output / f".1.{dead.pid}.partial").mkdir()  # a folder (an export's version)
        left.append(f".1.{dead.pid}.partial")
        (output / "run.json").write_text(json.dumps({"options": {"model": "other"}}))
        (output / "model.keras").write_bytes(b"")  # a run that trained: its options bind
        with pytest.raises(SystemExit, match="other options"):  # refused after the clean-up
            cli.main(["train", "capsnet", "--output", str(output)])
        printed = capsys.readouterr().out
        assert printed.startswith(f"Removed {len(left)} temporary file(s) left by a run")
        assert len(printed.splitlines()) == 1
        for name in left:
            assert not os.path.lexists(output / name), name
            assert str(output / name) in printed
        for name in kept:
            assert (output / name).exists(), name
    finally:
        live.kill()
        live.wait()

"""TensorFlow's start-up banner stays out of the commands' output unless --verbose asks."""

import os
import platform
import subprocess
import sys

import pytest

from keras_capsules.cli._quiet import is_banner
from tests.conftest import requires_tensorflow

# A stand-in for TensorFlow whose import writes to the process's standard error
# as TensorFlow's C++ libraries do: below Python, on file descriptor 2.
_FAKE_TENSORFLOW = """
import os
os.write(2, b"WARNING: All log messages before absl::InitializeLog() is called are written\\n")
os.write(2, b"I0000 00:00:1.0 1 port.cc:153] oneDNN custom operations are on.\\n")
os.write(2, b"a warning of the user's own\\n")
"""

_IMPORT = """
import sys
from keras_capsules.cli._quiet import import_tensorflow_quietly
left_out = import_tensorflow_quietly()
print(len(left_out), "left out")
print("after", file=sys.stderr)
"""


def test_only_the_banner_is_left_out(tmp_path):
    (tmp_path / "tensorflow").mkdir()
    (tmp_path / "tensorflow" / "__init__.py").write_text(_FAKE_TENSORFLOW)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.getcwd()]))
    out = subprocess.run(
        [sys.executable, "-c", _IMPORT], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout == "2 left out\n"
    assert out.stderr == "a warning of the user's own\nafter\n"


@pytest.mark.parametrize(
    "line, banner",
    [
        ("I0000 00:00:17.5 4231 port.cc:153] oneDNN custom operations are on.", True),
        ("I0000 00:00:17.5 4231 cpu_feature_guard.cc:227] This TensorFlow binary is", True),
        ("To enable the following instructions: AVX2 AVX512F FMA, in other operations,", True),
        ("keras-capsules: no model at missing.keras", False),
        ("Traceback (most recent call last):", False),
    ],
)
def test_is_banner(line, banner):
    assert is_banner(line) is banner


@requires_tensorflow
@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="oneDNN on x86")
@pytest.mark.parametrize("verbose", [False, True])
def test_a_command_prints_its_own_lines_only(verbose):
    # oneDNN on makes TensorFlow print its banner on any x86 CPU.
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="1", KERAS_BACKEND="tensorflow")
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    command = [sys.executable, "-m", "keras_capsules.cli"]
    command += ["--verbose"] * verbose + ["evaluate", "missing.keras"]
    out = subprocess.run(command, env=env, capture_output=True, text=True)
    assert out.returncode == 1
    lines = out.stderr.splitlines()
    assert lines[-1] == "keras-capsules: no model at missing.keras"
    assert any("oneDNN custom operations" in line for line in lines) is verbose
    if not verbose:
        assert lines == ["keras-capsules: no model at missing.keras"]

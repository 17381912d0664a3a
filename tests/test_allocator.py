"""Importing keras_capsules selects TensorFlow's pooling CPU allocator unless the user chose."""

import os
import platform
import subprocess
import sys

import pytest

from tests.conftest import BACKEND

# TensorFlow reports allocator statistics for the CPU only when the BFC
# allocator serves it; the default allocator raises ValueError.
_ALLOCATOR = """
import tensorflow as tf
x = tf.ones((256, 256)) * 2.0
try:
    stats = tf.config.experimental.get_memory_info("CPU:0")
    print("pooled", stats["peak"] >= 256 * 256 * 4)
except ValueError:
    print("default")
"""

_IMPORT_ONLY = """
import os
import keras_capsules
print(os.environ.get("TF_CPU_ALLOCATOR_USE_BFC"))
"""

# TensorFlow ran before the import: the import changes nothing, and says nothing.
_IMPORT_TOO_LATE = """
import os
import warnings
import tensorflow as tf
tf.ones((4, 4)).numpy()
warnings.simplefilter("error")
import keras_capsules
print(os.environ.get("TF_CPU_ALLOCATOR_USE_BFC"))
"""

_CALL_FIRST = """
import warnings
warnings.simplefilter("error")  # no warning before TensorFlow is imported
import keras_capsules
print(keras_capsules.use_pooled_cpu_allocator())
"""

# Importing Keras imports TensorFlow but runs no operation: not too late.
_CALL_AFTER_IMPORTING_KERAS = """
import warnings
import keras
warnings.simplefilter("error")
import keras_capsules
print(keras_capsules.use_pooled_cpu_allocator())
"""

_CALL_TOO_LATE = """
import warnings
import tensorflow as tf
tf.ones((4, 4)).numpy()  # TensorFlow has allocated: the variable was read
import keras_capsules
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    print(keras_capsules.use_pooled_cpu_allocator())
print([(w.category.__name__, "before building a model" in str(w.message)) for w in caught])
"""

# The command chooses before its subcommand imports TensorFlow; `evaluate` of a
# missing model imports Keras (and TensorFlow), then stops.
_COMMAND = """
import os
from keras_capsules.cli import main
try:
    main(["evaluate", "missing.keras"])
except SystemExit as error:
    print(error)
print(os.environ.get("TF_CPU_ALLOCATOR_USE_BFC"))
"""


def _start(code, value=None, onednn="0"):
    """A fresh TensorFlow process running `code`, then the allocator probe."""
    env = dict(
        os.environ,
        KERAS_BACKEND="tensorflow",
        TF_CPP_MIN_LOG_LEVEL="3",
        TF_ENABLE_ONEDNN_OPTS=onednn,
    )
    env.pop("TF_CPU_ALLOCATOR_USE_BFC", None)
    if value is not None:
        env["TF_CPU_ALLOCATOR_USE_BFC"] = value
    return subprocess.Popen(
        [sys.executable, "-c", code + _ALLOCATOR],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


# Each probe in its own process (TensorFlow chooses its allocator once), all
# started at once: importing TensorFlow takes seconds and one core.
_PROBES = {
    "import only, None": (_IMPORT_ONLY, None),
    "import only, false": (_IMPORT_ONLY, "false"),
    "import only, true": (_IMPORT_ONLY, "true"),
    "import too late": (_IMPORT_TOO_LATE,),
    "call first, None": (_CALL_FIRST, None),
    "call first, false": (_CALL_FIRST, "false"),
    "call after importing Keras": (_CALL_AFTER_IMPORTING_KERAS,),
    "call too late": (_CALL_TOO_LATE,),
    "command, None": (_COMMAND, None),
    "command, false": (_COMMAND, "false"),
    "oneDNN": ("", "false", "1"),
    "import only, oneDNN": (_IMPORT_ONLY, None, "1"),
}


# With TensorFlow's oneDNN kernels off: with them on (TensorFlow's default on
# CPUs with AVX-512), TensorFlow uses oneDNN's CPU allocator, below.
requires_tensorflow = pytest.mark.skipif(BACKEND != "tensorflow", reason="a TensorFlow allocator")


@pytest.fixture(scope="module")
def probe():
    """`probe(name)`: the lines that probe's `code`, then the allocator probe, print."""
    processes = {name: _start(*args) for name, args in _PROBES.items()}

    def result(name):
        process = processes[name]
        stdout, stderr = process.communicate(timeout=300)
        assert process.returncode == 0, stderr[-2000:]
        return stdout.strip().splitlines()

    yield result
    for process in processes.values():
        if process.poll() is None:
            process.kill()
            process.wait()


@requires_tensorflow
@pytest.mark.parametrize(
    "value, expected",
    [
        (None, ["true", "pooled True"]),
        ("false", ["false", "default"]),  # the user's value is kept: the way out
        ("true", ["true", "pooled True"]),
    ],
)
def test_importing_keras_capsules_chooses_the_pool_unless_the_user_did(probe, value, expected):
    assert probe(f"import only, {value}") == expected


@requires_tensorflow
def test_importing_after_tensorflow_ran_changes_nothing_silently(probe):
    assert probe("import too late") == ["None", "default"]


@requires_tensorflow
@pytest.mark.parametrize("value", [None, "false"])
def test_calling_it_first_chooses_the_pool(probe, value):
    # An explicit call wins over the variable the environment set.
    assert probe(f"call first, {value}") == ["True", "pooled True"]


@requires_tensorflow
def test_calling_it_after_importing_keras_still_chooses_the_pool(probe):
    assert probe("call after importing Keras") == ["True", "pooled True"]


@requires_tensorflow
def test_calling_it_after_tensorflow_allocated_warns_and_changes_nothing(probe):
    assert probe("call too late") == ["False", "[('RuntimeWarning', True)]", "default"]


@requires_tensorflow
@pytest.mark.parametrize(
    "value, expected", [(None, ["true", "pooled True"]), ("false", ["false", "default"])]
)
def test_the_command_chooses_the_pool_unless_the_user_did(probe, value, expected):
    lines = probe(f"command, {value}")
    assert lines[0] == "keras-capsules: no model at missing.keras"
    assert lines[1:] == expected


@requires_tensorflow
@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="oneDNN on x86")
def test_onednn_pools_cpu_memory_whatever_the_variable_says(probe):
    # What docs/scaling.md says: under oneDNN the variable changes nothing.
    assert probe("oneDNN") == ["pooled True"]


@requires_tensorflow
@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="oneDNN on x86")
def test_importing_under_onednn_leaves_tensorflows_allocator(probe):
    # Under oneDNN the pool measured slower: the import sets nothing.
    assert probe("import only, oneDNN") == ["None", "pooled True"]


_ONEDNN = """
from keras_capsules._allocator import onednn_by_default
from keras_capsules._compat import tensorflow
print(onednn_by_default(), tensorflow.onednn_enabled())
"""


@requires_tensorflow
@pytest.mark.parametrize("value", [None, "False", "1"])
def test_the_import_tells_onednn_as_tensorflow_does(value):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("TF_ENABLE_ONEDNN_OPTS", None)
    if value is not None:
        env["TF_ENABLE_ONEDNN_OPTS"] = value
    out = subprocess.run(
        [sys.executable, "-c", _ONEDNN], env=env, capture_output=True, text=True, check=True
    )
    ours, tensorflows = out.stdout.split()
    assert ours == tensorflows, (value, out.stdout)

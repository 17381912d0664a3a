"""`use_pooled_cpu_allocator` selects TensorFlow's pooling CPU allocator; importing does not."""

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

_CALL_FIRST = """
import warnings
warnings.simplefilter("error")  # no warning before TensorFlow is imported
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
print([(w.category.__name__, "before importing TensorFlow" in str(w.message)) for w in caught])
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


def _probe(code, value=None, onednn="0"):
    """The lines `code` then the allocator probe print, in a fresh TensorFlow process."""
    env = dict(
        os.environ,
        KERAS_BACKEND="tensorflow",
        TF_CPP_MIN_LOG_LEVEL="3",
        TF_ENABLE_ONEDNN_OPTS=onednn,
    )
    env.pop("TF_CPU_ALLOCATOR_USE_BFC", None)
    if value is not None:
        env["TF_CPU_ALLOCATOR_USE_BFC"] = value
    result = subprocess.run(
        [sys.executable, "-c", code + _ALLOCATOR],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.strip().splitlines()


# With TensorFlow's oneDNN kernels off: with them on (TensorFlow's default on
# CPUs with AVX-512), TensorFlow uses oneDNN's CPU allocator, below.
requires_tensorflow = pytest.mark.skipif(BACKEND != "tensorflow", reason="a TensorFlow allocator")


@requires_tensorflow
def test_importing_keras_capsules_changes_no_allocator():
    assert _probe(_IMPORT_ONLY) == ["None", "default"]


@requires_tensorflow
@pytest.mark.parametrize("value", [None, "false"])
def test_calling_it_first_chooses_the_pool(value):
    # An explicit call wins over the variable the environment set.
    assert _probe(_CALL_FIRST, value) == ["True", "pooled True"]


@requires_tensorflow
def test_calling_it_after_tensorflow_allocated_warns_and_changes_nothing():
    assert _probe(_CALL_TOO_LATE) == ["False", "[('RuntimeWarning', True)]", "default"]


@requires_tensorflow
@pytest.mark.parametrize(
    "value, expected", [(None, ["true", "pooled True"]), ("false", ["false", "default"])]
)
def test_the_command_chooses_the_pool_unless_the_user_did(value, expected):
    lines = _probe(_COMMAND, value)
    assert lines[0] == "keras-capsules: no model at missing.keras"
    assert lines[1:] == expected


@requires_tensorflow
@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="oneDNN on x86")
def test_onednn_pools_cpu_memory_whatever_the_variable_says():
    # What docs/scaling.md says: under oneDNN the variable changes nothing.
    assert _probe("", "false", onednn="1") == ["pooled True"]

"""Importing keras_capsules selects TensorFlow's pooling (BFC) CPU allocator, unless told not to."""

import os
import platform
import subprocess
import sys

import pytest

from tests.conftest import BACKEND

# TensorFlow reports allocator statistics for the CPU only when the BFC
# allocator serves it; the default allocator raises ValueError.
_PROBE = """
import keras_capsules
import tensorflow as tf
x = tf.ones((256, 256)) * 2.0
try:
    stats = tf.config.experimental.get_memory_info("CPU:0")
    print("pooled", stats["peak"] >= 256 * 256 * 4)
except ValueError:
    print("default")
"""


def _probe(value, onednn):
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
        [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.strip().splitlines()[-1]


@pytest.mark.skipif(BACKEND != "tensorflow", reason="a TensorFlow allocator")
@pytest.mark.parametrize("value, expected", [(None, "pooled True"), ("false", "default")])
def test_import_chooses_the_pooling_allocator_unless_the_user_did(value, expected):
    # With TensorFlow's oneDNN kernels off: with them on (TensorFlow's default on
    # CPUs with AVX-512), TensorFlow uses oneDNN's CPU allocator, below.
    assert _probe(value, onednn="0") == expected


@pytest.mark.skipif(BACKEND != "tensorflow", reason="a TensorFlow allocator")
@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="oneDNN on x86")
def test_onednn_pools_cpu_memory_whatever_the_variable_says():
    # What docs/scaling.md says: under oneDNN the variable changes nothing.
    assert _probe("false", onednn="1") == "pooled True"

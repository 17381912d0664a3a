"""The TensorFlow internal keras-capsules uses (its runtime's start) is there, or fails by name."""

import re

import pytest

tf = pytest.importorskip("tensorflow")

from keras_capsules import _allocator  # noqa: E402
from keras_capsules._compat import InternalChanged  # noqa: E402
from keras_capsules._compat import tensorflow as compat  # noqa: E402


def test_tensorflows_internals_are_there():
    compat.check()


def test_the_runtime_has_started_once_an_operation_ran():
    # Whether it had not before is the allocator's tests' part: each a fresh process.
    (tf.constant(1.0) + 1.0).numpy()
    assert compat.runtime_started()


def test_a_context_without_its_handle_is_named_and_counts_as_started(monkeypatch):
    context = pytest.importorskip("tensorflow.python.eager.context")

    class Context:
        pass

    monkeypatch.setattr(context, "context_safe", Context)
    monkeypatch.setattr(context, "context", Context)
    version = re.escape(tf.__version__)
    with pytest.raises(InternalChanged, match=rf"_context_handle.*tensorflow {version}"):
        compat.check()
    with pytest.raises(InternalChanged, match="_context_handle"):
        compat.runtime_started()
    assert _allocator._tensorflow_started()  # so use_pooled_cpu_allocator warns

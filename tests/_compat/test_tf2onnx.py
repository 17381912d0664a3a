"""The tf2onnx internal keras-capsules uses (its optimizers' table) is there, or fails by name."""

import importlib
import re

import pytest

tf = pytest.importorskip("tensorflow")
tf2onnx = pytest.importorskip("tf2onnx")

from keras_capsules._compat import InternalChanged  # noqa: E402
from keras_capsules._compat import tf2onnx as compat  # noqa: E402

optimizer = importlib.import_module("tf2onnx.optimizer")


def test_tf2onnxs_internals_are_there():
    compat.check()


def _einsum_searches(monkeypatch, without):
    """How often tf2onnx's einsum optimizer ran, converting a function with an einsum."""
    einsum_optimizer = importlib.import_module("tf2onnx.optimizer.einsum_optimizer")
    calls = []
    original = einsum_optimizer.EinsumOptimizer._optimize

    def recording(self, graph):
        calls.append(1)
        return original(self, graph)

    monkeypatch.setattr(einsum_optimizer.EinsumOptimizer, "_optimize", recording)
    function = tf.function(
        lambda a, b: tf.einsum("ij,jk->ik", a, b),
        input_signature=[tf.TensorSpec((2, 3), tf.float32), tf.TensorSpec((3, 4), tf.float32)],
    )
    if without:
        with compat.without_optimizer("einsum_optimizer"):
            tf2onnx.convert.from_function(function, input_signature=function.input_signature)
    else:
        tf2onnx.convert.from_function(function, input_signature=function.input_signature)
    return len(calls)


def test_the_conversion_runs_without_the_optimizer_and_the_table_comes_back(monkeypatch):
    table = optimizer._optimizers
    assert _einsum_searches(monkeypatch, without=False) > 0
    assert _einsum_searches(monkeypatch, without=True) == 0
    assert optimizer._optimizers is table and "einsum_optimizer" in table


def test_a_missing_table_is_named_with_tf2onnxs_version_and_the_conversion_still_runs(
    monkeypatch,
):
    monkeypatch.delattr(optimizer, "_optimizers")
    version = re.escape(tf2onnx.__version__)
    with pytest.raises(
        InternalChanged, match=rf"tf2onnx\.optimizer\._optimizers.*tf2onnx {version}"
    ):
        compat.check()
    with compat.without_optimizer("einsum_optimizer"):  # with every optimizer: slower
        pass

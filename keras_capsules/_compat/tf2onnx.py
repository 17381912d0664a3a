"""tf2onnx's internals: its table of graph optimizers.

`tf2onnx.convert.from_function` runs every optimizer of tf2onnx's table and
has no argument to leave one out (`from_keras`'s `optimizers` is not passed
on by `from_function`): `keras_capsules.serving.export_onnx` converts without
the einsum optimizer by taking it out of the table for the conversion.
"""

import contextlib

from keras_capsules._compat import InternalChanged
from keras_capsules._compat import changed
from keras_capsules._compat import internal

_LIBRARY = "tf2onnx"


def _optimizer_table():
    table = internal(_LIBRARY, "tf2onnx.optimizer", "_optimizers")
    if not isinstance(table, dict):
        raise changed(_LIBRARY, "tf2onnx.optimizer._optimizers", "it is no dict")
    return table


@contextlib.contextmanager
def without_optimizer(name):
    """tf2onnx's conversions in the block run without its graph optimizer `name`.

    Where this tf2onnx has no table of optimizers, or `name` is not in it, the
    conversions run with every optimizer: slower, but the same model.
    """
    try:
        table = _optimizer_table()
    except InternalChanged:  # `check()` reports it
        table = {}
    if name not in table:
        yield
        return
    module = internal(_LIBRARY, "tf2onnx.optimizer")
    module._optimizers = type(table)((k, v) for k, v in table.items() if k != name)
    try:
        yield
    finally:
        module._optimizers = table


def check():
    """Make sure the tf2onnx internals that keras-capsules uses are there.

    Raises:
        InternalChanged: one is gone; the message names it and tf2onnx's version.
    """
    if "einsum_optimizer" not in _optimizer_table():
        raise changed(_LIBRARY, "tf2onnx.optimizer._optimizers['einsum_optimizer']")

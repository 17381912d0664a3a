"""keras-capsules: capsule networks for Keras 3.

The submodules are imported when first used (`keras_capsules.layers`,
`from keras_capsules import losses`), so that importing the package does not
import Keras or TensorFlow. Loading a saved model needs its classes
registered: import the modules they come from first (`import applications`
registers the prebuilt models and every layer and loss they use).

Importing the package selects TensorFlow's pooling CPU allocator where
TensorFlow will run without oneDNN, unless `TF_CPU_ALLOCATOR_USE_BFC` is set
or TensorFlow has already run an operation (`use_pooled_cpu_allocator` says
why, and how to keep TensorFlow's default).
"""

import importlib

from keras_capsules._allocator import _choose_default
from keras_capsules._allocator import use_pooled_cpu_allocator

_choose_default()

__version__ = "0.1.0"

_SUBMODULES = (
    "callbacks",
    "datasets",
    "distribute",
    "layers",
    "losses",
    "metrics",
    "ops",
    "routing",
    "utils",
)

__all__ = [*_SUBMODULES, "use_pooled_cpu_allocator", "__version__"]


def __getattr__(name):
    """Import the submodule `name` on first use (PEP 562)."""
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))

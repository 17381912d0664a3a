"""keras-capsules: capsule networks for Keras 3."""

# First: it must run before TensorFlow allocates its first tensor.
from keras_capsules import _allocator  # noqa: F401
from keras_capsules import callbacks
from keras_capsules import datasets
from keras_capsules import distribute
from keras_capsules import layers
from keras_capsules import losses
from keras_capsules import ops
from keras_capsules import routing

__version__ = "0.1.0"

__all__ = [
    "callbacks",
    "datasets",
    "distribute",
    "layers",
    "losses",
    "ops",
    "routing",
    "__version__",
]

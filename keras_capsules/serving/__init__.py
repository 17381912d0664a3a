"""Serving: a versioned SavedModel export with a stable contract, and a model server.

`export_saved_model` needs TensorFlow only; `serve` needs the `serve` extra
(`pip install "keras-capsules[serve]"`), which installs KServe's model server.
`export_onnx` (the `onnx` extra: tf2onnx) and `export_litert` (TensorFlow's
converter; the `litert` extra installs LiteRT's interpreter to run the file)
write the same contract as one file for runtimes without TensorFlow.
"""

from keras_capsules.serving.export import RECONSTRUCT_CAPSULE_SIGNATURE
from keras_capsules.serving.export import RECONSTRUCT_SIGNATURE
from keras_capsules.serving.export import SERVING_SIGNATURE
from keras_capsules.serving.export import export_saved_model
from keras_capsules.serving.export import latest_version_dir
from keras_capsules.serving.portable import export_litert
from keras_capsules.serving.portable import export_onnx
from keras_capsules.serving.server import serve

__all__ = [
    "RECONSTRUCT_CAPSULE_SIGNATURE",
    "RECONSTRUCT_SIGNATURE",
    "SERVING_SIGNATURE",
    "export_litert",
    "export_onnx",
    "export_saved_model",
    "latest_version_dir",
    "serve",
]

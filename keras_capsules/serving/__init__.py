"""Serving: a versioned SavedModel export with a stable contract, and a model server.

The exports read a model through its `ServingSpec` (the applications' classifiers
declare theirs; a functional model is given one). `export_saved_model` needs
TensorFlow only; `serve` needs the `serve` extra
(`pip install "keras-capsules[serve]"`), which installs KServe's model server.
`export_onnx` (the `onnx` extra: tf2onnx) and `export_litert` (TensorFlow's
converter; the `litert` extra installs LiteRT's interpreter to run the file)
write the same contract as one file for runtimes without TensorFlow; `float32_copy`
makes the float32 model of a mixed-precision one, which LiteRT and ONNX Runtime need.
"""

from keras_capsules.serving.export import RECONSTRUCT_CAPSULE_SIGNATURE
from keras_capsules.serving.export import RECONSTRUCT_SIGNATURE
from keras_capsules.serving.export import SERVING_SIGNATURE
from keras_capsules.serving.export import export_saved_model
from keras_capsules.serving.export import float32_copy
from keras_capsules.serving.export import latest_version_dir
from keras_capsules.serving.portable import export_litert
from keras_capsules.serving.portable import export_onnx
from keras_capsules.serving.server import serve
from keras_capsules.serving.serving_spec import ServingSpec

__all__ = [
    "RECONSTRUCT_CAPSULE_SIGNATURE",
    "RECONSTRUCT_SIGNATURE",
    "SERVING_SIGNATURE",
    "ServingSpec",
    "export_litert",
    "export_onnx",
    "export_saved_model",
    "float32_copy",
    "latest_version_dir",
    "serve",
]

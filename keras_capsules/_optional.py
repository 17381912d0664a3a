"""Optional dependencies: import one, or fail with the extra that installs it."""

import importlib
import sys

# What each optional module is installed with: `pip install "keras-capsules[EXTRA]"`.
_EXTRAS = {
    "tensorflow": "tensorflow-cpu",
    "tensorflow_datasets": "datasets",
    "keras_tuner": "tune",
    "kserve": "serve",
    "gradio": "explore",
    "onnx": "onnx",
    "tf2onnx": "onnx",
    "onnxruntime": "onnx",
    "huggingface_hub": "hf",
    "kagglehub": "kaggle",
}


def require(module, feature):
    """Import and return `module`, or raise an `ImportError` naming `feature` and its extra.

    A module already imported is returned from `sys.modules` without calling
    the import machinery: the `tf.data` pipelines call `require` inside the
    functions they trace, where AutoGraph would try, and fail, to convert
    `importlib`'s frozen code, with a warning on every run.
    """
    if module in sys.modules and sys.modules[module] is not None:
        return sys.modules[module]
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        if error.name is None or error.name.split(".")[0] != module.split(".")[0]:
            raise  # the module is there but one of its own imports failed
        extra = _EXTRAS[module.split(".")[0]]
        raise ImportError(
            f"{feature} needs {module.split('.')[0]}, which is not installed: "
            f'pip install "keras-capsules[{extra}]"'
        ) from error

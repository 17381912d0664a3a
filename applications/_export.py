"""`model.export` for the applications: ONNX and LiteRT through keras-capsules' checked exports."""

import keras


class PortableExport:
    """`export(path, format="onnx" | "litert")` writes the files `keras-capsules export` writes.

    Keras's own ONNX export of these models writes files ONNX Runtime refuses
    (tf2onnx has no conversion for `Expm1`), printing a notice and no error.
    On TensorFlow, the applications route `format="onnx"` and `"litert"`
    through `keras_capsules.serving.export_onnx` and `export_litert`, which
    load the written file in its runtime and compare it with the model before
    they report success; every other format, backend or option is Keras's.
    """

    def export(
        self, filepath, format="tf_saved_model", verbose=None, input_signature=None, **kwargs
    ):
        if (
            format in ("onnx", "litert")
            and keras.backend.backend() == "tensorflow"
            and input_signature is None
            and not kwargs
        ):
            from keras_capsules.serving import export_litert
            from keras_capsules.serving import export_onnx

            export = export_onnx if format == "onnx" else export_litert
            return export(self, filepath, verbose=True if verbose is None else verbose)
        return super().export(
            filepath, format=format, verbose=verbose, input_signature=input_signature, **kwargs
        )

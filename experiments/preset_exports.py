"""Export every shipped preset to every format: `python experiments/preset_exports.py`.

Each preset of `applications.list_presets()` is exported as a SavedModel, an
ONNX file and a LiteRT file, each through its export function, which loads
the result back in its runtime and refuses it unless it answers as the Keras
model does on the probe images (`keras_capsules.serving.export.verify_tolerance`).
For each export the JSON object records whether it was written (`ok`), the
error otherwise, the seconds it took, and, measured again here on the same
probes, how far its probabilities lie from Keras's (`max_difference`), the
tolerance the check held it to and whether any predicted class changed.

    python experiments/preset_exports.py
    python experiments/preset_exports.py --presets em_capsnet_mnist --formats saved_model

Smoke test (the smallest preset, one format, seconds):

    python experiments/preset_exports.py --presets em_capsnet_mnist --formats litert
"""

import argparse
import json
import os
import platform
import tempfile
import time

from _training import log

FORMATS = ("saved_model", "onnx", "litert")


def _runner(format_name, path):
    """A function of images to the written export's probabilities."""
    from keras_capsules.serving import portable

    if format_name == "saved_model":
        import tensorflow as tf

        signature = tf.saved_model.load(path).signatures["serving_default"]
        return lambda images: signature(images=tf.constant(images))["probabilities"].numpy()
    run = {"onnx": portable._run_onnx, "litert": portable._run_litert}[format_name]
    return lambda images: run(path, images)["probabilities"]


def export_one(model, format_name, folder):
    """Export `model` to `format_name` in `folder`; what was written and how close it is."""
    import numpy as np
    import tensorflow as tf

    from keras_capsules import serving
    from keras_capsules.serving import export as saved_model_export
    from keras_capsules.serving import portable
    from keras_capsules.serving.serving_spec import ServingSpec

    start = time.perf_counter()
    try:
        if format_name == "saved_model":
            path = serving.export_saved_model(model, os.path.join(folder, "saved"), verbose=False)
        else:
            path = os.path.join(folder, "model" + portable.SUFFIXES[format_name])
            {"onnx": serving.export_onnx, "litert": serving.export_litert}[format_name](
                model, path, verbose=False
            )
    except (ValueError, RuntimeError, OSError) as error:
        return {"ok": False, "error": str(error), "seconds": time.perf_counter() - start}
    seconds = time.perf_counter() - start
    spec = ServingSpec.of(model, None)
    # Keras's answers as the export's check computes them: the SavedModel's against the
    # serving function run eagerly, the files' against it traced.
    if format_name == "saved_model":
        function = saved_model_export._predict_function(tf, model, spec, "probabilities")
    else:
        _, _, function = portable._prediction_function(model, "onnx", spec, "probabilities")
    answer = _runner(format_name, path)
    result = {"ok": True, "seconds": round(seconds, 1), "probes": {}}
    for shape in saved_model_export.probe_shapes(spec, portable.PROBE_IMAGES):
        images = saved_model_export._probe_images(spec, shape)

        def probabilities(x):
            return np.asarray(function(tf.constant(x))["probabilities"], dtype="float32")

        expected = probabilities(images)
        answered = np.asarray(answer(images), dtype="float32")
        tolerance = saved_model_export.verify_tolerance(model, probabilities, images, expected)
        result["probes"][str(shape[1:])] = {
            "max_difference": float(np.max(np.abs(answered - expected))),
            "tolerance": tolerance,
            "classes_changed": int(np.sum(answered.argmax(-1) != expected.argmax(-1))),
        }
    return result


def main():
    import applications

    names = [preset["name"] for preset in applications.list_presets()]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", choices=names, default=names)
    parser.add_argument("--formats", nargs="+", choices=FORMATS, default=list(FORMATS))
    args = parser.parse_args()

    import keras
    import tensorflow as tf

    results = {}
    for name in args.presets:
        model = applications.PresetMixin.from_preset(name)
        for format_name in args.formats:
            log(f"{name} -> {format_name}")
            with tempfile.TemporaryDirectory() as folder:
                results[f"{name} {format_name}"] = export_one(model, format_name, folder)
            log(json.dumps(results[f"{name} {format_name}"]))
    summary = {
        "exported": sum(result["ok"] for result in results.values()),
        "of": len(results),
        "results": results,
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "versions": {"keras": keras.__version__, "tensorflow": tf.__version__},
    }
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()

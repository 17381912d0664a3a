"""Export a capsule network as one ONNX or LiteRT file, for runtimes without TensorFlow.

Both files hold the SavedModel's `serving_default` contract (see
`export_saved_model`): one float32 input `images`, `(batch, height, width,
channels)` with a dynamic batch (and any height, width and colour for a
model that converts images itself), and the outputs `probabilities`,
`classes` (int64) and, when the model has them, `poses`. ONNX Runtime runs the `.onnx`
file, LiteRT's interpreter (`ai-edge-litert`) the `.tflite` file.
"""

import importlib
import re
import tempfile

import keras
import numpy as np

from keras_capsules._atomic import replacing
from keras_capsules._autodiff import inference_only
from keras_capsules._optional import require
from keras_capsules.serving.export import OUTPUT_KINDS
from keras_capsules.serving.export import SERVING_SIGNATURE
from keras_capsules.serving.export import _check_probabilities
from keras_capsules.serving.export import _probe_images
from keras_capsules.serving.export import _write_out
from keras_capsules.serving.export import disagreement
from keras_capsules.serving.export import low_precision_layer
from keras_capsules.serving.export import probe_shapes
from keras_capsules.serving.export import verify_tolerance
from keras_capsules.serving.serving_spec import ServingSpec

SUFFIXES = {"onnx": ".onnx", "litert": ".tflite"}


def export_onnx(model, path, spec=None, output_kind="probabilities", opset=None, verbose=True):
    """Export a capsule network as an ONNX file that ONNX Runtime serves.

    The graph is the model's inference pass (routing without its training
    gradient) followed by the serving contract of `export_saved_model`'s
    `serving_default`: input `images`, float32 `(batch, height, width,
    channels)`, pixel values as the model was trained on (any height, width
    and colour for a model that converts images itself); outputs
    `probabilities`, `classes` (int64) and `poses` (when the model has class
    capsules). Unlike the SavedModel, the graph holds no checks of its own:
    ONNX Runtime refuses a batch of the wrong rank (or, for a model that
    takes one size only, size) itself, and NaN pixels give NaN outputs. The
    model's image converter refuses an image of other than 1, 3 or 4
    channels, as it does in Keras, here with a failing `Reshape`.

    Needs the TensorFlow backend and the `onnx` extra (`pip install
    "keras-capsules[onnx]"`: tf2onnx converts the TensorFlow graph).

    Args:
        model: a built Keras model taking one image batch, as for
            `export_saved_model`.
        path: the file to write, ending in `.onnx`; an existing file is
            replaced (in one step: a reader never sees half a file).
        spec: a `ServingSpec`, as for `export_saved_model`; by default the
            model's own.
        output_kind: `"probabilities"` (default, checked on probe images) or
            `"logits"` (exported as their softmax), as for `export_saved_model`.
        opset: the ONNX opset to target; tf2onnx's default when `None`.
        verbose: print what was written.

    Returns:
        `path`.

    Raises:
        ValueError: the model's graph uses TensorFlow operations that tf2onnx
            cannot express in ONNX; the message names them.

    Example:

    >>> from keras_capsules.serving import export_onnx
    >>> export_onnx(model, "capsnet.onnx")  # doctest: +SKIP
    'capsnet.onnx'
    """
    _check_arguments(path, "onnx", output_kind)
    onnx = require("onnx", "serving.export_onnx")
    convert = require("tf2onnx.convert", "serving.export_onnx")
    tf, spec, function = _prediction_function(model, "onnx", spec, output_kind)
    # Traced without the routings' training gradients: nothing differentiates the file.
    with inference_only(), _without_einsum_search():
        proto, _ = convert.from_function(
            function,
            input_signature=function.input_signature,
            opset=opset,
            custom_op_handlers={"Expm1": (_expm1, [])},
        )
    unconverted = sorted(
        {node.op_type for node in proto.graph.node if not onnx.defs.has(node.op_type, node.domain)}
    )
    if unconverted:
        raise ValueError(
            "ONNX cannot express these TensorFlow operations of the model (tf2onnx has no "
            f"conversion for them): {', '.join(unconverted)}."
        )
    with replacing(path) as temporary:
        with open(temporary, "wb") as f:
            f.write(proto.SerializeToString())
        _verify(model, spec, function, temporary, "onnx", _run_onnx)
    if verbose:
        print(f"ONNX model written to {path} (checked with ONNX Runtime)")
    return path


def export_litert(model, path, spec=None, output_kind="probabilities", verbose=True):
    """Export a capsule network as a LiteRT (TensorFlow Lite) file.

    The file has one signature, `serving_default`, with the contract of
    `export_onnx`: input `images`, outputs `probabilities`, `classes` (int64)
    and `poses`. It uses LiteRT's builtin operations only, so LiteRT's own
    interpreter runs it (`ai_edge_litert.interpreter.Interpreter`, the
    `litert` extra), with no TensorFlow and no Flex delegate; the export
    fails, naming the operations, for a model that needs more.

    Needs the TensorFlow backend; TensorFlow's converter writes the file.

    Args:
        model: a built Keras model taking one image batch, as for
            `export_saved_model`.
        path: the file to write, ending in `.tflite`; an existing file is
            replaced (in one step).
        spec: a `ServingSpec`, as for `export_saved_model`; by default the
            model's own.
        output_kind: `"probabilities"` or `"logits"`, as for `export_saved_model`.
        verbose: print what was written.

    Returns:
        `path`.

    Example:

    >>> from keras_capsules.serving import export_litert
    >>> export_litert(model, "capsnet.tflite")  # doctest: +SKIP
    'capsnet.tflite'
    """
    _check_arguments(path, "litert", output_kind)
    tf, spec, function = _prediction_function(model, "litert", spec, output_kind)
    archive = keras.export.ExportArchive()
    archive.track(model)
    with inference_only():  # traced without the routings' training gradients
        function.get_concrete_function()
        archive.add_endpoint(SERVING_SIGNATURE, function)
    with tempfile.TemporaryDirectory() as saved_model:
        # Through a SavedModel, as Keras's own LiteRT export does: converted from
        # the concrete function directly, these models answered NaN.
        _write_out(
            tf,
            archive,
            saved_model,
            options=tf.saved_model.SaveOptions(experimental_custom_gradients=False),
        )
        converter = tf.lite.TFLiteConverter.from_saved_model(
            saved_model, signature_keys=[SERVING_SIGNATURE]
        )
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
        try:
            flatbuffer = converter.convert()
        except Exception as error:  # ConverterError, whose text names the operations
            unconverted = sorted(set(re.findall(r"'tf\.(\w+)' op is neither", str(error))))
            if not unconverted:
                raise
            low = low_precision_layer(model)
            if low is not None:
                raise ValueError(
                    f"LiteRT's builtin operations do not take {low.compute_dtype}, in which "
                    f"the model computes (layer {low.name!r}, policy {low.dtype_policy.name}): "
                    "export a float32 copy: keras_capsules.serving.float32_copy(model), or "
                    "`keras-capsules export --float32`."
                ) from error
            raise ValueError(
                "LiteRT's builtin operations cannot express these TensorFlow operations "
                f"of the model: {', '.join(unconverted)}."
            ) from error
    with replacing(path) as temporary:
        with open(temporary, "wb") as f:
            f.write(flatbuffer)
        _verify(model, spec, function, temporary, "litert", _run_litert)
    if verbose:
        print(f"LiteRT model written to {path} (checked with LiteRT's interpreter)")
    return path


PROBE_IMAGES = 4


def _run_onnx(path, images):
    onnxruntime = require("onnxruntime", "Checking the exported ONNX file")
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [output.name for output in session.get_outputs()]
    return dict(zip(names, session.run(None, {"images": images}), strict=True))


def _run_litert(path, images):
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:  # TensorFlow's own copy of the interpreter
        import tensorflow as tf

        Interpreter = tf.lite.Interpreter
    runner = Interpreter(model_path=path).get_signature_runner(SERVING_SIGNATURE)
    return runner(images=images)


def _verify(model, spec, function, path, format, run):
    """Run the written file on probe images beside the traced function; refuse a mismatch.

    The probes are random pixels over the model's input range (`[0, 255]`,
    or as its spec declares), of the network's size and, for a model that
    takes any image, of another size and colour; the file's probabilities must match
    Keras's within `verify_tolerance` (1e-3, ten times that for a model
    computing in float16 or bfloat16, or three times the model's own
    sensitivity to float32 rounding where that is larger) with no class changed.
    """
    for shape in probe_shapes(spec, PROBE_IMAGES):
        _verify_on(model, function, path, format, run, _probe_images(spec, shape))


def _verify_on(model, function, path, format, run, images):
    """`_verify` on the probe `images`."""

    def probabilities(x):
        return np.asarray(function(x)["probabilities"], dtype="float32")

    expected = probabilities(images)
    names = {"onnx": "ONNX Runtime", "litert": "LiteRT's interpreter"}
    try:
        answered = run(path, images)
    except ImportError:
        raise
    except Exception as error:  # the runtime's own error: it cannot load or run the file
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ValueError(
            f"The exported {format} file does not run in {names[format]}, so it was not "
            f"written: {first}"
        ) from error
    tolerance = verify_tolerance(model, probabilities, images, expected)
    apart = disagreement(expected, answered.get("probabilities"), tolerance)
    if apart is None:
        return
    raise ValueError(
        f"The exported {format} file answers other probabilities than the Keras model on "
        f"{len(images)} probe images {images.shape[1:]} ({apart}), so it was not written."
    )


def _check_arguments(path, format, output_kind):
    """Refuse another backend, a file name without the format's suffix, an unknown output kind."""
    if keras.backend.backend() != "tensorflow":
        raise RuntimeError(
            f"{format} export needs the TensorFlow backend (current backend: "
            f"{keras.backend.backend()!r}). A .keras file saved on any backend loads there: "
            f"run `KERAS_BACKEND=tensorflow keras-capsules export MODEL.keras OUTPUT "
            f"--format {format}`."
        )
    if not str(path).endswith(SUFFIXES[format]):
        raise ValueError(
            f"The {format} file's name must end in {SUFFIXES[format]!r}. Received: {path!r}"
        )
    if output_kind not in OUTPUT_KINDS:
        raise ValueError(
            f"`output_kind` must be one of {OUTPUT_KINDS}. Received: output_kind={output_kind!r}"
        )


def _prediction_function(model, format, spec, output_kind):
    """TensorFlow, the spec and the `serving_default` function of `model`, not traced yet."""
    tf = require("tensorflow", f"serving.export_{format}")
    spec = ServingSpec.of(model, spec)
    if output_kind == "probabilities":
        _check_probabilities(tf, model, spec)

    def predict(images):
        probabilities, poses = spec.heads(model(images, training=False))
        probabilities = tf.cast(probabilities, tf.float32)
        if output_kind == "logits":
            probabilities = tf.nn.softmax(probabilities, axis=-1)
        result = {"probabilities": probabilities, "classes": tf.argmax(probabilities, axis=-1)}
        if poses is not None:
            result["poses"] = tf.cast(poses, tf.float32)
        return result

    if spec.any_image:
        channels = spec.input_channels
        shape = (None, None, None, channels[0] if len(channels) == 1 else None)
    else:
        shape = (None,) + spec.image_shape
    images = tf.TensorSpec(shape, tf.float32, name="images")
    return tf, spec, tf.function(predict, input_signature=[images], autograph=False)


def _without_einsum_search():
    """Convert without tf2onnx's einsum optimizer, whose search is too slow for routing.

    For every einsum the optimizer times all orders of the equation's letters
    (5040 for `ClassMatrixCapsule`'s seven: most of a 25 s conversion of a
    small `MatrixCapsNetNORB`); ONNX Runtime runs the `Einsum` operation as it
    is. If a tf2onnx release moves its optimizers, the conversion runs with the
    optimizer, slower.
    """
    from keras_capsules._compat import tf2onnx as tf2onnx_compat

    return tf2onnx_compat.without_optimizer("einsum_optimizer")


def convert_expm1_to_onnx():
    """Teach tf2onnx to convert TensorFlow's `Expm1`, for every conversion after this call.

    `exponential_squash` (Efficient-CapsNet's primary capsules) computes
    `expm1`, for which tf2onnx has no conversion: it copies the node, and ONNX
    Runtime refuses the file ("No Op registered for Expm1"). `export_onnx`
    passes the conversion to its own call; Keras's `model.export(path,
    format="onnx")` passes none, so the applications' classifiers register it
    with tf2onnx's `tf_op` (its API for op conversions) before calling it.
    Registering again replaces the same handler.
    """
    handler = require("tf2onnx.handler", "model.export(format='onnx')")

    class Expm1:
        @classmethod
        def version_11(cls, ctx, node, **kwargs):  # `Where` and float `Equal`: opset 11
            _expm1(ctx, node, node.name, [])

    handler.tf_op("Expm1")(Expm1)


def _expm1(graph, node, name, args):
    """tf2onnx's missing `Expm1` (`exponential_squash` uses it), in ONNX operations.

    ONNX has no `expm1`, and `exp(x) - 1` loses the relative precision of small
    `x`. For `|x| < 1/2` this is Kahan's `(u - 1) x / log(u)` with `u = exp(x)`
    (`x` itself where `u` rounds to 1), accurate to a few float32 units in
    the last place; elsewhere `u - 1` is already that accurate.
    """
    utils = importlib.import_module("tf2onnx.utils")
    x = node.input[0]
    dtype = utils.map_onnx_to_numpy_type(graph.get_dtype(x))

    def constant(value):
        return graph.make_const(utils.make_name(f"{name}_c"), np.array(value, dtype)).output[0]

    def op(op_type, *inputs):
        return graph.make_node(op_type, list(inputs)).output[0]

    u = op("Exp", x)
    u_minus_one = op("Sub", u, constant(1))
    kahan = op("Div", op("Mul", u_minus_one, x), op("Log", u))
    near_zero = op("Where", op("Equal", u, constant(1)), x, kahan)
    small = op("Less", op("Abs", x), constant(0.5))
    # The node becomes the last operation, keeping its output's name, shape and type.
    node.type = "Where"
    node.domain = ""
    graph.replace_inputs(node, [small, near_zero, u_minus_one])

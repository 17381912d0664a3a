"""Export a capsule network as a versioned SavedModel with a stable serving contract."""

import contextlib
import errno
import os

import keras
import numpy as np

from keras_capsules._atomic import replacing
from keras_capsules._compat import keras as keras_compat
from keras_capsules._optional import require
from keras_capsules._validation import is_int
from keras_capsules.serving.serving_spec import ServingSpec

SERVING_SIGNATURE = "serving_default"
OUT_OF_RANGE = (
    "the model's outputs are NaN or infinite for these images: "
    "pixel values out of the range the model can answer"
)
RECONSTRUCT_SIGNATURE = "reconstruct"
RECONSTRUCT_CAPSULE_SIGNATURE = "reconstruct_capsule"


def next_version(output_dir):
    """The version TF Serving will load next: one above the highest in `output_dir`."""
    versions = [int(name) for name in _listdir(output_dir) if name.isdigit()]
    return max(versions, default=0) + 1


def latest_version_dir(path):
    """The SavedModel directory to serve from `path`.

    `path` is either a SavedModel itself or a versioned base directory
    (`path/1/`, `path/2/`, ...), in which case the highest version is chosen,
    as TF Serving does.
    """
    if os.path.isfile(os.path.join(path, "saved_model.pb")):
        return path
    versions = [
        int(name)
        for name in _listdir(path)
        if name.isdigit() and os.path.isfile(os.path.join(path, name, "saved_model.pb"))
    ]
    if not versions:
        raise FileNotFoundError(
            f"No SavedModel in {path!r}: expected {path}/saved_model.pb or version "
            f"folders such as {path}/1/saved_model.pb (as `keras-capsules export` writes)."
        )
    return os.path.join(path, str(max(versions)))


def _listdir(path):
    return os.listdir(path) if os.path.isdir(path) else []


OUTPUT_KINDS = ("probabilities", "logits")


def _probe_images(spec, shape):
    """float32 random pixels of `shape` over the model's input range, the same every call."""
    low, high = spec.pixel_range or (0.0, 255.0)
    return np.random.default_rng(0).uniform(low, high, shape).astype("float32")


def probe_shapes(spec, count):
    """The shapes of the probe batches: the network's images and, for a model that takes
    any image, a larger one in colour (with alpha for a grey or colour network)."""
    shapes = [(count,) + spec.image_shape]
    if spec.any_image:
        height, width, channels = spec.image_shape
        other = 4 if channels in (1, 3) else channels
        shapes.append((count, height + 7, width + 3, other))
    return shapes


def _load(tf, path):
    """`tf.saved_model.load(path)`."""
    return tf.saved_model.load(path)


def _verify_saved_model(tf, model, spec, path, predict, probes=4):
    """Load the written SavedModel and compare its answers with the model's; refuse a mismatch.

    The answers are held to `verify_tolerance`, as the ONNX and LiteRT files are.
    """
    try:
        signature = _load(tf, path).signatures[SERVING_SIGNATURE]
    except Exception as error:  # TensorFlow's own error: the folder does not load
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ValueError(
            f"The exported SavedModel does not load, so it was not written: {first}"
        ) from error
    for shape in probe_shapes(spec, probes):
        images = _probe_images(spec, shape)
        expected = predict(tf.constant(images))["probabilities"].numpy()
        try:
            answered = signature(images=tf.constant(images))
        except Exception as error:  # TensorFlow's own error: the graph does not run
            first = str(error).strip().splitlines()[0] if str(error).strip() else "error"
            raise ValueError(
                f"The exported SavedModel does not run on images {shape[1:]}, so it was not "
                f"written: {first}"
            ) from error
        tolerance = verify_tolerance(
            model, lambda x: predict(tf.constant(x))["probabilities"].numpy(), images, expected
        )
        apart = disagreement(expected, answered["probabilities"].numpy(), tolerance)
        if apart is not None:
            raise ValueError(
                "The exported SavedModel answers other probabilities than the Keras model on "
                f"{len(images)} probe images {shape[1:]} ({apart}), so it was not written."
            )


VERIFY_TOLERANCE = 1e-3
"""Largest difference of a probability between an export and Keras (float32), or three times
the model's own sensitivity to float32 rounding where that is larger."""
SENSITIVE_TOLERANCE = 2e-2
"""The most that a model's sensitivity may widen `VERIFY_TOLERANCE` to."""


def verify_tolerance(model, probabilities, images, expected):
    """How far an export's probabilities may be from Keras's `expected` on the probe `images`.

    What matters of a probability (a capsule length, an EM activation) is
    its class and its first three digits; an export runs the same model
    with other kernels, fused or reordered operations (Grappler's rewrites
    of the SavedModel's graph, ONNX Runtime's, LiteRT's), so it rounds
    float32 otherwise, and a model amplifies that rounding as much as it
    amplifies any change of its inputs. The tolerance is the larger of
    `VERIFY_TOLERANCE` (1e-3; ten times that for a model computing in
    float16 or bfloat16) and three times how far the model's own
    probabilities move when the probes move by one part in a million, at
    most `SENSITIVE_TOLERANCE`: the shipped EM model, whose three rounds of
    EM routing amplify float32 rounding, moves by up to 1.5e-3, and its
    exports lie up to 1.7e-3 from Keras with no class changed.

    Args:
        model: the Keras model exported.
        probabilities: a function of float32 images to the model's
            probabilities (a NumPy array), as `expected` was computed.
        images: the probe images, a float32 NumPy array.
        expected: `probabilities(images)`.
    """
    floor = VERIFY_TOLERANCE * (10 if low_precision_layer(model) is not None else 1)
    return max(floor, min(3 * _sensitivity(probabilities, images, expected), SENSITIVE_TOLERANCE))


def _sensitivity(probabilities, images, expected):
    """How far the model's probabilities move when its inputs move by one part in 10^6."""
    if not expected.size:
        return 0.0
    nudged = np.asarray(probabilities(images * np.float32(1 + 1e-6)), dtype="float32")
    return float(np.nanmax(np.abs(nudged - expected)))


def disagreement(expected, answered, tolerance):
    """What sets an export's probabilities `answered` apart from Keras's `expected`, or `None`.

    They agree when every probability is within `tolerance` of Keras's and
    every predicted class is Keras's, but where Keras's two highest
    probabilities are themselves within `tolerance` of each other (a tie at
    the model's precision).
    """
    expected = np.asarray(expected, dtype="float32")
    answered = np.asarray(answered, dtype="float32")
    if answered.shape != expected.shape:
        return f"shape {answered.shape} against {expected.shape}"
    problems = []
    if not np.allclose(answered, expected, atol=tolerance, rtol=0):
        problems.append(
            f"up to {np.max(np.abs(answered - expected)):.3g} apart, beyond {tolerance:g}"
        )
    if expected.ndim == 2 and expected.shape[-1] > 1:
        top_two = np.sort(expected, axis=-1)[:, -2:]
        clear = top_two[:, 1] - top_two[:, 0] > tolerance
        changed = int(np.sum(clear & (answered.argmax(-1) != expected.argmax(-1))))
        if changed:
            problems.append(f"the class of {changed} of {len(expected)} changed")
    return "; ".join(problems) or None


def low_precision_layer(model):
    """The first layer of `model` computing in float16 or bfloat16, or `None`."""
    for layer in keras_compat.flatten_layers(model):
        if keras.backend.standardize_dtype(layer.compute_dtype) in ("float16", "bfloat16"):
            return layer
    return None


def float32_copy(model):
    """A copy of `model` that computes in float32, with its weights.

    A model under a `mixed_float16` or `mixed_bfloat16` policy keeps its
    variables in float32 and computes in the low precision; LiteRT's builtin
    operations and ONNX Runtime take no bfloat16, so such a model exports
    as this copy (`keras-capsules export --float32`). Its probabilities
    differ from the low-precision model's by that model's own rounding.
    A model computing in float32 is returned as it is.

    The applications' models are rebuilt from their config with
    `dtype="float32"`; a functional or sequential model is cloned layer by
    layer with each layer's dtype set to float32.

    Args:
        model: a built Keras model.

    Returns:
        The float32 model, with `model`'s weights.

    Raises:
        ValueError: a layer of the copy still computes in float16 or
            bfloat16 (a layer that sets its own dtype); the message names it.

    Example:

    >>> import applications
    >>> from keras_capsules.serving import float32_copy
    >>> model = applications.BaselineCNN(dtype="mixed_float16")
    >>> float32_copy(model).dtype_policy.name
    'float32'
    """
    low = low_precision_layer(model)
    if low is None:
        return model
    config = model.get_config()
    if isinstance(model, keras.Sequential) or _is_functional(model):
        copy = keras.models.clone_model(model, clone_function=_float32_layer)
    elif isinstance(config, dict) and "dtype" in config:
        copy = type(model).from_config({**config, "dtype": "float32"})
    else:
        raise ValueError(
            f"Cannot make a float32 copy of the model {model.name!r}: its config takes no "
            f"`dtype`, and it computes in {low.compute_dtype} (layer {low.name!r}). Build it "
            "again with a float32 policy and set its weights."
        )
    still = low_precision_layer(copy)
    if still is not None:
        raise ValueError(
            f"Cannot make a float32 copy of the model {model.name!r}: its layer "
            f"{still.name!r} still computes in {still.compute_dtype} (policy "
            f"{still.dtype_policy.name}) when the model is rebuilt in float32."
        )
    copy.set_weights(model.get_weights())
    return copy


def _is_functional(model):
    """Whether `model` is a functional model (not a subclass with its own `call`)."""
    return type(model).__name__ == "Functional"


def _float32_layer(layer):
    """`layer` rebuilt from its config with the float32 policy (for `clone_model`)."""
    return type(layer).from_config({**layer.get_config(), "dtype": "float32"})


def _check_probabilities(tf, model, spec):
    """Refuse a model whose class scores leave [0, 1] on probe images.

    The probes are black images and uniform noise in [0, 1] and [0, 255], the
    two pixel conventions; a softmax, sigmoid or capsule length never leaves
    [0, 1], a linear layer (logits) almost always does.
    """
    rng = np.random.default_rng(0)
    shape = (2,) + spec.image_shape
    probes = [
        tf.zeros(shape),
        tf.constant(rng.uniform(0, 1, shape), tf.float32),
        tf.constant(rng.uniform(0, 255, shape), tf.float32),
    ]
    for images in probes:
        scores, _ = spec.heads(model(images, training=False))
        scores = tf.cast(scores, tf.float32).numpy()
        finite = scores[np.isfinite(scores)]
        if finite.size and (finite.min() < -1e-6 or finite.max() > 1 + 1e-6):
            raise ValueError(
                "The model's class scores are not probabilities: on probe images they "
                f"range from {finite.min():.4g} to {finite.max():.4g}, outside [0, 1]. If "
                "they are logits, export with `output_kind='logits'` (the server then "
                "returns their softmax as `probabilities`)."
            )


def export_saved_model(
    model, output_dir, version=None, spec=None, verbose=True, output_kind="probabilities"
):
    """Export a capsule network as a SavedModel that TF Serving and KServe load.

    The SavedModel is written to `output_dir/<version>/`, the versioned layout
    of TF Serving. Its signatures take a float32 image batch `images` of shape
    `(batch, height, width, channels)`, pixel values as the model was trained
    on (`[0, 255]` for the applications), and check it in the graph: NaN or
    infinite pixels are refused, and so is a wrong rank or size, with a
    message naming the expected shape. A model that converts images itself
    (`spec.any_image`, as every classifier of `applications`, whose image
    converter is inside) takes any height and width, grey, RGB or RGBA, and
    answers as if the images had been converted first.

    - `serving_default` returns `probabilities` (float32, `(batch, classes)`:
      capsule lengths or activations), `classes` (int64, the predicted class),
      `labels` (string, its name from the model's `class_names`, or its index
      as text) and `poses` (float32, the class capsules), when the model has
      them.
      Outputs that are not finite (pixels far outside the range the model
      was trained on) fail in the graph, as bad pixels do.
    - `reconstruct` (models with a decoder, such as `CapsNetMNIST`) returns
      `reconstructions` in [0, 1] from the longest capsule and its `classes`.
    - `reconstruct_capsule` takes `images` and `capsules` (int64, one class
      index per image) and reconstructs each image from the capsule named.

    Nothing from keras-capsules is needed to load the result: it is plain
    TensorFlow (`tf.saved_model.load`, `keras.layers.TFSMLayer`,
    `saved_model_cli`, TF Serving).

    Args:
        model: a built Keras model taking one image batch, e.g. an application
            or a functional model made of keras-capsules layers.
        output_dir: the model's base directory; versions are folders below it.
        version: positive integer version; by default one above the highest
            version already in `output_dir` (1 for a new directory).
        spec: a `ServingSpec`, what the export reads of the model (its
            images, classes and outputs); by default the one the model
            declares (`model.serving_spec()`, as the applications do). A
            functional model needs one.
        verbose: print what was written.
        output_kind: what the model's class scores are: `"probabilities"`
            (default; capsule lengths, activations or a softmax, checked to lie
            in [0, 1] on probe images, and refused otherwise) or `"logits"`
            (served as their softmax).

    Returns:
        The path of the version directory written.

    Raises:
        OSError: the SavedModel cannot be written (a full disk, a folder
            that cannot be written); nothing is left of it, and the folders
            made for it are removed.

    Example:

    >>> from keras_capsules.serving import export_saved_model
    >>> export_saved_model(model, "models/capsnet")  # doctest: +SKIP
    'models/capsnet/1'
    """
    tf = _tensorflow()
    version, path = _version_path(output_dir, version, output_kind)
    spec = ServingSpec.of(model, spec)
    if output_kind == "probabilities":
        _check_probabilities(tf, model, spec)
    predict = _predict_function(tf, model, spec, output_kind)
    archive = _serving_archive(tf, model, spec, predict)
    # Written beside and renamed into place: TF Serving never sees half a version.
    with _new_folders(output_dir), replacing(path) as temporary:
        _write_out(tf, archive, temporary)
        _verify_saved_model(tf, model, spec, temporary, predict)
    if verbose:
        print(f"SavedModel version {version} written to {path} (loaded and checked)")
    return path


@contextlib.contextmanager
def _new_folders(folder):
    """Create `folder` and its missing parents; remove those it created if the block fails."""
    created = []
    path = os.path.abspath(folder)
    while not os.path.isdir(path):
        created.append(path)
        path = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    try:
        yield
    except BaseException:
        for path in created:  # the deepest first; one holding anything stays
            try:
                os.rmdir(path)
            except OSError:
                break
        raise


# TensorFlow's errors for the system's, as its file system reports them.
_WRITE_ERRNOS = {
    "ResourceExhaustedError": errno.ENOSPC,
    "OutOfRangeError": errno.EFBIG,
    "PermissionDeniedError": errno.EACCES,
    "NotFoundError": errno.ENOENT,
}


def _write_out(tf, archive, path, **kwargs):
    """`archive.write_out(path)`, its failure to write a file raised as an `OSError`.

    TensorFlow reports a full disk as a `ResourceExhaustedError` (a file too
    large as an `OutOfRangeError`, ...): it is raised as the `OSError` a
    Python write would raise, with `path` as its file name.
    """
    try:
        archive.write_out(path, verbose=False, **kwargs)
    except tf.errors.OpError as error:
        code = _WRITE_ERRNOS.get(type(error).__name__)
        if code is None:
            raise
        raise OSError(code, os.strerror(code), path) from error


def _tensorflow():
    """The `tensorflow` module, refusing any other Keras backend."""
    if keras.backend.backend() != "tensorflow":
        raise RuntimeError(
            "SavedModel export needs the TensorFlow backend (current backend: "
            f"{keras.backend.backend()!r}). A .keras file saved on any backend loads there: "
            "run `KERAS_BACKEND=tensorflow keras-capsules export MODEL.keras OUTPUT_DIR`."
        )
    return require("tensorflow", "serving.export.export_saved_model")


def _version_path(output_dir, version, output_kind):
    """`(version, path)` of the new version directory, after checking the arguments."""
    if version is None:
        version = next_version(output_dir)
    if output_kind not in OUTPUT_KINDS:
        raise ValueError(
            f"`output_kind` must be one of {OUTPUT_KINDS}. Received: output_kind={output_kind!r}"
        )
    if not is_int(version) or version < 1:
        raise ValueError(f"`version` must be a positive integer. Received: version={version!r}")
    path = os.path.join(output_dir, str(version))
    if os.path.exists(path):
        raise FileExistsError(
            f"Version {version} already exists at {path}; choose another `version` "
            "(TF Serving serves the highest) or remove it."
        )
    return version, path


def _image_check(tf, spec):
    """A graph function passing `images` on, failing on a wrong shape or non-finite pixels."""
    image_shape = spec.image_shape
    channels = spec.input_channels
    if spec.any_image:
        expected = "(batch, height, width, channels) with " + " or ".join(map(str, channels))
        expected += " channels"
        static = (None, None, None, None if len(channels) > 1 else channels[0])
    else:
        expected = "shape (batch, " + ", ".join(str(d) for d in image_shape) + ")"
        static = (None,) + image_shape

    def size_ok(shape):
        if spec.any_image:
            sides = tf.reduce_all(shape[1:3] > 0)
            return sides & tf.reduce_any(tf.equal(shape[3], channels))
        return tf.reduce_all(tf.equal(shape[1:], image_shape))

    def checked(images):
        shape = tf.shape(images)
        rank_ok = tf.equal(tf.size(shape), len(image_shape) + 1)
        fits = tf.cond(rank_ok, lambda: size_ok(shape), lambda: tf.constant(False))
        shape_check = tf.debugging.Assert(
            rank_ok & fits,
            [f"`images` must be a float32 batch {expected}; received shape", shape],
            summarize=8,
        )
        with tf.control_dependencies([shape_check]):
            images = tf.ensure_shape(tf.identity(images), static)
        return tf.debugging.assert_all_finite(images, "`images` contains NaN or infinite pixels")

    return checked


def _finite(tf, tensor):
    """`tensor` as float32, failing in the graph when it is NaN or infinite."""
    return tf.debugging.assert_all_finite(tf.cast(tensor, tf.float32), OUT_OF_RANGE)


def _predict_function(tf, model, spec, output_kind):
    """The `serving_default` function: `probabilities`, `classes` and `poses` of `images`."""
    checked = _image_check(tf, spec)
    names = None if spec.class_names is None else tf.constant(list(spec.class_names))

    def predict(images):
        probabilities, poses = spec.heads(model(checked(images), training=False))
        if output_kind == "logits":
            probabilities = tf.nn.softmax(tf.cast(probabilities, tf.float32), axis=-1)
        probabilities = _finite(tf, probabilities)
        classes = tf.argmax(probabilities, axis=-1)
        result = {
            "probabilities": probabilities,
            "classes": classes,
            "labels": tf.gather(names, classes)
            if names is not None
            else tf.strings.as_string(classes),
        }
        if poses is not None:
            result["poses"] = _finite(tf, poses)
        return result

    return predict


def _serving_archive(tf, model, spec, predict):
    """The `ExportArchive` of `model` with its serving signatures and shape records."""
    image_spec = tf.TensorSpec(shape=None, dtype=tf.float32, name="images")
    archive = keras.export.ExportArchive()
    archive.track(model)
    # Recorded for servers: the signatures accept any rank so that they can
    # answer a wrong one with a message, which leaves the shape unstated.
    archive.add_variable_collection(
        "image_shape", [tf.Variable(spec.image_shape, dtype=tf.int64, trainable=False)]
    )
    archive.add_variable_collection(
        "input_channels", [tf.Variable(spec.input_channels, dtype=tf.int64, trainable=False)]
    )
    archive.add_variable_collection(
        "any_image", [tf.Variable(spec.any_image, dtype=tf.bool, trainable=False)]
    )
    if spec.pixel_range is not None:  # the server refuses pixels outside it
        archive.add_variable_collection(
            "pixel_range", [tf.Variable(spec.pixel_range, dtype=tf.float32, trainable=False)]
        )
    if spec.class_names:  # the server's metadata names the classes
        archive.add_variable_collection(
            "class_names",
            [tf.Variable(list(spec.class_names), dtype=tf.string, trainable=False)],
        )
    archive.add_endpoint(
        SERVING_SIGNATURE, tf.function(predict, input_signature=[image_spec], autograph=False)
    )
    if spec.decoder is not None:
        _add_reconstruction_endpoints(tf, archive, spec, predict, image_spec)
    return archive


def _add_reconstruction_endpoints(tf, archive, spec, predict, image_spec):
    """Add `reconstruct` and `reconstruct_capsule` to `archive`, for models with a decoder."""
    decoder, mask = spec.decoder, spec.mask

    def reconstruct(images):
        outputs = predict(images)
        return {
            "reconstructions": _finite(tf, decoder(mask(outputs["poses"]))),
            "classes": outputs["classes"],
        }

    def reconstruct_capsule(images, capsules):
        poses = predict(images)["poses"]
        num_classes = poses.shape[1]  # known when traced
        in_range = tf.reduce_all((capsules >= 0) & (capsules < num_classes))
        checks = [
            tf.debugging.Assert(
                in_range, [f"`capsules` must be class indices in [0, {num_classes})"]
            ),
            tf.debugging.assert_equal(
                tf.shape(capsules)[0],
                tf.shape(images)[0],
                message="`capsules` needs one class index per image",
            ),
        ]
        with tf.control_dependencies(checks):
            poses = tf.identity(poses)
        return {"reconstructions": _finite(tf, decoder(mask(poses, labels=capsules)))}

    archive.add_endpoint(
        RECONSTRUCT_SIGNATURE,
        tf.function(reconstruct, input_signature=[image_spec], autograph=False),
    )
    archive.add_endpoint(
        RECONSTRUCT_CAPSULE_SIGNATURE,
        tf.function(
            reconstruct_capsule,
            input_signature=[
                image_spec,
                tf.TensorSpec(shape=[None], dtype=tf.int64, name="capsules"),
            ],
            autograph=False,
        ),
    )

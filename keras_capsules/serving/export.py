"""Export a capsule network as a versioned SavedModel with a stable serving contract."""

import contextlib
import errno
import os

import keras
import numpy as np

from keras_capsules._atomic import replacing
from keras_capsules._optional import require
from keras_capsules._validation import is_int

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


def _image_shape(model, input_shape):
    if input_shape is None:
        inputs = getattr(model, "inputs", None)
        if not inputs or len(inputs) != 1:
            raise ValueError(
                "Cannot tell the image shape of this model: pass `input_shape`, "
                "the shape of one image such as (28, 28, 1)."
            )
        input_shape = tuple(inputs[0].shape[1:])
    input_shape = tuple(input_shape)
    if len(input_shape) != 3 or not all(isinstance(d, int) and d > 0 for d in input_shape):
        raise ValueError(
            "`input_shape` must be a fully known (height, width, channels) image shape. "
            f"Received: input_shape={input_shape}"
        )
    return input_shape


def _heads(tf, outputs):
    """Class probabilities and class capsule poses (or None) from a model's outputs.

    Understands the applications' dicts (`probabilities` and `poses`), the
    `[poses, activations]` pair of `ClassMatrixCapsule`, a tensor of class
    capsules `(batch, classes, dim)` (probabilities are their lengths) and a
    tensor of probabilities `(batch, classes)`.
    """
    if isinstance(outputs, dict):
        probabilities = outputs.get("probabilities")
        if probabilities is None:
            raise ValueError(
                "A model with dict outputs must name its class probabilities "
                f"'probabilities'. Received keys: {sorted(outputs)}"
            )
        return probabilities, outputs.get("poses")
    if isinstance(outputs, (list, tuple)):
        if len(outputs) == 2:
            poses, activations = outputs
            if activations.shape.rank == 2 and poses.shape.rank >= 3:
                return activations, poses
        raise ValueError(
            "A model with several outputs must return [poses, activations] as "
            f"ClassMatrixCapsule does. Received {len(outputs)} outputs."
        )
    if outputs.shape.rank == 3:
        capsules = tf.cast(outputs, tf.float32)
        return tf.sqrt(tf.reduce_sum(tf.square(capsules), axis=-1) + 1e-7), capsules
    if outputs.shape.rank == 2:
        return outputs, None
    raise ValueError(
        "The model must output class capsules (batch, classes, dim) or class "
        f"probabilities (batch, classes). Received an output of shape {outputs.shape}."
    )


OUTPUT_KINDS = ("probabilities", "logits")


def _probe_images(model, shape):
    """float32 random pixels of `shape` over the model's input range, the same every call."""
    low, high = _pixel_range(model) or (0.0, 255.0)
    return np.random.default_rng(0).uniform(low, high, shape).astype("float32")


def _load(tf, path):
    """`tf.saved_model.load(path)`."""
    return tf.saved_model.load(path)


def _verify_saved_model(tf, model, path, predict, image_shape, probes=4):
    """Load the written SavedModel and compare its answers with the model's; refuse a mismatch."""
    images = tf.constant(_probe_images(model, (probes,) + image_shape))
    expected = predict(images)["probabilities"].numpy()
    try:
        answered = _load(tf, path).signatures[SERVING_SIGNATURE](images=images)
    except Exception as error:  # TensorFlow's own error: the folder does not load or run
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ValueError(
            f"The exported SavedModel does not load and run, so it was not written: {first}"
        ) from error
    probabilities = answered["probabilities"].numpy()
    if probabilities.shape != expected.shape or not np.allclose(
        probabilities, expected, atol=1e-5, rtol=0
    ):
        raise ValueError(
            "The exported SavedModel answers other probabilities than the Keras model on "
            f"{probes} probe images, so it was not written."
        )


def _pixel_range(model):
    """`(low, high)` of the pixel values `model` expects, or `None` when it does not say.

    The applications declare it with `rescale`: `1 / 255` for [0, 255], `None`
    for images already in [0, 1].
    """
    if not hasattr(model, "rescale"):
        return None
    if model.rescale is None:
        return (0.0, 1.0)
    return (0.0, 1.0 / float(model.rescale))


def _check_probabilities(tf, model, image_shape):
    """Refuse a model whose class scores leave [0, 1] on probe images.

    The probes are black images and uniform noise in [0, 1] and [0, 255], the
    two pixel conventions; a softmax, sigmoid or capsule length never leaves
    [0, 1], a linear layer (logits) almost always does.
    """
    rng = np.random.default_rng(0)
    probes = [
        tf.zeros((2,) + image_shape),
        tf.constant(rng.uniform(0, 1, (2,) + image_shape), tf.float32),
        tf.constant(rng.uniform(0, 255, (2,) + image_shape), tf.float32),
    ]
    for images in probes:
        scores, _ = _heads(tf, model(images, training=False))
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
    model, output_dir, version=None, input_shape=None, verbose=True, output_kind="probabilities"
):
    """Export a capsule network as a SavedModel that TF Serving and KServe load.

    The SavedModel is written to `output_dir/<version>/`, the versioned layout
    of TF Serving. Its signatures take a float32 image batch `images` of shape
    `(batch, height, width, channels)`, pixel values as the model was trained
    on (`[0, 255]` for the applications), and check it in the graph: a wrong
    rank or size fails with a message naming the expected shape, and NaN or
    infinite pixels are refused.

    - `serving_default` returns `probabilities` (float32, `(batch, classes)`:
      capsule lengths or activations), `classes` (int64, the predicted class),
      `labels` (string, its name from the model's `class_names`, or its index
      as text) and `poses` (float32, the class capsules), when the model has
      them.
      Outputs that are not finite (pixels far outside the range the model
      was trained on) fail in the graph, as bad pixels do.
    - `reconstruct` (models with a `decoder`, such as `CapsNetMNIST`) returns
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
        input_shape: shape of one image; read from the model when `None`.
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
    image_shape = _image_shape(model, input_shape)
    if output_kind == "probabilities":
        _check_probabilities(tf, model, image_shape)
    predict = _predict_function(tf, model, image_shape, output_kind)
    archive = _serving_archive(tf, model, image_shape, predict)
    # Written beside and renamed into place: TF Serving never sees half a version.
    with _new_folders(output_dir), replacing(path) as temporary:
        _write_out(tf, archive, temporary)
        _verify_saved_model(tf, model, temporary, predict, image_shape)
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


def _image_check(tf, image_shape):
    """A graph function passing `images` on, failing on a wrong shape or non-finite pixels."""
    expected = "(batch, " + ", ".join(str(d) for d in image_shape) + ")"

    def checked(images):
        shape = tf.shape(images)
        rank_ok = tf.equal(tf.size(shape), len(image_shape) + 1)
        size_ok = tf.cond(
            rank_ok,
            lambda: tf.reduce_all(tf.equal(shape[1:], image_shape)),
            lambda: tf.constant(False),
        )
        shape_check = tf.debugging.Assert(
            rank_ok & size_ok,
            [f"`images` must be a float32 batch of shape {expected}; received shape", shape],
            summarize=8,
        )
        with tf.control_dependencies([shape_check]):
            images = tf.ensure_shape(tf.identity(images), (None,) + image_shape)
        return tf.debugging.assert_all_finite(images, "`images` contains NaN or infinite pixels")

    return checked


def _finite(tf, tensor):
    """`tensor` as float32, failing in the graph when it is NaN or infinite."""
    return tf.debugging.assert_all_finite(tf.cast(tensor, tf.float32), OUT_OF_RANGE)


def _predict_function(tf, model, image_shape, output_kind):
    """The `serving_default` function: `probabilities`, `classes` and `poses` of `images`."""
    checked = _image_check(tf, image_shape)
    class_names = getattr(model, "class_names", None)
    names = None if class_names is None else tf.constant(list(class_names))

    def predict(images):
        probabilities, poses = _heads(tf, model(checked(images), training=False))
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


def _serving_archive(tf, model, image_shape, predict):
    """The `ExportArchive` of `model` with its serving signatures and shape records."""
    image_spec = tf.TensorSpec(shape=None, dtype=tf.float32, name="images")
    archive = keras.export.ExportArchive()
    archive.track(model)
    # Recorded for servers: the signatures accept any rank so that they can
    # answer a wrong one with a message, which leaves the shape unstated.
    archive.add_variable_collection(
        "image_shape", [tf.Variable(image_shape, dtype=tf.int64, trainable=False)]
    )
    pixel_range = _pixel_range(model)
    if pixel_range is not None:  # the server refuses pixels outside it
        archive.add_variable_collection(
            "pixel_range", [tf.Variable(pixel_range, dtype=tf.float32, trainable=False)]
        )
    class_names = getattr(model, "class_names", None)
    if class_names:  # the server's metadata names the classes
        archive.add_variable_collection(
            "class_names", [tf.Variable(list(class_names), dtype=tf.string, trainable=False)]
        )
    archive.add_endpoint(
        SERVING_SIGNATURE, tf.function(predict, input_signature=[image_spec], autograph=False)
    )
    decoder = getattr(model, "decoder", None)
    mask = getattr(model, "mask", None)
    if decoder is not None and mask is not None:
        _add_reconstruction_endpoints(tf, archive, model, decoder, mask, predict, image_spec)
    return archive


def _add_reconstruction_endpoints(tf, archive, model, decoder, mask, predict, image_spec):
    """Add `reconstruct` and `reconstruct_capsule` to `archive`, for models with a decoder."""
    num_classes = model.num_classes

    def reconstruct(images):
        outputs = predict(images)
        return {
            "reconstructions": _finite(tf, decoder(mask(outputs["poses"]))),
            "classes": outputs["classes"],
        }

    def reconstruct_capsule(images, capsules):
        in_range = tf.reduce_all((capsules >= 0) & (capsules < num_classes))
        tf.debugging.Assert(in_range, [f"`capsules` must be class indices in [0, {num_classes})"])
        tf.debugging.assert_equal(
            tf.shape(capsules)[0],
            tf.shape(images)[0],
            message="`capsules` needs one class index per image",
        )
        poses = predict(images)["poses"]
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

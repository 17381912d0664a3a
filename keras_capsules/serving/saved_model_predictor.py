"""A KServe model that answers TF Serving's REST predict protocol from a SavedModel."""

import asyncio
import base64
import binascii
import os
import re

import kserve
import numpy as np
import orjson
import tensorflow as tf
from kserve.errors import InvalidInput

from keras_capsules.serving.export import OUT_OF_RANGE
from keras_capsules.serving.export import SERVING_SIGNATURE
from keras_capsules.serving.export import latest_version_dir

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_DT_NAMES = {tf.float32: "DT_FLOAT", tf.int64: "DT_INT64", tf.int32: "DT_INT32"}


RANGE_TOLERANCE = 0.01
"""Pixels may leave the model's declared range by this fraction of it (rounding, resizing)."""

MAX_IMAGE_PIXELS = 4096 * 4096
"""The largest image, in pixels, a model that takes any size is given (checked before decoding)."""
MAX_PNG_SIDE = 1_000_000
"""The longest side of a PNG the server decodes: libpng's limit, kept by TensorFlow's decoder."""


class SavedModelPredictor(kserve.Model):
    """Serve a SavedModel written by `export_saved_model` with KServe.

    Requests follow TF Serving's REST predict API, which is KServe's v1
    protocol: `{"instances": [...]}` (row format) answered with
    `{"predictions": [...]}`, or `{"inputs": ...}` (columnar format) answered
    with `{"outputs": ...}`, and an optional `"signature_name"`. An image is a
    nested list `(height, width, channels)` (or `(height, width)` for one
    channel) of pixel values, or `{"b64": "<base64 PNG>"}`. A model that
    converts images itself (every classifier of `applications`) takes any
    height and width up to `MAX_IMAGE_PIXELS` pixels, grey, RGB or RGBA, and
    one request may mix sizes; others take their own shape only. Every
    request is checked before it reaches the model: malformed structure,
    wrong shapes or dtypes, NaN or infinite pixels, pixels outside the range the model
    declares (by more than 1% of it; `check_range=False` accepts any finite
    value) and batches over `max_batch_size` raise
    `kserve.errors.InvalidInput`, which the server turns into a 400 answer
    with a message, and the server goes on serving.

    Args:
        name: the model name in the URL, `/v1/models/<name>:predict`.
        model_dir: a SavedModel, or a versioned base directory (the highest
            version is served).
        max_batch_size: the most images one request may carry.
        check_range: refuse pixels outside the range the SavedModel records
            (`[0, 255]` for the applications' default image converter; a PNG's 8-bit
            pixels are mapped onto it); models exported without one are not
            checked.

    Example:

    >>> predictor = SavedModelPredictor("capsnet", "models/capsnet")  # doctest: +SKIP
    >>> predictor.load()  # doctest: +SKIP
    """

    def __init__(self, name, model_dir, max_batch_size=256, check_range=True):
        super().__init__(name)
        if not isinstance(max_batch_size, int) or max_batch_size < 1:
            raise ValueError(
                f"`max_batch_size` must be a positive integer. Received: {max_batch_size!r}"
            )
        self.model_dir = model_dir
        self.max_batch_size = max_batch_size
        self.version = None
        self.image_shape = None
        self.any_image = False
        self.input_channels = None
        self.pixel_range = None
        self.class_names = None
        self.check_range = bool(check_range)
        self._signatures = {}

    def load(self):
        path = latest_version_dir(self.model_dir)
        self.version = os.path.basename(os.path.normpath(path))
        loaded = tf.saved_model.load(path)
        if SERVING_SIGNATURE not in loaded.signatures:
            raise ValueError(f"The SavedModel at {path} has no {SERVING_SIGNATURE!r} signature.")
        shape_variables = getattr(loaded, "image_shape", None)
        if not shape_variables:
            raise ValueError(
                f"The SavedModel at {path} does not record its image shape; export it "
                "with `keras-capsules export` or `keras_capsules.serving.export_saved_model`."
            )
        self.image_shape = tuple(int(d) for d in shape_variables[0].numpy())
        any_image = getattr(loaded, "any_image", None)
        self.any_image = bool(any_image[0].numpy()) if any_image else False
        channels = getattr(loaded, "input_channels", None)
        self.input_channels = (
            tuple(int(c) for c in channels[0].numpy()) if channels else self.image_shape[-1:]
        )
        names = getattr(loaded, "class_names", None)
        if names:
            self.class_names = [name.decode("utf-8") for name in names[0].numpy()]
        range_variables = getattr(loaded, "pixel_range", None)
        if range_variables:
            self.pixel_range = tuple(float(v) for v in range_variables[0].numpy())
        self._loaded = loaded  # keeps the signatures' variables alive
        self._signatures = dict(loaded.signatures)
        self.ready = True
        return self.ready

    # Requests ---------------------------------------------------------------

    def _expected(self):
        """The images this model takes, in words."""
        if not self.any_image:
            return f"an image of shape {self.image_shape}"
        channels = " or ".join(map(str, self.input_channels))
        return f"an image (height, width, channels) with {channels} channels"

    def _shape_fits(self, shape):
        """Whether one image of `shape` (with its channel axis) is one this model takes."""
        if not self.any_image:
            return shape == self.image_shape
        return (
            len(shape) == 3
            and min(shape[:2]) > 0
            and shape[0] * shape[1] <= MAX_IMAGE_PIXELS
            and shape[2] in self.input_channels
        )

    def _image(self, value, where):
        """One image as a float32 array `(height, width, channels)` the model takes."""
        if isinstance(value, dict):
            if set(value) != {"b64"} or not isinstance(value["b64"], str):
                raise InvalidInput(f'{where}: an encoded image must be {{"b64": "<base64 PNG>"}}')
            return self._decode_png(value["b64"], where)
        try:
            # As objects first: NumPy would read "1" and true as pixels.
            cells = np.asarray(value, dtype=object)
        except ValueError:
            cells = None
        shape = None if cells is None else cells.shape
        if shape is not None and len(shape) == 2 and 1 in self.input_channels:
            shape = (*shape, 1)  # grey as (height, width)
        if shape is None or not self._shape_fits(shape):
            received = "ragged" if cells is None else f"shape {cells.shape}"
            limit = f" of at most {MAX_IMAGE_PIXELS} pixels" if self.any_image else ""
            raise InvalidInput(f"{where}: expected {self._expected()}{limit}, received {received}")
        if not all(type(v) in (int, float) for v in cells.flat):
            raise InvalidInput(
                f"{where}: an image must be a nested list of numbers, {self._expected()} "
                "(strings, booleans and nulls are not pixels)"
            )
        expected = shape
        try:
            with np.errstate(over="ignore"):  # floats beyond float32 become inf
                image = cells.astype(np.float32).reshape(expected)
        except OverflowError:  # an integer beyond float64 (a Python caller's: JSON refuses it)
            image = np.full(expected, np.inf, np.float32)
        if not np.all(np.isfinite(image)):
            raise InvalidInput(f"{where}: the image contains NaN or infinite pixels")
        self._check_range(image, where)
        return image

    def _check_range(self, image, where):
        """Refuse pixels beyond the model's declared range by more than 1% of it."""
        if self.pixel_range is None or not self.check_range:
            return
        low, high = self.pixel_range
        tolerance = RANGE_TOLERANCE * (high - low)
        smallest, largest = float(image.min()), float(image.max())
        if smallest < low - tolerance or largest > high + tolerance:
            raise InvalidInput(
                f"{where}: pixel values must lie in [{low:g}, {high:g}], the model's input "
                f"range; received values from {smallest:.6g} to {largest:.6g} (the server "
                "was started with the range check on: --no-range-check turns it off)"
            )

    def _decode_png(self, data, where):
        """A PNG as a float32 image the model takes, or InvalidInput.

        The size is read from the PNG's header and checked before anything is
        decoded, so a small file that claims a huge image costs nothing; a side
        longer than `MAX_PNG_SIDE` is refused by name, as the decoder would refuse
        it, and a PNG whose data does not decode is named damaged.
        An alpha channel is dropped, as the model's image converter drops it
        from an image sent as a list: an RGBA PNG is answered as its RGB
        image, a grey + alpha PNG as its grey one. For a model that converts
        images itself the image goes on at its own size and colour; for
        another, grey images are repeated over RGB channels and colour images
        converted to grey as it needs.
        """
        height, width, channels = self.image_shape
        not_png = f"{where}: b64 does not hold a base64-encoded PNG image"
        try:
            raw = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidInput(not_png) from None
        if len(raw) < 26 or raw[:8] != _PNG_SIGNATURE or raw[12:16] != b"IHDR":
            raise InvalidInput(not_png)
        size = (int.from_bytes(raw[20:24], "big"), int.from_bytes(raw[16:20], "big"))
        if self.any_image and not 0 < size[0] * size[1] <= MAX_IMAGE_PIXELS:
            raise InvalidInput(
                f"{where}: the PNG is {size[0]}x{size[1]}; this server takes images of at "
                f"most {MAX_IMAGE_PIXELS} pixels"
            )
        if self.any_image and max(size) > MAX_PNG_SIDE:
            raise InvalidInput(
                f"{where}: the PNG is {size[0]}x{size[1]}; this server decodes PNGs whose "
                f"sides are at most {MAX_PNG_SIDE} pixels (and of at most {MAX_IMAGE_PIXELS} "
                "pixels)"
            )
        if not self.any_image and size != (height, width):
            raise InvalidInput(
                f"{where}: expected a {height}x{width} image, received {size[0]}x{size[1]}"
            )
        try:
            image = tf.io.decode_png(raw, dtype=tf.uint8).numpy().astype(np.float32)
        except tf.errors.InvalidArgumentError:
            raise InvalidInput(
                f"{where}: the PNG ({size[0]}x{size[1]}, as its header says) is damaged: its "
                "image data cannot be decoded (truncated or corrupt)"
            ) from None
        if image.shape[2] in (2, 4):  # grey + alpha or RGBA: the alpha is dropped
            image = image[..., :-1]
        if self.any_image and image.shape[2] in self.input_channels:
            pass  # the model converts the colour itself
        elif image.shape[2] != channels:
            if channels == 1:  # RGB to grey, ITU-R 601 as tf.image.rgb_to_grayscale
                image = image @ np.array([[0.2989], [0.587], [0.114]], np.float32)
            elif channels == 3:
                image = np.repeat(image, 3, axis=-1)
            else:
                raise InvalidInput(
                    f"{where}: expected {channels} channel(s), the PNG has {image.shape[2]}"
                )
        if self.pixel_range is not None:  # 8-bit pixels, to the model's range
            low, high = self.pixel_range
            image = low + image * ((high - low) / 255.0)
        return image.astype(np.float32)

    def _signature(self, payload):
        name = payload.get("signature_name", SERVING_SIGNATURE)
        if not isinstance(name, str):
            raise InvalidInput(f'"signature_name" must be a string. Received: {name!r:.100}')
        if name not in self._signatures:
            raise InvalidInput(
                f"Unknown signature_name {name!r}; this model has {sorted(self._signatures)}"
            )
        return name, self._signatures[name]

    def _input_names(self, signature):
        return sorted(signature.structured_input_signature[1])

    def _column(self, name, values, where):
        """Convert one named input for the whole batch."""
        if name == "images":
            images = [self._image(v, f"{where}[{i}]") for i, v in enumerate(values)]
            if len({image.shape for image in images}) > 1:
                return images  # of several sizes: the model answers them one by one
            return np.stack(images)
        try:
            column = np.asarray(values)
        except ValueError:
            raise InvalidInput(f"{where}: {name!r} must be a list of integers") from None
        if column.ndim != 1 or not np.issubdtype(column.dtype, np.integer):
            raise InvalidInput(f"{where}: {name!r} must be a list of integers, one per image")
        return column.astype(np.int64)

    def _batch(self, payload, names):
        """The request's inputs as a dict of arrays, and whether it was row format."""
        if not isinstance(payload, dict):
            raise InvalidInput('The request must be a JSON object with "instances" or "inputs"')
        if ("instances" in payload) == ("inputs" in payload):
            raise InvalidInput('The request must have exactly one of "instances" and "inputs"')
        rows = "instances" in payload
        data = payload["instances" if rows else "inputs"]
        if rows:
            if not isinstance(data, list) or not data:
                raise InvalidInput('"instances" must be a non-empty list')
            if len(names) > 1 or all(isinstance(r, dict) and "b64" not in r for r in data):
                if not all(isinstance(r, dict) and set(r) == set(names) for r in data):
                    raise InvalidInput(f"Each instance must be an object with keys {names}")
                columns = {n: [r[n] for r in data] for n in names}
            else:
                columns = {names[0]: data}
        else:
            if len(names) == 1 and not isinstance(data, dict):
                data = {names[0]: data}
            if not isinstance(data, dict) or set(data) != set(names):
                raise InvalidInput(f'"inputs" must be an object with keys {names}')
            columns = data
        sizes = set()
        for name, values in columns.items():
            if not isinstance(values, list) or not values:
                raise InvalidInput(f"{name!r} must be a non-empty list, one entry per image")
            sizes.add(len(values))
        if len(sizes) != 1:
            raise InvalidInput(f"All inputs need the same batch size; received sizes {sizes}")
        (size,) = sizes
        if size > self.max_batch_size:
            raise InvalidInput(
                f"Batch of {size} images is over this server's limit of {self.max_batch_size}"
            )
        where = "instances" if rows else "inputs"
        if len(names) > 1:
            return {n: self._column(n, v, f"{where}.{n}") for n, v in columns.items()}, rows
        return {n: self._column(n, v, where) for n, v in columns.items()}, rows

    def _run(self, signature, inputs):
        images = inputs.get("images")
        if isinstance(images, list):  # images of several sizes, answered one by one
            answers = [
                self._run(signature, {n: np.stack(v[i : i + 1]) for n, v in inputs.items()})
                for i in range(len(images))
            ]
            return {k: np.concatenate([a[k] for a in answers]) for k in answers[0]}
        tensors = {n: tf.constant(v) for n, v in inputs.items()}
        try:
            outputs = signature(**tensors)
        except tf.errors.InvalidArgumentError as error:
            raise InvalidInput(_assert_message(error)) from None
        outputs = {k: _numpy(v) for k, v in outputs.items()}
        for value in outputs.values():
            # Models exported before the graph checked its outputs: never a 200 with null.
            if np.issubdtype(value.dtype, np.floating) and not np.all(np.isfinite(value)):
                raise InvalidInput(OUT_OF_RANGE)
        return outputs

    def _answer(self, signature, payload):
        """Check the request and run the model: the work done off the event loop."""
        inputs, rows = self._batch(payload, self._input_names(signature))
        return self._run(signature, inputs), rows

    async def predict(self, payload, headers=None):
        if isinstance(payload, (bytes, str)):
            # KServe parses only bodies sent as JSON; TF Serving clients (curl -d)
            # often send no content type, so parse those here.
            try:
                payload = orjson.loads(payload)
            except orjson.JSONDecodeError as error:
                if re.search(r"\b(NaN|Infinity)\b", str(payload)):
                    raise InvalidInput(
                        "The request holds NaN or Infinity, which are neither JSON nor pixels"
                    ) from None
                raise InvalidInput(f"The request body is not valid JSON: {error}") from None
        name, signature = self._signature(payload if isinstance(payload, dict) else {})
        # Converting and decoding images is work: off the event loop, which
        # keeps answering other clients meanwhile.
        outputs, rows = await asyncio.get_running_loop().run_in_executor(
            None, self._answer, signature, payload
        )
        if rows:
            size = len(next(iter(outputs.values())))
            if len(outputs) == 1:
                return {"predictions": next(iter(outputs.values())).tolist()}
            return {
                "predictions": [{k: v[i].tolist() for k, v in outputs.items()} for i in range(size)]
            }
        if len(outputs) == 1:
            return {"outputs": next(iter(outputs.values())).tolist()}
        return {"outputs": {k: v.tolist() for k, v in outputs.items()}}

    # Status and metadata -----------------------------------------------------

    def status(self):
        """TF Serving's model status, with KServe's `name` and `ready` fields."""
        return {
            "name": self.name,
            "ready": self.ready,
            "model_version_status": [
                {
                    "version": str(self.version),
                    "state": "AVAILABLE" if self.ready else "LOADING",
                    "status": {"error_code": "OK", "error_message": ""},
                }
            ],
        }

    def metadata(self):
        """TF Serving's model metadata: the signature definitions."""
        signatures = {}
        for name, signature in self._signatures.items():
            signatures[name] = {
                "inputs": {
                    k: _tensor_info(k, spec)
                    for k, spec in signature.structured_input_signature[1].items()
                },
                "outputs": {k: _tensor_info(k, v) for k, v in signature.structured_outputs.items()},
                "method_name": "tensorflow/serving/predict",
            }
        return {
            "model_spec": {"name": self.name, "signature_name": "", "version": str(self.version)},
            "metadata": {
                "signature_def": {"signature_def": signatures},
                "image_shape": list(self.image_shape),
                "any_image": self.any_image,
                "class_names": self.class_names,
            },
        }


def _numpy(tensor):
    """A tensor as a NumPy array; strings (the class labels) decoded from UTF-8."""
    value = tensor.numpy()
    if value.dtype == object:
        value = np.char.decode(value.astype(np.bytes_), "utf-8")
    return value


def _tensor_info(name, spec):
    shape = spec.shape
    if shape.rank is None:
        tensor_shape = {"unknown_rank": True}
    else:
        tensor_shape = {"dim": [{"size": str(-1 if d is None else d)} for d in shape.as_list()]}
    dtype = _DT_NAMES.get(spec.dtype, spec.dtype.name)
    return {"dtype": dtype, "tensor_shape": tensor_shape, "name": name}


def _assert_message(error):
    """The first line of a graph assertion that names the problem."""
    for line in error.message.splitlines():
        line = line.strip()
        if line.startswith("assertion failed:"):
            return line.removeprefix("assertion failed:").strip()
        if "NaN" in line or "infinite" in line:
            return line.split(" : ")[0]
    return error.message.splitlines()[-1].strip()

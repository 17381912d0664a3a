import dataclasses

import keras

from keras_capsules._validation import is_int
from keras_capsules._validation import is_number
from keras_capsules.layers.image_converter import accepted_channels


@dataclasses.dataclass(frozen=True)
class ServingSpec:
    """What a model declares for export and serving: its images, classes and outputs.

    The exports (`export_saved_model`, `export_onnx`, `export_litert`) and the
    server read a model through its spec and nothing else. The classifiers of
    `applications` declare their own (`model.serving_spec()`); for a
    functional model built from the layers, write one and pass it as
    `spec`.

    Args:
        image_shape: `(height, width, channels)` of the images the network
            takes.
        any_image: the model brings images of any size and colour to
            `image_shape` itself (an `ImageConverter` inside): the exports and
            the server then take any size and colour; otherwise exactly
            `image_shape`.
        class_names: the classes' names in label order, or `None` (the
            labels are then the class indices as text).
        scores: where the class scores are in the model's outputs: `None`
            when its one output is them, else the key of a dict of outputs
            or the index of a list of them. Scores must be probabilities in
            [0, 1] unless the export is asked for `output_kind="logits"`.
        poses: where the class capsules' poses are, in the same way; `None`
            for a model without them.
        pixel_range: `(low, high)` of the pixel values the model takes, e.g.
            `(0, 255)`; the server refuses pixels outside it and maps a PNG's
            8-bit pixels onto it. `None`: not declared, not checked.
        decoder: the layer that reconstructs images from the masked class
            capsules, for the `reconstruct` signatures; `None` for none.
        mask: the `Mask` layer that feeds `decoder` (both or neither).

    Example:

    >>> import keras
    >>> from keras_capsules import layers
    >>> images = keras.Input((28, 28, 1))
    >>> x = keras.layers.Conv2D(32, 9, strides=2, activation="relu")(images / 255.0)
    >>> digits = layers.CapsuleLayer(10, 8)(layers.PrimaryCapsule(4, 8, 9, strides=2)(x))
    >>> model = keras.Model(images, {"probabilities": layers.Length()(digits), "poses": digits})
    >>> spec = ServingSpec(
    ...     image_shape=(28, 28, 1), scores="probabilities", poses="poses", pixel_range=(0, 255)
    ... )
    >>> scores, poses = spec.heads(model(keras.ops.zeros((2, 28, 28, 1))))
    >>> tuple(scores.shape), tuple(poses.shape)
    ((2, 10), (2, 10, 8))
    """

    image_shape: tuple
    any_image: bool = False
    class_names: tuple = None
    scores: object = None
    poses: object = None
    pixel_range: tuple = None
    decoder: object = None
    mask: object = None

    def __post_init__(self):
        shape = self.image_shape
        if (
            not isinstance(shape, (tuple, list))
            or len(shape) != 3
            or not all(is_int(d) and d > 0 for d in shape)
        ):
            raise ValueError(
                "`image_shape` must be (height, width, channels), three positive integers. "
                f"Received: image_shape={shape!r}"
            )
        object.__setattr__(self, "image_shape", tuple(int(d) for d in shape))
        for name in ("scores", "poses"):
            where = getattr(self, name)
            if where is not None and not isinstance(where, str) and not is_int(where):
                raise ValueError(
                    f"`{name}` must be None, a key of the outputs or an index of them. "
                    f"Received: {name}={where!r}"
                )
        if self.class_names is not None:
            object.__setattr__(self, "class_names", tuple(str(n) for n in self.class_names))
        if self.pixel_range is not None:
            low, high = _pair(self.pixel_range)
            object.__setattr__(self, "pixel_range", (low, high))
        if (self.decoder is None) != (self.mask is None):
            raise ValueError("`decoder` and `mask` go together: give both or neither.")
        for name in ("decoder", "mask"):
            layer = getattr(self, name)
            if layer is not None and not isinstance(layer, keras.layers.Layer):
                raise ValueError(f"`{name}` must be a Keras layer. Received: {name}={layer!r}")

    @classmethod
    def of(cls, model, spec=None):
        """`spec`, or the spec `model` declares (`model.serving_spec()`); else a `ValueError`."""
        if spec is not None:
            if not isinstance(spec, cls):
                raise ValueError(
                    f"`spec` must be a keras_capsules.serving.ServingSpec. Received: spec={spec!r}"
                )
            return spec
        declared = getattr(type(model), "serving_spec", None)  # the applications' classifiers
        if not callable(declared):
            raise ValueError(
                f"{type(model).__name__} declares no serving spec: say what its images and "
                "outputs are with spec=keras_capsules.serving.ServingSpec(image_shape=..., "
                "scores=..., poses=...)."
            )
        return model.serving_spec()

    @property
    def input_channels(self):
        """The channels an image may have: grey, RGB or RGBA where the model converts colour."""
        channels = self.image_shape[-1]
        return accepted_channels(channels) if self.any_image else (channels,)

    def heads(self, outputs):
        """`(scores, poses)` of the model's `outputs`; `poses` is `None` without them."""
        return self._output(outputs, self.scores, "scores"), (
            None if self.poses is None else self._output(outputs, self.poses, "poses")
        )

    def _output(self, outputs, where, name):
        if where is None:
            if isinstance(outputs, (dict, list, tuple)):
                raise ValueError(
                    f"The model has several outputs: say which are the class {name} with "
                    f"`{name}=` (a key or an index). Received: {name}=None"
                )
            return outputs
        try:
            return outputs[where]
        except (KeyError, IndexError, TypeError):
            have = sorted(outputs) if isinstance(outputs, dict) else type(outputs).__name__
            raise ValueError(
                f"The model's outputs have no {where!r} for `{name}`; they are {have}."
            ) from None


def _pair(pixel_range):
    try:
        low, high = pixel_range
    except (TypeError, ValueError):
        low = high = None
    if not (is_number(low) and is_number(high) and float(low) < float(high)):
        raise ValueError(
            "`pixel_range` must be (low, high), two numbers with low < high, or None. "
            f"Received: pixel_range={pixel_range!r}"
        )
    return float(low), float(high)

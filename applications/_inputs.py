"""The applications' input convention: a `rescale` factor, and a loud wrong input range."""

import math
import warnings

import keras
import numpy as np

from keras_capsules._validation import is_number

PIXELS = 1.0 / 255.0
"""The default `rescale`: images arrive as 8-bit pixel values in [0, 255]."""


def check_rescale(rescale):
    """`rescale` as a float, or `None`; a `ValueError` naming it otherwise."""
    if rescale is None:
        return None
    if not is_number(rescale):
        raise ValueError(f"`rescale` must be a positive number or None. Received: {rescale!r}")
    if not (math.isfinite(rescale) and rescale > 0):
        raise ValueError(f"`rescale` must be a positive number or None. Received: {rescale!r}")
    return float(rescale)


def rescaled(images, rescale, policy):
    """`images` multiplied by `rescale` in the graph (a `Rescaling` layer), or as they are."""
    if rescale is None:
        return images
    return keras.layers.Rescaling(rescale, name="rescaling", dtype=policy)(images)


class InputRangeCheck:
    """Warn once when the first NumPy batch given to `fit`, `evaluate` or `predict`
    cannot be in the range the model's `rescale` expects.

    With a `rescale` the model expects raw values up to about `1 / rescale`
    (pixels in [0, 255] for `1 / 255`): negative values, or values that never
    exceed `1 / rescale` divided by 100 (images already scaled to [0, 1]),
    warn. Without one it expects values already scaled: values above 20
    (raw pixels) warn. The check looks at the arrays before `fit` starts, so
    the compiled step is untouched; `tf.data` pipelines are not inspected.
    """

    rescale = PIXELS

    def _check_input_range(self, x):
        if getattr(self, "_input_range_checked", False):
            return
        images = x.get("images") if isinstance(x, dict) else x
        if not isinstance(images, np.ndarray) or images.size == 0:
            return
        self._input_range_checked = True
        sample = np.asarray(images[:1024], dtype="float64")
        low, high = float(np.min(sample)), float(np.max(sample))
        name = type(self).__name__
        if self.rescale is not None:
            top = 1.0 / self.rescale
            if low < 0 or 0 < high <= top / 100:
                warnings.warn(
                    f"{name} multiplies its inputs by rescale={self.rescale:.6g}, so it expects "
                    f"values in [0, {top:.6g}], but the first batch ranges over "
                    f"[{low:.6g}, {high:.6g}]. Pass the raw pixel values, or build the model "
                    "with rescale=None if the inputs are already scaled.",
                    stacklevel=3,
                )
        elif high > 20:
            warnings.warn(
                f"{name} was built with rescale=None, so it expects inputs already scaled "
                f"(about [-3, 3] or [0, 1]), but the first batch reaches {high:.6g}. For raw "
                "pixel values build it with rescale=1 / 255.",
                stacklevel=3,
            )

    def fit(self, x=None, *args, **kwargs):
        self._check_input_range(x)
        return super().fit(x, *args, **kwargs)

    def evaluate(self, x=None, *args, **kwargs):
        self._check_input_range(x)
        return super().evaluate(x, *args, **kwargs)

    def predict(self, x, *args, **kwargs):
        self._check_input_range(x)
        return super().predict(x, *args, **kwargs)

"""Helpers shared by the figures: argument checks, Agg figures, saving."""

import os

import numpy as np

from keras_capsules._atomic import replacing
from keras_capsules._validation import is_int
from keras_capsules._validation import is_number


def new_figure(rows, cols, cell_inches=1.0, dpi=100, size=None):
    """A `Figure` with a grid of `rows x cols` axes on the Agg canvas (no pyplot).

    Its size is `size` (inches) or `cols x rows` cells of `cell_inches`.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if size is None:
        size = (cols * cell_inches, rows * cell_inches)
    figure = Figure(figsize=size, dpi=dpi, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(rows, cols, squeeze=False)
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
    return figure, axes


def save(figure, path):
    """Write `figure` as a PNG to `path` (if given); its size is figsize x dpi pixels."""
    if path is not None:
        path = os.fspath(path)
        folder = os.path.dirname(path)
        if folder:
            os.makedirs(folder, exist_ok=True)
        with replacing(path) as temporary:
            figure.savefig(temporary, format="png", dpi=figure.dpi)
    return figure


def check_dpi(dpi):
    if not is_number(dpi) or not dpi > 0:
        raise ValueError(f"`dpi` must be a positive number. Received: dpi={dpi!r}")


def check_model(model, needs_decoder=True):
    """Raise unless `model` looks like `applications.CapsNet` (with a decoder, if needed)."""
    for attribute in ("predict", "image_shape", "num_classes"):
        if not hasattr(model, attribute):
            raise ValueError(
                "`model` must be a capsule network like applications.CapsNet "
                f"(with `{attribute}`). Received: model={type(model).__name__}"
            )
    if needs_decoder and getattr(model, "decoder", None) is None:
        raise ValueError(
            f"{type(model).__name__} has no decoder to reconstruct images from (built with "
            "`decoder_units=None`, or a matrix capsule network)."
        )


def check_images(model, x, name="x", single=False):
    """`x` as float32 `(n,) + model.image_shape` with pixels in [0, 255].

    Accepts `(n, height, width)` for one-channel models; with `single`, also
    one image without the batch axis, and requires exactly one image.
    """
    shape = tuple(model.image_shape)
    x = np.asarray(x)
    if not np.issubdtype(x.dtype, np.number):
        raise ValueError(f"`{name}` must be a numeric array. Received dtype {x.dtype}")
    x = x.astype("float32")
    if single and x.shape in (shape, shape[:2]):
        x = x[None]
    if x.ndim == 3 and shape[-1] == 1:
        x = x[..., None]
    if x.ndim != 4 or x.shape[1:] != shape or len(x) == 0:
        raise ValueError(
            f"`{name}` must be images of shape (n,) + {shape} (or (n, height, width) for "
            f"one channel) matching the model. Received: {name}.shape={np.shape(x)}"
        )
    if single and len(x) != 1:
        raise ValueError(f"`{name}` must be a single image. Received {len(x)} images.")
    if not np.all(np.isfinite(x)) or x.min() < 0 or x.max() > 255:
        raise ValueError(f"`{name}` must hold pixel values in [0, 255], as the model takes them.")
    return x


def check_class(model, name, value):
    if not is_int(value, numpy=True):
        raise ValueError(f"`{name}` must be a class index. Received: {name}={value!r}")
    if not 0 <= value < model.num_classes:
        raise ValueError(
            f"`{name}` must lie in [0, {model.num_classes}). Received: {name}={value!r}"
        )
    return int(value)


def check_labels(model, labels, n, name="labels"):
    """Integer class indices `(n,)` (or one-hot `(n, num_classes)`), or `None`."""
    if labels is None:
        return None
    labels = np.asarray(labels)
    if labels.ndim == 2 and labels.shape[1] == model.num_classes:
        labels = np.argmax(labels, axis=1)
    if labels.shape != (n,) or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(
            f"`{name}` must be {n} class indices (n,) or one-hot (n, {model.num_classes}). "
            f"Received: {name}.shape={labels.shape}, dtype={labels.dtype}"
        )
    if labels.min() < 0 or labels.max() >= model.num_classes:
        raise ValueError(f"`{name}` must lie in [0, {model.num_classes}).")
    return labels.astype("int32")


def to_display(images):
    """`(n, h, w, c)` images as `(n, h, w)` grey or `(n, h, w, 3)` colour for imshow."""
    images = np.asarray(images, dtype="float32")
    return images[..., 0] if images.shape[-1] == 1 else images[..., :3]


def show(ax, image, title=None):
    """Draw one image in [0, 1] on `ax`, grey if it has no colour axis."""
    kwargs = {"cmap": "gray"} if image.ndim == 2 else {}
    ax.imshow(np.clip(image, 0.0, 1.0), vmin=0.0, vmax=1.0, interpolation="nearest", **kwargs)
    if title is not None:
        ax.set_title(title, fontsize=7)

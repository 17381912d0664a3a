"""A drawing from the explorer's canvas made an MNIST-like image: boxed, centred, scaled."""

import numpy as np

_MNIST_BOX = 20
"""MNIST digits are scaled to fit a 20x20 box, then centred by their centre of mass."""


def _resize(image, height, width):
    """Area-average (down) or nearest (up) resize of a 2-D float array, NumPy only."""
    rows = np.minimum((np.arange(height) + 0.5) * image.shape[0] / height, image.shape[0] - 1)
    cols = np.minimum((np.arange(width) + 0.5) * image.shape[1] / width, image.shape[1] - 1)
    if image.shape[0] <= height and image.shape[1] <= width:
        return image[rows.astype(int)][:, cols.astype(int)]
    # Average over the source block of each target pixel.
    row_edges = np.linspace(0, image.shape[0], height + 1).astype(int)
    col_edges = np.linspace(0, image.shape[1], width + 1).astype(int)
    summed = np.add.reduceat(np.add.reduceat(image, row_edges[:-1], axis=0), col_edges[:-1], axis=1)
    counts = np.outer(np.diff(row_edges), np.diff(col_edges))
    return summed / np.maximum(counts, 1)


def prepare_drawing(drawing, image_shape=(28, 28, 1)):
    """A drawing as an MNIST-style image: white strokes on black, the digit boxed and centred.

    As MNIST was made: the strokes' bounding box is scaled to fit 20x20
    pixels (keeping its aspect ratio) and placed so that its centre of mass
    is at the centre of the `image_shape` canvas. Larger canvases (36x36
    MultiMNIST, 40x40 expanded MNIST) get the same 20-pixel digit, as their
    training digits are.

    Args:
        drawing: the sketch as an array `(h, w)`, `(h, w, 3)` or `(h, w, 4)`
            (RGBA with transparent background, what Gradio's sketchpad
            gives), or Gradio's editor value (a dict with `"composite"`).
            Strokes are dark on light or opaque on transparent.
        image_shape: the model's input shape; a colour model gets the
            strokes in every channel.

    Returns:
        uint8 `image_shape`, or `None` when nothing is drawn.
    """
    if isinstance(drawing, dict):
        drawing = drawing.get("composite")
    if drawing is None:
        return None
    image = np.asarray(drawing, dtype="float32")
    if image.ndim == 3 and image.shape[-1] == 4:
        if image[..., 3].min() < 255:  # strokes on a transparent background
            ink = image[..., 3] / 255.0
        else:  # opaque: dark strokes on a light background
            ink = 1.0 - image[..., :3].mean(axis=-1) / 255.0
    elif image.ndim == 3:
        ink = 1.0 - image[..., :3].mean(axis=-1) / 255.0
    elif image.ndim == 2:
        ink = 1.0 - image / 255.0
    else:
        raise ValueError(f"`drawing` must be an image (h, w[, c]). Received shape {image.shape}")
    ink = np.clip(ink, 0.0, 1.0)
    if ink.max() < 0.1:
        return None
    rows = np.flatnonzero(ink.max(axis=1) > 0.1)
    cols = np.flatnonzero(ink.max(axis=0) > 0.1)
    ink = ink[rows[0] : rows[-1] + 1, cols[0] : cols[-1] + 1]
    height, width = image_shape[:2]
    scale = min(_MNIST_BOX, height, width) / max(ink.shape)
    new_h, new_w = max(1, round(ink.shape[0] * scale)), max(1, round(ink.shape[1] * scale))
    ink = _resize(ink, new_h, new_w)
    canvas = np.zeros((height, width), "float32")
    total = ink.sum()
    cy = (ink.sum(axis=1) @ np.arange(new_h)) / total
    cx = (ink.sum(axis=0) @ np.arange(new_w)) / total
    top = int(np.clip(round((height - 1) / 2 - cy), 0, height - new_h))
    left = int(np.clip(round((width - 1) / 2 - cx), 0, width - new_w))
    canvas[top : top + new_h, left : left + new_w] = ink
    channels = image_shape[2] if len(image_shape) > 2 else 1
    return np.repeat(np.round(canvas * 255).astype("uint8")[..., None], channels, axis=-1)

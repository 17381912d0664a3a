"""What each dimension of a class capsule encodes (Sabour et al. 2017, figure 4)."""

import numpy as np

from keras_capsules._class_names import class_name
from keras_capsules._validation import is_int
from keras_capsules.visualization import _common

PAPER_STEPS = np.round(np.arange(-0.25, 0.2501, 0.05), 2) + 0.0  # + 0.0: no -0.0
"""The paper's tweaks: -0.25 to 0.25 in steps of 0.05 (11 values)."""

GAP = 2
"""White pixels between the tiles of the perturbation mosaic."""


def _check_dims(dims, capsule_dim):
    dims = list(range(capsule_dim)) if dims is None else list(dims)
    if not dims or not all(is_int(d, numpy=True) and 0 <= d < capsule_dim for d in dims):
        raise ValueError(
            f"`dims` must be a non-empty list of capsule dimensions in [0, {capsule_dim}). "
            f"Received: dims={dims!r}"
        )
    return [int(d) for d in dims]


def _check_steps(steps):
    steps = np.asarray(steps, dtype="float64")
    if steps.ndim != 1 or len(steps) == 0 or not np.all(np.isfinite(steps)):
        raise ValueError(
            f"`steps` must be a non-empty 1-D sequence of finite numbers. Received: steps={steps!r}"
        )
    return steps


def perturbations(model, x, dims=None, steps=PAPER_STEPS, label=None):
    """Decode the winning capsule of one image with one dimension tweaked at a time.

    Args:
        model: a capsule network with a decoder, e.g. `applications.CapsNetMNIST`.
        x: one image, `model.image_shape` (or `(height, width)`, or with a
            batch axis of 1), pixels in [0, 255].
        dims: capsule dimensions to tweak; `None` (default) tweaks all of them
            (16 for the paper's model).
        steps: values added to the dimension (the paper: -0.25 to 0.25 by 0.05).
        label: the class capsule to tweak and decode; `None` (default) takes
            the longest capsule, as the paper.

    Returns:
        `(images, label)`: float32 `(len(dims), len(steps)) + model.image_shape`
        reconstructions in [0, 1], and the class capsule used.
    """
    _common.check_model(model)
    x = _common.check_images(model, x, single=True)
    steps = _check_steps(steps)
    poses = np.asarray(model.predict(x, verbose=0)["poses"], dtype="float32")
    capsule_dim = poses.shape[-1]
    dims = _check_dims(dims, capsule_dim)
    if label is None:
        label = int(np.argmax(np.linalg.norm(poses[0], axis=-1)))
    else:
        label = _common.check_class(model, "label", label)
    tweaked = np.repeat(poses, len(dims) * len(steps), axis=0)
    tweaked = tweaked.reshape((len(dims), len(steps)) + poses.shape[1:])
    for row, dim in enumerate(dims):
        tweaked[row, :, label, dim] += steps.astype("float32")
    tweaked = tweaked.reshape((-1,) + poses.shape[1:])
    images = model.decode(tweaked, labels=np.full((len(tweaked),), label, "int32"))
    images = np.asarray(images, dtype="float32")
    return images.reshape((len(dims), len(steps)) + images.shape[1:]), label


def perturbation_grid(
    model, x, dims=None, steps=PAPER_STEPS, label=None, path=None, cell_inches=0.6, dpi=100
):
    """The paper's dimension perturbation figure: rows are dimensions, columns tweaks.

    The image is encoded; the winning capsule (or that of `label`) is decoded
    with dimension `dims[r]` shifted by `steps[c]` in row `r`, column `c`,
    all other capsules masked out. A trained model shows scale, thickness,
    skew, width, ... changing along a row. The reconstructions are drawn as
    one mosaic (one axes, fast for the 16 x 11 grid), tiles separated by
    `GAP` white pixels, labelled with the dimension and the tweak.

    Args:
        model: a trained capsule network with a decoder, e.g.
            `applications.CapsNetMNIST`.
        x: one image, `model.image_shape` or `(height, width)`, in [0, 255].
        dims: capsule dimensions (rows); `None` (default) gives all of them,
            `range(16)` for the paper's model.
        steps: tweaks (columns), default `np.arange(-0.25, 0.2501, 0.05)`.
        label: class capsule to tweak; `None` (default) takes the longest.
        path: optional file name; the figure is written there as a PNG.
        cell_inches: size of one tile in inches.
        dpi: resolution; the PNG is `(len(steps) * cell_inches + 0.6) * dpi`
            pixels wide and `(len(dims) * cell_inches + 0.6) * dpi` high.

    Returns:
        The `matplotlib.figure.Figure`; `figure.axes[0].images[0]` holds the
        mosaic: the tile of row `r`, column `c` starts at pixel
        `(r * (height + GAP), c * (width + GAP))`.

    Example:

    >>> import applications
    >>> from keras_capsules.visualization import perturbation_grid
    >>> model = applications.CapsNetMNIST()  # trained
    >>> figure = perturbation_grid(model, x_test[0], path="dimensions.png")  # doctest: +SKIP
    """
    _common.check_dpi(dpi)
    images, label = perturbations(model, x, dims, steps, label)
    dims = list(range(images.shape[0])) if dims is None else [int(d) for d in dims]
    steps = _check_steps(steps)
    rows, cols, height, width = images.shape[:4]
    tiles = _common.to_display(images.reshape((rows * cols,) + images.shape[2:]))
    mosaic = np.ones(
        (rows * (height + GAP) - GAP, cols * (width + GAP) - GAP) + tiles.shape[3:], "float32"
    )
    for r in range(rows):
        for c in range(cols):
            top, left = r * (height + GAP), c * (width + GAP)
            mosaic[top : top + height, left : left + width] = tiles[r * cols + c]

    figure, axes = _common.new_figure(
        1, 1, dpi=dpi, size=(cols * cell_inches + 0.6, rows * cell_inches + 0.6)
    )
    ax = axes[0, 0]
    _common.show(ax, mosaic)
    ax.set_title(f"capsule {class_name(model, label)}: one dimension tweaked per row", fontsize=8)
    ax.set_xticks(np.arange(cols) * (width + GAP) + (width - 1) / 2)
    ax.set_xticklabels([f"{round(s, 6) + 0.0:+.2f}" for s in steps], fontsize=6)
    ax.set_yticks(np.arange(rows) * (height + GAP) + (height - 1) / 2)
    ax.set_yticklabels([f"dim {d}" for d in dims], fontsize=6)
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    return _common.save(figure, path)

"""Where the primary capsules send their output: coupling coefficients as heat maps."""

import numpy as np

from keras_capsules._class_names import class_name
from keras_capsules._validation import is_int
from keras_capsules.visualization import _common

REDUCTIONS = ("mean", "sum")


def _capsule_layers(model):
    from keras_capsules._compat import keras as keras_compat
    from keras_capsules.layers import CapsuleLayer
    from keras_capsules.layers import PrimaryCapsule

    layers = keras_compat.flatten_layers(model, include_self=False)  # the backbone's too
    primary = [layer for layer in layers if isinstance(layer, PrimaryCapsule)]
    routed = [layer for layer in model.layers if isinstance(layer, CapsuleLayer)]
    if len(primary) != 1 or len(routed) != 1:
        raise ValueError(
            "`model` must be a functional capsule network with one PrimaryCapsule layer "
            "feeding one CapsuleLayer (dynamic routing), like applications.CapsNet. Received "
            f"{len(primary)} PrimaryCapsule and {len(routed)} CapsuleLayer layers."
        )
    return primary[0], routed[0]


def couplings(model, x, reduce="mean"):
    """Coupling coefficients from the primary capsules to the class capsules, on their grid.

    Runs the model up to the primary capsules and routes them through the
    class capsule layer with `return_coupling=True`: `c[i, j]` of the last
    routing iteration, which sums to 1 over the class capsules `j` for every
    primary capsule `i`. Primary capsules are laid out position-major, then
    type (`PrimaryCapsule`), so `c` reshapes to `(height, width, types, classes)`.

    Args:
        model: a capsule network like `applications.CapsNetMNIST`: one
            `PrimaryCapsule` layer feeding one `CapsuleLayer`.
        x: one image, `model.image_shape` or `(height, width)`, in [0, 255].
        reduce: how the capsule types at a position are combined: `"mean"`
            (default; the map then sums to 1 over classes at every position)
            or `"sum"` (the total coupling of the position, `types` times the mean).

    Returns:
        float32 `(height, width, num_classes)`: the primary grid (6x6 for
        the paper's model) for every class capsule.
    """
    import keras

    _common.check_model(model, needs_decoder=False)
    if reduce not in REDUCTIONS:
        raise ValueError(f'`reduce` must be "mean" or "sum". Received: reduce={reduce!r}')
    x = _common.check_images(model, x, single=True)
    primary, routed = _capsule_layers(model)
    _, height, width, _ = primary.conv.compute_output_shape(primary.input.shape)
    encoder = keras.Model(model.input, routed.input)
    capsules = encoder(x, training=False)
    _, coupling = routed(capsules, return_coupling=True)
    coupling = np.asarray(keras.ops.convert_to_numpy(coupling), dtype="float32")[0]
    coupling = coupling.reshape((height, width, primary.capsule_types, coupling.shape[-1]))
    return coupling.mean(axis=2) if reduce == "mean" else coupling.sum(axis=2)


def routing_heatmap(
    model, x, classes="all", reduce="mean", path=None, cell_inches=1.4, dpi=100, max_cols=6
):
    """Heat maps of the coupling coefficients over the primary capsule grid.

    One panel per class capsule shows, at every position of the primary grid
    (6x6 in the paper's model), the coupling coefficient to that class,
    averaged over the capsule types (`reduce="mean"`, default) or summed; all
    panels share one colour scale. The first panel shows the input image.
    After routing, the positions that agree with the winning capsule couple
    to it more strongly.

    Args:
        model: a capsule network like `applications.CapsNetMNIST`.
        x: one image, `model.image_shape` or `(height, width)`, in [0, 255].
        classes: `"all"` (default) for a panel per class capsule,
            `"predicted"` for the longest capsule only, or a list of class
            indices.
        reduce: `"mean"` or `"sum"` over the capsule types (see `couplings`).
        path: optional file name; the figure is written there as a PNG.
        cell_inches: size of one panel in inches.
        dpi: resolution; the PNG is `cols * cell_inches * dpi` pixels wide and
            `rows * cell_inches * dpi` high, `cols = min(panels, max_cols)`.
        max_cols: panels per row.

    Returns:
        The `matplotlib.figure.Figure`.

    Example:

    >>> import applications
    >>> from keras_capsules.visualization import routing_heatmap
    >>> model = applications.CapsNetMNIST()  # trained
    >>> figure = routing_heatmap(model, x_test[0], path="routing.png")  # doctest: +SKIP
    """
    _common.check_dpi(dpi)
    if not is_int(max_cols) or max_cols < 1:
        raise ValueError(f"`max_cols` must be a positive integer. Received: max_cols={max_cols!r}")
    maps = couplings(model, x, reduce)
    image = _common.check_images(model, x, single=True)
    lengths = np.asarray(model.predict(image, verbose=0)["probabilities"])[0]
    predicted = int(np.argmax(lengths))
    if isinstance(classes, str):
        if classes not in ("all", "predicted"):
            raise ValueError(
                f'`classes` must be "all", "predicted" or class indices. Received: {classes!r}'
            )
        classes = list(range(model.num_classes)) if classes == "all" else [predicted]
    else:
        classes = [_common.check_class(model, "classes", c) for c in classes]
        if not classes:
            raise ValueError("`classes` must name at least one class.")

    panels = len(classes) + 1
    cols = min(panels, max_cols)
    rows = -(-panels // cols)
    figure, axes = _common.new_figure(rows, cols, cell_inches, dpi)
    _common.show(
        axes.flat[0],
        _common.to_display(image / 255.0)[0],
        f"input, pred {class_name(model, predicted)}",
    )
    selected = maps[..., classes]
    vmin, vmax = float(selected.min()), float(selected.max())
    if vmax <= vmin:
        vmax = vmin + 1e-6
    for ax, k in zip(axes.flat[1:], classes):
        shown = ax.imshow(maps[..., k], cmap="viridis", vmin=vmin, vmax=vmax)
        ax.set_title(f"{class_name(model, k)} (|v| {lengths[k]:.2f})", fontsize=7)
    for ax in axes.flat[panels:]:
        ax.set_axis_off()
    figure.colorbar(shown, ax=list(axes.flat), shrink=0.8, label=f"coupling ({reduce})")
    return _common.save(figure, path)

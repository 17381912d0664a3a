"""Inputs next to their reconstructions through the capsules (Sabour et al. 2017, figure 3)."""

import numpy as np

from keras_capsules._class_names import class_name
from keras_capsules.visualization import _common


def reconstruction_grid(model, x, labels=None, path=None, cell_inches=1.0, dpi=100):
    """Draw inputs (top row) above their reconstructions (bottom row).

    Each image is classified by `model`; the reconstruction is decoded from
    the capsule of `labels` if given (e.g. the true labels, as in training),
    else from the longest capsule (the prediction), as at test time. Column
    titles give the predicted class and, with `labels`, the decoded one.

    Args:
        model: a trained capsule network with a decoder, e.g.
            `applications.CapsNetMNIST`.
        x: images `(n,) + model.image_shape` (or `(n, height, width)`) in
            [0, 255], as the model takes them.
        labels: optional class indices `(n,)` or one-hot: the capsules to
            decode from.
        path: optional file name; the figure is written there as a PNG.
        cell_inches: size of one image in inches.
        dpi: resolution; the PNG is `n * cell_inches * dpi` pixels wide and
            `2 * cell_inches * dpi` high.

    Returns:
        The `matplotlib.figure.Figure`.

    Example:

    >>> import applications
    >>> from keras_capsules.visualization import reconstruction_grid
    >>> model = applications.CapsNetMNIST()  # trained
    >>> figure = reconstruction_grid(model, x_test[:8], path="recons.png")  # doctest: +SKIP
    """
    _common.check_model(model)
    _common.check_dpi(dpi)
    x = _common.check_images(model, x)
    labels = _common.check_labels(model, labels, len(x))
    outputs = model.predict(x, verbose=0)
    predicted = np.argmax(outputs["probabilities"], axis=-1)
    reconstructions = model.decode(outputs["poses"], labels=labels)

    figure, axes = _common.new_figure(2, len(x), cell_inches, dpi)
    inputs = _common.to_display(x / 255.0)
    outputs = _common.to_display(reconstructions)
    for i in range(len(x)):
        title = f"pred {class_name(model, predicted[i])}"
        _common.show(axes[0, i], inputs[i], title)
        decoded = predicted[i] if labels is None else labels[i]
        _common.show(axes[1, i], outputs[i], f"from {class_name(model, decoded)}")
    axes[0, 0].set_ylabel("input", fontsize=7)
    axes[1, 0].set_ylabel("reconstruction", fontsize=7)
    return _common.save(figure, path)

"""Both digits of MultiMNIST examples, each reconstructed from its own capsule (figure 5)."""

import numpy as np

from keras_capsules.visualization import _common


def _check_pairs(model, labels, n):
    """`(n, 2)` class pairs from indices or multi-hot rows with two classes."""
    labels = np.asarray(labels)
    if labels.ndim == 2 and labels.shape[1] == model.num_classes and model.num_classes != 2:
        if not np.all(np.count_nonzero(labels, axis=1) == 2):
            raise ValueError("`labels` given as multi-hot must have exactly two classes per row.")
        labels = np.argsort(-labels, axis=1, kind="stable")[:, :2]
    if labels.shape != (n, 2) or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(
            f"`labels` must be {n} pairs of class indices (n, 2) or multi-hot "
            f"(n, {model.num_classes}). Received: labels.shape={labels.shape}, dtype={labels.dtype}"
        )
    if labels.min() < 0 or labels.max() >= model.num_classes:
        raise ValueError(f"`labels` must lie in [0, {model.num_classes}).")
    return labels.astype("int32")


def multimnist_reconstructions(
    model, x, labels=None, path=None, cell_inches=1.0, dpi=100, truth=None
):
    """Draw MultiMNIST inputs above the two digits reconstructed from their own capsules.

    For each example the decoder runs twice, once from the capsule of each
    digit with every other capsule masked. The bottom row shows the first
    digit's reconstruction in red and the second's in green (yellow where they
    overlap), over the input in dim grey; the top row shows the input. Titles
    give the two classes decoded and the two longest capsules (the prediction).

    Args:
        model: a capsule network with a decoder trained on MultiMNIST, e.g.
            `applications.CapsNet(input_shape=(36, 36, 1))`.
        x: images `(n,) + model.image_shape` (or `(n, height, width)`) in
            [0, 255], e.g. `multimnist.test_set(...)["images"]`.
        labels: the two classes of each example, `(n, 2)` indices (such as
            `test_set(...)["labels"]`) or multi-hot `(n, num_classes)`;
            `None` (default) decodes the two longest capsules.
        path: optional file name; the figure is written there as a PNG.
        cell_inches: size of one image in inches.
        dpi: resolution; the PNG is `n * cell_inches * dpi` pixels wide and
            `2 * cell_inches * dpi` high.
        truth: optional `(n, 2)` true classes of each example: the input is
            titled with them (`L:`) and the reconstructions with the classes
            decoded (`R:`), in red where the two longest capsules are not the
            two true classes (a failure), as in figure 5 of the paper.

    Returns:
        The `matplotlib.figure.Figure`.

    Example:

    >>> import applications
    >>> from keras_capsules.datasets import multimnist
    >>> from keras_capsules.visualization import multimnist_reconstructions
    >>> model = applications.CapsNet(input_shape=(36, 36, 1))  # trained on MultiMNIST
    >>> test = multimnist.test_set(x_test, y_test)  # doctest: +SKIP
    >>> images, labels = test["images"], test["labels"]  # doctest: +SKIP
    >>> figure = multimnist_reconstructions(
    ...     model, images[:8], labels[:8], path="multimnist.png"
    ... )  # doctest: +SKIP
    """
    _common.check_model(model)
    _common.check_dpi(dpi)
    x = _common.check_images(model, x)
    if model.num_classes < 2:
        raise ValueError("`model` needs at least two class capsules for two digits.")
    outputs = model.predict(x, verbose=0)
    predicted = np.argsort(-np.asarray(outputs["probabilities"]), axis=-1)[:, :2]
    labels = predicted if labels is None else _check_pairs(model, labels, len(x))
    truth = None if truth is None else _check_pairs(model, truth, len(x))
    first = _common.to_display(model.decode(outputs["poses"], labels=labels[:, 0]))
    second = _common.to_display(model.decode(outputs["poses"], labels=labels[:, 1]))
    if first.ndim == 4:  # colour models: one intensity per pixel
        first, second = first.mean(-1), second.mean(-1)
    inputs = _common.to_display(x / 255.0)
    grey = inputs if inputs.ndim == 3 else inputs.mean(-1)
    background = 0.3 * grey
    composite = np.stack(
        [np.maximum(first, background), np.maximum(second, background), background], axis=-1
    )

    figure, axes = _common.new_figure(2, len(x), cell_inches, dpi)
    for i in range(len(x)):
        if truth is None:
            _common.show(axes[0, i], inputs[i], f"pred {predicted[i, 0]},{predicted[i, 1]}")
            _common.show(axes[1, i], composite[i], f"red {labels[i, 0]} green {labels[i, 1]}")
            continue
        _common.show(axes[0, i], inputs[i], f"L:{truth[i, 0]},{truth[i, 1]}")
        _common.show(axes[1, i], composite[i], f"R:{labels[i, 0]},{labels[i, 1]}")
        if set(predicted[i]) != set(truth[i]):
            axes[1, i].title.set_color("red")
    axes[0, 0].set_ylabel("input", fontsize=7)
    axes[1, 0].set_ylabel("reconstructions", fontsize=7)
    return _common.save(figure, path)


def multimnist_successes_and_failures(
    model, x, labels, count=8, path=None, cell_inches=1.0, dpi=100
):
    """Figure 5 of Sabour et al.: MultiMNIST pairs the model gets right, then ones it gets wrong.

    The model classifies `x`; the first `count` examples whose two longest
    capsules are their two labels and the first `count` whose are not are
    drawn side by side, successes first, each with its two digits decoded
    from the two longest capsules (red and green over the input), titled with
    the true classes (`L:`) and the decoded ones (`R:`, red for a failure).

    Args:
        model: a capsule network with a decoder trained on MultiMNIST.
        x: MultiMNIST images `(n, 36, 36[, 1])` in [0, 255] to choose from.
        labels: their two classes, `(n, 2)`.
        count: successes drawn, and failures drawn (fewer where `x` has fewer).
        path: optional file name; the figure is written there as a PNG.
        cell_inches: size of one image in inches.
        dpi: resolution.

    Returns:
        The `matplotlib.figure.Figure`.

    Example:

    >>> from keras_capsules.visualization import multimnist_successes_and_failures
    >>> test = multimnist.test_set(x_test, y_test)  # doctest: +SKIP
    >>> figure = multimnist_successes_and_failures(
    ...     model, test["images"][:1000], test["labels"][:1000], path="figure5.png"
    ... )  # doctest: +SKIP
    """
    _common.check_model(model)
    x = _common.check_images(model, x)
    labels = _check_pairs(model, labels, len(x))
    if not isinstance(count, int) or count < 1:
        raise ValueError(f"`count` must be a positive integer. Received: count={count!r}")
    scores = np.asarray(model.predict(x, verbose=0)["probabilities"])
    top = np.sort(np.argsort(-scores, axis=-1)[:, :2], axis=-1)
    right = np.all(top == np.sort(labels, axis=-1), axis=-1)
    chosen = np.concatenate([np.flatnonzero(right)[:count], np.flatnonzero(~right)[:count]])
    return multimnist_reconstructions(
        model, x[chosen], path=path, cell_inches=cell_inches, dpi=dpi, truth=labels[chosen]
    )

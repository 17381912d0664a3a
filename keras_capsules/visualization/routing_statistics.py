"""What routing does over many images: `routing_statistics`'s numbers, drawn."""

import math

import numpy as np

from keras_capsules._class_names import class_name
from keras_capsules.visualization import _common


def routing_statistics_plot(model, images, labels=None, path=None, dpi=100, batch_size=100):
    """Three panels per routing layer: how sharply, how widely and how consistently it routes.

    The numbers of `keras_capsules.diagnostics.routing_statistics`, before
    they are averaged, for every fully connected routing layer of `model`:

    - the distribution of each child's coupling entropy over the images,
      divided by its maximum `log(num_parents)`, counted on a log scale: near
      1 a child is split evenly between the parents (no routing), near 0 it
      goes to one;
    - for each parent, the fraction of images on which it is active (length
      or activation at least 0.1); parents at zero are never used;
    - for each class, how often two of its images send a child to the same
      strongest parent.

    Args:
        model: a functional capsule network, such as the applications.
        images: test images as the model takes them, e.g. 500 of them.
        labels: their integer classes; by default the predicted ones.
        path: where to write the PNG (optional).
        dpi: resolution.
        batch_size: images per batch (100).

    Returns:
        The `matplotlib.figure.Figure`.

    Example:

    >>> import applications
    >>> import numpy as np
    >>> model = applications.CapsNetMNIST(conv_filters=16, primary_capsule_types=4)
    >>> images = np.random.default_rng(0).integers(0, 256, (6, 28, 28, 1))
    >>> figure = routing_statistics_plot(model, images, labels=[0, 0, 1, 1, 2, 2])
    >>> len(figure.axes)  # one layer, three panels
    3
    """
    from keras_capsules.diagnostics import routing_details

    _common.check_dpi(dpi)
    layers = routing_details(model, images, labels, batch_size)
    figure, axes = _common.new_figure(len(layers), 3, dpi=dpi, size=(11, 3 * len(layers)))
    for row, (name, details) in zip(axes, layers.items()):
        entropy, activity, agreement = row
        for ax in row:
            ax.tick_params(labelsize=8)
        top = math.log(details["num_parents"])
        ratios = details["entropy"].ravel() / top if top > 0 else details["entropy"].ravel()
        # Near-uniform couplings round to just above 1: they belong in the last bin.
        ratios = np.clip(ratios, 0, 1)
        entropy.hist(ratios, bins=np.linspace(0, 1, 41), color="tab:blue", log=True)
        entropy.axvline(ratios.mean(), color="black", linestyle="--", linewidth=1)
        entropy.set_xticks([0, 0.5, 1])
        entropy.set_xlabel("coupling entropy / log(parents); children, log scale", fontsize=8)
        entropy.set_title(f"{name}: entropy / max, mean {ratios.mean():.3f}", fontsize=9)

        parents = np.arange(details["num_parents"])
        active = details["activity"]
        colours = ["tab:red" if a == 0 else "tab:green" for a in active]
        activity.bar(parents, active, color=colours)
        activity.set_ylim(0, 1)
        activity.set_yticks([0, 0.5, 1])
        activity.set_xlabel("parent capsule", fontsize=8)
        never = int(np.sum(active == 0))
        activity.set_title(f"active on a fraction of images; {never} never", fontsize=9)

        classes = sorted(details["class_agreement"])
        values = [details["class_agreement"][c][0] for c in classes]
        agreement.bar([class_name(model, c) for c in classes], values, color="tab:purple")
        agreement.set_ylim(0, 1)
        agreement.set_yticks([0, 0.5, 1])
        agreement.set_xlabel("class", fontsize=8)
        agreement.set_title("same strongest parent, same-class pairs", fontsize=9)
        if not classes:
            agreement.text(0.5, 0.5, "no class has two images", ha="center", fontsize=8)
    return _common.save(figure, path)

"""What routing does in a trained model: `routing_statistics`, and `routing_details` unaveraged."""

import math

import keras
import numpy as np

from keras_capsules._validation import check_positive_int
from keras_capsules.layers import ClassMatrixCapsule
from keras_capsules.layers import FullyConnectedCapsule

INACTIVE = 0.1
"""A parent capsule below this length (or activation) on every image is never active."""

TIE = 1e-5
"""A child whose coupling spreads less than this (relative to its largest) has no favourite."""


def routing_statistics(model, images, labels=None, batch_size=100):
    """How each routing layer of `model` couples its children to its parents, on `images`.

    For every fully connected routing layer (`CapsuleLayer`,
    `SelfAttentionCapsule`, `InvertedDotProductCapsule`,
    `RandomCouplingCapsule`, any `FullyConnectedCapsule`, and
    `ClassMatrixCapsule`), the coupling of its last iteration, each child's
    distribution over the parents (`R` for EM routing), gives:

    - `"entropy"`: the mean entropy of a child's coupling, in nats, over the
      images and children; `"max_entropy"` is its largest possible value,
      `log(num_parents)`, that of uniform coupling.
    - `"inactive_fraction"`: the fraction of parents whose length (for vector
      capsules) or activation (for EM routing) stays below 0.1 on every
      image: parents the sample never uses.
    - `"same_class_agreement"`: over every pair of images of one class and
      every child, the fraction of those in which the child's strongest
      parent is the same in both. A child split evenly between its parents
      (to within 1e-5 of its largest coefficient) has no strongest parent
      and is left out; `None` when nothing is left (no class has two
      images, or the coupling is uniform).

    A coupling that is not a distribution over the parents, as
    self-attention routing's `c + B` (the prior `B` can be negative), is made
    one first: negative coefficients count as zero and each child's are
    divided by their sum. Convolutional capsule layers (`MatrixCapsule`) are
    left out: their children are coupled to parents at several positions.

    Args:
        model: a functional Keras model, such as the applications.
        images: inputs of the model, as its `predict` takes them.
        labels: integer classes of the images; by default the model's
            predicted classes (the argmax of its class scores).
        batch_size: images per batch (100).

    Returns:
        `{layer_name: {"entropy", "max_entropy", "inactive_fraction",
        "same_class_agreement", "num_parents", "num_children"}}`, floats and
        integers.

    Example:

    >>> import applications
    >>> import numpy as np
    >>> model = applications.CapsNetMNIST(conv_filters=16, primary_capsule_types=4)
    >>> images = np.random.default_rng(0).integers(0, 256, (6, 28, 28, 1))
    >>> stats = routing_statistics(model, images, labels=[0, 0, 1, 1, 2, 2])
    >>> digit_caps = stats["digit_caps"]  # the one routing layer
    >>> round(digit_caps["max_entropy"], 4), digit_caps["num_children"]
    (2.3026, 144)
    """
    return {
        name: _summary(details)
        for name, details in routing_details(model, images, labels, batch_size).items()
    }


def routing_details(model, images, labels=None, batch_size=100):
    """What `routing_statistics` averages, per routing layer, before averaging.

    The same layers, couplings and conventions as `routing_statistics`, kept
    per image, child, parent and class, as the routing statistics figure
    (`keras_capsules.visualization.routing_statistics_plot`) draws them.

    Args:
        model: a functional Keras model, such as the applications.
        images: inputs of the model, as its `predict` takes them.
        labels: integer classes of the images; by default the model's
            predicted classes.
        batch_size: images per batch (100).

    Returns:
        `{layer_name: details}`, where `details` holds `"entropy"`, the
        entropy of each child's coupling in nats, `(num_images,
        num_children)`; `"activity"`, the fraction of the images on which
        each parent is active (length or activation at least 0.1),
        `(num_parents,)`; `"class_agreement"`, `{class: (agreement, pairs)}`,
        the same-class agreement of each class with two images or more and
        the number of (image pair, child) cases it counts; and
        `"num_parents"` and `"num_children"`.

    Example:

    >>> import applications
    >>> import numpy as np
    >>> model = applications.CapsNetMNIST(conv_filters=16, primary_capsule_types=4)
    >>> images = np.random.default_rng(0).integers(0, 256, (6, 28, 28, 1))
    >>> details = routing_details(model, images, labels=[0, 0, 1, 1, 2, 2])["digit_caps"]
    >>> details["entropy"].shape, details["activity"].shape, sorted(details["class_agreement"])
    ((6, 144), (10,), [0, 1, 2])
    """
    check_positive_int("batch_size", batch_size)
    images = np.asarray(images)
    if len(images) == 0:
        raise ValueError("`images` is empty: the statistics need at least one image.")
    if not np.issubdtype(images.dtype, np.number) or not np.all(np.isfinite(images)):
        raise ValueError(
            "`images` must hold finite numbers: NaN or infinite pixels route to nothing "
            "(they read as maximum entropy with every parent inactive)."
        )
    layers = [
        layer
        for layer in model.layers
        if isinstance(layer, (FullyConnectedCapsule, ClassMatrixCapsule))
    ]
    if not layers:
        raise ValueError(
            "`model` has no fully connected routing layer (CapsuleLayer, SelfAttentionCapsule, "
            f"InvertedDotProductCapsule, ClassMatrixCapsule, ...). Received: {model.name!r}"
        )
    if labels is None:
        scores = model.predict(images, batch_size=batch_size, verbose=0)
        labels = np.argmax(scores["probabilities"] if isinstance(scores, dict) else scores, -1)
    labels = np.asarray(labels)
    if labels.shape != (len(images),):
        raise ValueError(
            f"`labels` must hold one class per image ({len(images)}). "
            f"Received: labels.shape={labels.shape}"
        )
    return {
        layer.name: _details(*_coupling(model, layer, images, batch_size), labels)
        for layer in layers
    }


def _coupling(model, layer, images, batch_size):
    """The layer's parents' presence `(n, parents)` and coupling `(n, children, parents)`."""
    capsules = keras.Model(model.inputs, layer.input).predict(
        images, batch_size=batch_size, verbose=0
    )
    if not isinstance(capsules, (list, tuple)):
        capsules = [capsules]
    presence, coupling = [], []
    for start in range(0, len(images), batch_size):
        batch = [np.asarray(x[start : start + batch_size]) for x in capsules]
        if isinstance(layer, ClassMatrixCapsule):
            _, activations, resp = layer(tuple(batch), return_responsibilities=True)
            presence.append(keras.ops.convert_to_numpy(activations))
            resp = keras.ops.convert_to_numpy(resp)
            coupling.append(resp.reshape(len(resp), -1, resp.shape[-1]))
        else:
            outputs, c = layer(batch[0], return_coupling=True)
            presence.append(np.linalg.norm(keras.ops.convert_to_numpy(outputs), axis=-1))
            coupling.append(keras.ops.convert_to_numpy(c))
    return np.concatenate(presence).astype("float64"), np.concatenate(coupling).astype("float64")


def _details(presence, coupling, labels):
    n, num_children, num_parents = coupling.shape
    # Self-attention's coupling `c + B` is no distribution: its negative part is dropped
    # and the rest normalised over the parents (a child with nothing left is even).
    coupling = np.maximum(coupling, 0.0)
    totals = np.sum(coupling, axis=-1, keepdims=True)
    coupling = np.where(totals > 0, coupling / np.where(totals > 0, totals, 1.0), 1 / num_parents)
    safe = np.where(coupling > 0, coupling, 1.0)
    strongest = np.argmax(coupling, axis=-1)  # (n, children)
    # A child split evenly (to rounding) has no strongest parent: it takes no part.
    decided = np.ptp(coupling, axis=-1) > TIE * np.max(coupling, axis=-1)
    agreement = {}
    for cls in np.unique(labels):
        members, sure = strongest[labels == cls], decided[labels == cls]  # (m, children)
        # Per child, the pairs of members that share its strongest parent, of all pairs
        # of members that have one.
        counts = np.stack([np.sum((members == j) & sure, axis=0) for j in range(num_parents)], -1)
        pairs = np.sum(sure, axis=0) * (np.sum(sure, axis=0) - 1) / 2
        if pairs.sum() > 0:
            agreeing = np.sum(counts * (counts - 1) / 2)
            agreement[int(cls)] = (float(agreeing / pairs.sum()), float(pairs.sum()))
    return {
        "entropy": -np.sum(coupling * np.log(safe), axis=-1),  # (n, children)
        "num_parents": int(num_parents),
        "num_children": int(num_children),
        "activity": np.mean(presence >= INACTIVE, axis=0),  # (parents,)
        "class_agreement": agreement,
    }


def _summary(details):
    pairs = sum(count for _, count in details["class_agreement"].values())
    agreeing = sum(value * count for value, count in details["class_agreement"].values())
    return {
        "entropy": float(details["entropy"].mean()),
        "max_entropy": math.log(details["num_parents"]),
        "inactive_fraction": float(np.mean(details["activity"] == 0)),
        "same_class_agreement": float(agreeing / pairs) if pairs else None,
        "num_parents": details["num_parents"],
        "num_children": details["num_children"],
    }

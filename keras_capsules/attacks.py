"""Adversarial examples against a trained classifier: `fgsm` and `pgd`.

Both attacks move each image within an L-infinity ball of radius `epsilon`,
given in units of the full pixel range (0.1 is a tenth of it, 25.5 grey
levels for pixels in [0, 255]), in the direction that raises the model's
loss, and keep the pixels in range. They run on every backend: the gradient
with respect to the images is the only backend-specific step.
"""

import keras
import numpy as np
from keras import ops

from keras_capsules._autodiff import vjp
from keras_capsules._validation import check_positive_int


def fgsm(model, images, labels, epsilon, loss=None, batch_size=100):
    """The fast gradient sign method (Goodfellow et al. 2015): one step of `epsilon`.

    Each image moves by `epsilon` (times the pixel range) along the sign of
    the gradient of the loss with respect to it, and is clipped to the range.

    Args:
        model: a Keras classifier whose output is its class scores, or a
            dict of outputs with `"probabilities"` (as the applications).
        images: the images as the model takes them, a NumPy array.
        labels: their integer classes.
        epsilon: the L-infinity radius, a fraction of the pixel range in
            [0, 1].
        loss: `loss(labels, scores)` to raise; by default the model's own
            class loss (the margin or spread loss of a capsule network,
            cross-entropy otherwise).
        batch_size: images per gradient computation (100).

    Returns:
        The adversarial images, a float32 NumPy array shaped as `images`.

    Example:

    >>> import applications
    >>> import numpy as np
    >>> model = applications.CapsNetMNIST(conv_filters=16, primary_capsule_types=4)
    >>> images = np.random.default_rng(0).integers(0, 256, (4, 28, 28, 1))
    >>> adversarial = fgsm(model, images, labels=[0, 1, 2, 3], epsilon=0.1)
    >>> bool(np.abs(adversarial - images).max() <= 25.5 + 1e-3)
    True

    Reference:
        Goodfellow, Shlens, Szegedy. Explaining and Harnessing Adversarial
        Examples. ICLR 2015.
    """
    return pgd(
        model,
        images,
        labels,
        epsilon,
        steps=1,
        step_size=epsilon,
        random_start=False,
        loss=loss,
        batch_size=batch_size,
    )


def pgd(
    model,
    images,
    labels,
    epsilon,
    steps=10,
    step_size=None,
    random_start=True,
    seed=None,
    loss=None,
    batch_size=100,
):
    """Projected gradient descent (Madry et al. 2018): `steps` signed steps in the ball.

    From a uniformly random start in the ball (with `random_start`), each
    step moves every image by `step_size` along the sign of its loss
    gradient, then projects it back into the ball of radius `epsilon` around
    the original and into the pixel range.

    Args:
        model: a Keras classifier, as for `fgsm`.
        images: the images as the model takes them, a NumPy array.
        labels: their integer classes.
        epsilon: the L-infinity radius, a fraction of the pixel range in
            [0, 1].
        steps: gradient steps, a positive integer (10).
        step_size: the size of each step, in the same units; by default
            `2.5 * epsilon / steps`, as Madry et al.
        random_start: start from a uniformly random point of the ball (`True`).
        seed: seed of the random start.
        loss: the loss to raise, as for `fgsm`.
        batch_size: images per gradient computation (100).

    Returns:
        The adversarial images, a float32 NumPy array shaped as `images`.

    Example:

    >>> import applications
    >>> import numpy as np
    >>> model = applications.CapsNetMNIST(conv_filters=16, primary_capsule_types=4)
    >>> images = np.random.default_rng(0).integers(0, 256, (4, 28, 28, 1))
    >>> adversarial = pgd(model, images, labels=[0, 1, 2, 3], epsilon=0.05, steps=2, seed=0)
    >>> adversarial.shape, bool(adversarial.min() >= 0 and adversarial.max() <= 255)
    ((4, 28, 28, 1), True)

    Reference:
        Madry, Makelov, Schmidt, Tsipras, Vladu. Towards Deep Learning Models
        Resistant to Adversarial Attacks. ICLR 2018.
    """
    epsilon = _real(epsilon)
    if epsilon is None or not 0 <= epsilon <= 1:
        raise ValueError(
            f"`epsilon` must be a fraction of the pixel range in [0, 1]. Received: {epsilon!r}"
        )
    check_positive_int("steps", steps)
    check_positive_int("batch_size", batch_size)
    given = step_size
    step_size = 2.5 * epsilon / steps if step_size is None else _real(step_size)
    if step_size is None or step_size < 0:
        raise ValueError(
            f"`step_size` must be a finite non-negative number. Received: step_size={given!r}"
        )
    images = np.asarray(images, dtype="float32")
    labels = _checked_labels(model, labels, len(images))
    loss = _class_loss(model) if loss is None else loss
    top = _pixel_range(model)
    radius, stride = epsilon * top, step_size * top
    rng = np.random.default_rng(seed)
    adversarial = images.copy()
    if random_start and radius > 0:
        adversarial += rng.uniform(-radius, radius, size=images.shape).astype("float32")
        adversarial = np.clip(adversarial, 0.0, top)
    for start in range(0, len(images), batch_size):
        batch = slice(start, start + batch_size)
        x, targets = adversarial[batch], ops.convert_to_tensor(labels[batch])
        for _ in range(steps):
            x = x + stride * np.sign(_loss_gradient(model, loss, x, targets))
            x = np.clip(x, images[batch] - radius, images[batch] + radius)
            x = np.clip(x, 0.0, top)
        adversarial[batch] = x
    return adversarial


def _real(value):
    """`value` as a finite Python float (from a Python or NumPy number), or None."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
        return None
    value = float(value)
    return value if np.isfinite(value) else None


def _checked_labels(model, labels, count):
    """`labels` as int32 class indices, one per image, each a class of `model`."""
    labels = np.asarray(labels).reshape(-1)
    if len(labels) != count:
        raise ValueError(
            f"`labels` must hold one class per image: {count} images, {len(labels)} labels."
        )
    classes = getattr(model, "num_classes", None)
    if classes is None:  # any Keras classifier: its scores' last axis
        shape = model.output_shape
        classes = int((shape["probabilities"] if isinstance(shape, dict) else shape)[-1])
    integral = np.issubdtype(labels.dtype, np.integer) or (
        np.issubdtype(labels.dtype, np.floating)
        and np.all(np.isfinite(labels))
        and np.all(labels == np.round(labels))
    )
    if not integral or (len(labels) and (labels.min() < 0 or labels.max() >= classes)):
        bad = labels if not integral else labels[(labels < 0) | (labels >= classes)]
        raise ValueError(
            f"`labels` must be class indices in [0, {classes}). Received: {bad[:5].tolist()}"
        )
    return labels.astype("int32")


def _class_loss(model):
    """The model's own class loss, or cross-entropy on its class probabilities."""
    own = getattr(model, "margin_loss", None)  # the capsule classifiers' class loss
    if isinstance(own, keras.losses.Loss):
        return own
    return keras.losses.SparseCategoricalCrossentropy()


def _pixel_range(model):
    """The largest pixel value: `1 / scale` of the model's `image_converter` (the
    applications'), or 1 for a model without one."""
    converter = getattr(model, "image_converter", None)  # a functional model has none
    scale = None if converter is None else converter.scale
    return 1.0 if scale is None else 1.0 / scale


def _scores(model, x):
    outputs = model(x, training=False)
    if isinstance(outputs, dict):
        outputs = outputs["probabilities"]
    return ops.cast(outputs, "float32")


def _loss_gradient(model, loss, x, labels):
    """The gradient of the batch's loss with respect to `x`, as NumPy (only its sign is used)."""

    def total(images):
        return (loss(labels, _scores(model, images)),), None

    (grad,), _ = vjp(total, [ops.convert_to_tensor(x)], [ops.convert_to_tensor(1.0)])
    return ops.convert_to_numpy(grad)

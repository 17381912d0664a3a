"""Trained layers carried from a preset's model to a new model of other classes or images."""

import keras
import numpy as np

from keras_capsules.utils import flatten_layers


def head_layers(model):
    """The layers of `model` with weights that follow its backbone: the class capsules' side."""
    backbone = {id(layer) for layer in flatten_layers(model.backbone)}
    head = [layer for layer in model.layers if id(layer) not in backbone and layer.weights]
    decoder = getattr(model, "decoder", None)
    return head + ([decoder] if decoder is not None else [])


def _layers_with_weights(model, prefix=""):
    """`{path: layer}` of the layers with weights, nested models walked (`"backbone/conv1"`)."""
    layers = {}
    for layer in model.layers:
        if not layer.weights:
            continue
        if isinstance(layer, keras.Model):
            layers.update(_layers_with_weights(layer, prefix=f"{prefix}{layer.name}/"))
        else:
            layers[prefix + layer.name] = layer
    decoder = getattr(model, "decoder", None)
    if decoder is not None and not prefix:
        layers[decoder.name] = decoder
    return layers


def _grey_to_colour(source, target):
    """A first convolution's grey kernel spread over `target`'s channels, or None.

    A kernel trained on one channel, divided evenly over C channels, gives an
    image whose channels are all equal the response the grey image had.
    """
    if len(source) != len(target) or not isinstance(source[0], np.ndarray):
        return None
    kernel, wanted = source[0], target[0].shape
    if (
        kernel.ndim != 4
        or kernel.shape[2] != 1
        or kernel.shape[:2] + kernel.shape[3:] != (wanted[:2] + wanted[3:])
    ):
        return None
    rest = source[1:]
    if any(a.shape != tuple(b.shape) for a, b in zip(rest, target[1:])):
        return None
    return [np.repeat(kernel, wanted[2], axis=2) / wanted[2], *rest]


def transfer_weights(source, target, new_head):
    """Copy `source`'s weights into the layers of `target` that still fit; return their paths.

    A layer is copied when `source` has a layer at the same path (`"backbone/conv1"`) whose weights
    have the same shapes; the first convolution of a one-channel model also
    fits a model of more channels (its kernel spread over them). With
    `new_head`, the target's `_head_layers()` (class capsules, scores and the
    decoder; a CNN's softmax layer) are left as built: they belong to other
    classes.
    """
    skip = {id(layer) for layer in target._head_layers()} if new_head else set()
    sources = _layers_with_weights(source)
    kept = []
    for name, layer in _layers_with_weights(target).items():
        if id(layer) in skip or name not in sources:
            continue
        values = [np.asarray(v) for v in sources[name].get_weights()]
        shapes = [tuple(w.shape) for w in layer.weights]
        if [v.shape for v in values] != shapes:
            values = _grey_to_colour(values, layer.weights)
            if values is None:
                continue
        layer.set_weights(values)
        kept.append(name)
    return kept

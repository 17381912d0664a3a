"""A model's feature extractor as `model.backbone`, and trained layers carried to a new model."""

import keras
import numpy as np

from keras_capsules._compat import keras as keras_compat


class BackboneView:
    """`backbone`: the model's layers from the images to `BACKBONE_OUTPUT`, as a `keras.Model`.

    The backbone shares its layers with the model, so
    `model.backbone.trainable = False` freezes them in the model (Keras's way:
    set it before `fit`, and batch normalisation then runs in inference
    mode), and `model.backbone.predict(x)` gives the features the class
    capsules read. It is not a part of the model's saved structure: the model
    saves its layers once.
    """

    BACKBONE_OUTPUT = None
    """The name of the backbone's last layer; the class capsules and the decoder come after it."""

    @property
    def backbone(self):
        view = self.__dict__.get("_backbone_view")
        if view is None:
            output = self.get_layer(self.BACKBONE_OUTPUT).output
            view = keras.Model(self.inputs, output, name=f"{self.name}_backbone")
            # Set past Keras's tracking: the layers are the model's own already.
            object.__setattr__(self, "_backbone_view", view)
        return view


def head_layers(model):
    """The layers of `model` with weights that follow its backbone: the class capsules' side."""
    backbone = {id(layer) for layer in keras_compat.flatten_layers(model.backbone)}
    head = [layer for layer in model.layers if id(layer) not in backbone and layer.weights]
    decoder = getattr(model, "decoder", None)
    return head + ([decoder] if decoder is not None else [])


def _layers_with_weights(model):
    layers = {layer.name: layer for layer in model.layers if layer.weights}
    decoder = getattr(model, "decoder", None)
    if decoder is not None:
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
    """Copy `source`'s weights into the layers of `target` that still fit; return their names.

    A layer is copied when `source` has a layer of the same name whose weights
    have the same shapes; the first convolution of a one-channel model also
    fits a model of more channels (its kernel spread over them). With
    `new_head`, the layers after the backbone (class capsules, scores and the
    decoder) are left as built: they belong to other classes.
    """
    skip = {id(layer) for layer in head_layers(target)} if new_head else set()
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

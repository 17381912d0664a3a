"""What the capsule classifiers share: their loss, metrics, inference methods and config."""

import keras
from keras import ops

from applications._classes import resolve_classes
from applications._defaults import dtype_policy
from applications._inputs import accept_any_image
from applications._inputs import converter_for
from applications._inputs import image_input
from applications._losses import batch_mean
from applications._losses import with_penalties
from applications._preset import PresetMixin
from applications._task import Task
from applications._task import own_loss
from applications._transfer import head_layers
from keras_capsules.layers import Length
from keras_capsules.layers import Mask
from keras_capsules.layers import ReconstructionDecoder
from keras_capsules.losses import MarginLoss
from keras_capsules.losses import ReconstructionLoss
from keras_capsules.losses import SpreadLoss
from keras_capsules.metrics import SpreadMargin


class CapsuleClassifier(PresetMixin, Task, keras.Model):
    """A functional model from images to class capsules, trained on the margin loss.

    The images go through the `image_converter` (any size and colour to the
    network's, pixels scaled) and the `backbone`
    (a `keras.Model` the model tracks, and saves in its config); the
    subclass's `head(features, num_classes, policy, backbone)` turns its
    output into the class capsules `poses` `(batch, num_classes, capsule_dim)` and their
    scores in [0, 1] (`None`: the capsules' lengths). With `backbone=None`
    the family's `BACKBONE` is built from the backbone's arguments, which
    the subclass passes on in `kwargs`. This class adds the class scores as
    `"probabilities"`, the reconstruction decoder fed the true label's
    capsule, the loss (the margin loss of the scores, or with a
    `spread_margin` the spread loss at the margin of the model's
    `keras_capsules.metrics.SpreadMargin`, plus the scaled reconstruction
    loss), the metrics,
    `decode`, `reconstruct` and the config round trip (`config` holds the
    head's own arguments). The arguments every capsule classifier takes
    (`num_classes` to `name`) are defined here once, with the vector
    capsule networks' defaults; a subclass names in its signature only those
    it sets otherwise and passes the rest on in `kwargs`.
    """

    def __init__(
        self,
        backbone,
        head,
        *,
        config,
        num_classes=None,
        class_names=None,
        decoder_units=(512, 1024),
        reconstruction_weight=0.0005,
        image_converter=None,
        compile=True,
        dtype=None,
        name=None,
        image_shape=None,
        default_classes=10,
        spread_margin=None,
        **kwargs,
    ):
        num_classes, class_names = resolve_classes(num_classes, class_names, default_classes)
        policy = dtype_policy(dtype)
        check_reconstruction_weight(reconstruction_weight)
        trainable = kwargs.pop("trainable", True)
        backbone = self._backbone(backbone, kwargs, policy)
        input_shape = image_shape or backbone.image_shape
        converter = converter_for(image_converter, input_shape)
        images = image_input(input_shape)
        features = backbone(converter(images))
        poses, scores = head(features, num_classes, policy, backbone)
        if scores is None:
            probabilities = Length(name="probabilities", dtype="float32")(poses)
        else:
            probabilities = keras.layers.Activation(
                "linear", name="probabilities", dtype="float32"
            )(scores)
        super().__init__(
            inputs=images,
            outputs={"probabilities": probabilities, "poses": poses},
            name=name,
        )
        accept_any_image(self)
        if not trainable:  # set once the layers are tracked, so that they are frozen too
            self.trainable = False
        self._declare(policy, input_shape, converter, num_classes, class_names)
        self.backbone = backbone
        self._config = {
            "num_classes": num_classes,
            "class_names": None if class_names is None else list(class_names),
            **config,
            "decoder_units": None if decoder_units is None else tuple(decoder_units),
            "reconstruction_weight": reconstruction_weight,
            "dtype": policy.name,
        }
        self.mask = Mask(name="mask")
        self.decoder = None
        if decoder_units is not None:
            self.decoder = ReconstructionDecoder(
                input_shape,
                hidden_units=decoder_units,
                resolution=ReconstructionDecoder.resolution_for(input_shape),
                name="decoder",
                dtype=policy,
            )
            self.decoder.build((None, num_classes, poses.shape[-1]))
        if spread_margin is None:
            self.margin_loss = MarginLoss()
        else:  # the margin is training state, which SpreadMarginSchedule raises
            self.spread_margin = SpreadMargin(spread_margin, name="spread_margin")
            self.margin_loss = SpreadLoss(margin=self.spread_margin.margin)
        self.reconstruction_loss = ReconstructionLoss(
            weight=reconstruction_weight * _drawn_share(self.decoder, input_shape)
        )
        self.margin_loss_tracker = keras.metrics.Mean(name=self.margin_loss.name)
        if self.decoder is not None:
            self.reconstruction_loss_tracker = keras.metrics.Mean(name="reconstruction_loss")
        if compile:
            self.compile()

    # Training ---------------------------------------------------------------

    def _loss_for_compile(self, loss):
        return own_loss(self, loss)

    def _images(self, x):
        """The reconstruction target: the input images as the converter gives the network."""
        return ops.cast(self.image_converter(x), "float32")

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        if y is None:
            raise ValueError(f"{type(self).__name__} needs labels `y` to compute its loss.")
        pairs = [(y, self._images(x))] if self.decoder is not None else []
        total = self._capsule_loss(y, pairs, y_pred, sample_weight)
        return with_penalties(self, total, x, y, y_pred, sample_weight, training)

    def _capsule_loss(self, targets, reconstructions, y_pred, sample_weight):
        """Margin loss of `targets` plus, with a decoder, one reconstruction term per pair.

        `reconstructions` holds `(labels, images)` pairs: the decoder's output
        from the capsules `labels` alone is compared with `images` (in [0, 1]),
        and the terms are summed.
        """
        # The losses are scaled for summing across tf.distribute replicas (as
        # Keras scales them); the trackers report the batch's plain means.
        probabilities = y_pred["probabilities"]
        total = self.margin_loss(targets, probabilities, sample_weight=sample_weight)
        self.margin_loss_tracker.update_state(
            batch_mean(self.margin_loss, targets, probabilities, sample_weight)
        )
        if self.decoder is not None:
            reconstruction, tracked = 0.0, 0.0
            for labels, images in reconstructions:
                decoded = ops.cast(
                    self.decoder(self.mask(y_pred["poses"], labels=labels)), "float32"
                )
                loss = self.reconstruction_loss
                reconstruction = reconstruction + loss(images, decoded, sample_weight=sample_weight)
                tracked = tracked + batch_mean(loss, images, decoded, sample_weight)
            self.reconstruction_loss_tracker.update_state(tracked)
            total = total + reconstruction
        return total

    def _head_layers(self):
        """The layers after the backbone (class capsules, scores, decoder): the classes' own."""
        return head_layers(self)

    def _serving_outputs(self):
        decoder = {} if self.decoder is None else {"decoder": self.decoder, "mask": self.mask}
        return {"scores": "probabilities", "poses": "poses", **decoder}

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        return super().compute_metrics(x, y, y_pred["probabilities"], sample_weight)

    # Inference --------------------------------------------------------------

    def decode(self, poses, labels=None):
        """Reconstruct images from class capsules.

        Args:
            poses: class capsules `(batch, num_classes, capsule_dim)`, e.g.
                `model.predict(x)["poses"]`, possibly perturbed.
            labels: the capsules to decode from (class indices or one-hot);
                `None` decodes from the longest capsule of each example.

        Returns:
            A NumPy array of images in [0, 1], shape `(batch,) + input_shape`.
        """
        if self.decoder is None:
            raise ValueError("This model was built with `decoder_units=None`: it has no decoder.")
        poses = ops.convert_to_tensor(poses, dtype=self.decoder.compute_dtype)
        return ops.convert_to_numpy(self.decoder(self.mask(poses, labels=labels)))

    def reconstruct(self, x, labels=None, batch_size=100):
        """Reconstruct images through the capsules: `decode(predict(x)["poses"])`."""
        poses = self.predict(x, batch_size=batch_size, verbose=0)["poses"]
        return self.decode(poses, labels=labels)

    # Serialization ----------------------------------------------------------

    def _architecture_config(self):
        config = dict(self._config)
        if config.get("spread_margin") is not None:  # the margin it is at, which a run raised
            config["spread_margin"] = round(float(self.spread_margin.result()), 6)
        return config


def _drawn_share(decoder, image_shape):
    """The share of the image's values the decoder draws (1 without a `resolution`).

    The reconstruction loss sums the squared errors of the image's values; a
    decoder that draws fewer and resizes its drawing has its loss scaled by
    this share, so that `reconstruction_weight` weighs each drawn value as
    the paper's weighs each pixel, and the loss does not grow with the image.
    """
    if decoder is None or decoder.resolution is None:
        return 1.0
    height, width = decoder.resolution
    return height * width / (image_shape[0] * image_shape[1])


def check_reconstruction_weight(reconstruction_weight):
    """Raise a `ValueError` unless `reconstruction_weight` is non-negative."""
    if reconstruction_weight < 0:
        raise ValueError(
            "`reconstruction_weight` must be non-negative. "
            f"Received: reconstruction_weight={reconstruction_weight!r}"
        )

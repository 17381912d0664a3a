import keras
import numpy as np
from keras import ops

from applications._checks import check_positive_ints
from applications._checks import image_shape
from applications._checks import take_renamed
from applications._defaults import default_optimizer
from applications._defaults import dtype_policy
from applications._inputs import PIXELS
from applications._inputs import InputRangeCheck
from applications._inputs import check_rescale
from applications._inputs import rescaled
from applications._losses import batch_mean
from applications._losses import with_penalties
from applications._predictions import CapsulePredictions
from keras_capsules.layers import CapsuleLayer
from keras_capsules.layers import Length
from keras_capsules.layers import Mask
from keras_capsules.layers import PrimaryCapsule
from keras_capsules.layers import ReconstructionDecoder
from keras_capsules.losses import MarginLoss
from keras_capsules.losses import ReconstructionLoss


@keras.saving.register_keras_serializable(package="keras_capsules")
class CapsNetMNIST(CapsulePredictions, InputRangeCheck, keras.Model):
    """The CapsNet of Sabour et al. 2017 for MNIST, ready to `fit`.

    Conv1 (256 filters 9x9, ReLU) -> PrimaryCaps (32 types x 8D, 9x9 stride 2)
    -> DigitCaps (10 x 16D, dynamic routing) -> capsule lengths, plus the
    reconstruction decoder (512, 1024, 784). With the defaults it has the
    paper's 8,215,568 parameters.

    The model takes images with pixel values in [0, 255], as
    `keras_capsules.datasets.mnist.load_data()` returns them (uint8 or float,
    `(28, 28)` or `(28, 28, 1)`), and multiplies them by `rescale` (1 / 255)
    itself. For images already scaled to [0, 1] pass `rescale=None`. The
    first NumPy batch of `fit`, `evaluate` or `predict` whose range cannot be
    the expected one gives a warning.

    Its outputs are a dict: `"probabilities"` (capsule lengths, one per class)
    and `"poses"` (the class capsules). `predict` returns the probabilities,
    `predict_poses` the class capsules and `predict_outputs` both. The loss is the
    margin loss plus the scaled reconstruction loss, with the decoder fed the
    capsule of the true label (integer or one-hot `y`), as in the paper;
    `fit(x, y)` needs no `loss` argument. `reconstruct()` and `decode()` give
    reconstructions from the longest or from chosen capsules.

    Args:
        input_shape: shape of one image, `(28, 28, 1)`.
        num_classes: number of class capsules (10).
        conv_filters: filters of Conv1 (256).
        conv_kernel_size: kernel size of Conv1 (9).
        primary_capsule_types: primary capsule types (32; formerly
            `primary_capsules`).
        primary_capsule_dim: dimensions of a primary capsule (8).
        primary_kernel_size: kernel size of the primary capsule convolution (9).
        primary_strides: strides of the primary capsule convolution (2).
        capsule_dim: dimensions of a class capsule (16).
        iterations: routing iterations (3; formerly `routings`).
        stop_gradient: stop gradients through the inner routing iterations
            (`False`, as the paper).
        decoder_units: hidden layer sizes of the decoder, `(512, 1024)`; `None`
            builds no decoder and trains on the margin loss alone.
        reconstruction_weight: scale of the reconstruction loss (0.0005).
        learning_rate: initial Adam learning rate of the default compile (1e-3).
        decay_steps: exponential decay of the learning rate: it is multiplied
            by `decay_rate` every `decay_steps` steps (2000, as the official
            code).
        decay_rate: see `decay_steps` (0.96, as the official code).
        rescale: the factor the model multiplies its inputs by, `1 / 255` for
            pixel values in [0, 255]; `None` for inputs already in [0, 1].
        compile: compile with the defaults above and an accuracy metric.
        dtype: dtype policy of the layers, e.g. `"mixed_bfloat16"`; by default
            the global policy. Routing, lengths and losses run in float32.
        **kwargs: `keras.Model` arguments such as `name`.

    Example:

    >>> import applications
    >>> from keras_capsules import datasets
    >>> (x_train, y_train), (x_test, y_test) = datasets.mnist.load_data()
    >>> model = applications.CapsNetMNIST()
    >>> model.fit(x_train, y_train, epochs=1, batch_size=100)  # doctest: +SKIP
    >>> probabilities = model.predict(x_test[:8])  # doctest: +SKIP

    Reference:
        Sabour, Frosst, Hinton. Dynamic Routing Between Capsules. NIPS 2017.
        arXiv:1710.09829.
    """

    def __init__(
        self,
        input_shape=(28, 28, 1),
        num_classes=10,
        conv_filters=256,
        conv_kernel_size=9,
        primary_capsule_types=32,
        primary_capsule_dim=8,
        primary_kernel_size=9,
        primary_strides=2,
        capsule_dim=16,
        iterations=3,
        stop_gradient=False,
        decoder_units=(512, 1024),
        reconstruction_weight=0.0005,
        learning_rate=1e-3,
        decay_steps=2000,
        decay_rate=0.96,
        rescale=PIXELS,
        compile=True,
        dtype=None,
        name="capsnet_mnist",
        **kwargs,
    ):
        renamed = take_renamed(
            kwargs,
            {"primary_capsules": "primary_capsule_types", "routings": "iterations"},
            type(self).__name__,
        )
        primary_capsule_types = renamed.get("primary_capsule_types", primary_capsule_types)
        iterations = renamed.get("iterations", iterations)
        input_shape = image_shape(input_shape)
        rescale = check_rescale(rescale)
        policy = dtype_policy(dtype)
        check_positive_ints(
            num_classes=num_classes,
            conv_filters=conv_filters,
            primary_capsule_types=primary_capsule_types,
            primary_capsule_dim=primary_capsule_dim,
            capsule_dim=capsule_dim,
            iterations=iterations,
        )
        if reconstruction_weight < 0:
            raise ValueError(
                "`reconstruction_weight` must be non-negative. "
                f"Received: reconstruction_weight={reconstruction_weight!r}"
            )

        images = keras.Input(shape=input_shape, name="images")
        x = rescaled(images, rescale, policy)
        x = keras.layers.Conv2D(
            conv_filters,
            conv_kernel_size,
            activation="relu",
            kernel_initializer="he_normal",
            name="conv1",
            dtype=policy,
        )(x)
        primary = PrimaryCapsule(
            primary_capsule_types,
            primary_capsule_dim,
            primary_kernel_size,
            strides=primary_strides,
            name="primary_caps",
            dtype=policy,
        )(x)
        poses = CapsuleLayer(
            num_classes,
            capsule_dim,
            iterations=iterations,
            stop_gradient=stop_gradient,
            name="digit_caps",
            dtype=policy,
        )(primary)
        probabilities = Length(name="probabilities", dtype="float32")(poses)
        super().__init__(
            inputs=images,
            outputs={"probabilities": probabilities, "poses": poses},
            name=name,
            **kwargs,
        )
        # The model's own policy decides loss scaling in compile (mixed_float16).
        self.dtype_policy = policy

        self._config = {
            "input_shape": input_shape,
            "num_classes": num_classes,
            "conv_filters": conv_filters,
            "conv_kernel_size": conv_kernel_size,
            "primary_capsule_types": primary_capsule_types,
            "primary_capsule_dim": primary_capsule_dim,
            "primary_kernel_size": primary_kernel_size,
            "primary_strides": primary_strides,
            "capsule_dim": capsule_dim,
            "iterations": iterations,
            "stop_gradient": stop_gradient,
            "decoder_units": None if decoder_units is None else tuple(decoder_units),
            "reconstruction_weight": reconstruction_weight,
            "learning_rate": learning_rate,
            "decay_steps": decay_steps,
            "decay_rate": decay_rate,
            "rescale": rescale,
            "dtype": policy.name,
        }
        self.image_shape = input_shape
        self.rescale = rescale
        self.num_classes = num_classes
        self.mask = Mask(name="mask")
        self.decoder = None
        if decoder_units is not None:
            self.decoder = ReconstructionDecoder(
                input_shape, hidden_units=decoder_units, name="decoder", dtype=policy
            )
            self.decoder.build((None, num_classes, capsule_dim))
        self.margin_loss = MarginLoss()
        self.reconstruction_loss = ReconstructionLoss(weight=reconstruction_weight)
        self.margin_loss_tracker = keras.metrics.Mean(name="margin_loss")
        self.reconstruction_loss_tracker = keras.metrics.Mean(name="reconstruction_loss")
        if compile:
            self.compile(
                optimizer=default_optimizer(learning_rate, decay_steps, decay_rate),
                metrics=self._default_metrics(),
            )

    # Training ---------------------------------------------------------------

    def _default_metrics(self):
        """Metrics of the default compile; subclasses with other targets override it."""
        return ["accuracy"]

    def _images(self, x):
        """The reconstruction target: the input images scaled to [0, 1]."""
        x = ops.cast(x, "float32")
        if self.rescale is not None:
            x = x * self.rescale
        return ops.reshape(x, (ops.shape(x)[0],) + self.image_shape)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        if y is None:
            raise ValueError("CapsNetMNIST needs labels `y` to compute its loss.")
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

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        return super().compute_metrics(x, y, y_pred["probabilities"], sample_weight)

    # Inference --------------------------------------------------------------

    def _prediction_inputs(self, x):
        if isinstance(x, np.ndarray) and x.ndim == 3 and self.image_shape[-1] == 1:
            x = x[..., None]  # (n, 28, 28) as load_data gives it: one trace for both ranks
        return x

    def decode(self, poses, labels=None):
        """Reconstruct images from class capsules.

        Args:
            poses: class capsules `(batch, num_classes, capsule_dim)`, e.g. from
                `predict_poses(x)`, possibly perturbed.
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
        """Reconstruct images through the capsules: `decode(predict_poses(x))`."""
        poses = self.predict_poses(x, batch_size=batch_size, verbose=0)
        return self.decode(poses, labels=labels)

    # Serialization ----------------------------------------------------------

    def get_config(self):
        return {"name": self.name, "trainable": self.trainable, **self._config}

    @classmethod
    def from_config(cls, config):
        return cls(**config)

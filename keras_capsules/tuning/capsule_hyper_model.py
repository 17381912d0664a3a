"""The base of the capsule networks' hypermodels: argument checks, `fit` with shifted images."""

import dataclasses
import math

import keras_tuner as kt
import numpy as np

from keras_capsules._validation import check_image_shape
from keras_capsules._validation import check_positive_int
from keras_capsules._validation import is_number


def check_fraction(name, value, low=0.0, high=1.0):
    """Raise a `ValueError` naming `name` unless `low < value <= high`."""
    if not is_number(value) or not low < value <= high:
        raise ValueError(f"`{name}` must be in ({low}, {high}]. Received: {name}={value!r}")


class CapsuleHyperModel(kt.HyperModel):
    """The base of the capsule networks' hypermodels, e.g. `applications.CapsNetHyperModel`.

    Subclasses define `METRICS` (what the built models report in `fit`),
    `_values(hp)` (the search space but `max_shift`: the model's arguments, with
    `learning_rate` and `decay_rate`), `_model(values)` (the model of those
    arguments, with the images' shape, the number of classes and
    `compile=False`); `build(hp)` compiles the model
    with its recipe's optimizer at the trial's learning rate schedule. `fit`
    trains on images shifted by up to `hp["max_shift"]` pixels, as the papers
    augment MNIST.

    Args:
        input_shape: the images' shape, `(height, width, channels)`.
        num_classes: the number of classes (at least 2).
        batch_size: examples per training step.
        decay_steps: the learning rate is multiplied by the trial's
            `decay_rate` every `decay_steps` steps (2000).
        name: the hypermodel's name.
        tunable: whether keras-tuner may tune its hyperparameters.

    Example:

    >>> from keras_capsules.tuning import CapsuleHyperModel
    >>> CapsuleHyperModel.objectives()
    ('loss', 'accuracy', 'val_loss', 'val_accuracy')

    Reference:
        Sabour, Frosst, Hinton. Dynamic Routing Between Capsules. NIPS 2017.
    """

    METRICS = ("loss", "accuracy")

    def __init__(
        self, input_shape, num_classes, batch_size, decay_steps=2000, name=None, tunable=True
    ):
        super().__init__(name=name, tunable=tunable)
        check_positive_int("decay_steps", decay_steps)
        self.decay_steps = decay_steps
        self.input_shape = check_image_shape(input_shape)
        check_positive_int("num_classes", num_classes)
        if num_classes < 2:
            raise ValueError(
                f"`num_classes` must be at least 2. Received: num_classes={num_classes!r}"
            )
        check_positive_int("batch_size", batch_size)
        self.num_classes = num_classes
        self.batch_size = batch_size

    @classmethod
    def objectives(cls):
        """The metric names a search may use as its objective (`val_accuracy`, ...)."""
        return tuple(cls.METRICS) + tuple(f"val_{name}" for name in cls.METRICS)

    def search_space(self):
        """The search space: a `keras_tuner.HyperParameters` holding every hyperparameter."""
        hp = kt.HyperParameters()
        self.declare_hyperparameters(hp)
        return hp

    def declare_hyperparameters(self, hp):
        """Register the search space in `hp` (keras-tuner calls this first)."""
        self._search_values(hp)

    def _search_values(self, hp):
        values = self._values(hp)
        self._max_shift(hp)
        return values

    def build(self, hp):
        """The compiled model of the hyperparameters `hp`."""
        values = self._search_values(hp)
        schedule = {key: values.pop(key) for key in ("learning_rate", "decay_rate")}
        shape = {"input_shape": self.input_shape, "num_classes": self.num_classes}
        model = self._model({**shape, **values, "compile": False})
        recipe = dataclasses.replace(model.RECIPE, decay_steps=self.decay_steps, **schedule)
        model.compile(optimizer=recipe.optimizer())
        return model

    @staticmethod
    def _max_shift(hp):
        return hp.Int("max_shift", 0, 3, default=2)

    def _as_images(self, x):
        """`x` as an array of images of rank 4, adding the channel axis of grey images."""
        x = np.asarray(x)
        if x.ndim == len(self.input_shape) and self.input_shape[-1] == 1:
            x = x[..., None]
        return x

    def _fit_callbacks(self, hp, steps):
        """Callbacks a subclass adds to every `fit`, given its training steps (or `None`)."""
        return []

    def fit(
        self,
        hp,
        model,
        x=None,
        y=None,
        *,
        batch_size=None,
        epochs=1,
        initial_epoch=0,
        validation_split=0.0,
        validation_data=None,
        shuffle=True,
        callbacks=None,
        seed=None,
        **kwargs,
    ):
        """Train `model` with the augmentation chosen by `hp`, like `keras.Model.fit`.

        NumPy images and labels (`x`, `y`) are fed through
        `keras_capsules.datasets.mnist.training_pipeline`, shifting every image
        by up to `hp["max_shift"]` pixels, new shifts every epoch.
        `validation_split` takes the last fraction of the examples, before any
        shuffling, as `keras.Model.fit` does. Any other input (a
        `tf.data.Dataset`, a generator) is passed to `model.fit` unchanged,
        without augmentation.

        Args:
            hp: the trial's `keras_tuner.HyperParameters`.
            model: the model `build(hp)` returned.
            x: training images, or a dataset.
            y: training labels (none with a dataset).
            batch_size: examples per batch (the hypermodel's `batch_size` if
                `None`).
            epochs: as in `keras.Model.fit`.
            initial_epoch: as in `keras.Model.fit`.
            validation_data: as in `keras.Model.fit`.
            callbacks: as in `keras.Model.fit`.
            validation_split: fraction of `x`, `y` held out for validation.
            shuffle: reshuffle the training examples every epoch.
            seed: seed of the shuffle and the shifts.
            **kwargs: other `keras.Model.fit` arguments.

        Returns:
            The `keras.callbacks.History` of `model.fit`.
        """
        batch_size = batch_size or self.batch_size
        callbacks = list(callbacks or [])
        steps_per_epoch = None
        if isinstance(x, np.ndarray) and y is not None:
            from keras_capsules.datasets import mnist

            x = self._as_images(x)
            y = np.asarray(y)
            if validation_data is None and validation_split:
                check_fraction("validation_split", validation_split, high=0.5)
                split = int(math.floor(len(x) * (1.0 - validation_split)))
                validation_data = (x[split:], y[split:])
                x, y = x[:split], y[:split]
            steps_per_epoch = -(-len(x) // batch_size)
            x = mnist.training_pipeline(
                x, y, batch_size, max_shift=hp.get("max_shift"), shuffle=shuffle, seed=seed
            )
            y = None
            validation_split = 0.0
            fit_batch_size = None
            kwargs["shuffle"] = False  # the pipeline shuffles
        else:
            fit_batch_size = batch_size
            kwargs["shuffle"] = shuffle
        validation_batch_size = None
        if isinstance(validation_data, tuple) and len(validation_data) == 2:
            validation_data = (self._as_images(validation_data[0]), validation_data[1])
            validation_batch_size = batch_size
        steps = None if steps_per_epoch is None else steps_per_epoch * (epochs - initial_epoch)
        callbacks = self._fit_callbacks(hp, steps) + callbacks
        return model.fit(
            x,
            y,
            batch_size=fit_batch_size,
            epochs=epochs,
            initial_epoch=initial_epoch,
            validation_split=validation_split,
            validation_data=validation_data,
            validation_batch_size=validation_batch_size,
            callbacks=callbacks,
            **kwargs,
        )

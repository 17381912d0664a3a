import keras
from keras import ops

from keras_capsules._steps import steps_run
from keras_capsules.losses import SpreadLoss
from keras_capsules.metrics import SpreadMargin


class SpreadMarginSchedule(keras.callbacks.Callback):
    """Raise the spread loss margin linearly during training, as the paper does (0.2 to 0.9).

    Before every batch the margin becomes `start + (end - start) * min(1,
    step / steps)`, `step` being the optimizer's iteration count, so the
    schedule resumes where it was after `BackupAndRestore` or a reloaded model.
    A model compiled with `steps_per_execution=N` runs N steps per call of its
    compiled step, and the margin is updated before each call.

    The margins updated are those of the model's
    `keras_capsules.metrics.SpreadMargin` metrics (the applications' EM
    classifiers hold one; part of the compiled step's state on every
    backend), else the `margin` of each `SpreadLoss` the model was compiled
    with, which gets a `keras.Variable` in place of a float. On JAX a
    compiled loss's margin is a constant of the compiled step, so there the
    model needs a `SpreadMargin`; the callback raises a `ValueError`
    otherwise.

    Args:
        start: margin at step 0 (0.2).
        end: margin from `steps` on (0.9).
        steps: steps over which the margin rises. `None`: the whole `fit`
            call, `epochs * steps_per_epoch`.

    Example:

    >>> model.compile(optimizer="adam", loss=SpreadLoss())  # doctest: +SKIP
    >>> model.fit(ds, epochs=50,
    ...           callbacks=[SpreadMarginSchedule(0.2, 0.9)])  # doctest: +SKIP

    Reference:
        Hinton, Sabour, Frosst. Matrix capsules with EM routing. ICLR 2018,
        section 3.1.
    """

    def __init__(self, start=0.2, end=0.9, steps=None):
        super().__init__()
        for name, value in (("start", start), ("end", end)):
            if not 0 < value <= 1:
                raise ValueError(f"`{name}` must be in (0, 1]. Received: {name}={value!r}")
        if steps is not None and (not isinstance(steps, int) or steps < 1):
            raise ValueError(f"`steps` must be a positive integer or None. Received: {steps!r}")
        self.start = float(start)
        self.end = float(end)
        self.steps = steps
        self._targets = []
        self._total = None
        self._step = None
        self._assigned = None
        self._begin = 0

    def margin_at(self, step):
        """The scheduled margin at optimizer step `step`."""
        fraction = min(1.0, step / self._total) if self._total else 1.0
        return self.start + (self.end - self.start) * fraction

    def on_train_begin(self, logs=None):
        self._total = self.steps
        if self._total is None:
            steps = self.params.get("steps")
            if not steps:
                raise ValueError(
                    "SpreadMarginSchedule needs `steps` when fit() does not know the number "
                    "of steps per epoch (pass steps_per_epoch to fit or steps= here)."
                )
            self._total = self.params["epochs"] * steps
        model = self.model
        self._targets = [m.margin for m in model.metrics if isinstance(m, SpreadMargin)]
        if self._targets:
            return
        losses = model.loss if isinstance(model.loss, (list, tuple)) else [model.loss]
        if isinstance(model.loss, dict):
            losses = list(model.loss.values())
        spread = [loss for loss in losses if isinstance(loss, SpreadLoss)]
        if not spread:
            raise ValueError(
                "SpreadMarginSchedule found nothing to schedule: the model has no "
                "keras_capsules.metrics.SpreadMargin and was not compiled with a SpreadLoss."
            )
        if keras.backend.backend() == "jax":
            raise ValueError(
                "On the JAX backend SpreadMarginSchedule can only update a model's "
                "keras_capsules.metrics.SpreadMargin (a compiled SpreadLoss's margin is a "
                "constant of the compiled step): give the model one, and compute the loss "
                "with its margin."
            )
        for loss in spread:
            if not isinstance(loss.margin, keras.Variable):
                loss.margin = keras.Variable(
                    float(loss.margin), trainable=False, dtype="float32", name="spread_margin"
                )
        self._targets = [loss.margin for loss in spread]

    def on_train_batch_begin(self, batch, logs=None):
        self._begin = batch
        if not self._targets:
            return
        if self._step is None:  # read here, after BackupAndRestore has restored it
            self._step = int(ops.convert_to_numpy(self.model.optimizer.iterations))
        margin = self.margin_at(self._step)
        # Assign only when the margin has moved: on JAX every assignment syncs the state.
        if self._assigned is None or abs(margin - self._assigned) >= 1e-3:
            # `self.model` first writes JAX's training state back into the model's
            # variables, so that the next step starts from them, the new margin among them.
            self.model  # noqa: B018
            for variable in self._targets:
                variable.assign(margin)
            self._assigned = margin

    def on_train_batch_end(self, batch, logs=None):
        if self._step is not None:
            self._step += steps_run(self, self._begin, batch)

    def on_train_end(self, logs=None):
        self._step = None
        self._assigned = None

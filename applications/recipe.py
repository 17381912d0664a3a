"""How an architecture trains by default: its paper's batch size, optimizer and schedules."""

import dataclasses

import keras

from keras_capsules.utils import check_positive
from keras_capsules.utils import check_positive_int
from keras_capsules.utils import has_accelerator
from keras_capsules.utils import is_int
from keras_capsules.utils import native_bfloat16


@dataclasses.dataclass(frozen=True)
class Recipe:
    """The training settings of an architecture, in one place.

    Every application has one, as `RECIPE`: `model.compile()` with no
    arguments uses its optimizer, and `keras-capsules train` and
    `experiments/presets.py` read its batch size, schedules and augmentation
    from it. A variation is `dataclasses.replace(recipe, ...)`, e.g. another
    learning rate.

    Args:
        batch_size: examples per training step.
        learning_rate: Adam's initial learning rate.
        decay_rate: the learning rate is multiplied by `decay_rate` every
            `decay_steps` steps (exponential decay; 1 keeps it constant).
        decay_steps: steps between two decays when the number of steps per
            epoch is unknown or `decay_every_epoch` is false (2000).
        decay_every_epoch: decay once per epoch when the steps per epoch are
            known (`optimizer(steps_per_epoch=...)`), as Efficient-CapsNet's
            code does.
        max_shift: pixels by which MNIST-like training images are shifted at
            random (2, as Sabour et al.); 0 for none.
        spread_margin: `(start, end)`: the spread loss's margin rises
            linearly from `start` to `end` over the run, as Hinton et al.
            raise it (`callbacks`); `None` for models without a spread loss.
        bfloat16_on_cpu: whether `auto_precision()` (`keras-capsules train
            --precision auto`) trains in `mixed_bfloat16` on a CPU that
            computes bfloat16 natively: true where that trained faster than
            float32 and the architecture's preset recipe reached the same
            test accuracy in it (False).

    Example:

    >>> import dataclasses
    >>> import applications
    >>> recipe = applications.CapsNet.RECIPE
    >>> recipe.batch_size, recipe.learning_rate
    (100, 0.001)
    >>> faster = dataclasses.replace(recipe, learning_rate=3e-3)
    >>> round(float(faster.optimizer().learning_rate), 6)
    0.003

    Reference:
        Sabour, Frosst, Hinton. Dynamic Routing Between Capsules. NIPS 2017.
        Hinton, Sabour, Frosst. Matrix capsules with EM routing. ICLR 2018.
    """

    batch_size: int
    learning_rate: float
    decay_rate: float = 0.96
    decay_steps: int = 2000
    decay_every_epoch: bool = False
    max_shift: int = 2
    spread_margin: tuple = None
    bfloat16_on_cpu: bool = False

    def __post_init__(self):
        check_positive_int("batch_size", self.batch_size)
        check_positive("learning_rate", self.learning_rate)
        check_positive("decay_rate", self.decay_rate)
        check_positive_int("decay_steps", self.decay_steps)
        if not is_int(self.max_shift) or self.max_shift < 0:
            raise ValueError(
                "`max_shift` must be a non-negative integer. "
                f"Received: max_shift={self.max_shift!r}"
            )
        if self.spread_margin is not None:
            margin = tuple(self.spread_margin)
            if len(margin) != 2 or not all(0 < float(value) <= 1 for value in margin):
                raise ValueError(
                    "`spread_margin` must be None or (start, end) in (0, 1]. "
                    f"Received: spread_margin={self.spread_margin!r}"
                )
            object.__setattr__(self, "spread_margin", margin)
        if not isinstance(self.bfloat16_on_cpu, bool):
            raise ValueError(
                "`bfloat16_on_cpu` must be True or False. "
                f"Received: bfloat16_on_cpu={self.bfloat16_on_cpu!r}"
            )

    def auto_precision(self):
        """The dtype policy that trains fastest here at the recipe's accuracy.

        `"mixed_bfloat16"` where `bfloat16_on_cpu` is set, the backend is
        TensorFlow (the one measured), no GPU or TPU is visible and the CPU
        computes bfloat16 natively (`keras_capsules.utils.native_bfloat16`:
        `avx512_bf16` or `amx_bf16`); `"float32"` everywhere else.
        """
        if not self.bfloat16_on_cpu or keras.backend.backend() != "tensorflow":
            return "float32"
        if native_bfloat16() is not True or has_accelerator():
            return "float32"
        return "mixed_bfloat16"

    def optimizer(self, steps_per_epoch=None):
        """Adam with the recipe's exponentially decaying learning rate.

        Args:
            steps_per_epoch: training steps per epoch, if known; with
                `decay_every_epoch` the rate then decays once per epoch.
        """
        steps = self.decay_steps
        if self.decay_every_epoch and steps_per_epoch is not None:
            check_positive_int("steps_per_epoch", steps_per_epoch)
            steps = steps_per_epoch
        return keras.optimizers.Adam(
            keras.optimizers.schedules.ExponentialDecay(
                self.learning_rate, decay_steps=steps, decay_rate=self.decay_rate
            )
        )

    def callbacks(self, steps):
        """The callbacks of a run of `steps` training steps: the spread margin's rise, if any."""
        if self.spread_margin is None:
            return []
        from keras_capsules.callbacks import SpreadMarginSchedule

        start, end = self.spread_margin
        return [SpreadMarginSchedule(start, end, steps=steps)]

    def get_config(self):
        """The recipe as JSON values, e.g. for a run's record."""
        config = dataclasses.asdict(self)
        if self.spread_margin is not None:
            config["spread_margin"] = list(self.spread_margin)
        return config

"""EM routing's settings: their defaults, one validated value, and the per-iteration schedules."""

import dataclasses

from keras_capsules._validation import check_choice
from keras_capsules._validation import check_positive
from keras_capsules._validation import check_positive_int
from keras_capsules._validation import is_number

INVERSE_TEMPERATURE = 0.01
"""Default final inverse temperature `lambda` of EM routing."""

TEMPERING = 0.1
"""Default exponent `tau` of the tempered E-step, `R ∝ (a[j] p[i, j]) ** tau` (1: the paper's)."""

SCHEDULES = ("rescaled", "authors")
"""The inverse temperature schedules of `inverse_temperatures`."""

VARIANCE_EPSILON = 1e-4
"""Default floor of every per-dimension variance in EM routing."""


def inverse_temperatures(iterations, final=INVERSE_TEMPERATURE, schedule="rescaled"):
    """The inverse temperature `lambda` of each EM iteration.

    Both schedules grow as `1 - 0.95 ** (t + 1)` over the iterations
    `t = 0 .. iterations - 1`, the schedule of the authors' answer on
    OpenReview and of their code:

    - `"rescaled"` (default): `final * (1 - 0.95 ** (t + 1)) / (1 - 0.95 **
      iterations)`, rescaled so that the last iteration, the one whose
      activations leave the layer, uses `final` itself;
    - `"authors"`: `final * (1 - 0.95 ** (t + 1))`, as the authors' code
      computes it. With `final = 0.01` and 3 iterations the last `lambda` is
      0.0014, 14% of `final`, and the activations barely depend on the costs.
      (The authors' class capsule layer also divides `final` by 4.)

    Example:

    >>> tuple(round(x, 5) for x in inverse_temperatures(3, 0.01, schedule="authors"))
    (0.0005, 0.00098, 0.00143)
    """
    check_positive_int("iterations", iterations)
    check_choice("schedule", schedule, SCHEDULES)
    top = 1.0 - 0.95**iterations if schedule == "rescaled" else 1.0
    return [final * (1.0 - 0.95 ** (t + 1)) / top for t in range(iterations)]


def tempering_schedule(tempering, iterations):
    """The exponent `tau` of each E-step of `iterations` EM iterations.

    `tempering` is one positive number for every E-step, or a sequence with
    one per E-step (`iterations - 1` of them: the last iteration has no
    E-step). Raises a `ValueError` naming `tempering` otherwise.
    """
    check_positive_int("iterations", iterations)
    if isinstance(tempering, (list, tuple)):
        values = list(tempering)
        if len(values) != iterations - 1:
            raise ValueError(
                "`tempering` must be a positive number or one per E-step "
                f"({iterations - 1} for {iterations} iterations). Received: "
                f"tempering={tempering!r}"
            )
    else:
        values = [tempering] * (iterations - 1)
    for value in values:
        if not is_number(value) or not 0 < value < 1e30:
            raise ValueError(
                "`tempering` must be a positive finite number or a sequence of them. "
                f"Received: tempering={tempering!r}"
            )
    return [float(value) for value in values]


@dataclasses.dataclass(frozen=True)
class EMSettings:
    """EM routing's settings as one value, checked once when it is made.

    The matrix capsule layers (`MatrixCapsule`, `ClassMatrixCapsule`) and
    `applications.MatrixCapsNet` take these five settings as keyword
    arguments, or all at once as `em_settings=EMSettings(...)`, and hold them
    as one `EMSettings` (a model shares its one with all its layers); the
    routing iterations read them from it. A bad value is a `ValueError`
    naming its argument. The value is frozen; `get_config` gives the five as
    keyword arguments, as the layers' configs hold them.

    Args:
        iterations: EM iterations, a positive integer (3).
        inverse_temperature: the final inverse temperature `lambda` (0.01).
        variance_epsilon: the floor of every per-dimension variance (1e-4).
        tempering: the E-step exponent `tau`, one positive number (0.1) or one
            per E-step (`iterations - 1`); stored as a float or a tuple.
        inverse_temperature_schedule: `"rescaled"` (default) or `"authors"`
            (see `inverse_temperatures`).

    Example:

    >>> from keras_capsules.layers import ClassMatrixCapsule, MatrixCapsule
    >>> from keras_capsules.routing import EMSettings
    >>> settings = EMSettings(iterations=2, tempering=[0.5])
    >>> settings.tempering, [round(x, 4) for x in settings.inverse_temperatures()]
    ((0.5,), [0.0051, 0.01])
    >>> conv_caps = MatrixCapsule(8, em_settings=settings)
    >>> class_caps = ClassMatrixCapsule(5, em_settings=settings)
    >>> conv_caps.settings is class_caps.settings is settings
    True
    >>> settings.get_config()["tempering"] == [0.5]
    True
    >>> EMSettings(iterations=0)
    Traceback (most recent call last):
    ...
    ValueError: `iterations` must be a positive integer. Received: iterations=0
    """

    iterations: int = 3
    inverse_temperature: float = INVERSE_TEMPERATURE
    variance_epsilon: float = VARIANCE_EPSILON
    tempering: object = TEMPERING
    inverse_temperature_schedule: str = "rescaled"

    def __post_init__(self):
        check_positive_int("iterations", self.iterations)
        check_positive("inverse_temperature", self.inverse_temperature)
        check_positive("variance_epsilon", self.variance_epsilon)
        temperings = tempering_schedule(self.tempering, self.iterations)
        check_choice("inverse_temperature_schedule", self.inverse_temperature_schedule, SCHEDULES)
        tempering = tuple(temperings) if isinstance(self.tempering, (list, tuple)) else None
        object.__setattr__(self, "inverse_temperature", float(self.inverse_temperature))
        object.__setattr__(self, "variance_epsilon", float(self.variance_epsilon))
        if tempering is not None:
            object.__setattr__(self, "tempering", tempering)

    @classmethod
    def resolve(cls, em_settings=None, **arguments):
        """The one `EMSettings` to route with: `em_settings`, or one made of `arguments`.

        A layer or model that takes the five settings as keyword arguments and
        as `em_settings` calls this with what it received. Beside an
        `em_settings` the five must keep their defaults: a `ValueError` names
        those that do not.

        >>> EMSettings.resolve(None, iterations=2).iterations
        2
        >>> EMSettings.resolve(EMSettings(iterations=2), iterations=4)
        Traceback (most recent call last):
        ...
        ValueError: `em_settings` holds every EM routing setting: set `iterations` in it, \
not beside it. Received: iterations=4
        """
        if em_settings is None:
            return cls(**arguments)
        if not isinstance(em_settings, cls):
            raise ValueError(
                "`em_settings` must be a keras_capsules.routing.EMSettings. "
                f"Received: em_settings={em_settings!r}"
            )
        defaults = {field.name: field.default for field in dataclasses.fields(cls)}
        given = {name: value for name, value in arguments.items() if value != defaults[name]}
        if given:
            raise ValueError(
                "`em_settings` holds every EM routing setting: set "
                f"{', '.join(f'`{name}`' for name in given)} in it, not beside it. Received: "
                + ", ".join(f"{name}={value!r}" for name, value in given.items())
            )
        return em_settings

    def inverse_temperatures(self):
        """The `lambda` of each iteration."""
        return inverse_temperatures(
            self.iterations, self.inverse_temperature, self.inverse_temperature_schedule
        )

    def temperings(self):
        """The `tau` of each E-step (`iterations - 1` of them)."""
        return tempering_schedule(self.tempering, self.iterations)

    def get_config(self):
        """The five settings as keyword arguments (a sequence of `tau` as a list)."""
        config = dataclasses.asdict(self)
        if isinstance(self.tempering, tuple):
            config["tempering"] = list(self.tempering)
        return config

"""EM routing's settings as a layer or a model takes them: five arguments or one `EMSettings`."""

import dataclasses

from keras_capsules.routing import EMSettings

_DEFAULTS = {field.name: field.default for field in dataclasses.fields(EMSettings)}


def routing_settings(em_settings, **arguments):
    """The one `EMSettings` to route with: `em_settings`, or one made of `arguments`.

    `arguments` are the five settings as the layer or model received them
    (`iterations`, `inverse_temperature`, `variance_epsilon`, `tempering`,
    `inverse_temperature_schedule`). Beside an `em_settings` they must keep
    their defaults: a `ValueError` names those that do not.
    """
    if em_settings is None:
        return EMSettings(**arguments)
    if not isinstance(em_settings, EMSettings):
        raise ValueError(
            "`em_settings` must be a keras_capsules.routing.EMSettings. "
            f"Received: em_settings={em_settings!r}"
        )
    given = {name: value for name, value in arguments.items() if value != _DEFAULTS[name]}
    if given:
        raise ValueError(
            "`em_settings` holds every EM routing setting: set "
            f"{', '.join(f'`{name}`' for name in given)} in it, not beside it. Received: "
            + ", ".join(f"{name}={value!r}" for name, value in given.items())
        )
    return em_settings

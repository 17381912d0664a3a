"""The papers' configurations of an architecture: classes that fix some of its arguments."""


def fixed_configuration(model, kwargs, architecture):
    """`kwargs` with `model.CONFIGURATION` added; a `ValueError` if they set any of it.

    `architecture` names the class that takes those arguments, for the message.
    """
    given = sorted(set(kwargs) & set(model.CONFIGURATION))
    if given:
        fixed = ", ".join(
            f"{len(value)} class names" if key == "class_names" else f"{key}={value!r}"
            for key, value in model.CONFIGURATION.items()
        )
        raise ValueError(
            f"{type(model).__name__} is the paper's configuration ({fixed}), so it takes no "
            f"{', '.join(f'`{key}`' for key in given)}. For other images or classes use "
            f"applications.{architecture}. Received: "
            + ", ".join(f"{key}={kwargs[key]!r}" for key in given)
        )
    return {**kwargs, **model.CONFIGURATION}

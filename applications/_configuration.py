"""The papers' configurations: functions that build an architecture with some arguments fixed."""


def configured(function, architecture, fixed, kwargs):
    """`kwargs` with the `fixed` arguments added; a `ValueError` if they set any of them.

    `function` is the name of the paper's configuration (`"CapsNetMNIST"`),
    `architecture` the class that takes every argument (`"CapsNet"`), which
    the error points to.
    """
    given = sorted(set(kwargs) & set(fixed))
    if given:
        values = ", ".join(
            f"{len(value)} class names" if key == "class_names" else f"{key}={value!r}"
            for key, value in fixed.items()
        )
        raise ValueError(
            f"{function} is the paper's configuration ({values}), so it takes no "
            f"{', '.join(f'`{key}`' for key in given)}. For other images or classes use "
            f"applications.{architecture}. Received: "
            + ", ".join(f"{key}={kwargs[key]!r}" for key in given)
        )
    return {**kwargs, **fixed}

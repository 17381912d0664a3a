"""Arguments renamed for one word per concept: the old names keep working, and warn."""

import warnings


def renamed(kwargs, old, new, value, owner):
    """The value of argument `new`: `value`, or what was passed under its old name `old`.

    `old` is popped from `kwargs` (the keyword arguments the caller has not
    named), with a `DeprecationWarning` that names both.
    """
    if old not in kwargs:
        return value
    warnings.warn(
        f"{owner}: the argument `{old}` is now called `{new}`.",
        DeprecationWarning,
        stacklevel=3,
    )
    return kwargs.pop(old)

"""Argument checks shared by the layers and applications."""


def check_positive_int(name, value):
    """Raise a `ValueError` naming `name` unless `value` is a positive integer."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"`{name}` must be a positive integer. Received: {name}={value!r}")

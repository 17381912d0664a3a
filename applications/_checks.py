"""The applications' argument checks: each `ValueError` names the argument."""


def _is_positive_int(value):
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def check_positive_ints(**arguments):
    """Raise a `ValueError` naming the first argument that is not a positive integer."""
    for name, value in arguments.items():
        if not _is_positive_int(value):
            raise ValueError(f"`{name}` must be a positive integer. Received: {name}={value!r}")


def image_shape(input_shape):
    """`input_shape` as a tuple, or a `ValueError` unless it is (height, width, channels)."""
    shape = tuple(input_shape)
    if len(shape) == 3 and all(_is_positive_int(d) for d in shape):
        return shape
    raise ValueError(
        "`input_shape` must be (height, width, channels) of positive integers. "
        f"Received: input_shape={shape!r}"
    )

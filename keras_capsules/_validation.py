"""Argument checks shared by the layers and applications."""

import numpy as np
from keras import ops
from keras.backend import is_keras_tensor


def is_int(value, numpy=False):
    """Whether `value` is a Python integer (or, with `numpy`, a NumPy one), not a bool."""
    kinds = (int, np.integer) if numpy else int
    return isinstance(value, kinds) and not isinstance(value, (bool, np.bool_))


def is_number(value):
    """Whether `value` is a Python integer or float, not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_positive_int(name, value):
    """Raise a `ValueError` naming `name` unless `value` is a positive integer."""
    if not is_int(value) or value < 1:
        raise ValueError(f"`{name}` must be a positive integer. Received: {name}={value!r}")


def check_positive_ints(**arguments):
    """Raise a `ValueError` naming the first argument that is not a positive integer."""
    for name, value in arguments.items():
        check_positive_int(name, value)


def check_positive(name, value):
    """Raise a `ValueError` naming `name` unless `value` is a positive number."""
    if not is_number(value) or not value > 0:
        raise ValueError(f"`{name}` must be a positive number. Received: {name}={value!r}")


def check_margin(name, value):
    """`value` as a float in (0, 1]; a `ValueError` naming `name` otherwise."""
    if not is_number(value) or not 0 < value <= 1:
        raise ValueError(f"`{name}` must be a number in (0, 1]. Received: {name}={value!r}")
    return float(value)


def check_choice(name, value, choices):
    """Raise a `ValueError` naming `name` unless `value` is one of `choices`."""
    if not isinstance(value, str) or value not in choices:
        options = ", ".join(repr(c) for c in choices)
        raise ValueError(f"`{name}` must be one of {options}. Received: {name}={value!r}")


def check_gradient_method(gradient, stop_gradient=False):
    """Raise a `ValueError` unless `gradient` names a routing gradient method.

    The methods are `"auto"`, `"autodiff"` and `"structured"`
    (`keras_capsules.routing.dynamic_routing`, `em_routing`); the structured
    gradient does not stop the gradient through the inner iterations.
    """
    if gradient not in ("auto", "autodiff", "structured"):
        raise ValueError(
            "`gradient` must be 'auto', 'autodiff' or 'structured'. "
            f"Received: gradient={gradient!r}"
        )
    if gradient == "structured" and stop_gradient:
        raise ValueError("`gradient='structured'` does not support `stop_gradient=True`.")


def check_image_shape(input_shape):
    """Return `input_shape` as a tuple, or raise unless it is (height, width, channels)."""
    input_shape = tuple(input_shape)
    if len(input_shape) != 3 or not all(is_int(d) and d > 0 for d in input_shape):
        raise ValueError(
            "`input_shape` must be (height, width, channels) of positive integers. "
            f"Received: input_shape={input_shape!r}"
        )
    return input_shape


def check_capsule_inputs(input_shape, layer_name, spatial, known_grid=False):
    """Check the `(poses, activations)` input shapes of a matrix capsule layer.

    Poses are `(batch, height, width, types, 16)` and activations
    `(batch, height, width, types)` when `spatial`, else `(batch, capsules, 16)`
    and `(batch, capsules)`. With `known_grid`, height and width must be
    known. Returns the two shapes; raises a `ValueError` naming the layer and
    the shapes otherwise.
    """
    rank = 5 if spatial else 3
    layout = "(batch, height, width, types" if spatial else "(batch, capsules"
    try:
        poses_shape, activations_shape = (tuple(s) for s in input_shape)
    except (TypeError, ValueError):
        poses_shape = activations_shape = None
    if (
        poses_shape is None
        or not isinstance(poses_shape[0] if poses_shape else None, (int, type(None)))
        or len(poses_shape) != rank
        or len(activations_shape) != rank - 1
        or poses_shape[-1] != 16
        or tuple(poses_shape[1:-1]) != tuple(activations_shape[1:])
        or poses_shape[-2] is None
    ):
        raise ValueError(
            f"Layer {layer_name!r} expects inputs (poses, activations) with poses of shape "
            f"{layout}, 16) (flattened 4x4 matrices) and activations of shape {layout}). "
            f"Received: input_shape={input_shape}"
        )
    if known_grid and (poses_shape[1] is None or poses_shape[2] is None):
        raise ValueError(
            f"Layer {layer_name!r} needs a known height and width of the input grid. "
            f"Received: poses shape {poses_shape}"
        )
    return poses_shape, activations_shape


def check_in_unit_interval(name, value):
    """Raise a `ValueError` naming `name` unless every entry of `value` is in [0, 1].

    Values are checked where they exist when the function is called (NumPy
    arrays, lists, eager tensors); symbolic and traced tensors pass unchecked.
    """
    values = _concrete(value)
    if values is None or values.size == 0:
        return
    inside = (values >= 0) & (values <= 1)
    if not np.all(inside):
        bad = values[~inside].ravel()[0]
        raise ValueError(
            f"`{name}` must be in [0, 1]. Received: {name} with an entry of {float(bad)!r} "
            f"(range {float(np.nanmin(values))!r} to {float(np.nanmax(values))!r})"
        )


def _concrete(x):
    """`x`'s values as a NumPy array when they exist now, else None."""
    if isinstance(x, (np.ndarray, list, tuple, int, float)):
        return np.asarray(x, dtype="float64")
    if is_keras_tensor(x):
        return None
    try:
        return np.asarray(ops.convert_to_numpy(x), dtype="float64")
    except Exception:  # a traced or symbolic tensor has no values yet
        return None


MODEL_ARGUMENTS = ("trainable",)
"""The `keras.Model` arguments a prebuilt model passes on besides its own (and `name`)."""


def check_model_arguments(model, kwargs, others=()):
    """Raise a `ValueError` naming each argument of `kwargs` that `model`'s class does not take.

    What a prebuilt model hands to `keras.Model` must be one of
    `MODEL_ARGUMENTS`; anything else is a misspelled or renamed argument,
    which would otherwise be dropped in silence. The message names the
    closest argument of the class's constructors, or of `others` (classes
    the model hands arguments on to, such as its backbone's).
    """
    import difflib
    import inspect

    unknown = sorted(set(kwargs) - set(MODEL_ARGUMENTS))
    if not unknown:
        return
    known = set(MODEL_ARGUMENTS)
    for cls in (*type(model).__mro__, *others):
        init = cls.__dict__.get("__init__")
        if init is None:
            continue
        for parameter in inspect.signature(init).parameters.values():
            if parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY):
                known.add(parameter.name)
    known.discard("self")
    hints = []
    for name in unknown:
        close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
        hints.append(f"`{name}`" + (f" (did you mean `{close[0]}`?)" if close else ""))
    raise ValueError(
        f"{type(model).__name__} got unknown argument(s): {', '.join(hints)}. "
        f"Received: {', '.join(f'{name}={kwargs[name]!r}' for name in unknown)}"
    )

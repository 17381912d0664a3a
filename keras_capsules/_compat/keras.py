"""Keras's internals: the optimizer's step inside the JAX backend's training step.

On JAX, the compiled training step holds the optimizer's variables as
arguments: Keras's trainer gives their values to
`Model.compute_loss_and_updates` as `optimizer_variables`, in the order of
`optimizer.variables`, while `optimizer.iterations` read there is the value it
had when the step was traced. A model whose loss depends on the step (the
spread margin of `applications.MatrixCapsNet`) takes it from there.
"""

import inspect

from keras_capsules._compat import changed

_LIBRARY = "keras"


def optimizer_step(optimizer, optimizer_variables):
    """The value of `optimizer.iterations` among `optimizer_variables` (JAX's training step).

    Args:
        optimizer: the model's optimizer.
        optimizer_variables: the values of `optimizer.variables`, in their
            order, that the JAX backend gives `Model.compute_loss_and_updates`.

    Raises:
        InternalChanged: the values do not match the optimizer's variables.
    """
    variables = optimizer.variables
    if len(variables) != len(optimizer_variables):
        raise changed(
            _LIBRARY,
            "compute_loss_and_updates's optimizer_variables",
            f"{len(optimizer_variables)} values for the optimizer's {len(variables)} variables",
        )
    for variable, value in zip(variables, optimizer_variables):
        if variable is optimizer.iterations:
            return value
    raise changed(_LIBRARY, "optimizer.variables", "the step, optimizer.iterations, is not one")


def check():
    """Make sure the Keras internal that keras-capsules uses is there (on JAX, the one it has).

    Raises:
        InternalChanged: one is gone; the message names it and Keras's version.
    """
    import keras

    if keras.backend.backend() != "jax":
        return
    parameters = inspect.signature(keras.Model.compute_loss_and_updates).parameters
    if "optimizer_variables" not in parameters:
        raise changed(_LIBRARY, "the JAX trainer's compute_loss_and_updates(optimizer_variables)")

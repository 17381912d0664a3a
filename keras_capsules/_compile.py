"""Compiling a model again with other arguments of `compile`, its optimizer kept."""

import keras


def compile_again(model, **changes):
    """Compile `model` again as it is compiled, with `changes` to the arguments of `compile`.

    The model keeps its optimizer, with its state (a resumed run's moments and
    step count); the loss, metrics and every other argument come from its
    compile config. E.g. `compile_again(model, steps_per_execution=1)`.
    """
    config = keras.saving.deserialize_keras_object(model.get_compile_config())
    model.compile(**{**config, "optimizer": model.optimizer, **changes})
    return model

"""Whether a model's training step fits in the host's memory, judged before it is built."""

import numpy as np

from keras_capsules._compat import keras as keras_compat
from keras_capsules._devices import available_memory
from keras_capsules._devices import has_accelerator

BYTES_PER_PARAMETER = 16
"""float32 weights, their gradients and Adam's two moments."""

BYTES_PER_ACTIVATION = 8
"""Each layer's float32 output, kept for the backward pass, and its gradient."""


def _activations(model):
    """The values one image makes the layers of a functional `model` output (nested walked)."""
    import keras

    count = 0
    for layer in model.layers:
        if isinstance(layer, keras.Model) and layer.layers:
            count += _activations(layer)
            continue
        for output in keras.tree.flatten(layer.output):
            if None not in output.shape[1:]:  # the input takes any size: its converter's counts
                count += int(np.prod(output.shape[1:]))
    return count


def estimate(build, batch_size):
    """`(parameters, bytes)` of the model `build()` returns: its size, and a step's least memory.

    The model is built without allocating its weights (nothing is computed);
    the bytes are a lower bound: `BYTES_PER_PARAMETER` for each parameter, and
    `BYTES_PER_ACTIVATION` for each value a batch of `batch_size` images makes
    the layers output (a decoder's, off the graph, counted as the image).
    """
    with keras_compat.unallocated():
        model = build()
        parameters = int(model.count_params())
        activations = _activations(model)
        decoder = getattr(model, "decoder", None)
        if decoder is not None:
            activations += 2 * int(np.prod(model.image_shape))
    return parameters, parameters * BYTES_PER_PARAMETER + (
        batch_size * activations * BYTES_PER_ACTIVATION
    )


def check_fits(build, batch_size, command="train", cheaper=None):
    """Say in one line what `build()`'s model costs; end the command if it cannot fit.

    The line gives its parameters and the least memory of a training step
    (`estimate`) and, with `cheaper` (`(option, build)` of another model for
    the same images), that model's where it needs less. The command ends in
    one line where the step needs more memory than the host has free; only on
    a CPU: an accelerator's memory is its own.
    """
    parameters, needed = estimate(build, batch_size)
    line = (
        f"The model has {parameters:,} parameters; a training step of {batch_size} images "
        f"needs at least {_gib(needed)}"
    )
    if cheaper is not None:
        option, build_cheaper = cheaper
        other_parameters, other_needed = estimate(build_cheaper, batch_size)
        if other_needed < needed:
            line += (
                f"; cheaper for images this size: {option} ({other_parameters:,} parameters, "
                f"{_gib(other_needed)})"
            )
    print(line, flush=True)
    available = available_memory()
    if available is None or has_accelerator():
        return
    if needed > available:
        raise SystemExit(
            f"keras-capsules {command}: this model would not fit in memory: "
            f"{parameters:,} parameters and batches of {batch_size} need at least "
            f"{_gib(needed)}, and {_gib(available)} are free. "
            "Use smaller images (--image-size) or a smaller --batch-size"
        )


def _gib(size):
    """`size` bytes in GiB, or in MiB below one GiB."""
    return f"{size / 2**30:,.1f} GiB" if size >= 2**30 else f"{size / 2**20:,.0f} MiB"

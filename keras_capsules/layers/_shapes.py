"""The output spec of a layer from its `compute_output_shape`, whatever its input is."""

import keras


def _shape(x):
    return tuple(x.shape) if hasattr(x, "shape") else tuple(keras.ops.shape(x))


def input_shape(inputs):
    """The shape of `inputs`, or the shapes of a tuple / list of tensors or arrays, kept so."""
    if isinstance(inputs, (tuple, list)) and inputs and all(hasattr(x, "shape") for x in inputs):
        return type(inputs)(_shape(x) for x in inputs)
    return _shape(inputs)


def output_spec(layer, inputs):
    """The `KerasTensor`(s) that `layer` returns for `inputs`, from `compute_output_shape`.

    Keras hands `compute_output_shape` the shapes of tensor arguments alone,
    so an array or a list given to `compute_output_spec` (or arrays in the
    `(poses, activations)` tuple of a matrix capsule layer) reached it as
    `None`; this reads the shape of whatever `inputs` is.
    """
    return keras.tree.map_shape_structure(
        lambda output: keras.KerasTensor(output, dtype=layer.compute_dtype),
        layer.compute_output_shape(input_shape(inputs)),
    )

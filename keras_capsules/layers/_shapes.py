"""The output spec of a layer from its `compute_output_shape`, whatever its input is."""

import keras


def output_spec(layer, inputs):
    """The `KerasTensor`(s) that `layer` returns for `inputs`, from `compute_output_shape`.

    Keras hands `compute_output_shape` the shapes of tensor arguments alone,
    so an array or a list given to `compute_output_spec` reached it as
    `None`; this reads the shape of whatever `inputs` is.
    """
    shape = inputs.shape if hasattr(inputs, "shape") else keras.ops.shape(inputs)
    return keras.tree.map_shape_structure(
        lambda output: keras.KerasTensor(output, dtype=layer.compute_dtype),
        layer.compute_output_shape(tuple(shape)),
    )

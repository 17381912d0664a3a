"""`compute_output_spec` of every layer agrees with its call, for tensors, arrays and dtypes."""

import keras
import numpy as np
import pytest

from keras_capsules import layers

RNG = np.random.default_rng(0)

CASES = [
    (layers.Length, {}, RNG.random((2, 5, 4), dtype="float32")),
    (layers.PrimaryCapsule, {"capsule_types": 2, "capsule_dim": 4, "kernel_size": 3}, None),
    (layers.DepthwisePrimaryCapsule, {"capsule_types": 2, "capsule_dim": 4}, None),
    (layers.PrimaryMatrixCapsule, {"capsule_types": 2}, None),
    (layers.ImageConverter, {"image_size": (6, 6), "scale": 1 / 255}, RNG.random((2, 9, 9, 3))),
    (layers.CapsuleLayer, {"capsule_types": 3, "capsule_dim": 4}, RNG.random((2, 6, 8))),
]


@pytest.mark.parametrize(
    "cls, kwargs, inputs", CASES, ids=lambda case: getattr(case, "__name__", "")
)
@pytest.mark.parametrize("dtype", ["float32", "mixed_bfloat16"])
def test_the_output_spec_of_an_array_is_the_shape_and_dtype_of_the_call(cls, kwargs, inputs, dtype):
    if inputs is None:
        inputs = RNG.random((2, 9, 9, 8), dtype="float32")
    inputs = inputs.astype("float32")
    layer = cls(**kwargs, dtype=dtype)
    outputs = layer(inputs)
    for given in (inputs, keras.ops.convert_to_tensor(inputs), keras.KerasTensor(inputs.shape)):
        spec = layer.compute_output_spec(given)
        keras.tree.assert_same_structure(spec, outputs)
        for got, want in zip(keras.tree.flatten(spec), keras.tree.flatten(outputs)):
            assert tuple(got.shape) == tuple(want.shape)
            assert keras.backend.standardize_dtype(got.dtype) == keras.backend.standardize_dtype(
                want.dtype
            )

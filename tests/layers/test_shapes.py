"""`compute_output_spec` of every layer agrees with its call, for tensors, arrays and dtypes.

The input is passed positionally and under the call argument's own name (as
keras-hub's checks pass a dict of inputs), as a NumPy array, a tensor and a
`KerasTensor`, with and without the optional outputs (`return_coupling`,
`return_responsibilities`).
"""

import inspect

import keras
import numpy as np
import pytest

from keras_capsules import layers

RNG = np.random.default_rng(0)


def _normal(*shape):
    return RNG.normal(size=shape).astype("float32")


def _uniform(*shape):
    return RNG.uniform(size=shape).astype("float32")


CONV = _normal(2, 9, 9, 8)
CAPSULES = _normal(2, 6, 8)
MATRICES = (_normal(2, 5, 5, 2, 16), _uniform(2, 5, 5, 2))
LABELS = np.array([1, 0], "int32")
ROUTED = {"capsule_types": 3, "capsule_dim": 4}

# (class, constructor arguments, input, other call arguments)
CASES = [
    (layers.CapsuleLayer, {**ROUTED, "iterations": 2}, CAPSULES, {}),
    (layers.CapsuleLayer, {**ROUTED, "iterations": 2}, CAPSULES, {"return_coupling": True}),
    (layers.ClassMatrixCapsule, {"capsule_types": 3, "iterations": 2}, MATRICES, {}),
    (
        layers.ClassMatrixCapsule,
        {"capsule_types": 3, "iterations": 2},
        MATRICES,
        {"return_responsibilities": True},
    ),
    (layers.DepthwisePrimaryCapsule, {"capsule_types": 2, "capsule_dim": 4}, CONV, {}),
    (layers.ImageConverter, {"image_size": (6, 6), "scale": 1 / 255}, _uniform(2, 9, 9, 3), {}),
    (layers.InvertedDotProductCapsule, {**ROUTED, "iterations": 2}, CAPSULES, {}),
    (
        layers.InvertedDotProductCapsule,
        {**ROUTED, "iterations": 2},
        CAPSULES,
        {"return_coupling": True},
    ),
    (layers.Length, {}, _normal(2, 5, 4), {}),
    (layers.Mask, {}, CAPSULES, {}),
    (layers.Mask, {}, CAPSULES, {"labels": LABELS}),
    (layers.Mask, {}, [CAPSULES, LABELS], {}),
    (layers.MatrixCapsule, {"capsule_types": 2, "kernel_size": 3, "iterations": 2}, MATRICES, {}),
    (
        layers.MatrixCapsule,
        {"capsule_types": 2, "kernel_size": 3, "strides": 2, "iterations": 2},
        MATRICES,
        {"return_responsibilities": True},
    ),
    (layers.PrimaryCapsule, {"capsule_types": 2, "capsule_dim": 4, "kernel_size": 3}, CONV, {}),
    (layers.PrimaryMatrixCapsule, {"capsule_types": 2}, CONV, {}),
    (layers.RandomCouplingCapsule, {**ROUTED, "seed": 1}, CAPSULES, {}),
    (layers.RandomCouplingCapsule, {**ROUTED, "seed": 1}, CAPSULES, {"return_coupling": True}),
    (layers.ReconstructionDecoder, {"target_shape": (6, 5), "hidden_units": (7,)}, CAPSULES, {}),
    (layers.SelfAttentionCapsule, ROUTED, CAPSULES, {}),
    (layers.SelfAttentionCapsule, ROUTED, CAPSULES, {"return_coupling": True}),
]

# The base of the fully connected capsule layers routes nothing (`route` is its
# subclasses'); its `compute_output_spec` is theirs.
ABSTRACT = {"FullyConnectedCapsule"}


def test_the_cases_cover_every_public_layer():
    covered = {cls.__name__ for cls, *_ in CASES}
    assert covered | ABSTRACT == set(layers.__all__)


def _signature(structure):
    return keras.tree.map_structure(
        lambda x: (tuple(x.shape), keras.backend.standardize_dtype(x.dtype)), structure
    )


def _as(form, structure):
    """`structure`'s arrays as NumPy arrays, tensors or `KerasTensor`s, its containers kept."""
    convert = {
        "array": lambda x: x,
        "tensor": keras.ops.convert_to_tensor,
        "keras_tensor": lambda x: keras.KerasTensor(x.shape, x.dtype),
    }[form]
    if isinstance(structure, (tuple, list)):
        return type(structure)(convert(x) for x in structure)
    return convert(structure) if isinstance(structure, np.ndarray) else structure


@pytest.mark.parametrize(
    "cls, kwargs, inputs, call_kwargs",
    CASES,
    ids=[
        "-".join([cls.__name__, *others, *(["listed"] if isinstance(x, list) else [])])
        for cls, _, x, others in CASES
    ],
)
@pytest.mark.parametrize("dtype", ["float32", "mixed_bfloat16"])
def test_the_output_spec_is_the_shape_and_dtype_of_the_call(
    cls, kwargs, inputs, call_kwargs, dtype
):
    layer = cls(**kwargs, dtype=dtype)
    want = _signature(layer(inputs, **call_kwargs))
    argument = list(inspect.signature(cls.call).parameters)[1]  # the input's own name
    for form in ("array", "tensor", "keras_tensor"):
        given = _as(form, inputs)
        others = {name: _as(form, value) for name, value in call_kwargs.items()}
        positional = layer.compute_output_spec(given, **others)
        keyword = layer.compute_output_spec(**{argument: given}, **others)
        assert _signature(positional) == want, (form, "positional")
        assert _signature(keyword) == want, (form, f"as {argument}=")


@pytest.mark.parametrize(
    "cls, kwargs",
    [
        (layers.MatrixCapsule, {"capsule_types": 2, "kernel_size": 3, "strides": 2}),
        (layers.ClassMatrixCapsule, {"capsule_types": 3}),
    ],
    ids=["MatrixCapsule", "ClassMatrixCapsule"],
)
def test_a_functional_model_returns_the_responsibilities_the_call_returns(cls, kwargs):
    inputs = (keras.Input(MATRICES[0].shape[1:]), keras.Input(MATRICES[1].shape[1:]))
    layer = cls(**kwargs, iterations=2)
    outputs = layer(inputs, return_responsibilities=True)
    assert len(outputs) == 3
    model = keras.Model(inputs, outputs)
    got = model(MATRICES)
    want = layer(MATRICES, return_responsibilities=True)
    for g, w in zip(got, want):
        np.testing.assert_allclose(keras.ops.convert_to_numpy(g), keras.ops.convert_to_numpy(w))

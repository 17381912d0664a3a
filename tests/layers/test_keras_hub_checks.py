"""keras-hub's own checks of a layer, run on every public layer of `keras_capsules.layers`.

keras-hub's `TestCase.run_layer_test` (serialization, build, symbolic and
eager calls, a compiled training step, and its precision check in
`mixed_float16`, `mixed_bfloat16` and `bfloat16`, which compares each output
and `compute_output_spec` with the policy's compute dtype) runs on every
layer that takes one tensor. Where they apply and where not:

- `ClassMatrixCapsule`, `MatrixCapsule` and `Mask` with labels take a tuple
  (or list) of tensors as their one input; `run_layer_test` builds a layer
  from `input_data.shape` (one tensor) or calls it with a dict's entries as
  keyword arguments, so it cannot pass them. Its serialization and precision
  checks (`run_serialization_test`, `run_precision_test`), which call the
  layer on its input as it is, run on them; `tests/_layer_testing.py` covers
  the rest for them.
- `FullyConnectedCapsule` is the abstract base of the fully connected
  capsule layers (it has no routing); its three subclasses are checked.
- keras-hub skips its precision checks on PyTorch without a GPU (PyTorch's
  CPU kernels lack float16), so on that backend only the rest runs.
- The preprocessing, tokenizer and Grain checks (`run_preprocessing_layer_test`,
  `run_preprocessor_test`, `run_grain_preprocessing_test`) are for keras-hub's
  text and image preprocessors: none of these layers is one (`ImageConverter`
  is a layer of the model, not a `tf.data` preprocessor).
- `run_quantization_test` quantizes `Dense`, `EinsumDense` and `Embedding`
  sublayers of a model built with a `DTypePolicyMap`; a capsule layer's
  weights are none of those (`tests/applications/test_keras_hub_checks.py`
  says why it does not apply to the models either).

`compute_output_spec` of every layer, its input passed positionally and under
the call argument's own name, is `tests/layers/test_shapes.py`'s test.
"""

import numpy as np
import pytest

from keras_capsules import layers
from tests._keras_hub import keras_hub_checks

RNG = np.random.default_rng(0)


def _normal(*shape):
    return RNG.normal(size=shape).astype("float32")


def _uniform(*shape):
    return RNG.uniform(size=shape).astype("float32")


ROUTED = {"capsule_types": 3, "capsule_dim": 4}

# name: (class, constructor arguments, one input tensor, output shape, trainable
# weights, non-trainable weights)
SINGLE_INPUT = {
    "CapsuleLayer": (
        layers.CapsuleLayer,
        {**ROUTED, "iterations": 2},
        _normal(2, 5, 3),
        (2, 3, 4),
        1,
        0,
    ),
    "DepthwisePrimaryCapsule": (
        layers.DepthwisePrimaryCapsule,
        {"capsule_types": 2, "capsule_dim": 3},
        _normal(2, 5, 4, 6),
        (2, 2, 3),
        2,
        0,
    ),
    "ImageConverter": (
        layers.ImageConverter,
        {"image_size": (6, 4), "channels": 1, "scale": 1 / 255},
        _uniform(2, 12, 8, 3) * 255,
        (2, 6, 4, 1),
        0,
        0,
    ),
    "InvertedDotProductCapsule": (
        layers.InvertedDotProductCapsule,
        {**ROUTED, "iterations": 2},
        _normal(2, 5, 3),
        (2, 3, 4),
        3,
        0,
    ),
    "Length": (layers.Length, {}, _normal(2, 3, 4), (2, 3), 0, 0),
    "Mask": (layers.Mask, {}, _normal(2, 3, 4), (2, 3, 4), 0, 0),
    "PrimaryCapsule": (
        layers.PrimaryCapsule,
        {"capsule_types": 4, "capsule_dim": 3, "kernel_size": 3, "strides": 2, "padding": "same"},
        _normal(2, 5, 5, 3),
        (2, 36, 3),
        2,
        0,
    ),
    "PrimaryMatrixCapsule": (
        layers.PrimaryMatrixCapsule,
        {"capsule_types": 2, "kernel_size": 3, "strides": 2},
        _normal(2, 5, 5, 3),
        ((2, 2, 2, 2, 16), (2, 2, 2, 2)),
        2,
        0,
    ),
    # The coupling's logits are a weight, drawn once and never trained.
    "RandomCouplingCapsule": (
        layers.RandomCouplingCapsule,
        {**ROUTED, "seed": 1},
        _normal(2, 5, 3),
        (2, 3, 4),
        1,
        1,
    ),
    "ReconstructionDecoder": (
        layers.ReconstructionDecoder,
        {"target_shape": (6, 5), "hidden_units": (7,)},
        _normal(2, 3, 4),
        (2, 6, 5),
        4,
        0,
    ),
    "SelfAttentionCapsule": (
        layers.SelfAttentionCapsule,
        ROUTED,
        _normal(2, 5, 3),
        (2, 3, 4),
        2,
        0,
    ),
}

MATRICES = (_normal(2, 5, 5, 2, 16), _uniform(2, 5, 5, 2))
# name: (class, constructor arguments, the tuple or list that is its one input)
SEVERAL_INPUTS = {
    "ClassMatrixCapsule": (
        layers.ClassMatrixCapsule,
        {"capsule_types": 3, "iterations": 2},
        (MATRICES[0][:, :2, :2], MATRICES[1][:, :2, :2]),
    ),
    "MatrixCapsule": (
        layers.MatrixCapsule,
        {"capsule_types": 2, "kernel_size": 3, "strides": 2, "iterations": 2},
        MATRICES,
    ),
    "Mask": (layers.Mask, {}, [_normal(2, 3, 4), np.array([2, 0], "int32")]),
}

ABSTRACT = {"FullyConnectedCapsule"}


@pytest.fixture
def hub(tmp_path):
    return keras_hub_checks(tmp_path)


def test_every_public_layer_is_checked():
    assert set(SINGLE_INPUT) | set(SEVERAL_INPUTS) | ABSTRACT == set(layers.__all__)


@pytest.mark.parametrize("name", sorted(SINGLE_INPUT))
def test_keras_hubs_layer_checks(hub, name):
    cls, kwargs, inputs, shape, trainable, non_trainable = SINGLE_INPUT[name]
    hub.run_layer_test(
        cls,
        kwargs,
        inputs,
        shape,
        expected_num_trainable_weights=trainable,
        expected_num_non_trainable_weights=non_trainable,
        expected_num_non_trainable_variables=non_trainable,
    )


@pytest.mark.parametrize("name", sorted(SEVERAL_INPUTS))
def test_keras_hubs_serialization_and_precision_checks(hub, name):
    cls, kwargs, inputs = SEVERAL_INPUTS[name]
    hub.run_serialization_test(cls(**kwargs))
    hub.run_precision_test(cls, kwargs, inputs)

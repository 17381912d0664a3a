"""The checks every Keras layer of the library passes, in one call: `run_layer_test`.

After keras-hub's `TestCase.run_layer_test`: each layer test calls it once with
tiny inputs, then tests what is particular to its layer (values against
`tests/_references.py`, errors, paper sizes).

This module imports Keras and NumPy only (pytest imports it for
`--doctest-modules`); its name matches neither `test_*.py` nor `*_test.py`, so
pytest does not collect it as tests.
"""

import functools
import os
import tempfile

import keras
import numpy as np
from keras import ops

MIXED_PRECISION_POLICIES = ("mixed_float16", "mixed_bfloat16")


def _is_shape(x):
    return isinstance(x, (tuple, list)) and all(
        d is None or isinstance(d, (int, np.integer)) for d in x
    )


def _shapes(structure):
    """The shape of a tensor, an array or a shape, or a list of those of a tuple / list of them."""
    if isinstance(structure, (tuple, list)) and not _is_shape(structure):
        return [_shapes(x) for x in structure]
    shape = structure if _is_shape(structure) else structure.shape
    return tuple(None if d is None else int(d) for d in shape)


def _without_batch(shapes):
    if isinstance(shapes, list):
        return [_without_batch(s) for s in shapes]
    return (None,) + shapes[1:]


def _assert_shapes(what, got, expected):
    got, expected = _shapes(got), _shapes(expected)
    assert got == expected, f"{what}: shape {got}, expected {expected}"


def _structure(data, fn):
    """`fn` of each array of `data`, an array or a tuple / list of them, keeping the container."""
    if isinstance(data, (tuple, list)):
        return type(data)(fn(x) for x in data)
    return fn(data)


def _flat(data):
    return list(data) if isinstance(data, (tuple, list)) else [data]


def _is_float(x):
    return "float" in keras.backend.standardize_dtype(x.dtype)


def _numpy(x):
    return ops.convert_to_numpy(ops.cast(x, "float32")) if _is_float(x) else ops.convert_to_numpy(x)


def run_layer_test(
    layer_cls,
    init_kwargs,
    input_data,
    expected_output_shape,
    *,
    call_kwargs=None,
    expected_num_trainable_weights=None,
    run_training_check=True,
    mixed_precision_policies=MIXED_PRECISION_POLICIES,
):
    """Check a layer's configuration, shapes, saving, training and mixed precision.

    Each check builds a fresh `layer_cls(**init_kwargs)`:

    1. `get_config` / `from_config`, and `keras.layers.serialize` /
       `deserialize` by its registered name, give a layer of the same config.
    2. `compute_output_shape` of the inputs' shapes is `expected_output_shape`,
       and builds nothing (no weights).
    3. A call on `input_data` gives outputs of `expected_output_shape`, finite,
       floating outputs of the layer's compute dtype (float32).
    4. A call on `keras.Input`s gives outputs of `expected_output_shape` with an
       unknown batch.
    5. That layer in a functional model survives a `.keras` save and load: the
       loaded model gives the same outputs on `input_data`.
    6. If the layer has trainable weights and `run_training_check`: one `fit`
       step of the model (the loss: the mean square of every output) has a
       finite loss and changes every trainable weight.
    7. For each of `mixed_precision_policies`, a layer with that `dtype` gives
       finite floating outputs of the policy's compute dtype, and keeps its
       floating variables in float32.

    Args:
        layer_cls: the layer class, registered for serialisation.
        init_kwargs: the constructor's arguments (keep the layer tiny: every
            check runs on every backend in CI).
        input_data: a NumPy array, or a tuple or list of arrays passed as the
            layer's one input (`(poses, activations)`, `[capsules, labels]`),
            with a batch dimension first.
        expected_output_shape: the output's shape, batch included, or one
            shape per output for a layer returning a tuple.
        call_kwargs: other arguments of every call.
        expected_num_trainable_weights: if given, the built layer's count.
        run_training_check: run check 6.
        mixed_precision_policies: the policies of check 7.

    Returns:
        The outputs of check 3, as NumPy arrays (a list for several outputs).
    """
    call_kwargs = dict(call_kwargs or {})
    input_shapes = _structure(input_data, _shapes)

    # 1. Configuration round trips.
    layer = layer_cls(**init_kwargs)
    config = layer.get_config()
    clone = layer_cls.from_config(config)
    assert clone.get_config() == config, f"from_config changed the config:\n{config}"
    revived = keras.layers.deserialize(keras.layers.serialize(layer))
    assert type(revived) is layer_cls, f"deserialize gave a {type(revived).__name__}"
    assert revived.get_config() == config, "serialize / deserialize changed the config"

    # 2. The shape without building.
    _assert_shapes(
        "compute_output_shape", layer.compute_output_shape(input_shapes), expected_output_shape
    )
    assert not layer.built and not layer.weights, "compute_output_shape built the layer"

    # 3. An eager call.
    layer = layer_cls(**init_kwargs)
    outputs = layer(input_data, **call_kwargs)
    _assert_shapes("call", outputs, expected_output_shape)
    for x in _flat(outputs):
        if _is_float(x):
            assert keras.backend.standardize_dtype(x.dtype) == layer.compute_dtype, x.dtype
        assert np.all(np.isfinite(_numpy(x))), "the outputs are not finite"
    if expected_num_trainable_weights is not None:
        count = len(layer.trainable_weights)
        assert count == expected_num_trainable_weights, f"{count} trainable weights"
    eager_outputs = [_numpy(x) for x in _flat(outputs)]

    # 4. A symbolic call.
    layer = layer_cls(**init_kwargs)
    inputs = _structure(
        input_data,
        lambda x: keras.Input(x.shape[1:], dtype=keras.backend.standardize_dtype(x.dtype)),
    )
    symbolic = layer(inputs, **call_kwargs)
    _assert_shapes("symbolic call", symbolic, _without_batch(_shapes(expected_output_shape)))

    # 5. A `.keras` round trip of the layer in a functional model.
    model = keras.Model(_flat(inputs), symbolic)
    data = _flat(input_data)
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "layer.keras")
        model.save(path)
        loaded = keras.saving.load_model(path)
    assert loaded.layers[-1].get_config() == layer.get_config(), "the loaded config differs"
    for before, after in zip(_flat(model(data)), _flat(loaded(data))):
        np.testing.assert_allclose(
            _numpy(after), _numpy(before), rtol=1e-6, atol=1e-7, err_msg="the loaded model"
        )

    # 6. One fit step.
    if run_training_check and layer.trainable_weights:
        square_means = [
            ops.mean(ops.square(ops.cast(x, "float32")), axis=tuple(range(1, len(x.shape))))
            for x in _flat(symbolic)
        ]
        trainer = keras.Model(_flat(inputs), functools.reduce(ops.add, square_means))
        trainer.compile(
            optimizer=keras.optimizers.SGD(0.1), loss=lambda _, y_pred: ops.mean(y_pred)
        )
        before = [ops.convert_to_numpy(w) for w in layer.trainable_weights]
        batch = len(data[0])
        history = trainer.fit(data, np.zeros((batch,), "float32"), batch_size=batch, verbose=0)
        loss = history.history["loss"][0]
        assert np.isfinite(loss), f"the fit step's loss is {loss}"
        for weight, old in zip(layer.trainable_weights, before):
            assert not np.array_equal(ops.convert_to_numpy(weight), old), (
                f"one fit step left {weight.path} unchanged"
            )

    # 7. Mixed precision.
    for policy in mixed_precision_policies:
        layer = layer_cls(**init_kwargs, dtype=policy)
        compute_dtype = keras.DTypePolicy(policy).compute_dtype
        for x in _flat(layer(input_data, **call_kwargs)):
            if _is_float(x):
                dtype = keras.backend.standardize_dtype(x.dtype)
                assert dtype == compute_dtype, f"{policy}: an output of {dtype}"
            assert np.all(np.isfinite(_numpy(x))), f"{policy}: the outputs are not finite"
        for weight in layer.weights:
            if "float" in weight.dtype:
                assert weight.dtype == "float32", f"{policy}: {weight.path} is {weight.dtype}"

    return eager_outputs if isinstance(outputs, (tuple, list)) else eager_outputs[0]

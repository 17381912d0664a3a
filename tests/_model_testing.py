"""The checks every classifier and backbone of `applications` passes, in one call each.

After keras-hub's `TestCase.run_task_test`, `run_preset_test` and
`run_backbone_test`: each model's test file calls `run_classifier_test` (or
`run_backbone_test`) once with a small configuration and a few images, then
tests what is particular to its model (paper sizes, losses against NumPy,
errors of its own arguments, learning on real data).

This module imports Keras and NumPy only (pytest imports it for
`--doctest-modules`); its name matches neither `test_*.py` nor `*_test.py`, so
pytest does not collect it as tests.
"""

import json
import os

import keras
import numpy as np
import pytest
from keras import ops

MIXED_PRECISION_POLICIES = ("mixed_float16", "mixed_bfloat16")


def _scores(outputs, key):
    """The class scores of a model's outputs: its dict's `key`, or the tensor itself."""
    return outputs[key] if isinstance(outputs, dict) else outputs


def _numpy(outputs):
    if isinstance(outputs, (list, tuple)):  # a backbone's several outputs
        outputs = dict(enumerate(outputs))
    if isinstance(outputs, dict):
        return {name: ops.convert_to_numpy(value) for name, value in outputs.items()}
    return ops.convert_to_numpy(outputs)


def _other_size_and_colour(images):
    """`images` twice as large (each pixel four times) and in the other colour, as the
    converter turns them back exactly: grey as equal red, green and blue (their luma is
    the grey), colour with an alpha channel (dropped); other channels keep their number.

    Halving by bilinear interpolation with half-pixel centres reads each output
    pixel between two copies of the same input pixel, so the size comes back exact.
    """
    images = np.repeat(np.repeat(np.asarray(images), 2, axis=1), 2, axis=2)
    if images.shape[-1] == 1:
        return np.repeat(images, 3, axis=-1)
    if images.shape[-1] == 3:
        return np.concatenate([images, np.full_like(images[..., :1], 255)], axis=-1)
    return images


def _same_config(a, b):
    """Configs equal once JSON has made tuples and lists alike, as a `.keras` file does."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _assert_same_outputs(got, want, what):
    got, want = _numpy(got), _numpy(want)
    if isinstance(want, dict):
        assert set(got) == set(want), what
        for name in want:
            np.testing.assert_array_equal(got[name], want[name], err_msg=f"{what}: {name}")
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


def run_classifier_test(
    cls,
    init_kwargs,
    images,
    labels,
    tmp_path,
    *,
    scores="probabilities",
    mixed_precision=True,
    preset=True,
):
    """Run `cls(**init_kwargs)` through the checks every classifier passes.

    - Its class scores are finite float32 in [0, 1], one per class, and the
      class names (if any) count the classes.
    - An unknown argument is refused with a `ValueError` naming it.
    - `get_config` / `from_config` give the same config, and the config holds
      no optimizer argument (the recipe's, `compile()`'s).
    - One epoch of `fit` on `(images, labels)` has a finite loss, and
      `evaluate` reports the accuracy.
    - A `.keras` round trip needs no custom objects and gives the same class,
      config, outputs and compile state, and the loaded model trains further.
    - The loaded model answers images of twice the size in the other colour
      as the images themselves: its image converter is inside.
    - A frozen backbone (the baseline's first layer) stays frozen through a
      `.keras` file, further training and, with `preset`, a preset.
    - With `mixed_precision`, each mixed policy builds a model whose scores
      are float32 and finite and whose loss is finite, and records the policy
      in its config.
    - With `preset`, `save_to_preset` / `from_preset` give the same outputs,
      and `from_preset` with two new class names builds a two-class model
      that keeps the backbone's weights.

    Args:
        cls: the class, e.g. `applications.CapsNet`.
        init_kwargs: a small configuration of it.
        images: a few images it takes, a NumPy array.
        labels: their labels, as `fit` takes them.
        tmp_path: a folder for the files the checks write.
        scores: the key of the class scores in a dict of outputs.
        mixed_precision: whether to run the mixed-precision checks.
        preset: whether to run the preset checks.
    """
    model = cls(**init_kwargs)
    outputs = model(images)
    probabilities = ops.convert_to_numpy(_scores(outputs, scores))
    assert ops.dtype(_scores(outputs, scores)) == "float32"
    assert probabilities.shape == (len(images), model.num_classes)
    assert np.all(np.isfinite(probabilities))
    assert np.all((probabilities >= 0) & (probabilities <= 1))
    names = model.get_config().get("class_names")
    assert names is None or len(names) == model.num_classes

    with pytest.raises(ValueError, match="not_an_argument"):
        cls(**init_kwargs, not_an_argument=1)

    config = model.get_config()
    assert not {"learning_rate", "decay_steps", "decay_rate"} & set(config)
    assert _same_config(cls.from_config(config).get_config(), config)

    history = model.fit(images, labels, batch_size=len(images), epochs=1, verbose=0).history
    assert np.all(np.isfinite(history["loss"])), history
    results = model.evaluate(images, labels, verbose=0, return_dict=True)
    assert 0 <= results["accuracy"] <= 1

    path = os.path.join(str(tmp_path), f"{model.name}.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert type(loaded) is type(model)
    assert _same_config(loaded.get_config(), model.get_config())
    assert loaded.get_compile_config() == model.get_compile_config()
    _assert_same_outputs(loaded(images), model(images), "the loaded model's outputs")
    np.testing.assert_allclose(
        ops.convert_to_numpy(_scores(loaded(_other_size_and_colour(images)), scores)),
        ops.convert_to_numpy(_scores(model(images), scores)),
        atol=1e-4,
        err_msg="an image twice the size, in the other colour, is answered otherwise",
    )
    if getattr(model, "decoder", None) is not None:
        np.testing.assert_array_equal(loaded.reconstruct(images), model.reconstruct(images))
    assert int(loaded.optimizer.iterations) == int(model.optimizer.iterations)
    loaded.fit(images, labels, batch_size=len(images), epochs=1, verbose=0)

    _run_frozen_checks(cls, init_kwargs, images, labels, str(tmp_path), preset)

    if mixed_precision:
        for policy in MIXED_PRECISION_POLICIES:
            mixed = cls(**init_kwargs, dtype=policy)
            assert mixed.get_config()["dtype"] == policy
            outputs = mixed(images)
            assert ops.dtype(_scores(outputs, scores)) == "float32", policy
            assert np.all(np.isfinite(ops.convert_to_numpy(_scores(outputs, scores)))), policy
            assert np.isfinite(float(mixed.compute_loss(images, labels, outputs))), policy

    if preset:
        _run_preset_checks(cls, model, images, str(tmp_path))


def assert_saves_and_loads(model, images, tmp_path, rtol=1e-5, atol=1e-6):
    """Save `model` as a `.keras` file, load it without custom objects, and compare outputs.

    Returns:
        The loaded model.
    """
    path = os.path.join(str(tmp_path), f"{model.name}.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert type(loaded) is type(model)
    got, want = _numpy(loaded.predict(images, verbose=0)), _numpy(model.predict(images, verbose=0))
    if not isinstance(want, dict):
        got, want = {"outputs": got}, {"outputs": want}
    assert set(got) == set(want)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=rtol, atol=atol, err_msg=name)
    return loaded


def _frozen(model):
    """Freeze `model`'s backbone (the CNN baseline: its first layer with weights)."""
    backbone = getattr(model, "backbone", None)
    if backbone is not None:
        backbone.trainable = False
        return backbone
    layer = next(layer for layer in model.layers if layer.weights)
    layer.trainable = False
    return layer


def _run_frozen_checks(cls, init_kwargs, images, labels, folder, preset):
    """A frozen backbone stays frozen through `.keras`, a preset and further training."""
    model = cls(**init_kwargs)
    trainable = len(model.trainable_weights)
    frozen = _frozen(model)
    count = len(model.trainable_weights)
    assert 0 < count < trainable
    path = os.path.join(folder, "frozen.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert len(loaded.trainable_weights) == count, "the .keras file unfroze layers"
    assert not _frozen_part(loaded, frozen).trainable
    before = [ops.convert_to_numpy(w) for w in _frozen_part(loaded, frozen).weights]
    loaded.fit(images, labels, batch_size=len(images), epochs=1, verbose=0)
    for got, want in zip(_frozen_part(loaded, frozen).weights, before):
        np.testing.assert_array_equal(ops.convert_to_numpy(got), want, err_msg=got.path)
    if preset:
        again = cls.from_preset(model.save_to_preset(os.path.join(folder, "frozen_preset")))
        assert len(again.trainable_weights) == count, "the preset unfroze layers"
        assert not _frozen_part(again, frozen).trainable


def _frozen_part(model, part):
    """`model`'s backbone, or its layer named as `part`."""
    backbone = getattr(model, "backbone", None)
    return backbone if backbone is not None else model.get_layer(part.name)


def _run_preset_checks(cls, model, images, folder):
    """`save_to_preset` / `from_preset`, and `from_preset` for two new classes."""
    preset = model.save_to_preset(os.path.join(folder, "preset"))
    same = cls.from_preset(preset)
    assert _same_config(same.get_config(), model.get_config())
    _assert_same_outputs(same(images), model(images), "the preset's outputs")

    pets = cls.from_preset(preset, class_names=["cat", "dog"])
    assert pets.num_classes == 2 and tuple(pets.class_names) == ("cat", "dog")
    assert pets.preset_layers, "from_preset kept no layer of the backbone"
    kept = [(_layer_at(pets, path), _layer_at(model, path)) for path in pets.preset_layers]
    if getattr(model, "backbone", None) is not None:  # all of it; the CNN baseline has none
        kept.append((pets.backbone, model.backbone))
    for got_layer, want_layer in kept:
        assert len(got_layer.weights) == len(want_layer.weights)
        for got, want in zip(got_layer.weights, want_layer.weights):
            np.testing.assert_array_equal(
                ops.convert_to_numpy(got), ops.convert_to_numpy(want), err_msg=want.path
            )


def _layer_at(model, path):
    """The layer of `model` at `path`, e.g. `"backbone/conv1"`."""
    layer = model
    for name in path.split("/"):
        layer = layer.get_layer(name)
    return layer


def run_backbone_test(cls, init_kwargs, images, output_shapes, tmp_path):
    """Run the backbone `cls(**init_kwargs)` through the checks every backbone passes.

    After keras-hub's `TestCase.run_backbone_test`:

    - It is an `applications.Backbone` whose `image_shape` is its input's,
      and on `images` its outputs (a tensor or a list of them) have
      `output_shapes` (without the batch axis) and are finite.
    - `get_config` / `from_config` give the same config and parameter count,
      and a `.keras` round trip (no custom objects) the same outputs.
    - `trainable=False` is kept by the config.
    - An unknown argument is refused with a `ValueError` naming it.
    - In each mixed policy the outputs are finite and the config records it.
    """
    import applications

    backbone = cls(**init_kwargs)
    assert isinstance(backbone, applications.Backbone)
    assert tuple(backbone.image_shape) == tuple(backbone.input_shape[1:])
    outputs = backbone(images)
    listed = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
    assert [tuple(o.shape[1:]) for o in listed] == [tuple(s) for s in output_shapes]
    for output in listed:
        assert np.all(np.isfinite(ops.convert_to_numpy(output)))
    config = backbone.get_config()
    again = cls.from_config(config)
    assert _same_config(again.get_config(), config)
    assert again.count_params() == backbone.count_params()
    path = os.path.join(str(tmp_path), "backbone.keras")
    backbone.save(path)
    loaded = keras.saving.load_model(path)
    assert type(loaded) is cls and _same_config(loaded.get_config(), config)
    _assert_same_outputs(loaded(images), outputs, "the .keras file's outputs")
    frozen = cls(**init_kwargs, trainable=False)
    assert not cls.from_config(frozen.get_config()).trainable
    with pytest.raises(ValueError, match="not_an_argument"):
        cls(**init_kwargs, not_an_argument=1)
    for policy in MIXED_PRECISION_POLICIES:
        mixed = cls(**init_kwargs, dtype=policy)
        assert mixed.get_config()["dtype"] == policy
        result = mixed(images)
        for output in result if isinstance(result, (list, tuple)) else [result]:
            assert np.all(np.isfinite(ops.convert_to_numpy(output))), policy

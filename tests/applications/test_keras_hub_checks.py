"""keras-hub's own checks of backbones and tasks, run on every backbone and classifier.

Every backbone (`CapsNetBackbone`, `EfficientCapsNetBackbone`,
`MatrixCapsNetBackbone`) runs keras-hub's `run_vision_backbone_test`:
serialization, eager output shapes, `predict` on a tensor and on a
`tf.data` dataset, its precision check (`mixed_float16`, `mixed_bfloat16`,
`bfloat16`: outputs, `compute_output_spec`, weights and every sublayer in the
policy's dtypes) and its quantization check. Every classifier runs
keras-hub's `run_serialization_test` and `run_model_saving_test` (a `.keras`
round trip to the same class and outputs), and the parts of
`run_task_test` that need no preprocessor: `predict` on arrays and on a
`tf.data` dataset agree, and a model built with `compile=False` refuses to
`fit`. `tests/_model_testing.py` checks the rest of what a classifier does.

What does not apply, and why:

- The backbone name check (a backbone's default name is the snake case of
  its class): the default names are the families' (`capsnet_backbone`, not
  `caps_net_backbone`), and the presets' files hold them; the checks pass
  keras-hub's name instead.
- The data-format check (`channels_first`): the networks take
  `(height, width, channels)` images whatever Keras's image data format is
  (`test_the_global_image_data_format_changes_no_network`); keras-hub's check
  feeds them channels-first images. keras-hub skips it on TensorFlow's CPU.
- `run_task_test`'s preprocessor parts: these classifiers have no
  `preprocessor`; their `ImageConverter` is a layer of the model.
- `run_precision_test` on the classifiers: a classifier's class scores stay
  float32 under a mixed policy (its last layers compute in float32, as Keras's
  mixed precision guide has outputs), where keras-hub wants every output and
  sublayer in the compute dtype; `tests/_model_testing.py` checks mixed
  precision for them (finite float32 scores, finite loss, policy in config).
- `run_quantization_test` on the classifiers: it builds the model with a
  `DTypePolicyMap` as `dtype`; the applications take one policy (a name, kept
  in their config). The backbones' check runs, and is vacuous there: it
  quantizes only `Dense`, `EinsumDense` and `Embedding` layers, which
  capsule layers are not.
- `run_preset_test`, `run_litert_export_test`: keras-hub's presets and its
  LiteRT wrapper of keras-hub models; the applications' presets have their own
  tests (`tests/applications/test_preset.py`), and LiteRT export is
  `tests/applications/test_keras_export.py`'s and `tests/serving`'s.
- On PyTorch without a GPU keras-hub skips the precision checks (PyTorch's CPU
  kernels lack float16), and the quantization check on PyTorch.
"""

import json
import re

import keras
import numpy as np
import pytest

import applications
from keras_capsules.datasets import mnist
from keras_capsules.datasets import smallnorb
from keras_capsules.layers import ImageConverter
from tests._keras_hub import keras_hub_checks

SMALL_CAPSNET = dict(conv_filters=16, primary_capsule_types=4, capsule_dim=8, decoder_units=(32,))
SMALL_EFFICIENT = dict(
    conv_filters=(8, 8, 8, 16),
    primary_capsule_types=4,
    primary_capsule_dim=4,
    capsule_dim=8,
    decoder_units=(32,),
)
TINY_MATRIX = dict(A=8, B=2, C=3, D=2, iterations=2)
MNIST = dict(input_shape=(28, 28, 1), num_classes=10, class_names=mnist.CLASS_NAMES)
NORB = dict(input_shape=(32, 32, 2), num_classes=5, class_names=smallnorb.CLASS_NAMES)
FACTORIES = {
    "CapsNetMNIST": (applications.CapsNetMNIST, dict(SMALL_CAPSNET, iterations=2)),
    "MatrixCapsNetNORB": (applications.MatrixCapsNetNORB, TINY_MATRIX),
}


def _feature_extractor():
    """Two strided convolutions: 32x32x3 -> 7x7x16."""
    return keras.Sequential(
        [
            keras.Input((32, 32, 3)),
            keras.layers.Conv2D(8, 3, strides=2, activation="relu"),
            keras.layers.Conv2D(16, 3, strides=2, activation="relu"),
        ]
    )


# name: (class, a function of no arguments giving its constructor arguments)
CLASSIFIERS = {
    "BackboneCNN": (
        applications.BackboneCNN,
        lambda: dict(backbone=_feature_extractor(), num_classes=3),
    ),
    "BackboneCapsNet": (
        applications.BackboneCapsNet,
        lambda: dict(
            backbone=_feature_extractor(),
            num_classes=3,
            primary_capsule_types=4,
            decoder_units=(8,),
        ),
    ),
    "BaselineCNN": (applications.BaselineCNN, lambda: dict(filters=(8, 8, 4), dense_units=(16, 8))),
    "CapsNet": (applications.CapsNet, lambda: dict(SMALL_CAPSNET, iterations=2)),
    # The factories `CapsNetMNIST` and `MatrixCapsNetNORB`, as the classes they build
    # (`test_the_factories_build_the_checked_models`).
    "CapsNetMNIST": (
        applications.CapsNet,
        lambda: dict(SMALL_CAPSNET, iterations=2, **MNIST, name="capsnet_mnist"),
    ),
    "CapsNetMultiMNIST": (
        applications.CapsNetMultiMNIST,
        lambda: dict(SMALL_CAPSNET, iterations=2),
    ),
    "EfficientCapsNet": (applications.EfficientCapsNet, lambda: SMALL_EFFICIENT),
    "EfficientCapsNetMultiMNIST": (
        applications.EfficientCapsNetMultiMNIST,
        lambda: SMALL_EFFICIENT,
    ),
    "MatrixCapsNet": (
        applications.MatrixCapsNet,
        lambda: dict(
            TINY_MATRIX, input_shape=(20, 20, 2), num_classes=3, image_converter=ImageConverter()
        ),
    ),
    "MatrixCapsNetNORB": (
        applications.MatrixCapsNet,
        lambda: dict(
            TINY_MATRIX, **NORB, image_converter=ImageConverter(), name="matrix_capsnet_norb"
        ),
    ),
}

# name: (class, constructor arguments)
BACKBONES = {
    "CapsNetBackbone": (
        applications.CapsNetBackbone,
        dict(conv_filters=8, primary_capsule_types=2),
    ),
    "EfficientCapsNetBackbone": (
        applications.EfficientCapsNetBackbone,
        dict(conv_filters=(4, 4, 4, 16), primary_capsule_types=2),
    ),
    "MatrixCapsNetBackbone": (
        applications.MatrixCapsNetBackbone,
        dict(conv_filters=4, primary_capsule_types=2, conv_caps1_types=2, conv_caps2_types=2),
    ),
}


@pytest.fixture
def hub(tmp_path):
    return keras_hub_checks(tmp_path)


def _images(model, count=2, seed=0):
    """Images the size `model` takes, in its converter's pixel range ([0, 1] without a scale)."""
    shape = tuple(model.image_shape)
    top = 1.0 / model.image_converter.scale if model.image_converter.scale else 1.0
    return np.random.default_rng(seed).uniform(0, top, (count,) + shape).astype("float32")


def _numpy(outputs):
    return keras.tree.map_structure(keras.ops.convert_to_numpy, outputs)


def test_every_backbone_and_classifier_is_checked():
    public = {name: getattr(applications, name) for name in applications.__all__}
    backbones = {
        name
        for name, value in public.items()
        if isinstance(value, type) and issubclass(value, applications.Backbone)
    }
    classifiers = {
        name
        for name, value in public.items()
        if isinstance(value, type) and issubclass(value, keras.Model) and name not in backbones
    }
    assert backbones - {"Backbone"} == set(BACKBONES)
    assert classifiers | set(FACTORIES) == set(CLASSIFIERS)


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_the_factories_build_the_checked_models(name):
    factory, kwargs = FACTORIES[name]
    cls, checked = CLASSIFIERS[name]
    model, spelled_out = factory(**kwargs), cls(**checked())
    assert type(model) is cls
    assert json.dumps(model.get_config(), sort_keys=True) == json.dumps(
        spelled_out.get_config(), sort_keys=True
    )


@pytest.mark.parametrize("name", sorted(BACKBONES))
def test_keras_hubs_vision_backbone_checks(hub, name):
    cls, kwargs = BACKBONES[name]
    # keras-hub's name check wants the class name's snake case; see the module docstring.
    snake = re.sub("([a-z])([A-Z])", r"\1_\2", re.sub("(.)([A-Z][a-z]+)", r"\1_\2", cls.__name__))
    kwargs = dict(kwargs, name=snake.lower())
    images = keras.ops.convert_to_tensor(
        np.random.default_rng(0).uniform(0, 1, (2, 28, 28, 1)).astype("float32")
    )
    outputs = cls(**kwargs)(images)
    if isinstance(outputs, (list, tuple)):  # keras-hub reads `output[key]` of a dict of shapes
        shape = {index: tuple(output.shape) for index, output in enumerate(outputs)}
    else:
        shape = tuple(outputs.shape)
    hub.run_vision_backbone_test(cls, kwargs, images, shape, run_data_format_check=False)


@pytest.mark.parametrize("name", sorted(CLASSIFIERS))
def test_keras_hubs_serialization_and_saving_checks(hub, name):
    cls, kwargs = CLASSIFIERS[name]
    model = cls(**kwargs())
    images = _images(model)
    hub.run_serialization_test(model)
    hub.run_model_saving_test(cls, kwargs(), images)


@pytest.mark.parametrize("name", sorted(CLASSIFIERS))
def test_keras_hubs_task_checks_that_need_no_preprocessor(name):
    tf = pytest.importorskip("tensorflow")
    cls, kwargs = CLASSIFIERS[name]
    model = cls(**kwargs())
    images = _images(model, count=3)
    from_arrays = _numpy(model.predict(images, verbose=0))
    dataset = tf.data.Dataset.from_tensor_slices(images).batch(2)
    from_dataset = _numpy(model.predict(dataset, verbose=0))
    keras.tree.map_structure(
        lambda got, want: np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6),
        from_dataset,
        from_arrays,
    )
    uncompiled = cls(**kwargs(), compile=False)
    labels = np.zeros((3,), "int32")
    with pytest.raises(ValueError, match="You must call `compile"):
        uncompiled.fit(images, labels, verbose=0)


@pytest.mark.parametrize("name", sorted(CLASSIFIERS))
def test_the_global_image_data_format_changes_no_network(name):
    """With `channels_first` set globally a network still reads `(h, w, c)` images, alike."""
    cls, kwargs = CLASSIFIERS[name]
    model = cls(**kwargs())
    images = _images(model)
    want = _numpy(model(images))
    arguments = kwargs()  # a feature extractor of channels-last layers, as its user built it
    previous = keras.config.image_data_format()
    keras.config.set_image_data_format("channels_first")
    try:
        again = cls(**arguments)
        again.set_weights(model.get_weights())
        got = _numpy(again(images))
    finally:
        keras.config.set_image_data_format(previous)
    keras.tree.map_structure(
        lambda got, want: np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6), got, want
    )

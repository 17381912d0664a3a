"""What every classifier of `applications` is beside a functional `keras.Model`: a task.

After keras-hub's `Task`: `compile()` with no arguments gives the class's
`RECIPE`, and the config round trip keeps which layers are frozen.
"""

import copy
import inspect
import warnings

import keras

from applications._inputs import batch_shape
from applications._inputs import empty_answer
from keras_capsules.layers.image_converter import accepted_channels
from keras_capsules.layers.image_converter import check_image_shape
from keras_capsules.serving import ServingSpec
from keras_capsules.utils import check_model_arguments


class Task:
    """The base of the applications' classifiers: compile defaults and config round trip.

    `compile()` with no arguments uses Adam with the learning rate schedule of
    the class's `RECIPE` (`applications.Recipe`), the model's own loss
    (`_loss_for_compile`) and `_default_metrics()`. A model saved on
    TensorFlow or JAX with `steps_per_execution > 1` in its compile config
    loads on PyTorch, whose Keras trainer runs one step per call, with one
    (and a warning).

    The config is `_architecture_config()` (what the constructor takes) with
    the model's name, whether it is trainable, its serialized `backbone`
    (for a task built on one) and `image_converter`, and `frozen_layers`, the
    layers with weights set untrainable (`model.backbone.trainable = False`
    freezes the backbone's), which `from_config` freezes again: a `.keras`
    file, a preset and a continued run keep them frozen.
    """

    RECIPE = None
    """The architecture's `applications.Recipe`."""

    BACKBONE = None
    """The family's backbone class, which `backbone=None` builds (`_backbone`)."""

    MULTIMNIST = None
    """The name in `applications` of the family's network for MultiMNIST (two digits per
    image), which `keras-capsules train ARCH --data multimnist` builds; `None` if none."""

    OPTIONS = ()
    """The family's command-line options (`keras_capsules.cli.option.Option`), one per
    constructor argument `keras-capsules train` sets; `option_arguments` reads them."""

    @classmethod
    def option_arguments(cls, values):
        """The constructor arguments that the values of `OPTIONS` give, `{argument: value}`.

        `values` holds one value per option (its `default` where it was not
        given). The family's arguments are the options' own; a family whose
        constructor takes some of them as one value overrides this.
        """
        return dict(values)

    # Compile -------------------------------------------------------------------

    def _default_metrics(self):
        """The metrics of `compile(metrics="auto")`; subclasses with other targets override it."""
        return ["accuracy"]

    def _loss_for_compile(self, loss):
        """The `loss` to give `keras.Model.compile` for the argument `loss`."""
        return loss

    def compile(self, optimizer="auto", loss="auto", metrics="auto", **kwargs):
        """Configure the model for training; with no arguments, as its paper trains it.

        Args:
            optimizer: `"auto"` (default): Adam with the learning rate
                schedule of the class's `RECIPE`; or any Keras optimizer.
            loss: `"auto"` (default): the model's own loss, which its
                docstring describes.
            metrics: `"auto"` (default): the class's metrics (accuracy); or a
                list of Keras metrics.
            **kwargs: the other arguments of `keras.Model.compile`, e.g.
                `steps_per_execution` or `jit_compile`.
        """
        if isinstance(optimizer, str) and optimizer == "auto":
            optimizer = self.RECIPE.optimizer()
        if isinstance(metrics, str) and metrics == "auto":
            metrics = self._default_metrics()
        loss = self._loss_for_compile(loss)
        steps = kwargs.get("steps_per_execution", 1)
        if keras.backend.backend() == "torch" and steps != 1:
            warnings.warn(
                f"steps_per_execution={steps} is taken as 1: PyTorch's Keras trainer runs one "
                "step per call.",
                stacklevel=2,
            )
            kwargs["steps_per_execution"] = 1
        super().compile(optimizer=optimizer, loss=loss, metrics=metrics, **kwargs)

    def compile_from_config(self, config):
        # Keras loads the compile state of a model whose `compile` is its own
        # only through this method, as its warning on load asks.
        self.compile(**keras.saving.deserialize_keras_object(config))
        if self.built:
            self.optimizer.build(self.trainable_variables)

    # Inference -----------------------------------------------------------------

    def predict(self, x, *args, **kwargs):
        """Keras's `predict`, which also answers an empty batch and names a bad shape.

        An array (or tensor) of images is checked first: one that is not a
        batch of images the model takes (a scalar, a rank other than 3 or
        4, channels other than 1, 3 or 4 for a grey or colour network) is a
        `ValueError` naming its shape, and an empty batch gets every output
        with 0 rows, `(0, num_classes)` probabilities, where Keras's predict
        loop runs no step and has nothing to answer with. Datasets and
        generators go to Keras as they are.
        """
        shape = batch_shape(x)
        if shape is not None:
            check_image_shape(shape, accepted_channels(self.image_shape[-1]))
            if shape[0] == 0:
                return empty_answer(self, shape)
        return super().predict(x, *args, **kwargs)

    # Serving -------------------------------------------------------------------

    def export(
        self, filepath, format="tf_saved_model", verbose=None, input_signature=None, **kwargs
    ):
        """Keras's `Model.export`, its ONNX file runnable for every classifier.

        The model's raw outputs (its dict of outputs) in any format Keras
        exports: `"tf_saved_model"`, `"onnx"`, `"litert"` (TensorFlow), and
        `"openvino"` with OpenVINO installed. For `"onnx"`, tf2onnx is first
        taught TensorFlow's `Expm1` (Efficient-CapsNet's squash), which it
        lacks. `keras_capsules.serving` exports the serving contract instead.
        """
        if format == "onnx" and keras.backend.backend() == "tensorflow":
            from keras_capsules.serving.portable import convert_expm1_to_onnx

            convert_expm1_to_onnx()
        return super().export(
            filepath, format=format, verbose=verbose, input_signature=input_signature, **kwargs
        )

    def serving_spec(self):
        """What the exports and the server read of this model: its `ServingSpec`.

        It takes any image (its `image_converter` is inside) and declares its
        class names, the pixel range its converter takes (`[0, 1 / scale]`,
        or `[0, 1]` without a scale), where its class scores are and, for a
        capsule classifier, its class capsules and decoder.
        """
        scale = self.image_converter.scale
        return ServingSpec(
            image_shape=self.image_shape,
            any_image=True,
            class_names=self.class_names,
            pixel_range=(0.0, 1.0 if scale is None else 1.0 / scale),
            **self._serving_outputs(),
        )

    def _serving_outputs(self):
        """The `ServingSpec` arguments that say where the outputs are: one tensor of scores."""
        return {}

    def _declare(self, policy, image_shape, converter, num_classes, class_names):
        """Hold what every classifier declares: its policy, images, converter and classes."""
        self.dtype_policy = policy  # the model's own policy decides loss scaling in compile
        self.image_shape = image_shape
        self.image_converter = converter
        self.num_classes = num_classes
        self.class_names = class_names

    def _backbone(self, backbone, arguments, policy):
        """`backbone`, or the family's built from `arguments`; a `ValueError` for a mix."""
        others = () if self.BACKBONE is None else (self.BACKBONE,)
        if backbone is not None:
            check_model_arguments(self, arguments, others)  # names misspelled arguments
            if arguments:
                raise ValueError(
                    f"{type(self).__name__} was given a `backbone`, so it takes none of the "
                    f"arguments that build one. Received: "
                    + ", ".join(f"{key}={value!r}" for key, value in arguments.items())
                )
            return backbone
        if self.BACKBONE is None:
            raise ValueError(f"{type(self).__name__} needs a `backbone`.")
        takes = backbone_arguments(self.BACKBONE)
        unknown = {key: value for key, value in arguments.items() if key not in takes}
        check_model_arguments(self, unknown, others)
        return self.BACKBONE(**arguments, dtype=policy, name="backbone")

    # Config --------------------------------------------------------------------

    def _architecture_config(self):
        """The constructor's arguments that build this model again (the subclass's)."""
        raise NotImplementedError

    @classmethod
    def _from_architecture_config(cls, config):
        """The model of `_architecture_config()`'s `config`; subclasses deserialize in it."""
        return cls(**config)

    def get_config(self):
        config = {"name": self.name, "trainable": self.trainable}
        backbone = getattr(self, "backbone", None)  # the CNN baseline has none
        if backbone is not None:
            backbone = keras.saving.serialize_keras_object(backbone)
            for state in ("build_config", "compile_config"):  # a built functional model's
                backbone.pop(state, None)
            config["backbone"] = backbone
        config.update(self._architecture_config())
        config["image_converter"] = keras.saving.serialize_keras_object(self.image_converter)
        frozen = frozen_layers(self)
        if frozen:
            config["frozen_layers"] = frozen
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        frozen = config.pop("frozen_layers", ())
        # A deep copy: Keras's functional from_config empties the nested config it reads,
        # and the caller's config must stay readable (a preset is read twice for new classes).
        backbone = copy.deepcopy(config.get("backbone"))
        if isinstance(backbone, dict):
            if cls.BACKBONE is not None and "dtype" in config:  # the family's follows the task's
                backbone = {**backbone, "config": {**backbone["config"], "dtype": config["dtype"]}}
            config["backbone"] = keras.saving.deserialize_keras_object(backbone)
        if isinstance(config.get("image_converter"), dict):
            config["image_converter"] = keras.saving.deserialize_keras_object(
                config["image_converter"]
            )
        model = cls._from_architecture_config(config)
        freeze(model, frozen)
        return model


def frozen_layers(model, prefix=""):
    """The paths (`"backbone/conv1"`) of the layers with weights that are not trainable.

    A frozen nested model is one path; inside a trainable one, its own
    frozen layers are listed.
    """
    paths = []
    for layer in model.layers:
        path = prefix + layer.name
        if not layer.weights:
            continue
        if not layer.trainable:
            paths.append(path)
        elif isinstance(layer, keras.Model):
            paths.extend(frozen_layers(layer, prefix=path + "/"))
    return paths


def freeze(model, paths):
    """Set the layers of `model` at `paths` (see `frozen_layers`) untrainable.

    A backbone whose every layer with weights is then frozen reports
    `model.backbone.trainable == False`, as it did when it was frozen.
    """
    for path in paths:
        layer = model
        try:
            for name in path.split("/"):
                layer = layer.get_layer(name)
        except ValueError:
            raise ValueError(
                f"`frozen_layers` names {path!r}, which is no layer of {model.name}. "
                f"Received: frozen_layers={list(paths)!r}"
            ) from None
        layer.trainable = False
    backbone = getattr(model, "backbone", None)  # the CNN baseline has none
    if paths and backbone is not None:
        weighted = [layer for layer in backbone.layers if layer.weights]
        if weighted and not any(layer.trainable for layer in weighted):
            backbone.trainable = False


def own_loss(model, loss):
    """`None` for `loss="auto"` (or `None`): a model computing its own loss takes no other."""
    if loss is None or (isinstance(loss, str) and loss == "auto"):
        return None
    raise ValueError(
        f"{type(model).__name__} computes its own loss (see its docstring), so `compile` "
        f"takes loss='auto' only. Received: loss={loss!r}"
    )


def backbone_arguments(cls):
    """The names of the arguments that build the backbone class `cls` (not its dtype or name)."""
    parameters = inspect.signature(cls.__init__).parameters.values()
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {p.name for p in parameters if p.kind in named} - {"self", "dtype", "name"}

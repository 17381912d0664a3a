"""What the CNN controls share: softmax probabilities, cross-entropy, the config round trip."""

import keras

from applications._classes import resolve_classes
from applications._defaults import dtype_policy
from applications._inputs import accept_any_image
from applications._inputs import converter_for
from applications._inputs import image_input
from applications._preset import PresetMixin
from applications._task import Task
from keras_capsules.utils import check_model_arguments


class SoftmaxClassifier(PresetMixin, Task, keras.Model):
    """A functional model from images to class probabilities, trained with cross-entropy.

    The images go through the `image_converter` (any size and colour to
    `input_shape`, pixels scaled) and the subclass's `network(x, policy)`,
    whose output a dense softmax layer, `"probabilities"`, turns into the
    class probabilities, one per class (`num_classes`, by default the number
    of `class_names`, which it keeps as the applications' capsule networks
    do). `config` holds the subclass's own arguments. It is
    compiled (unless `compile=False`) with `compile()`'s defaults: Adam with
    the class's `RECIPE` schedule, sparse categorical cross-entropy and
    accuracy.
    """

    def __init__(
        self,
        network,
        *,
        config,
        input_shape,
        num_classes=None,
        class_names=None,
        default_classes=10,
        image_converter=None,
        compile=True,
        dtype=None,
        name=None,
        **kwargs,
    ):
        check_model_arguments(self, kwargs)
        num_classes, class_names = resolve_classes(num_classes, class_names, default_classes)
        converter = converter_for(image_converter, input_shape)
        policy = dtype_policy(dtype)
        images = image_input(input_shape)
        x = network(converter(images), policy)
        probabilities = keras.layers.Dense(
            num_classes, activation="softmax", name="probabilities", dtype="float32"
        )(x)
        super().__init__(inputs=images, outputs=probabilities, name=name, **kwargs)
        accept_any_image(self)
        self._declare(policy, input_shape, converter, num_classes, class_names)
        self._config = {
            "input_shape": input_shape,
            "num_classes": num_classes,
            "class_names": None if class_names is None else list(class_names),
            **config,
            "dtype": policy.name,
        }
        if compile:
            self.compile()

    def _loss_for_compile(self, loss):
        if isinstance(loss, str) and loss == "auto":
            return "sparse_categorical_crossentropy"
        return loss

    def _head_layers(self):
        """The classes' own layers, which `from_preset` with new classes builds anew."""
        return [self.get_layer("probabilities")]

    def _architecture_config(self):
        return dict(self._config)

"""What the CNN controls share: softmax probabilities, cross-entropy, the config round trip."""

import keras

from applications._inputs import accept_any_image
from applications._task import Task
from keras_capsules._validation import check_model_arguments


class SoftmaxClassifier(Task, keras.Model):
    """A functional model from images to class probabilities, trained with cross-entropy.

    A subclass builds its graph from `images` to `probabilities` and hands
    both to `__init__` with its own config entries (which must hold
    `input_shape` and `num_classes`) and the arguments every such model
    takes: its `image_converter` (in the graph), the policy, whether to compile. It is compiled
    (unless `compile=False`) with `compile()`'s defaults: Adam with the
    class's `RECIPE` schedule, sparse categorical cross-entropy and accuracy.
    """

    def __init__(
        self,
        images,
        probabilities,
        *,
        config,
        policy,
        image_converter,
        compile,
        name,
        **kwargs,
    ):
        check_model_arguments(self, kwargs)
        super().__init__(inputs=images, outputs=probabilities, name=name, **kwargs)
        accept_any_image(self)
        self.dtype_policy = policy
        self._config = {
            **config,
            "dtype": policy.name,
        }
        self.image_shape = config["input_shape"]
        self.image_converter = image_converter
        self.num_classes = config["num_classes"]
        self.class_names = None
        if compile:
            self.compile()

    def _loss_for_compile(self, loss):
        if isinstance(loss, str) and loss == "auto":
            return "sparse_categorical_crossentropy"
        return loss

    def _architecture_config(self):
        return dict(self._config)

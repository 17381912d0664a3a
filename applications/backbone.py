import keras

from keras_capsules.utils import check_model_arguments


class Backbone(keras.Model):
    """The base of the architectures' backbones: a functional model from images to capsules.

    After keras-hub's `Backbone`: a family's backbone (`CapsNetBackbone`,
    `EfficientCapsNetBackbone`, `MatrixCapsNetBackbone`) builds its graph
    from `keras.Input(input_shape)` to its capsules and hands both to
    `__init__` with `config`, the constructor arguments that build it again
    (which must hold `input_shape`), and its dtype policy. The classifier of
    the family holds it as `model.backbone`.

    Args:
        inputs: the images, a `keras.Input`.
        outputs: the capsules the classifier's head reads.
        config: the subclass's constructor arguments, checked.
        policy: the dtype policy of the layers.
        name: the model's name.
        **kwargs: `keras.Model` arguments (`trainable`); any other is a
            `ValueError` naming it.

    Example:

    >>> import applications
    >>> backbone = applications.CapsNetBackbone(input_shape=(32, 32, 3), conv_filters=16)
    >>> isinstance(backbone, applications.Backbone), backbone.image_shape
    (True, (32, 32, 3))
    """

    def __init__(self, inputs, outputs, *, config, policy, name, **kwargs):
        check_model_arguments(self, kwargs)
        trainable = kwargs.pop("trainable", True)
        super().__init__(inputs=inputs, outputs=outputs, name=name, **kwargs)
        if not trainable:  # set once the layers are tracked, so that they are frozen too
            self.trainable = False
        self.dtype_policy = policy
        self.image_shape = config["input_shape"]
        self._config = {**config, "dtype": policy.name}

    @property
    def token_embedding(self):
        """`None`: keras-hub's `Backbone` attribute for text models; these read images."""
        return None

    def get_config(self):
        return {"name": self.name, "trainable": self.trainable, **self._config}

    @classmethod
    def from_config(cls, config):
        return cls(**config)

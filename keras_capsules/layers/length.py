import keras

from keras_capsules.layers._shapes import output_spec
from keras_capsules.ops import EPSILON
from keras_capsules.ops import length


@keras.saving.register_keras_serializable(package="keras_capsules")
class Length(keras.layers.Layer):
    """Length of each capsule: the probability that its entity is present.

    Args:
        epsilon: small positive float added to the squared length inside the
            square root, so that the gradient is finite at a zero capsule.
        **kwargs: base layer arguments such as `name` and `dtype`.

    Call arguments:
        inputs: capsules, shape `(batch, ..., capsule_dim)`.

    Returns:
        Lengths of shape `(batch, ...)`.

    Example:

    >>> import numpy as np
    >>> tuple(Length()(np.ones((2, 10, 16), "float32")).shape)
    (2, 10)

    Reference:
        Sabour, Frosst, Hinton. Dynamic Routing Between Capsules. NIPS 2017.
    """

    def __init__(self, epsilon=EPSILON, **kwargs):
        super().__init__(**kwargs)
        if not epsilon > 0:
            raise ValueError(f"`epsilon` must be positive. Received: epsilon={epsilon!r}")
        self.epsilon = float(epsilon)
        self.input_spec = keras.layers.InputSpec(min_ndim=2)

    def call(self, inputs):
        return length(inputs, axis=-1, epsilon=self.epsilon)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1])

    def compute_output_spec(self, inputs):
        return output_spec(self, inputs)

    def get_config(self):
        config = super().get_config()
        config["epsilon"] = self.epsilon
        return config

import keras
import numpy as np
from keras import ops

from keras_capsules import _positions
from keras_capsules import routing
from keras_capsules._validation import check_capsule_inputs
from keras_capsules.layers._em_capsule import EMCapsule
from keras_capsules.layers._shapes import input_shape
from keras_capsules.layers._shapes import output_spec


@keras.saving.register_keras_serializable(package="keras_capsules")
class ClassMatrixCapsule(EMCapsule):
    """Class capsules: every capsule of a grid votes for each class, with coordinate addition.

    A child of type `i` at any position votes for class `j` with
    `V = M @ W[i, j]`; `W` is shared by all positions of a type. With
    coordinate addition (the default, as the paper) the scaled position of the
    child, `((row + 0.5) / height, (column + 0.5) / width)`, the centre of its
    cell in the grid, is added to the first two entries of the right-hand
    column of its vote, so that the class poses can know where their parts
    are. EM routing over all children (`keras_capsules.routing.em_routing`)
    gives each class a pose and an activation.

    Args:
        capsule_types: number of class capsules, one type per class.
        iterations: EM iterations, a positive integer (3).
        coordinate_addition: add the children's positions to their votes.
        inverse_temperature: final inverse temperature `lambda` of routing.
        variance_epsilon: floor of the routing variances.
        tempering: the E-step exponent `tau`, `R ∝ (a p) ** tau`: a positive
            number (0.1) or one per E-step. 1 is the paper's E-step.
        inverse_temperature_schedule: `"rescaled"` (default) or `"authors"`,
            see `keras_capsules.routing.inverse_temperatures`.
        kernel_initializer: initializer of `W`, shape
            `(input_types, capsule_types, 4, 4)`. Default: truncated normal with
            standard deviation 0.5.
        kernel_regularizer: optional regularizer of `W`.
        em_settings: `iterations`, `inverse_temperature`, `variance_epsilon`,
            `tempering` and `inverse_temperature_schedule` as one
            `keras_capsules.routing.EMSettings`, which the layer then holds
            (those arguments keep their defaults).
        **kwargs: base layer arguments such as `name` and `dtype`.

    Call arguments:
        inputs: `(poses, activations)`: `(batch, height, width, input_types,
            16)` and `(batch, height, width, input_types)`.
        return_responsibilities: if `True`, also return `R` of the last
            E-step, `(batch, height, width, input_types, capsule_types)`,
            summing to 1 over classes.

    Returns:
        `(poses, activations)`: `(batch, capsule_types, 16)` and
        `(batch, capsule_types)`, activations in (0, 1).

    Example:

    >>> import numpy as np
    >>> layer = ClassMatrixCapsule(capsule_types=5)
    >>> poses, acts = layer((np.zeros((2, 4, 4, 16, 16), "float32"),
    ...                      np.ones((2, 4, 4, 16), "float32")))
    >>> tuple(poses.shape), tuple(acts.shape)
    ((2, 5, 16), (2, 5))

    Reference:
        Hinton, Sabour, Frosst. Matrix capsules with EM routing. ICLR 2018,
        section 2.1 (coordinate addition) and section 3 (class capsules).
    """

    def __init__(
        self,
        capsule_types=None,
        iterations=3,
        coordinate_addition=True,
        inverse_temperature=routing.INVERSE_TEMPERATURE,
        variance_epsilon=routing.VARIANCE_EPSILON,
        tempering=routing.TEMPERING,
        inverse_temperature_schedule="rescaled",
        kernel_initializer=None,
        kernel_regularizer=None,
        em_settings=None,
        **kwargs,
    ):
        settings = routing.EMSettings.resolve(
            em_settings,
            iterations=iterations,
            inverse_temperature=inverse_temperature,
            variance_epsilon=variance_epsilon,
            tempering=tempering,
            inverse_temperature_schedule=inverse_temperature_schedule,
        )
        super().__init__(
            capsule_types,
            settings,
            kernel_initializer,
            kernel_regularizer,
            **kwargs,
        )
        self.coordinate_addition = bool(coordinate_addition)

    def build(self, input_shape):
        poses_shape, _ = check_capsule_inputs(input_shape, self.name, spatial=True, known_grid=True)
        height, width, input_types = poses_shape[1], poses_shape[2], poses_shape[3]
        offsets = np.zeros((height, width, input_types, 16), "float32")
        if self.coordinate_addition:
            offsets[..., 3] = ((np.arange(height) + 0.5) / height)[:, None, None]
            offsets[..., 7] = ((np.arange(width) + 0.5) / width)[None, :, None]
        self._offsets = offsets.reshape(-1, 16)
        self.add_routing_weights(input_types)

    def call(self, inputs, return_responsibilities=False):
        poses, activations = inputs
        shape = ops.shape(poses)
        batch, height, width, types = shape[0], shape[1], shape[2], shape[3]
        num_inputs = height * width * types
        poses = ops.reshape(ops.cast(poses, "float32"), (batch, height * width, types, 4, 4))
        kernel = ops.cast(self.kernel, "float32")
        votes = ops.einsum("bpikl,ijlm->bjpikm", poses, kernel)
        votes = ops.reshape(votes, (batch, self.capsule_types, num_inputs, 16))
        if self.coordinate_addition:
            votes = votes + ops.convert_to_tensor(self._offsets)
        child_activations = ops.reshape(ops.cast(activations, "float32"), (batch, 1, num_inputs))
        out_poses, out_activations, resp = self.route(
            ops.expand_dims(votes, 1),
            child_activations,
            1.0 / self.capsule_types,
            _positions.normalize_over_outputs,
        )
        out_poses, out_activations = out_poses[:, 0], out_activations[:, 0]
        if not return_responsibilities:
            return out_poses, out_activations
        if resp is None:
            resp = ops.full(
                (batch, height, width, types, self.capsule_types), 1.0 / self.capsule_types
            )
        else:
            resp = ops.transpose(resp[:, 0], (0, 2, 1))
            resp = ops.reshape(resp, (batch, height, width, types, self.capsule_types))
        return out_poses, out_activations, resp

    def compute_output_shape(self, input_shape):
        poses_shape, _ = check_capsule_inputs(input_shape, self.name, spatial=True)
        batch = poses_shape[0]
        return (batch, self.capsule_types, 16), (batch, self.capsule_types)

    def compute_output_spec(self, inputs, return_responsibilities=False):
        # Keras hands `compute_output_shape` the shapes of tensors only (not of
        # arrays), and not `return_responsibilities`.
        spec = output_spec(self, inputs)
        if not return_responsibilities:
            return spec
        shape = input_shape(inputs)[0][:4] + (self.capsule_types,)
        return (*spec, keras.KerasTensor(shape, dtype="float32"))  # the routing's dtype

    def get_config(self):
        config = super().get_config()
        config["coordinate_addition"] = self.coordinate_addition
        return config

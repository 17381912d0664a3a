import keras
import numpy as np
from keras import ops

from keras_capsules import _positions
from keras_capsules import routing
from keras_capsules._em_route import largest_magnitude
from keras_capsules._validation import check_capsule_inputs
from keras_capsules._validation import check_choice
from keras_capsules._validation import check_positive_int
from keras_capsules.layers._em_capsule import EMCapsule
from keras_capsules.layers._shapes import input_shape
from keras_capsules.layers._shapes import output_spec


@keras.saving.register_keras_serializable(package="keras_capsules")
class MatrixCapsule(EMCapsule):
    """Convolutional matrix capsules with EM routing (ConvCaps1 / ConvCaps2 of the paper).

    Every output position reads a `kernel_size x kernel_size` patch of input
    capsules. A child of type `i` at kernel offset `k` votes for a parent of
    type `j` with `V = M @ W[k, i, j]`, its 4x4 pose times a learned 4x4
    matrix; the same `W` serves every position. EM routing
    (`keras_capsules.routing.em_routing`'s iterations) turns the votes into
    the parents' poses and activations. A child is read by the parents of
    several positions: by default its responsibilities `R` are normalised
    over all of them, types x positions, as Procedure 1's text says
    (normalising over the types of one position only is a common mistake);
    `normalization="positions"` normalises them per output type over the
    positions instead, as the authors' code does. The E-step is tempered
    (`tempering`, see `keras_capsules.routing.em_routing`). The votes are one
    batched product of the gathered patches with `W`: nothing is tiled.

    Args:
        capsule_types: number of output capsule types (C or D in the paper).
        kernel_size: side of the square kernel, a positive integer (3).
        strides: stride of the kernel, a positive integer.
        iterations: EM iterations, a positive integer (3).
        inverse_temperature: final inverse temperature `lambda` of routing.
        variance_epsilon: floor of the routing variances.
        tempering: the E-step exponent `tau`, `R ∝ (a p) ** tau`: a positive
            number (0.1) or one per E-step. 1 is the paper's E-step.
        normalization: which parents share a child's `R`:
            `"types_and_positions"` (default, the paper's text) or
            `"positions"` (per output type, the authors' code, where the
            first M-step gives every parent `R = 1 / capsule_types`); the
            class attribute `NORMALIZATIONS` lists them.
        inverse_temperature_schedule: `"rescaled"` (default) or `"authors"`,
            see `keras_capsules.routing.inverse_temperatures`.
        kernel_initializer: initializer of `W`, shape
            `(kernel_size * kernel_size * input_types, capsule_types, 4, 4)`.
            Default: truncated normal with standard deviation 0.5, so that
            votes have the scale of the poses.
        kernel_regularizer: optional regularizer of `W`.
        em_settings: `iterations`, `inverse_temperature`, `variance_epsilon`,
            `tempering` and `inverse_temperature_schedule` as one
            `keras_capsules.routing.EMSettings`, which the layer then holds
            (those arguments keep their defaults).
        **kwargs: base layer arguments such as `name` and `dtype`.

    Call arguments:
        inputs: `(poses, activations)`: poses `(batch, height, width,
            input_types, 16)` (flattened 4x4 matrices) and activations
            `(batch, height, width, input_types)`.
        return_responsibilities: if `True`, also return `R` of the last
            E-step, shape `(batch, out_h, out_w, kernel_size, kernel_size,
            input_types, capsule_types)`: `R[b, y, x, ky, kx, i, j]` is the
            share of the child at `(y * strides + ky, x * strides + kx, i)`
            given to parent `(y, x, j)`.

    Returns:
        `(poses, activations)`: `(batch, out_h, out_w, capsule_types, 16)` and
        `(batch, out_h, out_w, capsule_types)`, with `out_h = (height -
        kernel_size) // strides + 1` (valid padding).

    Example:

    >>> import numpy as np
    >>> layer = MatrixCapsule(capsule_types=16, kernel_size=3, strides=2)
    >>> poses, acts = layer((np.zeros((2, 14, 14, 8, 16), "float32"),
    ...                      np.ones((2, 14, 14, 8), "float32")))
    >>> tuple(poses.shape), tuple(acts.shape)
    ((2, 6, 6, 16, 16), (2, 6, 6, 16))

    Reference:
        Hinton, Sabour, Frosst. Matrix capsules with EM routing. ICLR 2018.
    """

    NORMALIZATIONS = _positions.NORMALIZATIONS

    def __init__(
        self,
        capsule_types,
        kernel_size=3,
        strides=1,
        iterations=3,
        inverse_temperature=routing.INVERSE_TEMPERATURE,
        variance_epsilon=routing.VARIANCE_EPSILON,
        tempering=routing.TEMPERING,
        normalization="types_and_positions",
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
        check_positive_int("kernel_size", kernel_size)
        check_positive_int("strides", strides)
        check_choice("normalization", normalization, _positions.NORMALIZATIONS)
        self.kernel_size = kernel_size
        self.strides = strides
        self.normalization = normalization

    def build(self, input_shape):
        poses_shape, _ = check_capsule_inputs(input_shape, self.name, spatial=True, known_grid=True)
        height, width, input_types = poses_shape[1], poses_shape[2], poses_shape[3]
        children, parents_of, counts, out_size = _positions.convolution_sites(
            height, width, self.kernel_size, self.strides
        )
        self._children = children
        self._parents_of = parents_of
        self._out_size = out_size
        patch = self.kernel_size * self.kernel_size
        # R of the first M-step: each child split evenly over all its parents,
        # or, per type, 1 / capsule_types for every parent (the authors' code).
        if self.normalization == "positions":
            initial = np.full(len(children), 1.0 / self.capsule_types)
        else:
            initial = 1.0 / (counts[children] * self.capsule_types)
        initial = np.repeat(initial.reshape(-1, patch, 1), input_types, axis=-1)
        self._initial = initial.reshape(1, -1, 1, patch * input_types).astype("float32")
        self.add_routing_weights(patch * input_types)

    def _patches(self, poses, activations):
        """Each site's patch of children: poses `(batch, sites, inputs, 4, 4)`, activations."""
        shape = ops.shape(poses)
        batch, height, width, types = shape[0], shape[1], shape[2], shape[3]
        sites = self._out_size[0] * self._out_size[1]
        num_inputs = self.kernel_size * self.kernel_size * types
        grid = ops.concatenate([poses, ops.expand_dims(activations, -1)], axis=-1)
        grid = ops.reshape(grid, (batch, height * width, types, 17))
        patches = ops.take(grid, self._children, axis=1)
        patches = ops.reshape(patches, (batch, sites, num_inputs, 17))
        # A split, not two slices: the gradient of a slice is a full-size tensor
        # of zeros around it (TensorFlow's StridedSliceGrad), one per slice.
        child_poses, child_activations = ops.split(patches, [16], axis=-1)
        child_poses = ops.reshape(child_poses, (batch, sites, num_inputs, 4, 4))
        return child_poses, ops.squeeze(child_activations, -1)

    def _votes(self, child_poses):
        """`votes[b, s, j, i] = pose[b, s, i] @ W[i, j]`, `(batch, sites, types, inputs, 16)`."""
        shape = ops.shape(child_poses)
        batch, sites, num_inputs = shape[0], shape[1], shape[2]
        kernel = ops.cast(self.kernel, "float32")
        # One (batch sites 4 x 4) @ (4 x types 4) product per input, then one
        # transpose to routing's layout.
        lhs = ops.reshape(
            ops.transpose(child_poses, (2, 0, 1, 3, 4)), (num_inputs, batch * sites * 4, 4)
        )
        rhs = ops.reshape(ops.transpose(kernel, (0, 2, 1, 3)), (num_inputs, 4, -1))
        votes = ops.reshape(
            ops.matmul(lhs, rhs), (num_inputs, batch, sites, 4, self.capsule_types, 4)
        )
        votes = ops.transpose(votes, (1, 2, 4, 0, 3, 5))
        return ops.reshape(votes, (batch, sites, self.capsule_types, num_inputs, 16))

    def _vote_reference(self, child_poses):
        """The mean of each parent's votes, `(batch, sites, types, 16)`, without the votes.

        `mean_i pose[b, s, i] @ W[i, j]` as one product that sums over the inputs
        (and the rows of W) as it goes, so routing need not read the votes for it.
        The poses enter as they are laid out, against W spread over an identity
        (`M[i, k, l, k', j, m] = [k = k'] W[i, j, l, m] / inputs`, the size of W
        times 16), so that no copy of the poses is made. W is divided first, so
        that no partial sum exceeds the largest vote.
        """
        shape = ops.shape(child_poses)
        batch, sites, num_inputs = shape[0], shape[1], shape[2]
        kernel = ops.cast(self.kernel, "float32") / num_inputs  # (i, j, l, m)
        kernel = ops.transpose(kernel, (0, 2, 1, 3))  # (i, l, j, m)
        # A constant, not `ops.eye`: TensorFlow's `MatrixDiagV3` has no OpenVINO conversion.
        eye = ops.convert_to_tensor(np.eye(4, dtype="float32").reshape(1, 4, 1, 4, 1, 1))
        spread = eye * ops.expand_dims(ops.expand_dims(kernel, 1), 3)  # (i, k, l, k', j, m)
        spread = ops.reshape(spread, (num_inputs * 16, 16 * self.capsule_types))
        lhs = ops.reshape(child_poses, (batch * sites, num_inputs * 16))
        mean = ops.reshape(ops.matmul(lhs, spread), (batch, sites, 4, self.capsule_types, 4))
        return ops.reshape(
            ops.transpose(mean, (0, 1, 3, 2, 4)), (batch, sites, self.capsule_types, 16)
        )

    def _vote_bound(self, poses):
        """At least the largest `|vote|` of each example, `(batch,)`, without the votes.

        Each entry of `pose @ W` sums four products: at most 4 max|pose| max|W|.
        """
        largest_weight = ops.max(ops.abs(ops.cast(self.kernel, "float32")))
        return 4.0 * largest_magnitude(poses) * largest_weight

    def call(self, inputs, return_responsibilities=False):
        poses, activations = (ops.cast(x, "float32") for x in inputs)
        batch, types = ops.shape(poses)[0], ops.shape(poses)[3]
        out_h, out_w = self._out_size
        k = self.kernel_size
        child_poses, child_activations = self._patches(poses, activations)
        votes = self._votes(child_poses)
        shape = (batch, out_h * out_w, self.capsule_types, k * k * types)

        def log_normalize(logits):
            logits = ops.reshape(logits, (batch, out_h * out_w, self.capsule_types, k * k, types))
            log_r = _positions.normalize_over_positions(
                logits, self._children, self._parents_of, self.normalization
            )
            return ops.reshape(log_r, shape)

        initial = ops.convert_to_tensor(self._initial)
        out_poses, out_activations, resp = self.route(
            votes,
            child_activations,
            initial,
            log_normalize,
            reference=self._vote_reference(child_poses),
            vote_bound=self._vote_bound(poses),
        )
        out_poses = ops.reshape(out_poses, (batch, out_h, out_w, self.capsule_types, 16))
        out_activations = ops.reshape(out_activations, (batch, out_h, out_w, self.capsule_types))
        if not return_responsibilities:
            return out_poses, out_activations
        if resp is None:
            resp = ops.broadcast_to(initial, shape)
        resp = ops.reshape(resp, (batch, out_h, out_w, self.capsule_types, k, k, types))
        return out_poses, out_activations, ops.transpose(resp, (0, 1, 2, 4, 5, 6, 3))

    def compute_output_shape(self, input_shape):
        poses_shape, _ = check_capsule_inputs(input_shape, self.name, spatial=True)
        batch, height, width = poses_shape[0], poses_shape[1], poses_shape[2]
        out_h = None if height is None else (height - self.kernel_size) // self.strides + 1
        out_w = None if width is None else (width - self.kernel_size) // self.strides + 1
        return (
            (batch, out_h, out_w, self.capsule_types, 16),
            (batch, out_h, out_w, self.capsule_types),
        )

    def compute_output_spec(self, inputs, return_responsibilities=False):
        # Keras hands `compute_output_shape` the shapes of tensors only (not of
        # arrays), and not `return_responsibilities`.
        spec = output_spec(self, inputs)
        if not return_responsibilities:
            return spec
        batch, out_h, out_w = spec[0].shape[:3]
        types = input_shape(inputs)[0][3]
        k = self.kernel_size
        shape = (batch, out_h, out_w, k, k, types, self.capsule_types)
        return (*spec, keras.KerasTensor(shape, dtype="float32"))  # the routing's dtype

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "kernel_size": self.kernel_size,
                "strides": self.strides,
                "normalization": self.normalization,
            }
        )
        return config

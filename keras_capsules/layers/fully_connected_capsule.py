import keras
from keras import ops

from keras_capsules._contract import uniform_coupling
from keras_capsules._validation import check_positive_int


@keras.saving.register_keras_serializable(package="keras_capsules")
class FullyConnectedCapsule(keras.layers.Layer):
    """Base of fully connected capsule layers: every child votes for every parent.

    Every input capsule `u_i` predicts every output capsule through its own
    transformation matrix, `u_hat[j|i] = W[i, j] @ u_i` (the layer's
    `kernel`, computed as one batched matrix product, no tiling), and a
    routing combines the votes into the output capsules. A subclass supplies
    the routing by overriding `route`; it follows the contract of
    `keras_capsules.routing`, so any of its functions can serve. This class
    checks the arguments and input shapes, builds the kernel, returns the
    coupling on request and writes the config. `CapsuleLayer`,
    `InvertedDotProductCapsule` and `SelfAttentionCapsule` are its
    subclasses.

    Methods a subclass overrides:

    - `route(votes)` (required): takes the votes laid out `(batch,
      capsule_types, num_inputs, capsule_dim)` and returns `(outputs,
      coupling)`: the output capsules `(batch, capsule_types, capsule_dim)`
      and the coupling of every child with every parent, `(batch,
      capsule_types, num_inputs)`, or `None` for uniform coupling.
    - `build_routing(num_inputs, input_dim)` (optional): adds the routing's
      own weights, after the kernel.
    - `kernel_shape(num_inputs, input_dim)` and `votes(inputs)` (optional):
      another form of the transformation.

    Args:
        capsule_types: number of output capsules, each a type of its own.
        capsule_dim: dimensions of each output capsule.
        kernel_initializer: initializer of `W`.
        kernel_regularizer: optional regularizer of `W`.
        **kwargs: base layer arguments such as `name` and `dtype`.

    Call arguments:
        inputs: input capsules, shape `(batch, num_inputs, input_dim)`.
        return_coupling: if `True`, return `(outputs, coupling)`, `coupling`
            shaped `(batch, num_inputs, capsule_types)`: each child's share
            of each parent.

    Returns:
        Output capsules of shape `(batch, capsule_types, capsule_dim)`.

    Example:

    A layer whose parents are the plain means of their votes (uniform
    coupling):

    >>> import numpy as np
    >>> from keras import ops
    >>> class MeanCapsule(FullyConnectedCapsule):
    ...     def route(self, votes):
    ...         return ops.mean(votes, axis=2), None
    >>> layer = MeanCapsule(capsule_types=10, capsule_dim=16)
    >>> outputs, coupling = layer(np.ones((4, 32, 8), "float32"), return_coupling=True)
    >>> tuple(outputs.shape), tuple(coupling.shape)
    ((4, 10, 16), (4, 32, 10))
    >>> round(float(coupling[0, 0, 0]), 6)
    0.1

    Reference:
        Sabour, Frosst, Hinton. Dynamic Routing Between Capsules. NIPS 2017.
    """

    def __init__(
        self,
        capsule_types=None,
        capsule_dim=None,
        kernel_initializer="glorot_uniform",
        kernel_regularizer=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_positive_int("capsule_types", capsule_types)
        check_positive_int("capsule_dim", capsule_dim)
        self.capsule_types = capsule_types
        self.capsule_dim = capsule_dim
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.input_spec = keras.layers.InputSpec(ndim=3)

    def route(self, votes):
        """The routing: `(outputs, coupling)` from votes `(batch, types, inputs, dim)`."""
        raise NotImplementedError(f"{type(self).__name__} must implement `route(votes)`.")

    def kernel_shape(self, num_inputs, input_dim):
        """The shape of `W`: one `input_dim x capsule_types * capsule_dim` matrix per child.

        A two-dimensional shape, `(input_dim, capsule_types * capsule_dim)`,
        shares one `W` among all children, and the layer then takes any
        number of them.
        """
        return (num_inputs, input_dim, self.capsule_types * self.capsule_dim)

    def build_routing(self, num_inputs, input_dim):
        """Add the routing's own weights (none by default)."""

    def build(self, input_shape):
        shape = tuple(input_shape)
        if len(shape) != 3 or shape[2] is None:
            raise ValueError(
                f"{type(self).__name__} expects inputs of shape (batch, num_inputs, input_dim) "
                f"with a known input_dim. Received: input_shape={input_shape}"
            )
        num_inputs, input_dim = shape[1], shape[2]
        kernel_shape = tuple(self.kernel_shape(num_inputs, input_dim))
        if None in kernel_shape:
            raise ValueError(
                f"{type(self).__name__} expects inputs of shape (batch, num_inputs, input_dim) "
                f"with a known num_inputs. Received: input_shape={input_shape}"
            )
        self.kernel = self.add_weight(
            name="kernel",
            shape=kernel_shape,
            initializer=self.kernel_initializer,
            regularizer=self.kernel_regularizer,
        )
        self.build_routing(num_inputs, input_dim)
        shared = len(kernel_shape) == 2
        axes = {-1: input_dim} if shared else {1: num_inputs, -1: input_dim}
        self.input_spec = keras.layers.InputSpec(ndim=3, axes=axes)

    def votes(self, inputs):
        """The votes `u_hat[j|i] = W[i, j] @ u_i`: `(batch, capsule_types, num_inputs, dim)`."""
        inputs = ops.cast(inputs, self.compute_dtype)
        kernel = ops.cast(self.kernel, self.compute_dtype)
        batch, num_inputs = ops.shape(inputs)[0], ops.shape(inputs)[1]
        # One (batch x input_dim) @ (input_dim x types * dim) product per child.
        flat = ops.matmul(ops.transpose(inputs, (1, 0, 2)), kernel)
        votes = ops.reshape(flat, (num_inputs, batch, self.capsule_types, self.capsule_dim))
        return ops.transpose(votes, (1, 2, 0, 3))

    def call(self, inputs, return_coupling=False):
        votes = self.votes(inputs)
        outputs, coupling = self.route(votes)
        if not return_coupling:
            return outputs
        if coupling is None:
            coupling = uniform_coupling(votes)
        return outputs, ops.cast(ops.transpose(coupling, (0, 2, 1)), ops.dtype(outputs))

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.capsule_types, self.capsule_dim)

    def compute_output_spec(self, inputs, return_coupling=False):
        # Keras hands `compute_output_shape` the shapes only: the coupling of a
        # symbolic call needs `return_coupling`.
        outputs = keras.KerasTensor(self.compute_output_shape(inputs.shape), self.compute_dtype)
        if not return_coupling:
            return outputs
        shape = (inputs.shape[0], inputs.shape[1], self.capsule_types)
        return outputs, keras.KerasTensor(shape, self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "capsule_types": self.capsule_types,
                "capsule_dim": self.capsule_dim,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "kernel_regularizer": keras.regularizers.serialize(self.kernel_regularizer),
            }
        )
        return config

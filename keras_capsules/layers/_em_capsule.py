"""What `MatrixCapsule` and `ClassMatrixCapsule` share: EM settings, weights, routing, config."""

import keras
from keras import ops

from keras_capsules._em_route import em_route
from keras_capsules._validation import check_positive_int


class EMCapsule(keras.layers.Layer):
    """A layer of matrix capsules whose votes are routed by EM routing.

    It holds the routing's settings as one `EMSettings`, `settings` (checked
    once, by whoever made it, and shared by all the layers of a model; read
    back through `iterations`, `tempering` and the others), creates the
    layer's 4x4 transformation matrices `kernel` and the per-type `beta_v` and
    `beta_a`, routes votes with them and writes the config. A subclass
    computes the votes, says how a child's responsibilities are normalised
    and shapes the outputs.
    """

    def __init__(
        self,
        capsule_types,
        settings,
        kernel_initializer,
        kernel_regularizer,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_positive_int("capsule_types", capsule_types)
        self.capsule_types = capsule_types
        self.settings = settings
        if kernel_initializer is None:  # votes of the poses' scale
            kernel_initializer = keras.initializers.TruncatedNormal(stddev=0.5)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)

    @property
    def iterations(self):
        return self.settings.iterations

    @property
    def inverse_temperature(self):
        return self.settings.inverse_temperature

    @property
    def variance_epsilon(self):
        return self.settings.variance_epsilon

    @property
    def tempering(self):
        return self.settings.get_config()["tempering"]

    @property
    def inverse_temperature_schedule(self):
        return self.settings.inverse_temperature_schedule

    def add_routing_weights(self, num_input_types):
        """`kernel`, one 4x4 matrix per input type (or kernel offset and type) and output type."""
        self.kernel = self.add_weight(
            name="kernel",
            shape=(num_input_types, self.capsule_types, 4, 4),
            initializer=self.kernel_initializer,
            regularizer=self.kernel_regularizer,
        )
        self.beta_v = self.add_weight(
            name="beta_v", shape=(self.capsule_types,), initializer="zeros"
        )
        self.beta_a = self.add_weight(
            name="beta_a", shape=(self.capsule_types,), initializer="zeros"
        )

    def route(
        self,
        votes,
        activations,
        initial_responsibility,
        log_normalize,
        reference=None,
        vote_bound=None,
    ):
        """EM routing of votes `(batch, sites, capsule_types, inputs, 16)`.

        `reference` and `vote_bound`, if the layer forms them from its smaller
        tensors, spare routing its passes over the votes (see `em_route`).
        Returns the poses and activations in the layer's compute dtype, and
        `R` of the last E-step (`None` after a single iteration).
        """
        poses, acts, resp = em_route(
            votes,
            activations,
            self.beta_v,
            self.beta_a,
            self.settings,
            initial_responsibility=initial_responsibility,
            log_normalize=log_normalize,
            reference=reference,
            vote_bound=vote_bound,
        )
        return ops.cast(poses, self.compute_dtype), ops.cast(acts, self.compute_dtype), resp

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "capsule_types": self.capsule_types,
                **self.settings.get_config(),
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "kernel_regularizer": keras.regularizers.serialize(self.kernel_regularizer),
            }
        )
        return config

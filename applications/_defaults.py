"""What the applications share: the dtype policy they resolve and their default optimizer."""

import keras


def dtype_policy(dtype):
    """The policy of an application's layers: `dtype` if given, else the global policy."""
    return keras.dtype_policies.get(dtype or keras.mixed_precision.dtype_policy())


def default_optimizer(learning_rate, decay_steps, decay_rate):
    """Adam with an exponentially decaying learning rate, as Sabour et al. 2017 train."""
    return keras.optimizers.Adam(
        keras.optimizers.schedules.ExponentialDecay(
            learning_rate, decay_steps=decay_steps, decay_rate=decay_rate
        )
    )

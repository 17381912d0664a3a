"""What the applications share: the dtype policy they resolve."""

import warnings

import keras

from keras_capsules.utils import BFLOAT16_CPU_FLAGS
from keras_capsules.utils import has_accelerator
from keras_capsules.utils import native_bfloat16


def dtype_policy(dtype):
    """The policy of an application's layers: `dtype` if given, else the global policy.

    A bfloat16 policy on a CPU without native bfloat16 and no accelerator warns
    once: there the convolutions' bfloat16 gradients train about 10x slower
    than float32.
    """
    policy = keras.dtype_policies.get(dtype or keras.mixed_precision.dtype_policy())
    if policy.compute_dtype == "bfloat16":
        _warn_if_bfloat16_is_emulated(policy.name)
    return policy


_warned = []


def _warn_if_bfloat16_is_emulated(name):
    if _warned or native_bfloat16() is not False:  # native, or unknown: no guess
        return
    if has_accelerator():
        return
    _warned.append(name)
    warnings.warn(
        f"The dtype policy {name!r} computes in bfloat16, which this CPU has no instructions "
        f"for ({' or '.join(BFLOAT16_CPU_FLAGS)}): it is emulated, and training runs about 10x "
        "slower than in float32. Use float32 on this machine.",
        stacklevel=3,
    )

"""What the applications share: the dtype policy they resolve."""

import functools
import warnings

import keras

from keras_capsules.utils import has_accelerator

_BFLOAT16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
"""CPU features that compute bfloat16 natively; without them it is emulated, slowly."""


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


@functools.lru_cache(maxsize=1)
def cpu_flags():
    """The CPU's feature flags from `/proc/cpuinfo` (Linux); empty where unreadable."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


_warned = []


def _warn_if_bfloat16_is_emulated(name):
    flags = cpu_flags()
    if _warned or not flags or any(f in flags for f in _BFLOAT16_CPU_FLAGS):
        return
    if has_accelerator():
        return
    _warned.append(name)
    warnings.warn(
        f"The dtype policy {name!r} computes in bfloat16, which this CPU has no instructions "
        f"for ({' or '.join(_BFLOAT16_CPU_FLAGS)}): it is emulated, and training runs about 10x "
        "slower than in float32. Use float32 on this machine.",
        stacklevel=3,
    )

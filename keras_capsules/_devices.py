"""What the backend computes on: an accelerator, the CPU's features, the host's free memory."""

import functools

BFLOAT16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
"""CPU features (as Linux's /proc/cpuinfo names them) that compute bfloat16 natively."""


def has_accelerator():
    """Whether the backend sees a GPU or TPU (it then computes there, not on the CPU)."""
    import keras

    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return bool(
            tf.config.list_physical_devices("GPU") or tf.config.list_physical_devices("TPU")
        )
    if backend == "jax":
        import jax

        return jax.default_backend() != "cpu"
    if backend == "torch":
        import torch

        return torch.cuda.is_available()
    return False


@functools.lru_cache(maxsize=1)
def cpu_flags():
    """The CPU's feature flags from `/proc/cpuinfo` (Linux); empty where it cannot be read."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


def native_bfloat16():
    """Whether the CPU computes bfloat16 natively: one of `BFLOAT16_CPU_FLAGS`.

    Without those instructions bfloat16 is emulated, and training in
    `mixed_bfloat16` on the CPU runs several times slower than in float32.

    Returns:
        `True` or `False`; `None` where the CPU's features cannot be read
        (outside Linux).

    Example:

    >>> from keras_capsules.utils import native_bfloat16
    >>> native_bfloat16() in (True, False, None)
    True
    """
    flags = cpu_flags()
    if not flags:
        return None
    return bool(flags & set(BFLOAT16_CPU_FLAGS))


def available_memory():
    """The bytes of memory the host can give a new allocation (Linux's `MemAvailable`), or None."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None

"""What the backend computes on: whether an accelerator is there, and the host's free memory."""


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

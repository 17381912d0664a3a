"""What the experiments share: a wall-clock budget for `fit`, the device name, logging.

Importing this module (before Keras) also puts the repository root on `sys.path`, so the
experiments run from a checkout without installing it, defaults the backend to TensorFlow
with its C++ logs quietened, and calls `keras_capsules.use_pooled_cpu_allocator()` for
every model and baseline (unless `TF_CPU_ALLOCATOR_USE_BFC` is set already).
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
for _name, _value in (("KERAS_BACKEND", "tensorflow"), ("TF_CPP_MIN_LOG_LEVEL", "2")):
    os.environ.setdefault(_name, _value)

import keras_capsules  # noqa: E402  (imports neither Keras nor TensorFlow)

if "TF_CPU_ALLOCATOR_USE_BFC" not in os.environ:
    keras_capsules.use_pooled_cpu_allocator()


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def budget_callback(seconds, max_steps=None, log_every=100):
    """A callback that stops `fit` after `seconds` of wall time or `max_steps` steps.

    It logs the training logs every `log_every` steps; `steps` and `seconds`
    hold what it counted.
    """
    import keras

    class Budget(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.steps = 0
            self.start = None
            self.seconds = 0.0

        def on_train_begin(self, logs=None):
            self.start = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            self.steps += 1
            self.seconds = time.perf_counter() - self.start
            if self.steps % log_every == 0:
                shown = {k: round(float(v), 4) for k, v in (logs or {}).items()}
                log(f"step {self.steps} ({self.seconds:.0f} s): {shown}")
            if self.seconds >= seconds or (max_steps is not None and self.steps >= max_steps):
                self.model.stop_training = True

    return Budget()


def device():
    """The accelerator Keras runs on, in words, or `"cpu"`."""
    import keras

    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        gpus = tf.config.list_physical_devices("GPU")
        if gpus:
            return tf.config.experimental.get_device_details(gpus[0]).get("device_name", "GPU")
    elif keras.backend.backend() == "jax":
        import jax

        return str(jax.devices()[0])
    return "cpu"

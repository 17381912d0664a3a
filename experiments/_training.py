"""What the training benchmarks share: a wall-clock budget for `fit`, the device name, logging."""

import sys
import time


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

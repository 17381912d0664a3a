"""What the experiments share: a wall-clock budget for `fit`, the device name, logging.

Importing this module (before Keras) also puts the repository root on `sys.path`, so the
experiments run from a checkout without installing it, defaults the backend to TensorFlow
with its C++ logs quietened, and imports `keras_capsules`, which chooses TensorFlow's CPU
allocator for every model and baseline alike (`keras_capsules.use_pooled_cpu_allocator`).
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
for _name, _value in (("KERAS_BACKEND", "tensorflow"), ("TF_CPP_MIN_LOG_LEVEL", "2")):
    os.environ.setdefault(_name, _value)

import keras_capsules  # noqa: E402, F401  (imports neither Keras nor TensorFlow)


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def budget_callback(seconds, max_steps=None, log_every=100):
    """A callback that stops `fit` after `seconds` of wall time or `max_steps` steps.

    It logs the training logs every `log_every` steps; `steps` and `seconds`
    hold what it counted. With several steps per call of the compiled step
    (`steps_per_execution`), it stops and logs at the end of the call that
    reaches those counts.
    """
    import keras

    from keras_capsules._steps import steps_run

    class Budget(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.steps = 0
            self.start = None
            self.seconds = 0.0
            self._begin = 0

        def on_train_begin(self, logs=None):
            self.start = time.perf_counter()

        def on_train_batch_begin(self, batch, logs=None):
            self._begin = batch

        def on_train_batch_end(self, batch, logs=None):
            before = self.steps
            self.steps += steps_run(self, self._begin, batch)
            self.seconds = time.perf_counter() - self.start
            if self.steps // log_every > before // log_every:
                shown = {k: round(float(v), 4) for k, v in (logs or {}).items()}
                log(f"step {self.steps} ({self.seconds:.0f} s): {shown}")
            if self.seconds >= seconds or (max_steps is not None and self.steps >= max_steps):
                self.model.stop_training = True

    return Budget()


def one_step_per_call(model):
    """Compile `model` again as it is compiled, with one training step per call.

    The applications compile themselves with several steps per call, and a
    callback sees only the last step of each; an experiment whose callbacks
    act at exact steps runs one step per call.
    """
    from keras_capsules._compile import compile_again

    return compile_again(model, steps_per_execution=1)


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

        gpus = [each for each in jax.devices() if each.platform != "cpu"]
        if gpus:
            return gpus[0].device_kind
    elif keras.backend.backend() == "torch":
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_name(0)
    return "cpu"

"""Train CapsNetMNIST a few steps on one device and data-parallel on two; print JSON.

Run as `python -m tests._data_parallel_run` with KERAS_BACKEND set; the CPU is
split into two devices first (TensorFlow logical devices, or the XLA host
device count for JAX), so the split must happen before the backend starts.
"""

import json
import os

BACKEND = os.environ.get("KERAS_BACKEND", "tensorflow")
if BACKEND == "jax":
    # Added to the flags the suite sets (tests/conftest.py).
    os.environ["XLA_FLAGS"] = " ".join(
        [os.environ.get("XLA_FLAGS", ""), "--xla_force_host_platform_device_count=2"]
    ).strip()
else:
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

import keras  # noqa: E402
import numpy as np  # noqa: E402

import applications  # noqa: E402
from keras_capsules._compile import compile_again  # noqa: E402
from keras_capsules.datasets import mnist  # noqa: E402
from keras_capsules.distribute import data_parallel  # noqa: E402

SMALL = dict(conv_filters=16, primary_capsule_types=4, capsule_dim=8, decoder_units=(32,))
STEPS, BATCH = 4, 16


class StepLosses(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.losses = []

    def on_train_batch_end(self, batch, logs=None):
        self.losses.append(float(logs["loss"]))


def train(model, x, y):
    compile_again(model, steps_per_execution=1)  # the callback sees every step
    record = StepLosses()
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0, callbacks=[record])
    return record.losses, model.get_weights()


def main():
    keras.utils.set_random_seed(0)
    (x, y), _ = mnist.load_data()
    x, y = x[: STEPS * BATCH, ..., None].astype("float32"), y[: STEPS * BATCH]
    model = applications.CapsNetMNIST(**SMALL)
    initial = model.get_weights()
    single_losses, single_weights = train(model, x, y)

    if BACKEND == "jax":
        import jax

        devices = jax.devices()
    else:
        devices = ["/cpu:0", "/cpu:1"]
    with data_parallel(devices=devices) as engine:
        replicas = getattr(engine, "num_replicas_in_sync", None) or len(devices)
        model = applications.CapsNetMNIST(**SMALL)
        model.set_weights(initial)
        losses, weights = train(model, x, y)
        margin = model.evaluate(x, y, batch_size=BATCH, verbose=0, return_dict=True)
    print(
        json.dumps(
            {
                "replicas": int(replicas),
                "single_losses": single_losses,
                "distributed_losses": losses,
                "max_weight_difference": max(
                    float(np.abs(a - b).max()) for a, b in zip(single_weights, weights)
                ),
                "max_weight_change": max(
                    float(np.abs(a - b).max()) for a, b in zip(single_weights, initial)
                ),
                "distributed_evaluate": {k: float(v) for k, v in margin.items()},
            }
        )
    )


if __name__ == "__main__":
    main()

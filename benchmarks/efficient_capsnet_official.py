"""EfficientCapsNet against the official Efficient-CapsNet graph: training speed and peak memory.

Two measurements on the MNIST training images (`keras_capsules.datasets`,
the first `--train-size`), each in its own process (so that the peak
resident set size, `ru_maxrss`, is its own), trained with `fit` at `--batch`
on the in-memory arrays, shuffled, without augmentation:

* "ours": `applications.EfficientCapsNet()` as it compiles itself, fed the
  uint8 images and integer labels, as a user does;
* "official": the graph of the authors' code (github.com/EscVM/Efficient-CapsNet,
  `models/efficient_capsnet_graph_mnist.py` and `utils/layers.py`, mode
  "train") written out with `keras.ops`: the same convolutions and batch
  normalisation, `PrimaryCaps` as a grouped `Conv2D`, `FCCaps`, `Length`,
  `Mask` and the generator (512, 1024, 784), compiled as its `train` does
  (Adam 5e-4, the margin loss plus 0.392 times the mean squared error),
  fed the images as its `pre_process` makes them (float32 / 256, one-hot
  labels).

Each child reports its training images/s over `--steps` batches after
`--warmup` (tracing included there), its peak RSS, and the RSS at each
stage: after importing Keras, after loading the data, after building and
compiling the model, and after training (`stages_mb`), to say where memory
goes. `--onednn both` (the default on TensorFlow) measures both with
TensorFlow's oneDNN kernels turned off (`TF_ENABLE_ONEDNN_OPTS=0`, the path
of most AVX2 CPUs) and on (`=1`), in one run; `--repeats N` alternates the
measurements N times and reports medians and the median of the per-repeat
ratios.

    python benchmarks/efficient_capsnet_official.py --repeats 3 > efficient_capsnet_official.json
    python benchmarks/efficient_capsnet_official.py --train-size 64 --steps 2 --warmup 1  # smoke
"""

import argparse
import json
import os
import resource
import statistics
import sys
import time

from _child import add_onednn_argument
from _child import cpu_class
from _child import cpu_model
from _child import onednn_enabled
from _child import onednn_paths
from _child import run_command

MEASUREMENTS = ("ours", "official")


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=16, help="batch size (16, the paper's)")
    p.add_argument("--steps", type=int, default=200, help="timed training batches (200)")
    p.add_argument("--warmup", type=int, default=20, help="untimed batches first (20)")
    p.add_argument("--train-size", type=int, default=60000, help="MNIST images held (60000)")
    p.add_argument("--repeats", type=int, default=1, help="alternated runs; medians (1)")
    add_onednn_argument(p)
    p.add_argument("--only", choices=MEASUREMENTS, default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def _rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def official_model(input_shape=(28, 28, 1), num_classes=10):
    """The official code's training graph, `build_graph(input_shape, "train")`, in `keras.ops`."""
    import keras
    import numpy as np
    from keras import ops

    eps = 10e-21

    def squash(s):
        n = ops.sqrt(ops.sum(ops.square(s), axis=-1, keepdims=True))
        return (1 - 1 / (ops.exp(n) + eps)) * (s / (n + eps))

    class PrimaryCaps(keras.layers.Layer):
        def __init__(self, F, K, N, D, s=1, **kwargs):
            super().__init__(**kwargs)
            self.N, self.D = N, D
            self.dw_conv = keras.layers.Conv2D(F, K, s, groups=F, padding="valid")

        def call(self, inputs):
            return squash(ops.reshape(self.dw_conv(inputs), (-1, self.N, self.D)))

    class FCCaps(keras.layers.Layer):
        def __init__(self, N, D, **kwargs):
            super().__init__(**kwargs)
            self.N, self.D = N, D

        def build(self, input_shape):
            input_n, input_d = input_shape[-2], input_shape[-1]
            self.W = self.add_weight(
                shape=(self.N, input_n, input_d, self.D), initializer="he_normal", name="W"
            )
            self.b = self.add_weight(shape=(self.N, input_n, 1), initializer="zeros", name="b")

        def call(self, inputs):
            u = ops.einsum("...ji,kjiz->...kjz", inputs, self.W)
            c = ops.einsum("...ij,...kj->...i", u, u)[..., None]
            c = c / ops.sqrt(ops.cast(self.D, "float32"))
            c = ops.softmax(c, axis=1)
            c = c + self.b
            return squash(ops.sum(u * c, axis=-2))

    class Length(keras.layers.Layer):
        def call(self, inputs):
            return ops.sqrt(ops.sum(ops.square(inputs), -1) + keras.backend.epsilon())

    class Mask(keras.layers.Layer):
        def call(self, inputs):
            inputs, mask = inputs
            masked = inputs * ops.expand_dims(mask, -1)
            return ops.reshape(masked, (-1, masked.shape[1] * masked.shape[2]))

    inputs = keras.Input(input_shape)
    x = inputs
    for filters, kernel, stride in ((32, 5, 1), (64, 3, 1), (64, 3, 1), (128, 3, 2)):
        x = keras.layers.Conv2D(
            filters, kernel, stride, activation="relu", kernel_initializer="he_normal"
        )(x)
        x = keras.layers.BatchNormalization()(x)
    x = PrimaryCaps(128, 9, 16, 8)(x)
    digit_caps = FCCaps(num_classes, 16)(x)
    lengths = Length(name="length_capsnet_output")(digit_caps)
    efficient_capsnet = keras.Model(inputs, [digit_caps, lengths], name="Efficient_CapsNet")

    generator_inputs = keras.Input((16 * num_classes,))
    g = keras.layers.Dense(512, activation="relu", kernel_initializer="he_normal")(generator_inputs)
    g = keras.layers.Dense(1024, activation="relu", kernel_initializer="he_normal")(g)
    g = keras.layers.Dense(
        int(np.prod(input_shape)), activation="sigmoid", kernel_initializer="glorot_normal"
    )(g)
    g = keras.layers.Reshape(input_shape, name="out_generator")(g)
    generator = keras.Model(generator_inputs, g, name="Generator")

    images = keras.Input(input_shape)
    y_true = keras.Input((num_classes,))
    digit_caps, lengths = efficient_capsnet(images)
    reconstruction = generator(Mask()([digit_caps, y_true]))
    model = keras.Model([images, y_true], [lengths, reconstruction], name="Generator_train")

    def margin_loss(y_true, y_pred):
        loss = y_true * ops.square(ops.maximum(0.0, 0.9 - y_pred)) + 0.5 * (
            1 - y_true
        ) * ops.square(ops.maximum(0.0, y_pred - 0.1))
        return ops.mean(ops.sum(loss, axis=1))

    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate=5e-4),
        loss=[margin_loss, "mse"],
        loss_weights=[1.0, 0.392],
        metrics=[["accuracy"], []],
    )
    return model


def measure(args):
    stages = {"imported": None, "data": None, "model": None, "trained": None}
    import keras
    import numpy as np

    stages["imported"] = _rss_mb()
    from keras_capsules import datasets

    (x, y), _ = datasets.mnist.load_data()
    x, y = x[: args.train_size].copy(), y[: args.train_size].copy()  # the rest freed
    if args.only == "official":  # the official pre_process
        x = (x / 256)[..., None].astype("float32")
        y = keras.utils.to_categorical(y, num_classes=10)
        inputs, targets = (x, y), (y, x)
    else:
        inputs, targets = x[..., None], y
    stages["data"] = _rss_mb()
    keras.utils.set_random_seed(0)
    if args.only == "official":
        model = official_model()
    else:
        import applications

        model = applications.EfficientCapsNet()
    stages["model"] = _rss_mb()
    times = []

    class Timer(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            keras.tree.map_structure(np.asarray, logs or {})
            if batch == args.warmup - 1 or batch == args.warmup + args.steps - 1:
                times.append(time.perf_counter())

    warmup = max(args.warmup, 1)
    args.warmup = warmup
    model.fit(
        inputs,
        targets,
        batch_size=args.batch,
        epochs=1,
        steps_per_epoch=warmup + args.steps,
        shuffle=True,
        verbose=0,
        callbacks=[Timer()],
    )
    stages["trained"] = _rss_mb()
    return {
        "measurement": args.only,
        "images_per_s": args.batch * args.steps / (times[1] - times[0]),
        "peak_rss_mb": _peak_mb(),
        "stages_mb": {k: round(v, 1) for k, v in stages.items()},
        "parameters": int(model.count_params()),
        "onednn": onednn_enabled(),
    }


def main(argv=None):
    args = parse_args(argv)
    if args.only is not None:
        print(json.dumps(measure(args)), flush=True)
        return
    script = os.path.abspath(__file__)
    passed = ["--batch", str(args.batch), "--steps", str(args.steps)]
    passed += ["--warmup", str(args.warmup), "--train-size", str(args.train_size)]
    paths = onednn_paths(args.onednn)
    runs = {path: {m: [] for m in MEASUREMENTS} for path in paths}
    for repeat in range(max(args.repeats, 1)):
        for path, env in paths.items():
            for name in MEASUREMENTS:
                log(f"== {name}, oneDNN {path}, repeat {repeat + 1} of {max(args.repeats, 1)} ==")
                argv = [sys.executable, script, "--only", name, *passed]
                runs[path][name].append(run_command(argv, name, env))
    report = {
        "cpu_class": cpu_class(),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "backend": os.environ.get("KERAS_BACKEND", "tensorflow"),
        "batch": args.batch,
        "steps": args.steps,
        "train_size": args.train_size,
        "repeats": max(args.repeats, 1),
    }
    for path, by_name in runs.items():
        ours, official = by_name["ours"], by_name["official"]
        report[path] = {
            "onednn": ours[0]["onednn"],
            **{
                f"{n}_images_per_s": statistics.median(r["images_per_s"] for r in by_name[n])
                for n in MEASUREMENTS
            },
            "speed_over_official": statistics.median(
                a["images_per_s"] / b["images_per_s"] for a, b in zip(ours, official)
            ),
            **{f"{n}_peak_rss_mb": max(r["peak_rss_mb"] for r in by_name[n]) for n in MEASUREMENTS},
            "peak_rss_over_official": statistics.median(
                a["peak_rss_mb"] / b["peak_rss_mb"] for a, b in zip(ours, official)
            ),
            "runs": {n: by_name[n] for n in MEASUREMENTS},
        }
    print(json.dumps(report, indent=2), flush=True)


if __name__ == "__main__":
    main()

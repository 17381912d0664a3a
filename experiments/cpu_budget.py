"""Four models, two data sets, one wall-clock budget each: what does this CPU buy?

Trains `CapsNetMNIST`, `EfficientCapsNet`, the EM model (`MatrixCapsNet`
64/8/16/16 on 28x28 inputs) and `BaselineCNN` on MNIST and on Fashion-MNIST,
each for `--minutes` of wall-clock time (compilation included) from seed 0,
with its own default compile and batch size, shuffled, without augmentation,
then tests it on the 10,000 test images. Each run is its own process, so that
its peak RSS is its own. Prints one JSON object: per run, test accuracy,
parameters (all, trainable, and without the reconstruction decoder), steps and
images trained, training images per
second (after the first 5 steps, which compile), and peak RSS. A Markdown
table of the same goes to stderr.

    python experiments/cpu_budget.py --minutes 3

Smoke test:

    python experiments/cpu_budget.py --minutes 0.05 --test-size 100 --models efficient_capsnet
"""

import argparse
import json
import math
import resource
import subprocess
import sys
import time

from _training import log

MODELS = ("capsnet_mnist", "efficient_capsnet", "em", "baseline_cnn")
DATA = ("mnist", "fashion_mnist")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=3.0, help="budget of each run")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--data", default=",".join(DATA))
    parser.add_argument("--test-size", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", default=None, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def build(name, num_classes=10):
    import applications

    if name == "capsnet_mnist":
        return applications.CapsNet(num_classes=num_classes)
    if name == "efficient_capsnet":
        return applications.EfficientCapsNet(num_classes=num_classes)
    if name == "baseline_cnn":
        return applications.BaselineCNN(num_classes=num_classes)
    # The EM experiments' model (its margin's schedule: `run_one`).
    return applications.MatrixCapsNet(
        A=64,
        B=8,
        C=16,
        D=16,
        input_shape=(28, 28, 1),
        num_classes=num_classes,
    )


def run_one(name, data, args):
    import keras
    import numpy as np

    from keras_capsules import datasets

    keras.utils.set_random_seed(args.seed)
    (x, y), (x_test, y_test) = getattr(datasets, data).load_data()
    x, x_test = x[..., None], x_test[: args.test_size, ..., None]
    y_test = y_test[: args.test_size]
    model = build(name)
    batch_size = model.RECIPE.batch_size  # each model's own: 100, 16, 32 (EM) and 100 (CNN)
    budget = args.minutes * 60.0

    from keras_capsules._steps import steps_run
    from keras_capsules.callbacks import SpreadMarginSchedule

    class Budget(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            self.start, self.steps, self.after_warmup = time.perf_counter(), 0, None
            self.warmup_steps, self._begin = 0, 0

        def on_train_batch_begin(self, batch, logs=None):
            self._begin = batch

        def on_train_batch_end(self, batch, logs=None):
            self.steps += steps_run(self, self._begin, batch)
            now = time.perf_counter()
            if self.after_warmup is None and self.steps >= 5:  # the first calls trace
                self.after_warmup, self.warmup_steps = now, self.steps
            self.seconds = now - self.start
            if self.seconds >= budget:
                self.model.stop_training = True

    clock = Budget()
    # The EM experiments' margin rises from 0.2 to 0.9 over the first 600 steps
    # (about what 3 minutes hold at batch 32).
    margin = [SpreadMarginSchedule(0.2, 0.9, steps=600)] if name == "em" else []
    model.fit(
        x,
        y,
        batch_size=batch_size,
        epochs=1000,
        shuffle=True,
        verbose=0,
        callbacks=[clock, *margin],
    )
    warm_steps = clock.steps - clock.warmup_steps
    images_per_s = (
        warm_steps * batch_size / (clock.start + clock.seconds - clock.after_warmup)
        if clock.after_warmup and warm_steps > 0
        else math.nan
    )
    scores = model.evaluate(x_test, y_test, batch_size=100, verbose=0, return_dict=True)
    return {
        "model": name,
        "data": data,
        "test_accuracy": round(100 * float(scores["accuracy"]), 2),
        "parameters": int(model.count_params()),
        "trainable_parameters": int(sum(np.prod(w.shape) for w in model.trainable_weights)),
        "classifier_parameters": int(
            sum(np.prod(w.shape) for w in model.weights if not w.path.startswith("decoder"))
        ),
        "batch_size": batch_size,
        "steps": clock.steps,
        "images_trained": clock.steps * batch_size,
        "seconds": round(clock.seconds, 1),
        "train_images_per_s": round(images_per_s, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def main(argv=None):
    args = parse_args(argv)
    if args.only:
        name, data = args.only.split(":")
        print(json.dumps(run_one(name, data, args)), flush=True)
        return
    import keras

    runs = []
    for data in args.data.split(","):
        for name in args.models.split(","):
            log(f"== {name} on {data}, {args.minutes} minutes")
            command = [sys.executable, __file__, "--only", f"{name}:{data}"]
            command += ["--minutes", str(args.minutes), "--test-size", str(args.test_size)]
            command += ["--seed", str(args.seed)]
            out = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=True).stdout
            runs.append(json.loads([line for line in out.splitlines() if line.startswith("{")][-1]))
            log(runs[-1])
    log(
        "| data | model | test accuracy | parameters (trainable) | images trained | "
        "train images/s | peak RSS |"
    )
    log("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for r in runs:
        log(
            f"| {r['data']} | {r['model']} | {r['test_accuracy']:.2f}% | "
            f"{r['parameters']:,} / {r['classifier_parameters']:,} | {r['images_trained']:,} | "
            f"{r['train_images_per_s']:.1f} | {r['peak_rss_mb']:,} MB |"
        )
    print(
        json.dumps(
            {
                "experiment": "cpu_budget",
                "backend": keras.backend.backend(),
                "minutes_per_run": args.minutes,
                "seed": args.seed,
                "runs": runs,
            }
        )
    )


if __name__ == "__main__":
    main()

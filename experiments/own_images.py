"""Train on a folder of images, as a user would: from scratch against from a preset.

Writes Fashion-MNIST's images into class folders (a user's layout: one
subfolder per class, PNG files), `--per-class` 10, 100 and 1,000 training
images of each class and a fixed test folder of `--test-per-class` test
images of each, then for each size runs

    keras-capsules train efficient-capsnet --images DIR [--from-preset efficient_capsnet_mnist]
    keras-capsules evaluate OUTPUT/model.keras --images TEST_DIR

and records the test accuracy, the training time and the training images/s
(from `metrics.json`). It also times the input pipeline alone
(`image_folder.load_folder` over the 1,000-per-class folder, one epoch after
a first one) so that it can be set beside the model's images/s. Results go
to `experiments/results/own_images.jsonl`, one JSON line per run.

    python experiments/own_images.py                  # all sizes, both starts
    python experiments/own_images.py --per-class 10 --epochs 2   # a smoke run
"""

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time

from _training import log

_REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(_REPOSITORY, "experiments", "results", "own_images.jsonl")
EPOCHS = {10: 30, 100: 15, 1000: 5}
"""Epochs per size: about the same number of steps for the two smaller sizes."""


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--per-class", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--test-per-class", type=int, default=200)
    parser.add_argument("--epochs", type=int, default=None, help="override EPOCHS")
    parser.add_argument("--starts", nargs="+", default=["scratch", "preset"])
    parser.add_argument("--preset", default="efficient_capsnet_mnist")
    parser.add_argument("--work", default=None, help="folder for the images and runs (a temp dir)")
    parser.add_argument("--output", default=RESULTS, help="JSON lines file to append to")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def write_folder(root, images, labels, names, per_class, size=None):
    """The first `per_class` images of each class as `root/CLASS/INDEX.png`; the count written.

    With `size`, each image is upscaled to `size` x `size` (bilinear) and written in RGB.
    """
    from PIL import Image

    counts = {}
    for index, (image, label) in enumerate(zip(images, labels)):
        if counts.get(label, 0) >= per_class:
            continue
        folder = os.path.join(root, names[label].replace("/", "-"))
        os.makedirs(folder, exist_ok=True)
        picture = Image.fromarray(image)
        if size is not None:
            picture = picture.resize((size, size), Image.BILINEAR).convert("RGB")
        picture.save(os.path.join(folder, f"{index}.png"))
        counts[label] = counts.get(label, 0) + 1
    return sum(counts.values())


def command(*args):
    """Run `keras-capsules ARGS`; its output, or the run's end with its output."""
    done = subprocess.run(
        [sys.executable, "-m", "keras_capsules.cli", *args],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    if done.returncode != 0:
        log(done.stdout[-3000:], done.stderr[-3000:])
        raise SystemExit(f"keras-capsules {' '.join(args[:2])} failed ({done.returncode})")
    return done.stdout


def pipeline_images_per_second(folder, batch_size=16):
    """Images/s of `load_folder` alone over `folder`, the second of two epochs."""
    from keras_capsules.datasets import image_folder

    summary = image_folder.check_folder(folder)
    train, _ = image_folder.load_folder(summary, batch_size=batch_size, seed=0)
    for _ in train:  # the first epoch: the file system's cache warms
        pass
    start, count = time.perf_counter(), 0
    for images, _ in train:
        count += int(images.shape[0])
    return count / (time.perf_counter() - start)


def main(argv=None):
    args = parse_args(argv)
    from keras_capsules.datasets import fashion_mnist

    work = args.work or tempfile.mkdtemp(prefix="own-images-")
    (x_train, y_train), (x_test, y_test) = fashion_mnist.load_data()
    names = fashion_mnist.CLASS_NAMES
    test_folder = os.path.join(work, "test")
    if not os.path.isdir(test_folder):
        write_folder(test_folder, x_test, y_test, names, args.test_per_class)
    machine = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()}
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
        machine["cpu"] = re.search(r"model name\s*:\s*(.*)", info).group(1)
        machine["avx512"] = " avx512f" in info
    except (OSError, AttributeError):
        pass
    for per_class in args.per_class:
        folder = os.path.join(work, f"train-{per_class}")
        if not os.path.isdir(folder):
            write_folder(folder, x_train, y_train, names, per_class)
        epochs = args.epochs or EPOCHS.get(per_class, 5)
        for start in args.starts:
            output = os.path.join(work, f"run-{per_class}-{start}")
            train = ["train", "efficient-capsnet", "--images", folder, "--epochs", str(epochs)]
            train += ["--validation-split", "0.1", "--seed", str(args.seed), "--verbose", "2"]
            train += ["--output", output, "--fresh"]
            if start == "preset":
                train += ["--from-preset", args.preset]
            log(f"{per_class} per class, {start}: {epochs} epochs")
            command(*train)
            with open(os.path.join(output, "metrics.json")) as f:
                metrics = json.load(f)
            printed = command(
                "evaluate", os.path.join(output, "model.keras"), "--images", test_folder
            )
            accuracy = float(re.search(r"^Accuracy: ([0-9.]+)", printed, re.M).group(1))
            record = {
                "per_class": per_class,
                "start": start,
                "epochs": epochs,
                "train_images": metrics["train_images"],
                "test_images": args.test_per_class * len(names),
                "test_accuracy": accuracy,
                "train_seconds": metrics["train_seconds_this_session"],
                "train_images_per_second": round(
                    metrics["train_images"] * epochs / metrics["train_seconds_this_session"], 1
                ),
                "machine": machine,
            }
            log(json.dumps(record))
            with open(args.output, "a") as f:
                f.write(json.dumps(record) + "\n")
    largest = os.path.join(work, f"train-{max(args.per_class)}")
    record = {
        "pipeline_images_per_second": round(pipeline_images_per_second(largest), 1),
        "folder_images": max(args.per_class) * len(names),
        "machine": machine,
    }
    log(json.dumps(record))
    with open(args.output, "a") as f:
        f.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()

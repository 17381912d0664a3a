"""Ship the model of a `keras-capsules train` run as a preset.

The run folder (`--output` of `keras-capsules train`) holds what a preset
records: `run.json` (the options and the data's fingerprint), `history.csv`
(one row per epoch: for MultiMNIST the test accuracy after each epoch, the
learning curve), and `model.keras`, saved after every epoch. A run still in
progress ships its last finished epoch. The model is evaluated on the full
test set of its data with the code `keras-capsules evaluate` runs
(`keras_capsules.cli.evaluate.measure`), its weights are tried stored as
float16 (kept when the test accuracy moves by at most `--float16-tolerance`
points), and the preset is written where the package ships it (or to
`--output`) with its metadata: the data and its files' checksums, the command
that trains it, the options, epochs, examples seen, the learning curve, the
wall time of each epoch read from the run's console log (`--log`: the lines
Keras prints at the end of each epoch with `--verbose 2`), the processor time
the run's processes used (`--cpu-seconds`, which `train` does not record),
and both test accuracies; the machine that trained it is not recorded by `train`, so
the one that packaged it is (`packaged_on`).

    keras-capsules train efficient-capsnet --data multimnist --epochs 1000 --seed 0 \\
        --output ~/kc-runs/multimnist-ecn --verbose 2 >> ~/kc-runs/multimnist-ecn.log
    python experiments/preset_from_run.py ~/kc-runs/multimnist-ecn efficient_capsnet_multimnist \\
        --log ~/kc-runs/multimnist-ecn.log \\
        --description "Efficient-CapsNet on MultiMNIST, pairs drawn as it trains"
"""

import argparse
import csv
import json
import os
import re

from _training import log
from presets import _machine
from presets import provenance
from presets import ship
from presets import weights_dtype

_EPOCH_LINE = re.compile(r"^\s*(\d+)/(\d+) - (\d+)s - ")
"""The line Keras prints at the end of an epoch with `verbose=2`: `1874/1874 - 151s - ...`."""


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", help="the folder of a keras-capsules train run (its --output)")
    p.add_argument("name", help="the preset's name")
    p.add_argument("--description", default="", help="one line saying what the preset is")
    p.add_argument("--log", default=None, help="the run's console log, for its epochs' times")
    p.add_argument(
        "--cpu-seconds", type=float, default=None, help="processor time of the run's sessions"
    )
    p.add_argument("--output", default=None, help="write the preset here, not into the package")
    p.add_argument("--float16-tolerance", type=float, default=0.02)
    p.add_argument("--batch-size", type=int, default=500, help="evaluation batch size (500)")
    return p.parse_args(argv)


def read_run(folder):
    """`(options, fingerprint, history)` of a run folder; history is a list of dicts of floats."""
    with open(os.path.join(folder, "run.json")) as f:
        run = json.load(f)
    with open(os.path.join(folder, "history.csv"), newline="") as f:
        history = [
            {k: (int(v) + 1 if k == "epoch" else round(float(v), 5)) for k, v in row.items()}
            for row in csv.DictReader(f)
        ]
    for row in history:  # as every preset's history names it
        for key in ("val_accuracy", "val_multimnist_accuracy"):
            if key in row:
                row["test_accuracy"] = row[key]
    if not history:
        raise SystemExit(f"{folder} has no finished epoch yet (history.csv is empty)")
    return run["options"], run["data"], history


def epoch_seconds(path):
    """The seconds of each epoch Keras reported in the console log `path`, in order."""
    if path is None:
        return []
    with open(path, errors="replace") as f:
        return [
            int(m.group(3))
            for line in f
            if (m := _EPOCH_LINE.match(line)) and m.group(1) == m.group(2)
        ]


def command(options, epochs, name, recipe):
    """The `keras-capsules train` command that trains this preset again.

    It names the options that differ from the architecture's defaults (the
    model class's `recipe`, the data set's full size).
    """
    words = ["keras-capsules", "train", options["model"], "--data", options["data"]]
    words += ["--epochs", str(epochs)]
    for option, default in (
        ("train_size", None),
        ("batch_size", recipe.batch_size),
        ("learning_rate", recipe.learning_rate),
        ("seed", None),
    ):
        if options.get(option) is not None and options[option] != default:
            words += [f"--{option.replace('_', '-')}", str(options[option])]
    return " ".join([*words, "--output", f"runs/{name}"])


def main(argv=None):
    args = parse_args(argv)
    import keras

    import applications  # noqa: F401  (registers the models' classes for load_model)
    from keras_capsules.cli.evaluate import measure
    from keras_capsules.datasets import mnist

    options, fingerprint, history = read_run(args.run)
    model = keras.saving.load_model(os.path.join(args.run, "model.keras"))
    data = options["data"]
    log(f"{args.run}: {type(model).__name__}, {len(history)} epochs; evaluating on {data}")

    measured = {}

    def accuracy(m):
        _, value, measured["examples"] = measure(m, data, batch_size=args.batch_size, verbose=0)
        return value

    stored, float32, float16 = weights_dtype(model, accuracy, args.float16_tolerance)
    seconds = epoch_seconds(args.log)[: len(history)]
    for row, spent in zip(history, seconds):
        row["seconds"] = spent
    epochs = len(history)
    metadata = {
        "name": args.name,
        "description": args.description,
        "data": {
            "name": data,
            "train_images": fingerprint["train_images"],
            "test_images": measured["examples"],
            "sha256": dict(sorted(mnist.FILES.items())) if "mnist" in data else {},
        },
        "command": command(options, epochs, args.name, type(model).RECIPE),
        "options": options,
        "seed": options.get("seed"),
        "epochs": epochs,
        "examples_seen": epochs * fingerprint["train_images"],
        "train_wall_seconds": sum(seconds) if len(seconds) == epochs else None,
        "train_cpu_seconds": args.cpu_seconds,
        "history": history,
        "packaged_on": _machine(),
        **provenance(stored, float32, float16),
    }
    folder = ship(model, args.name, metadata, stored, args.output)
    log(f"wrote {folder}: test accuracy {metadata['test_accuracy']:.4f} ({stored} weights)")
    print(json.dumps({k: metadata[k] for k in ("name", "epochs", "test_accuracy")}))


if __name__ == "__main__":
    main()

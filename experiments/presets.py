"""Train a shipped preset on this machine and write it: `python experiments/presets.py NAME`.

Each preset has one recipe (`RECIPES`): the application and its arguments, the
data set, epochs, augmentation and seed, and how it varies the class's
`RECIPE` (`applications.Recipe`: batch size, learning-rate schedule, spread
margin), which `keras-capsules train` reads too.
The run keeps its state in `--runs-dir/NAME` (`~/kc-runs` by default, outside
the repository): the recipe, a checkpoint of the model with its optimizer after
every epoch, and the test accuracy of every epoch. Started again, the command
resumes from the last finished epoch; a run folder holding another recipe is
refused unless `--fresh` starts over. `--minutes` ends the run after the last
epoch expected to fit in the budget, so a long run can be split over sessions.
A recipe with a `start` trains a preset further: the preset as of the named
commit (taken from git into `--runs-dir/NAME/start`, its weights' SHA-256
checked), whose epochs, history and sessions count as the run's first ones.

When every epoch is done, the model is evaluated on the full test set in
float32, its weights are tried stored as float16 (kept when the test accuracy
moves by at most `--float16-tolerance` points, 0.02), and the preset is written
with `save_to_preset` to `--output` (by default where the package ships it: the
config and metadata in `applications/presets/NAME`, the weights in
`distributions/keras-capsules-presets/keras_capsules_presets/NAME`) with its
metadata: data set and file checksums, this command, seed, epochs, wall time,
machine, backend, versions, both test accuracies. Rerunning a finished run writes
the preset again without training.

    python experiments/presets.py capsnet_mnist --minutes 90
    python experiments/presets.py --list

`--seed N` trains the recipe with another seed, in `--runs-dir/NAME-seedN`,
and writes its preset there (`preset/`) unless `--output` says where. The
script needs no TensorFlow: with `KERAS_BACKEND=jax` or `torch` it trains on
whatever accelerator that backend finds, and records it with the machine.

Smoke test (a few hundred images; the preset goes to `--runs-dir/NAME/preset`
unless `--output` says where, never into the package):

    python experiments/presets.py capsnet_mnist --smoke --runs-dir /tmp/kc-smoke
"""

import argparse
import copy
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np
from _training import device
from _training import log

_REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PRESETS_PACKAGE = ("distributions", "keras-capsules-presets", "keras_capsules_presets")
_EFFICIENT = {
    "model": "EfficientCapsNet",
    "epochs": 30,
    # The paper's Adam from 5e-4, decayed by 0.9 per epoch instead of 0.97 so
    # that 30 epochs end near the learning rate its 150 reach.
    "recipe": {"decay_rate": 0.9},
    "augment": "efficient_capsnet",
    "seed": 0,
}
RECIPES = {
    # CapsNet-Keras's schedule (Adam from 1e-3 decayed by 0.9 per epoch) for 30
    # of its 50 epochs: by then the learning rate is 4% of its start.
    "capsnet_mnist": {
        "model": "CapsNet",
        "data": "mnist",
        "epochs": 30,
        "recipe": {"decay_rate": 0.9, "decay_every_epoch": True},
        "augment": "shift",
        "seed": 0,
        "description": "the paper's CapsNet (3 routing iterations, decoder), 8.2M parameters",
    },
    # The paper's own schedule: 150 epochs of EfficientCapsNet.RECIPE, Adam from
    # 5e-4 decayed by 0.97 per epoch.
    "efficient_capsnet_mnist": dict(
        _EFFICIENT,
        data="mnist",
        epochs=150,
        recipe={},
        description="Efficient-CapsNet, self-attention routing, the paper's 150 epochs",
    ),
    "efficient_capsnet_fashion_mnist": dict(
        _EFFICIENT,
        data="fashion_mnist",
        description="Efficient-CapsNet, self-attention routing",
    ),
    # The 10-epoch preset (Adam from 3e-3 decayed by 0.8 per epoch to 3.2e-4,
    # the spread loss's margin ramped from 0.2 to 0.9) settled at 99.19-99.22%
    # from epoch 8 on; these 5 epochs train it further with a new Adam from
    # 5e-4, the margin held at 0.9.
    "em_capsnet_mnist": {
        "model": "MatrixCapsNet",
        "data": "mnist",
        "start": {
            "commit": "c7da6e7264b26c12c5163dd0bf703b956b5235ea",
            "weights_sha256": "c384c72f320899c40f207e01acec11e70d0c872f1f7590d8ceba9fb2860e1283",
            "epochs": 10,
        },
        "epochs": 15,
        "arguments": {
            "A": 64,
            "B": 8,
            "C": 16,
            "D": 16,
            "iterations": 3,
            "input_shape": [28, 28, 1],
            "num_classes": 10,
        },
        "recipe": {
            "learning_rate": 5e-4,
            "decay_rate": 0.8,
            "decay_every_epoch": True,
            "spread_margin": [0.9, 0.9],
        },
        "augment": "shift",
        "seed": 0,
        "description": "matrix capsules with EM routing (64/8/16/16, 3 iterations, "
        "the tempered E-step)",
    },
}
"""Each preset's model (`model`, its `arguments`), data, epochs, augmentation and seed.

`recipe` varies the class's `RECIPE` (`applications.Recipe`: batch size,
learning rate and its decay, the spread margin's rise); what it leaves out is
the class's own.
"""


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("name", nargs="?", choices=sorted(RECIPES))
    parser.add_argument("--list", action="store_true", help="print the recipes and exit")
    parser.add_argument("--minutes", type=float, default=math.inf, help="wall-clock budget")
    parser.add_argument("--runs-dir", default=os.path.expanduser("~/kc-runs"))
    parser.add_argument("--output", default=None, help="preset folder to write")
    parser.add_argument("--fresh", action="store_true", help="delete the run and start over")
    parser.add_argument(
        "--float16-tolerance",
        type=float,
        default=0.02,
        help="largest test accuracy change, in points, for float16 weight storage",
    )
    parser.add_argument(
        "--steps-per-execution",
        type=int,
        default=None,
        help="training steps per call of the compiled step (1)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help="train with this seed instead of the recipe's, in NAME-seedN",
    )
    parser.add_argument(
        "--precision",
        choices=("float32", "mixed_bfloat16", "mixed_float16"),
        default="float32",
        help="Keras dtype policy to train with, in NAME-POLICY (float32); the preset is "
        "written and evaluated in float32",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="600 training and 500 test images, 2 epochs (1 after a recipe's start)",
    )
    args = parser.parse_args(argv)
    if not args.list and args.name is None:
        parser.error("name a preset, or pass --list")
    return args


def recipe_for(name, smoke=False, seed=None, precision="float32"):
    recipe = copy.deepcopy(RECIPES[name])
    recipe["name"] = name
    if precision != "float32":
        recipe["precision"] = precision
    if seed is not None:
        if seed < 0:
            raise SystemExit(f"--seed must be a non-negative integer. Received: {seed}")
        if "start" in recipe:
            raise SystemExit(
                f"--seed cannot train {name} with another seed: its recipe trains a preset "
                "of the recipe's seed further"
            )
        recipe["seed"] = seed
    if smoke:
        # One epoch after the start, if any; else two.
        epochs = recipe["start"]["epochs"] + 1 if "start" in recipe else 2
        recipe.update(epochs=epochs, train_size=600, test_size=500)
    return recipe


def _run_name(recipe):
    """The run's folder name: the preset's, with `-seedN` for a seed not the recipe's own
    and `-POLICY` for a dtype policy other than float32."""
    name = recipe["name"]
    if recipe["seed"] != RECIPES[name]["seed"]:
        name += f"-seed{recipe['seed']}"
    if "precision" in recipe:
        name += f"-{recipe['precision']}"
    return name


def _load(recipe):
    from keras_capsules import datasets

    (x, y), (x_test, y_test) = getattr(datasets, recipe["data"]).load_data()
    n, m = recipe.get("train_size"), recipe.get("test_size")
    return (x[:n], y[:n]), (x_test[:m], y_test[:m])


def training_recipe(recipe):
    """The `applications.Recipe` a preset trains with: its class's, varied by `recipe`."""
    import dataclasses

    import applications

    return dataclasses.replace(
        getattr(applications, recipe["model"]).RECIPE, **recipe.get("recipe", {})
    )


def _build(recipe, steps_per_epoch):
    """The recipe's model, compiled with its training recipe's optimizer."""
    import applications

    own = training_recipe(recipe)
    arguments = dict(recipe.get("arguments", {}))
    arguments["class_names"] = _class_names(recipe)
    if "input_shape" in arguments:
        arguments["input_shape"] = tuple(arguments["input_shape"])
    model = getattr(applications, recipe["model"])(compile=False, **arguments)
    model.compile(optimizer=own.optimizer(steps_per_epoch))
    return model


def _class_names(recipe):
    """The names of the recipe's data set's classes (MNIST's: the digits)."""
    from keras_capsules import datasets

    data = getattr(datasets, recipe["data"])
    return list(data.CLASS_NAMES)


def _with_class_names(model, recipe):
    """`model`, rebuilt with its classes' names if a checkpoint from before names lacks them."""
    if getattr(model, "class_names", None) is not None:
        return model
    named = type(model).from_config({**model.get_config(), "class_names": _class_names(recipe)})
    named.set_weights(model.get_weights())
    return named


def _shifted(images, max_shift, rng):
    """Each image moved by up to `max_shift` pixels down or up, and right or left, zero padded."""
    count, height, width = images.shape
    padded = np.pad(images, ((0, 0), (max_shift, max_shift), (max_shift, max_shift)))
    starts = rng.integers(0, 2 * max_shift + 1, size=(count, 2))
    rows = starts[:, :1] + np.arange(height)
    columns = starts[:, 1:] + np.arange(width)
    picked = np.take_along_axis(padded, rows[:, :, None], axis=1)
    return np.take_along_axis(picked, columns[:, None, :], axis=2)


def _epoch_data(recipe, x, epoch):
    """One epoch's augmented training images, float32 `(n, 28, 28, 1)` in [0, 255]."""
    seed = recipe["seed"] * 1000 + epoch
    if recipe["augment"] == "shift":
        # The paper's shifts of up to 2 pixels, in NumPy so that every backend
        # trains on the same images without TensorFlow.
        return _shifted(x, 2, np.random.default_rng(seed)).astype("float32")[..., None]
    from efficient_capsnet import _augment_in_chunks

    return _augment_in_chunks(x.astype("float32"), seed=seed)[..., None]


def _data_files(recipe):
    """SHA-256 of the data set's decompressed files, which its loader checked."""
    from keras_capsules import datasets

    return dict(sorted(getattr(datasets, recipe["data"]).FILES.items()))


def _machine():
    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:
        pass
    model = next(
        (line.split(":", 1)[1].strip() for line in flags.splitlines() if "model name" in line),
        platform.processor(),
    )
    machine = {
        "cpu": model,
        "cores": os.cpu_count(),
        "avx512": " avx512f" in flags,
        "system": platform.platform(),
    }
    accelerator = device()
    if accelerator != "cpu":
        machine["accelerator"] = accelerator
    return machine


def _machines(progress):
    """The distinct machines that trained at least one epoch of the run."""
    machines = {}
    for session in progress["sessions"]:
        if session.get("epochs"):
            machines[json.dumps(session["machine"], sort_keys=True)] = session["machine"]
    return list(machines.values())


def _commit():
    try:
        return subprocess.run(
            ["git", "-C", _REPOSITORY, "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def _write_json(path, value):
    from keras_capsules._atomic import write_json

    write_json(path, value)


def _start_preset(recipe, folder):
    """The preset the recipe trains further, as of its commit: its folder and metadata.

    The config, metadata and weights are taken from the repository's history
    into `folder/start`; the weights file's SHA-256 must be the recipe's and
    the metadata's, and its epochs the recipe's.
    """
    from applications._weights_file import sha256
    from keras_capsules._atomic import replacing

    start = recipe["start"]
    target = os.path.join(folder, "start")
    sources = {
        "config.json": f"applications/presets/{recipe['name']}/config.json",
        "metadata.json": f"applications/presets/{recipe['name']}/metadata.json",
        "model.weights.h5": "/".join((*_PRESETS_PACKAGE, recipe["name"], "model.weights.h5")),
    }
    os.makedirs(target, exist_ok=True)
    for name, source in sources.items():
        path = os.path.join(target, name)
        if os.path.exists(path):
            continue
        try:
            shown = subprocess.run(
                ["git", "-C", _REPOSITORY, "show", f"{start['commit']}:{source}"],
                capture_output=True,
            )
            error = shown.stderr.decode().strip() if shown.returncode else None
        except OSError as raised:
            error = str(raised)
        if error:
            raise SystemExit(
                f"The recipe starts from {source} at commit {start['commit']}, which git "
                f"cannot show here ({error}); it needs the repository's history, e.g. "
                "`git fetch --unshallow` in a shallow clone"
            )
        with replacing(path) as partial:
            with open(partial, "wb") as f:
                f.write(shown.stdout)
    with open(os.path.join(target, "metadata.json")) as f:
        metadata = json.load(f)
    actual = sha256(os.path.join(target, "model.weights.h5"))
    if {actual, metadata.get("weights_sha256")} != {start["weights_sha256"]}:
        raise SystemExit(
            f"{target} holds weights with SHA-256 {actual} (its metadata records "
            f"{metadata.get('weights_sha256')}), not the recipe's start "
            f"{start['weights_sha256']}; delete the folder and run again"
        )
    if metadata.get("epochs") != start["epochs"]:
        raise SystemExit(
            f"{target} holds a preset of {metadata.get('epochs')} epochs, not the recipe's "
            f"{start['epochs']}; delete the folder and run again"
        )
    return target, metadata


def _open_run(args, recipe):
    """The run folder's progress; refuses a folder that holds another recipe."""
    folder = os.path.join(args.runs_dir, _run_name(recipe))
    if args.fresh:
        shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder, exist_ok=True)
    recipe_path = os.path.join(folder, "recipe.json")
    if os.path.exists(recipe_path):
        with open(recipe_path) as f:
            held = json.load(f)
        if held != json.loads(json.dumps(recipe)):
            changed = sorted(k for k in set(held) | set(recipe) if held.get(k) != recipe.get(k))
            raise SystemExit(
                f"{folder} holds a run of another recipe (differs in: {', '.join(changed)}); "
                "pass --fresh to start over"
            )
    else:
        _write_json(recipe_path, recipe)
    progress_path = os.path.join(folder, "progress.json")
    if os.path.exists(progress_path):
        with open(progress_path) as f:
            return folder, json.load(f)
    if "start" in recipe:
        # The started preset's epochs count as the run's first ones.
        _, held = _start_preset(recipe, folder)
        return folder, {
            "epochs_done": held["epochs"],
            "train_seconds": held["train_seconds"],
            "history": held["history"],
            "sessions": held["sessions"],
            "start": {**recipe["start"], "recipe": held["recipe"]},
        }
    return folder, {"epochs_done": 0, "train_seconds": 0.0, "history": [], "sessions": []}


def train(args, recipe, folder, progress):
    """Train the remaining epochs within the budget; return the model and `progress`."""
    import keras

    import applications  # noqa: F401  (registers the models the checkpoint names)
    from keras_capsules._compile import compile_again

    keras.utils.set_random_seed(recipe["seed"] + progress["epochs_done"])
    # The policy builds the model; a checkpoint keeps each layer's own.
    keras.mixed_precision.set_dtype_policy(recipe.get("precision", "float32"))
    (x, y), (x_test, y_test) = _load(recipe)
    own = training_recipe(recipe)
    batch_size = own.batch_size
    steps_per_epoch = -(-len(x) // batch_size)
    checkpoint = os.path.join(folder, "checkpoint.keras")
    started = progress.get("start", {}).get("epochs", 0)
    if progress["epochs_done"] > started:
        log(f"resuming {recipe['name']} after epoch {progress['epochs_done']} from {checkpoint}")
        model = keras.saving.load_model(checkpoint)
    else:
        model = _build(recipe, steps_per_epoch)
    if progress["epochs_done"] == started and started:
        # _open_run checked the start's weights file. Its config is of its commit's
        # classes; the recipe builds the same network today, so the weights load into it.
        start_folder = os.path.join(folder, "start")
        log(f"starting {recipe['name']} after epoch {started} from the preset in {start_folder}")
        _load_start_weights(model, os.path.join(start_folder, "model.weights.h5"))
    if args.steps_per_execution:
        compile_again(model, steps_per_execution=args.steps_per_execution)
    session = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": _machine()}
    progress["sessions"].append(session)
    start = time.perf_counter()
    budget = args.minutes * 60.0
    last = None
    verbose = 1 if sys.stderr.isatty() else 2
    for epoch in range(progress["epochs_done"], recipe["epochs"]):
        elapsed = time.perf_counter() - start
        if last is not None and elapsed + 1.1 * last > budget:
            log(f"stopping before epoch {epoch + 1}: {elapsed:.0f} s of {budget:.0f} s used")
            break
        images = _epoch_data(recipe, x, epoch)
        began = time.perf_counter()
        logs = model.fit(
            images,
            y,
            batch_size=batch_size,
            epochs=epoch + 1,
            initial_epoch=epoch,
            shuffle=True,
            verbose=verbose,
            callbacks=own.callbacks(recipe["epochs"] * steps_per_epoch),
        ).history
        seconds = time.perf_counter() - began
        scores = model.evaluate(
            x_test[..., None], y_test, batch_size=500, verbose=0, return_dict=True
        )
        last = time.perf_counter() - began
        record = {"epoch": epoch + 1, "seconds": round(seconds, 1)}
        record.update({k: round(float(v[-1]), 5) for k, v in logs.items()})
        record["test_accuracy"] = round(float(scores["accuracy"]), 5)
        log(json.dumps(record))
        from keras_capsules._atomic import replacing

        with replacing(checkpoint) as partial:
            model.save(partial)
        progress["epochs_done"] = epoch + 1
        progress["train_seconds"] = round(progress["train_seconds"] + seconds, 1)
        progress["history"].append(record)
        session["epochs"] = session.get("epochs", 0) + 1
        _write_json(os.path.join(folder, "progress.json"), progress)
    return model, progress


def _load_start_weights(model, path):
    """Load the start preset's weights file into `model`, from either weights layout.

    A start preset written before the backbones became submodels holds every
    layer at the top of the file (`layers/conv2d`); today the backbone's are
    one level down (`layers/matrix_caps_net_backbone/layers/conv2d`). Such a
    file is rewritten, group by group, into the layout `model` saves.
    """
    import h5py

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Skipping variable loading for optimizer")
        warnings.filterwarnings("ignore", "Skipping nested container")
        try:
            model.load_weights(path)
            return
        except ValueError:
            pass
        with tempfile.TemporaryDirectory() as folder:
            moved = os.path.join(folder, "moved.weights.h5")
            model.save_weights(moved)  # the layout, filled below with the start's values
            with h5py.File(moved, "r+") as new, h5py.File(path, "r") as old:
                nested = {
                    name: f"layers/{group}/layers/{name}"
                    for group in new["layers"]
                    if "layers" in new["layers"][group]
                    for name in new["layers"][group]["layers"]
                }

                def place(key, item):
                    if not isinstance(item, h5py.Dataset) or key.startswith("optimizer"):
                        return
                    top, _, rest = key.partition("/")
                    if top == "layers":
                        name, _, rest = rest.partition("/")
                        top = f"layers/{name}" if name in new["layers"] else nested[name]
                    target = f"{top}/{rest}"
                    del new[target]
                    new.create_dataset(target, data=item[()])

                old.visititems(place)
            model.load_weights(moved)


def _test_accuracy(model, x_test, y_test):
    scores = model.evaluate(x_test[..., None], y_test, batch_size=500, verbose=0, return_dict=True)
    return float(scores["accuracy"])


def write_preset(args, recipe, model, progress):
    """Evaluate in float32 and float16 storage; write the preset with its metadata.

    A model trained under a mixed policy is evaluated in it too
    (`test_accuracy_trained_precision`), then copied into the recipe's model
    built in float32, which is evaluated and written as every preset is.
    """
    import keras

    model = _with_class_names(model, recipe)
    _, (x_test, y_test) = _load(recipe)
    trained_precision = {}
    if "precision" in recipe:
        trained_precision = {
            "precision": recipe["precision"],
            "test_accuracy_trained_precision": _test_accuracy(model, x_test, y_test),
        }
        keras.mixed_precision.set_dtype_policy("float32")
        in_float32 = _with_class_names(_build(recipe, steps_per_epoch=1), recipe)
        in_float32.set_weights(model.get_weights())
        model = in_float32
    stored, float32, float16 = weights_dtype(
        model, lambda m: _test_accuracy(m, x_test, y_test), args.float16_tolerance
    )
    command = "python experiments/presets.py " + recipe["name"]
    if args.seed is not None:
        command += f" --seed {recipe['seed']}"
    if "precision" in recipe:
        command += f" --precision {recipe['precision']}"
    if args.smoke:
        command += " --smoke"
    metadata = {
        "name": recipe["name"],
        "description": recipe["description"],
        "data": {
            "name": recipe["data"],
            "train_images": int(recipe.get("train_size") or 60000),
            "test_images": int(len(x_test)),
            "sha256": _data_files(recipe),
        },
        "command": command,
        "recipe": recipe,
        "training_recipe": training_recipe(recipe).get_config(),
        "seed": recipe["seed"],
        "epochs": progress["epochs_done"],
        "train_seconds": progress["train_seconds"],
        "history": progress["history"],
        "sessions": progress["sessions"],
        **({"start": progress["start"]} if "start" in progress else {}),
        "machine": _machines(progress),
        **provenance(stored, float32, float16),
        **trained_precision,
    }
    return ship(model, recipe["name"], metadata, stored, args.output), metadata


def weights_dtype(model, accuracy, tolerance):
    """`(stored, float32, float16)`: how to store the weights, and the accuracies that chose.

    `accuracy(model)` is the test accuracy; the weights are tried rounded to
    float16 and stored so when the accuracy moves by at most `tolerance`
    points. The model's weights are as they were when this returns.
    """
    float32 = accuracy(model)
    weights = [w.numpy() if hasattr(w, "numpy") else np.asarray(w) for w in model.weights]
    for variable, value in zip(model.weights, weights):
        if value.dtype == np.float32:
            variable.assign(value.astype(np.float16).astype(np.float32))
    float16 = accuracy(model)
    for variable, value in zip(model.weights, weights):
        variable.assign(value)
    stored = "float16" if abs(float16 - float32) * 100 <= tolerance else "float32"
    return stored, float32, float16


def provenance(stored, float32, float16):
    """What every preset's metadata records of its making and its test accuracies."""
    import keras

    import keras_capsules

    return {
        "backend": keras.backend.backend(),
        "keras_version": keras.__version__,
        "keras_capsules_version": keras_capsules.__version__,
        "commit": _commit(),
        "test_accuracy": float16 if stored == "float16" else float32,
        "test_accuracy_float32": float32,
        "test_accuracy_float16_weights": float16,
        "weights_dtype": stored,
    }


def ship(model, name, metadata, stored, output=None):
    """Write the preset `name` to `output`, or where the package ships it; return the folder.

    A shipped preset's weights go to the keras-capsules-presets distribution,
    its config and metadata (with the weights' SHA-256) to applications/presets.
    """
    if output:
        model.save_to_preset(output, metadata=metadata, weights_dtype=stored)
        return output
    output = os.path.join(_REPOSITORY, "applications", "presets", name)
    weights = os.path.join(_REPOSITORY, *_PRESETS_PACKAGE, name)
    with tempfile.TemporaryDirectory(dir=os.path.dirname(output)) as written:
        model.save_to_preset(written, metadata=metadata, weights_dtype=stored)
        os.makedirs(weights, exist_ok=True)
        os.makedirs(output, exist_ok=True)
        os.replace(
            os.path.join(written, "model.weights.h5"), os.path.join(weights, "model.weights.h5")
        )
        for file in ("config.json", "metadata.json"):
            os.replace(os.path.join(written, file), os.path.join(output, file))
    return output


def main(argv=None):
    args = parse_args(argv)
    if args.list:
        listed = {
            name: {**recipe, "training_recipe": training_recipe(recipe).get_config()}
            for name, recipe in RECIPES.items()
        }
        print(json.dumps(listed, indent=2))
        return None
    recipe = recipe_for(args.name, smoke=args.smoke, seed=args.seed, precision=args.precision)
    folder, progress = _open_run(args, recipe)
    if args.output is None and (args.smoke or _run_name(recipe) != recipe["name"]):
        args.output = os.path.join(folder, "preset")
    model, progress = train(args, recipe, folder, progress)
    result = {
        "preset": recipe["name"],
        "epochs_done": progress["epochs_done"],
        "epochs": recipe["epochs"],
        "train_seconds": progress["train_seconds"],
        "last_test_accuracy": progress["history"][-1]["test_accuracy"]
        if progress["history"]
        else None,
    }
    if progress["epochs_done"] == recipe["epochs"]:
        output, metadata = write_preset(args, recipe, model, progress)
        result.update(
            output=output,
            test_accuracy=metadata["test_accuracy"],
            test_accuracy_float32=metadata["test_accuracy_float32"],
            weights_dtype=metadata["weights_dtype"],
        )
    else:
        log(f"{progress['epochs_done']} of {recipe['epochs']} epochs done; run again to resume")
    print(json.dumps(result), flush=True)
    return result


if __name__ == "__main__":
    main()

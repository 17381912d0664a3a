"""Cost against image size: parameters, training images/s and peak memory of each architecture.

Every model is trained on random RGB images with 10 classes, at 28, 64, 128
and 224 pixels a side (`--sizes`), each measurement in its own process so
that its peak resident set size (`ru_maxrss`) is its own:

* "capsnet", "efficient_capsnet", "matrix_capsnet": `applications.CapsNet`,
  `EfficientCapsNet` and `MatrixCapsNet` (A=64, B=8, C=D=16, the small EM
  model) at that size, as `keras-capsules train` builds them;
* "efficient_capsnet_convs": EfficientCapsNet's four convolutions alone, then
  global average pooling and a softmax, trained with cross-entropy: the floor
  of its cost;
* "capsule_head_mobilenet", "dense_head_mobilenet": `BackboneCapsNet` and
  `BackboneCNN` on `MobileNetV3Small` (random weights: nothing downloads);
* "capsule_head_efficientnet", "dense_head_efficientnet": the same on
  `EfficientNetB0`.

A model is built once without its weights first (`keras-capsules train`'s
estimate); one that would need more than the free memory, or has more than
`--max-parameters`, is left out (`"skipped"`, with its parameters), and so is
a size under a backbone's smallest (32). Training
runs `--warmup` untimed steps (tracing) then `--steps` timed ones of
`--batch` images (`train_on_batch`). A measurement that fails (out of memory:
the estimate counts the layers' outputs, not the routing's own tensors) is
reported with its last error line. `--cache FILE` keeps each measurement as
it is made, so that an interrupted run measures only the rest when rerun.
`--precision` sets the Keras dtype policy of every model (after the
estimate, which counts float32). On TensorFlow, `--onednn both` (the
default) measures everything twice, with its oneDNN kernels off
(`TF_ENABLE_ONEDNN_OPTS=0`, the path of most AVX2 CPUs) and on (`=1`, the
default of CPUs with VNNI), so that a kernel slow on one path shows on
either machine: `onednn_paths` holds each path's results and ratios, and
`results` and `ratios` those of the path TensorFlow takes here by default.
`--repeats N` alternates the whole set N times and reports medians; the
ratios the targets name are medians of the per-repeat ratios: the capsule
head's speed over the dense head's on the same backbone, and
EfficientCapsNet's over its convolutions'. `--plot FILE` draws the figure
of the Results page from the report (`--from-json` redraws it from a saved
report without measuring).

    python benchmarks/image_size.py --repeats 2 --cache image_size.jsonl \\
        --plot docs/images/image_size.png > image_size.json
    python benchmarks/image_size.py --sizes 32 --steps 1 --warmup 1 --batch 2  # smoke test
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

from _child import add_onednn_argument
from _child import cpu_class
from _child import cpu_model
from _child import onednn_enabled
from _child import onednn_paths

MODELS = (
    "capsnet",
    "efficient_capsnet",
    "efficient_capsnet_convs",
    "matrix_capsnet",
    "capsule_head_mobilenet",
    "dense_head_mobilenet",
    "capsule_head_efficientnet",
    "dense_head_efficientnet",
)
BACKBONES = {"mobilenet": "MobileNetV3Small", "efficientnet": "EfficientNetB0"}
SMALLEST_BACKBONE_SIDE = 32
TARGETS = {
    "capsule_over_dense_head_mobilenet_224": 0.9,
    "efficient_capsnet_over_convs_128": 0.7,
    "efficient_capsnet_parameters_128": 5_000_000,
}


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="28,64,128,224", help="image sides (28,64,128,224)")
    p.add_argument("--models", default=",".join(MODELS), help="which models (all)")
    p.add_argument("--batch", type=int, default=16, help="batch size (16)")
    p.add_argument("--steps", type=int, default=12, help="timed training steps (12)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (3)")
    p.add_argument("--repeats", type=int, default=1, help="alternated runs; medians (1)")
    p.add_argument(
        "--max-parameters",
        type=int,
        default=200_000_000,
        help="leave out a model with more parameters (200M: minutes a step on a CPU)",
    )
    p.add_argument(
        "--precision",
        choices=("float32", "mixed_bfloat16", "mixed_float16"),
        default="float32",
        help="Keras dtype policy of every model (float32)",
    )
    add_onednn_argument(p)
    p.add_argument("--plot", default=None, help="draw the figure into this PNG file")
    p.add_argument("--from-json", default=None, help="redraw --plot from a saved report")
    p.add_argument(
        "--cache",
        default=None,
        help="JSON lines file of the measurements done: a rerun with it measures only the rest",
    )
    p.add_argument("--only", default=None, help=argparse.SUPPRESS)  # MODEL:SIZE, a child
    return p.parse_args(argv)


def build(model, size, compile=True):
    """The model `model` for RGB images of `size` x `size` and 10 classes, compiled or not."""
    import keras

    import applications

    shape = (size, size, 3)
    if model == "capsnet":
        return applications.CapsNet(input_shape=shape, num_classes=10, compile=compile)
    if model == "efficient_capsnet":
        return applications.EfficientCapsNet(input_shape=shape, num_classes=10, compile=compile)
    if model == "efficient_capsnet_convs":
        backbone = applications.EfficientCapsNet(input_shape=shape, compile=False).backbone
        convs = keras.Model(backbone.input, backbone.get_layer("primary_caps").input)
        images = keras.Input(shape)
        x = keras.layers.Rescaling(1 / 255)(images)
        x = keras.layers.GlobalAveragePooling2D()(convs(x))
        outputs = keras.layers.Dense(10, activation="softmax")(x)
        convs_alone = keras.Model(images, outputs)
        if compile:
            convs_alone.compile("adam", "sparse_categorical_crossentropy")
        return convs_alone
    if model == "matrix_capsnet":
        return applications.MatrixCapsNet(
            input_shape=shape, num_classes=10, A=64, B=8, C=16, D=16, compile=compile
        )
    head, backbone = model.split("_head_")
    cls = applications.BackboneCapsNet if head == "capsule" else applications.BackboneCNN
    return cls(
        BACKBONES[backbone],
        input_shape=shape,
        num_classes=10,
        backbone_weights=None,
        compile=compile,
    )


def measure(model, size, args):
    """One child's measurement: `{parameters, images_per_s, peak_rss_mb}` or why it was skipped."""
    import numpy as np

    from keras_capsules.cli import _memory

    if "_head_" in model and size < SMALLEST_BACKBONE_SIDE:
        return {"skipped": f"under the backbone's smallest side, {SMALLEST_BACKBONE_SIDE}"}
    parameters, needed = _memory.estimate(lambda: build(model, size, compile=False), args.batch)
    if parameters > args.max_parameters:
        return {"parameters": parameters, "skipped": "over --max-parameters"}
    available = _memory.available_memory()
    if available is not None and needed > 0.8 * available:
        return {
            "parameters": parameters,
            "skipped": f"needs at least {needed / 2**30:.1f} GiB, "
            f"{available / 2**30:.1f} GiB are free",
        }
    import keras

    keras.mixed_precision.set_dtype_policy(args.precision)
    network = build(model, size)
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (args.batch, size, size, 3)).astype("uint8")
    y = rng.integers(0, 10, (args.batch,))
    for _ in range(max(args.warmup, 1)):
        network.train_on_batch(x, y)
    start = time.perf_counter()
    for _ in range(args.steps):
        network.train_on_batch(x, y)
    seconds = time.perf_counter() - start
    return {
        "parameters": int(network.count_params()),
        "images_per_s": args.batch * args.steps / seconds,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
    }


def child(args):
    model, size = args.only.split(":")
    print(json.dumps(measure(model, int(size), args)), flush=True)


def main(argv=None):
    args = parse_args(argv)
    if args.only is not None:
        return child(args)
    if args.from_json is not None:
        with open(args.from_json) as f:
            report = json.load(f)
    else:
        report = run(args)
        print(json.dumps(report, indent=2), flush=True)
    if args.plot is not None:
        plot(report, args.plot)


def run(args):
    sizes = [int(s) for s in args.sizes.split(",")]
    models = args.models.split(",")
    paths = onednn_paths(args.onednn)
    runs = {path: {m: {s: [] for s in sizes} for m in models} for path in paths}
    passed = ["--batch", str(args.batch), "--steps", str(args.steps)]
    passed += ["--warmup", str(args.warmup), "--max-parameters", str(args.max_parameters)]
    passed += ["--precision", args.precision]
    cached = _read_cache(args.cache)
    for repeat in range(max(args.repeats, 1)):
        for size in sizes:
            for path, env in paths.items():
                for model in models:
                    key = {"model": model, "size": size, "repeat": repeat, "batch": args.batch}
                    key.update(steps=args.steps, warmup=args.warmup)
                    if args.precision != "float32":
                        key["precision"] = args.precision
                    if path != "default":
                        key["onednn"] = path
                    found = cached.get(json.dumps(key, sort_keys=True))
                    if found is None:
                        log(
                            f"== {model} at {size}x{size}, {path}, "
                            f"repeat {repeat + 1} of {args.repeats} =="
                        )
                        found = _measure_in_child(model, size, passed, env)
                        if args.cache is not None:
                            with open(args.cache, "a") as f:
                                f.write(json.dumps({**key, "result": found}) + "\n")
                    runs[path][model][size].append(found)
    by_path = {
        path: {
            "onednn": {"onednn_off": False, "onednn_on": True}.get(path, onednn_enabled()),
            "results": summarize(by_model),
            "ratios": ratios(by_model),
        }
        for path, by_model in runs.items()
    }
    # The figure and the top-level fields: the path TensorFlow takes here by default.
    default = next(
        (p for p, v in by_path.items() if v["onednn"] == onednn_enabled()), next(iter(by_path))
    )
    report = {
        "cpu_class": cpu_class(),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "backend": os.environ.get("KERAS_BACKEND", "tensorflow"),
        "onednn": by_path[default]["onednn"],
        "precision": args.precision,
        "batch": args.batch,
        "steps": args.steps,
        "repeats": max(args.repeats, 1),
        "results": by_path[default]["results"],
        "ratios": by_path[default]["ratios"],
        "onednn_paths": by_path,
        "targets": TARGETS,
    }
    return report


def summarize(runs):
    """Per model and size, the medians of the runs `{model: {size: [result, ...]}}`."""
    results = {}
    for model, by_size in runs.items():
        results[model] = {}
        for size, measured in by_size.items():
            first = measured[0]
            if "images_per_s" not in first:  # skipped or failed
                results[model][str(size)] = first
                continue
            results[model][str(size)] = {
                "parameters": first["parameters"],
                "images_per_s": statistics.median(r["images_per_s"] for r in measured),
                "runs_images_per_s": [round(r["images_per_s"], 2) for r in measured],
                "peak_rss_mb": max(r["peak_rss_mb"] for r in measured),
            }
    return results


def _read_cache(path):
    """`{key: result}` of the measurements in the JSON lines file `path` (none without one)."""
    if path is None or not os.path.exists(path):
        return {}
    found = {}
    with open(path) as f:
        for line in f:
            record = json.loads(line)
            result = record.pop("result")
            found[json.dumps(record, sort_keys=True)] = result
    return found


def _measure_in_child(model, size, passed, env=None):
    """One measurement in its own process; a failed one is `{"failed": its last line}`."""
    argv = [sys.executable, os.path.abspath(__file__), "--only", f"{model}:{size}", *passed]
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        errors = [line for line in done.stderr.splitlines() if line.strip()]
        reason = next((line for line in errors if "OOM when allocating" in line), None)
        return {"failed": reason or (errors[-1] if errors else f"exit {done.returncode}")}
    return json.loads(lines[-1])


def ratios(runs):
    """The medians of the per-repeat speed ratios the targets name, where both were measured."""
    pairs = {
        "capsule_over_dense_head_mobilenet": ("capsule_head_mobilenet", "dense_head_mobilenet"),
        "capsule_over_dense_head_efficientnet": (
            "capsule_head_efficientnet",
            "dense_head_efficientnet",
        ),
        "efficient_capsnet_over_convs": ("efficient_capsnet", "efficient_capsnet_convs"),
    }
    found = {}
    for name, (a, b) in pairs.items():
        if a not in runs or b not in runs:
            continue
        for size in runs[a]:
            values = [
                x["images_per_s"] / y["images_per_s"]
                for x, y in zip(runs[a][size], runs[b][size])
                if "images_per_s" in x and "images_per_s" in y
            ]
            if values:
                found[f"{name}_{size}"] = round(statistics.median(values), 3)
    return found


_STYLE = {
    "capsnet": ("tab:blue", False),
    "efficient_capsnet": ("tab:orange", False),
    "efficient_capsnet_convs": ("tab:orange", True),
    "matrix_capsnet": ("tab:red", False),
    "capsule_head_mobilenet": ("tab:purple", False),
    "dense_head_mobilenet": ("tab:purple", True),
    "capsule_head_efficientnet": ("tab:green", False),
    "dense_head_efficientnet": ("tab:green", True),
}
"""`(colour, dashed)` of each model's line: a control (dashed) in its capsule model's colour."""


def plot(report, path):
    """Parameters, training speed and peak memory against the image's side, one line a model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fields = (
        ("parameters", "parameters", 1e6, "millions"),
        ("images_per_s", "training images/s", 1, "images/s"),
        ("peak_rss_mb", "peak memory", 1024, "GB"),
    )
    figure, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for axis, (key, title, scale, unit) in zip(axes, fields):
        for model, by_size in report["results"].items():
            points = [
                (int(size), value[key] / scale)
                for size, value in by_size.items()
                if key in value and "images_per_s" in value
            ]
            if points:
                color, dashed = _STYLE.get(model, (None, False))
                axis.plot(
                    *zip(*points),
                    marker="o",
                    label=model,
                    color=color,
                    linestyle="--" if dashed else "-",
                )
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_xticks([28, 64, 128, 224], ["28", "64", "128", "224"])
        axis.set_xlabel("image side (pixels, RGB)")
        axis.set_title(f"{title} ({unit})")
        axis.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    figure.suptitle(
        f"Batch {report['batch']}, {report['cores']} cores, {report['cpu_class']} "
        f"({report['backend']}); 10 classes"
    )
    figure.tight_layout()
    figure.savefig(path, dpi=100)


if __name__ == "__main__":
    main()

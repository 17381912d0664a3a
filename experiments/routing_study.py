"""Does routing earn its cost? Every routing, no routing and a CNN head on one backbone.

Every variant is `applications.BackboneCapsNet` (or, for `cnn`,
`applications.BackboneCNN`) on the same small backbone, two strided
convolutions (32 5x5 and 64 3x3 filters, stride 2, ReLU: a 5x5x64 feature
map on 28x28 images, 8x8x64 on 40x40), with 16 primary capsule types:

| variant | head |
| --- | --- |
| `dynamic-1` | `routing="uniform"`: dynamic routing's layer with one iteration, uniform coupling |
| `dynamic-3` | `routing="dynamic"`, 3 iterations |
| `em-1` | `routing="em", iterations=1`: one M-step on even assignments |
| `em-3` | `routing="em"`, 3 iterations |
| `self_attention` | `routing="self_attention"` |
| `self_attention-uniform` | `routing="self_attention_uniform"`: the same layer without attention |
| `inverted-1` | `routing="inverted_dot_product", iterations=1`: uniform coupling |
| `inverted-2` | `routing="inverted_dot_product"`, 2 iterations |
| `random` | `routing="random"`: a frozen random coupling (Paik et al. 2019) |
| `cnn` | `BackboneCNN`: pooled features, a hidden layer, softmax; `dynamic-3`'s head size |

Each run trains one variant for a fixed number of steps (`--steps`, batch
`--batch`, the models' default Adam schedule) on one task, with one seed, in
its own process, and appends one JSON line to `--results`
(`experiments/results/routing_study.jsonl`):

- `mnist`, `fashion_mnist`: the full training set; test accuracy on the full
  test set. The `mnist` runs are also attacked: accuracy under FGSM and PGD
  (10 steps) at epsilon 0.05, 0.1 and 0.2 of the pixel range, on the first
  `--attack-size` test images (`keras_capsules.attacks`), and their routing
  layers described by `keras_capsules.diagnostics.routing_statistics` on the
  first `--stats-size` test images.
- `mnist_600`, `mnist_6000`: 60 or 600 training images per class (drawn with
  the run's seed), the same number of steps; full MNIST test set.
- `affine`: MNIST placed at random on a 40x40 canvas (a new placement for
  every pass over the data); tested on expanded MNIST and on the project's
  affNIST-style set (`datasets.affine.affnist_test_set`, seed 2).
- `multimnist`: pairs of overlapping shifted digits (36x36), trained on the
  multi-hot labels; both digits must be named (`MultiMNISTAccuracy`) on
  10,000 test pairs. The CNN trains on cross-entropy with half of each label.

Every run records its parameters (and the head's), training images/s (the
steady rate after the first 10% of steps) and peak RSS. The runs go seed by
seed, task by task, variant by variant (MultiMNIST after every seed of the
other tasks); started again, the study skips the runs already in
`--results` and refuses a results file written with other settings.
`--minutes` stops it before a run that would start after the budget.

`--cost` measures speed and memory apart, on an idle machine: each variant
trains `--cost-steps` MNIST steps alone in its process, into
`routing_study_cost.jsonl`. `--summary` prints the tables (mean and
standard deviation over the seeds) as Markdown.

    python experiments/routing_study.py --minutes 170
    python experiments/routing_study.py --cost
    python experiments/routing_study.py --summary

Smoke test (seconds per run):

    python experiments/routing_study.py --smoke --results /tmp/study.jsonl
"""

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time

import numpy as np
from _training import log

VARIANTS = {
    "dynamic-1": {"routing": "uniform"},
    "dynamic-3": {"routing": "dynamic", "iterations": 3},
    "em-1": {"routing": "em", "iterations": 1},
    "em-3": {"routing": "em", "iterations": 3},
    "self_attention": {"routing": "self_attention"},
    "self_attention-uniform": {"routing": "self_attention_uniform"},
    "inverted-1": {"routing": "inverted_dot_product", "iterations": 1},
    "inverted-2": {"routing": "inverted_dot_product", "iterations": 2},
    "random": {"routing": "random"},
    "cnn": None,
}
TASKS = ("mnist", "fashion_mnist", "mnist_600", "mnist_6000", "affine", "multimnist")
EPSILONS = (0.05, 0.1, 0.2)
PGD_STEPS = 10
PRIMARY_CAPSULE_TYPES = 16
_RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
_DEFAULT_RESULTS = os.path.join(_RESULTS, "routing_study.jsonl")
_DEFAULT_COST_RESULTS = os.path.join(_RESULTS, "routing_study_cost.jsonl")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--results", default=None, help="JSON-lines file of the runs")
    p.add_argument(
        "--cost",
        action="store_true",
        help="measure each variant's training images/s and peak RSS alone, on an idle machine",
    )
    p.add_argument("--cost-steps", type=int, default=300, help="--cost: steps per variant (300)")
    p.add_argument("--steps", type=int, default=1200, help="training steps per run (1200)")
    p.add_argument("--batch", type=int, default=100, help="batch size (100)")
    p.add_argument("--seeds", default="0,1,2", help="seeds (0,1,2)")
    p.add_argument("--tasks", default=",".join(TASKS), help="tasks, in order")
    p.add_argument("--variants", default=",".join(VARIANTS), help="variants, in order")
    p.add_argument("--attack-size", type=int, default=1000, help="test images attacked (1000)")
    p.add_argument("--stats-size", type=int, default=500, help="images for routing statistics")
    p.add_argument("--minutes", type=float, default=None, help="start no run after this budget")
    p.add_argument("--summary", action="store_true", help="print the tables and exit")
    p.add_argument("--smoke", action="store_true", help="tiny runs: 3 steps, 200 test images")
    p.add_argument("--run", default=None, help=argparse.SUPPRESS)  # "variant,task,seed": child
    args = p.parse_args(argv)
    args.seeds = [int(s) for s in args.seeds.split(",")]
    args.tasks = args.tasks.split(",")
    args.variants = args.variants.split(",")
    for name, chosen, known in (("task", args.tasks, TASKS), ("variant", args.variants, VARIANTS)):
        unknown = [c for c in chosen if c not in known]
        if unknown:
            p.error(f"unknown {name}(s) {unknown}; choose from {list(known)}")
    if args.smoke:
        args.steps, args.attack_size, args.stats_size = 3, 20, 20
    if args.cost:
        args.tasks, args.seeds, args.steps = ["cost"], [0], 3 if args.smoke else args.cost_steps
    if args.results is None:
        args.results = _DEFAULT_COST_RESULTS if args.cost else _DEFAULT_RESULTS
    return args


def protocol(args):
    """The settings a result depends on: a results file holds runs of one protocol."""
    return {
        "steps": args.steps,
        "batch": args.batch,
        "attack_size": args.attack_size,
        "stats_size": args.stats_size,
        "smoke": args.smoke,
        **({"cost": True} if args.cost else {}),
        "backbone": "conv32k5s2-conv64k3s2",
        "primary_capsule_types": PRIMARY_CAPSULE_TYPES,
    }


# The study: the queue of runs, each in a child process ---------------------


def read_results(path, expected):
    """The finished runs in `path`, keyed by (variant, task, seed); other protocols refused."""
    done = {}
    if not os.path.exists(path):
        return done
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            record = json.loads(line)
            if record["protocol"] != expected:
                raise SystemExit(
                    f"{path}, line {number}, holds a run with other settings "
                    f"({record['protocol']}, not {expected}): give another --results file."
                )
            done[(record["variant"], record["task"], record["seed"])] = record
    return done


def append_result(path, record):
    """Append one JSON line and flush it to disk before the next run starts."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())


def study(args):
    expected = protocol(args)
    done = read_results(args.results, expected)
    # MultiMNIST, the costliest task, comes after every seed of the others.
    groups = [
        [t for t in args.tasks if t != "multimnist"],
        [t for t in args.tasks if t == "multimnist"],
    ]
    queue = [
        (variant, task, seed)
        for tasks in groups
        for seed in args.seeds
        for task in tasks
        for variant in args.variants
        if (variant, task, seed) not in done
    ]
    log(f"{len(done)} runs in {args.results}; {len(queue)} to go")
    start = time.monotonic()
    for index, (variant, task, seed) in enumerate(queue):
        elapsed = (time.monotonic() - start) / 60
        if args.minutes is not None and elapsed >= args.minutes:
            log(f"stopping after {elapsed:.1f} minutes: {len(queue) - index} runs left")
            return
        log(f"[{index + 1}/{len(queue)}] {variant} on {task}, seed {seed}")
        argv = [sys.executable, os.path.abspath(__file__), "--run", f"{variant},{task},{seed}"]
        argv += ["--steps", str(args.steps), "--batch", str(args.batch)]
        argv += ["--attack-size", str(args.attack_size), "--stats-size", str(args.stats_size)]
        argv += ["--smoke"] if args.smoke else []
        argv += ["--cost", "--cost-steps", str(args.steps)] if args.cost else []
        child = subprocess.run(argv, stdout=subprocess.PIPE, text=True)
        if child.returncode != 0:
            raise SystemExit(f"{variant} on {task}, seed {seed}, failed ({child.returncode})")
        record = json.loads(child.stdout.strip().splitlines()[-1])
        append_result(args.results, {**record, "protocol": expected})
        log(json.dumps({k: v for k, v in record.items() if k != "routing_statistics"}))
    log("every run is done")


# One run --------------------------------------------------------------------


def backbone(input_shape):
    import keras

    return keras.Sequential(
        [
            keras.Input(input_shape),
            keras.layers.Conv2D(32, 5, strides=2, activation="relu"),
            keras.layers.Conv2D(64, 3, strides=2, activation="relu"),
        ],
        name="backbone",
    )


def build(variant, input_shape, num_classes=10):
    """The variant's model, compiled with the applications' defaults."""
    import applications

    if VARIANTS[variant] is None:
        reference = build("dynamic-3", input_shape, num_classes)
        return applications.BackboneCNN(
            backbone(input_shape),
            num_classes,
            head_parameters=reference.head_parameters(),
        )
    return applications.BackboneCapsNet(
        backbone(input_shape),
        num_classes,
        primary_capsule_types=PRIMARY_CAPSULE_TYPES,
        **VARIANTS[variant],
    )


def training_data(task, seed, count, smoke):
    """`(x, y, tests)`: `count` training examples in order, and `{name: (x, y)}` to test on."""
    from keras_capsules.datasets import affine
    from keras_capsules.datasets import fashion_mnist
    from keras_capsules.datasets import mnist
    from keras_capsules.datasets import multimnist

    rng = np.random.default_rng(seed)
    loader = fashion_mnist if task == "fashion_mnist" else mnist
    if task == "cost":
        (x_train, y_train), _ = loader.load_data()
        return x_train[:count, ..., None], y_train[:count], {}
    (x_train, y_train), (x_test, y_test) = loader.load_data()
    if smoke:
        x_test, y_test = x_test[:200], y_test[:200]
    if task in ("mnist_600", "mnist_6000"):
        per_class = 60 if task == "mnist_600" else 600
        keep = np.concatenate(
            [rng.permutation(np.flatnonzero(y_train == c))[:per_class] for c in range(10)]
        )
        x_train, y_train = x_train[keep], y_train[keep]
    passes = math.ceil(count / len(x_train))
    order = np.concatenate([rng.permutation(len(x_train)) for _ in range(passes)])[:count]
    if task == "affine":
        # Each pass over the data places every digit anew.
        x = np.concatenate(
            [
                affine.expand(x_train[order[i : i + len(x_train)]], seed=seed * 1000 + p)[0]
                for p, i in enumerate(range(0, count, len(x_train)))
            ]
        )
        tests = {
            "expanded": (affine.expand(x_test, seed=1)[0], y_test),
            "affnist": (affine.affnist_test_set(x_test, y_test, seed=2)["images"], y_test),
        }
        return x[..., None], y_train[order], tests
    if task == "multimnist":
        pairs = math.ceil(count / len(x_train))
        train = multimnist.test_set(x_train, y_train, pairs_per_digit=pairs, seed=100 + seed)
        test = multimnist.test_set(x_test, y_test, pairs_per_digit=1, seed=1)
        order = rng.permutation(len(train["images"]))[:count]
        x, y = train["images"][order][..., None], train["multi_hot"][order]
        return x, y, {"multimnist": (test["images"][..., None], test["labels"])}
    return x_train[order][..., None], y_train[order], {"test": (x_test[..., None], y_test)}


class _Throughput:
    """Training images/s after the first 10% of steps (compilation and warm-up).

    With several steps per call of the compiled step, a callback sees the
    last step of each call: the rate is counted between two such ends.
    """

    def __init__(self, steps, batch):
        import keras

        outer = self
        self.skip, self.batch = max(1, steps // 10), batch
        self.first = self.last = None

        class Callback(keras.callbacks.Callback):
            def on_train_batch_end(self, step, logs=None):
                now = time.perf_counter()
                if outer.first is None and step + 1 >= outer.skip:
                    outer.first = (step, now)
                outer.last = (step, now)

        self.callback = Callback()

    def images_per_second(self):
        if self.first is None or self.last[0] <= self.first[0]:
            return None
        (first_step, start), (last_step, end) = self.first, self.last
        return round((last_step - first_step) * self.batch / (end - start), 1)


def _scores(model, x):
    from keras_capsules.serving import ServingSpec

    return ServingSpec.of(model).heads(model.predict(x, batch_size=500, verbose=0))[0]


def _accuracy(model, x, y):
    return float(np.mean(np.argmax(_scores(model, x), axis=-1) == y))


def _multimnist_accuracy(model, x, labels):
    top2 = np.sort(np.argsort(_scores(model, x), axis=-1)[:, -2:], axis=-1)
    return float(np.mean(np.all(top2 == np.sort(labels, axis=-1), axis=-1)))


def _robustness(model, x, y):
    from keras_capsules import attacks

    result = {"clean": _accuracy(model, x, y)}
    for eps in EPSILONS:
        adversarial = attacks.fgsm(model, x, y, eps, batch_size=500)
        result[f"fgsm_{eps}"] = _accuracy(model, adversarial, y)
        adversarial = attacks.pgd(model, x, y, eps, steps=PGD_STEPS, seed=0, batch_size=500)
        result[f"pgd_{eps}"] = _accuracy(model, adversarial, y)
    return result


def one_run(args):
    variant, task, seed = args.run.split(",")
    seed = int(seed)
    import keras

    from keras_capsules._compile import compile_again
    from keras_capsules.diagnostics import routing_statistics

    keras.utils.set_random_seed(seed)
    count = args.steps * args.batch
    x, y, tests = training_data(task, seed, count, args.smoke)
    input_shape = x.shape[1:]
    model = build(variant, input_shape)
    if task == "multimnist" and variant == "cnn":
        # Cross-entropy on half of each multi-hot label: both digits' probability to 1/2.
        model = compile_again(model, loss="categorical_crossentropy", metrics=[])
        y = y / 2.0
    elif task == "multimnist":
        model = compile_again(model, metrics=[])
    speed = _Throughput(args.steps, args.batch)
    began = time.perf_counter()
    model.fit(
        x, y, batch_size=args.batch, epochs=1, shuffle=False, verbose=0, callbacks=[speed.callback]
    )
    train_seconds = time.perf_counter() - began
    record = {
        "variant": variant,
        "task": task,
        "seed": seed,
        "parameters": int(model.count_params()),
        "head_parameters": int(model.head_parameters()),
        "train_seconds": round(train_seconds, 1),
        "images_per_second": speed.images_per_second(),
        "accuracy": {},
    }
    for name, (x_test, y_test) in tests.items():
        score = _multimnist_accuracy if task == "multimnist" else _accuracy
        record["accuracy"][name] = score(model, x_test, y_test)
    if task == "mnist":
        x_test, y_test = tests["test"]
        n = args.attack_size
        record["robustness"] = _robustness(model, x_test[:n], y_test[:n])
        if variant != "cnn":
            m = args.stats_size
            record["routing_statistics"] = routing_statistics(model, x_test[:m], y_test[:m])
    record["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    record["backend"] = keras.backend.backend()
    if task == "cost":
        record["cpu"] = _cpu()
    print(json.dumps(record))


def _cpu():
    """The CPU's model name, its core count and whether it has AVX-512."""
    name, flags = "unknown", ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and name == "unknown":
                    name = line.split(":", 1)[1].strip()
                if line.startswith("flags") and not flags:
                    flags = line
    except OSError:
        pass
    return {"model": name, "cores": os.cpu_count(), "avx512": "avx512f" in flags}


# The tables -----------------------------------------------------------------


def _mean_std(values):
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    digits = 0 if min(abs(v) for v in values) >= 100 else 2
    if len(values) == 1:
        return f"{values[0]:,.{digits}f}"
    return f"{np.mean(values):,.{digits}f} ± {np.std(values, ddof=1):,.{digits}f}"


def summary(args):
    records = list(read_results(args.results, protocol(args)).values())
    by = {}
    for r in records:
        by.setdefault((r["variant"], r["task"]), []).append(r)
    variants = [v for v in args.variants if any(k[0] == v for k in by)]

    def table(title, columns):
        print(f"\n{title}\n")
        print("| variant | " + " | ".join(name for name, _, _ in columns) + " |")
        print("| --- |" + " --- |" * len(columns))
        for v in variants:
            cells = []
            for _, task, read in columns:
                runs = by.get((v, task), [])
                cell = _mean_std([read(r) for r in runs]) + f" ({len(runs)})"
                cells.append(cell if runs else "-")
            print(f"| {v} | " + " | ".join(cells) + " |")

    def acc(name):
        return lambda r: 100 * r["accuracy"][name]

    table(
        "Test accuracy, % (runs)",
        [
            ("MNIST", "mnist", acc("test")),
            ("Fashion-MNIST", "fashion_mnist", acc("test")),
            ("MNIST, 600 labels", "mnist_600", acc("test")),
            ("MNIST, 6,000 labels", "mnist_6000", acc("test")),
            ("expanded MNIST", "affine", acc("expanded")),
            ("affNIST-style", "affine", acc("affnist")),
            ("MultiMNIST", "multimnist", acc("multimnist")),
        ],
    )
    table(
        "MNIST under attack: accuracy, % (runs)",
        [("clean", "mnist", lambda r: 100 * r["robustness"]["clean"])]
        + [
            (f"{kind.upper()} {eps}", "mnist", _robust(f"{kind}_{eps}"))
            for kind in ("fgsm", "pgd")
            for eps in EPSILONS
        ],
    )

    def only_layer(field):
        def read(r):
            stats = r.get("routing_statistics") or {}
            return next(iter(stats.values()))[field] if stats else None

        return read

    table(
        "Routing statistics on 500 MNIST test digits (runs)",
        [
            ("coupling entropy / max", "mnist", lambda r: _entropy_ratio(r)),
            ("inactive parents", "mnist", only_layer("inactive_fraction")),
            ("same-class agreement", "mnist", only_layer("same_class_agreement")),
        ],
    )
    # Speed and memory come from the --cost runs, each variant alone on the machine.
    cost = args.results.replace(".jsonl", "_cost.jsonl")
    if os.path.exists(cost):
        with open(cost) as f:
            for line in filter(str.strip, f):
                record = json.loads(line)
                by.setdefault((record["variant"], "cost"), []).append(record)
        table(
            f"Cost: training on MNIST, batch {args.batch} (--cost runs)",
            [
                ("parameters", "cost", lambda r: r["parameters"]),
                ("head parameters", "cost", lambda r: r["head_parameters"]),
                ("training images/s", "cost", lambda r: r["images_per_second"]),
                ("peak RSS, MB", "cost", lambda r: r["peak_rss_mb"]),
            ],
        )


def _robust(key):
    return lambda record: 100 * record["robustness"][key]


def _entropy_ratio(record):
    stats = record.get("routing_statistics") or {}
    if not stats:
        return None
    layer = next(iter(stats.values()))
    return layer["entropy"] / layer["max_entropy"]


def main(argv=None):
    args = parse_args(argv)
    if args.run:
        one_run(args)
    elif args.summary:
        summary(args)
    else:
        study(args)


if __name__ == "__main__":
    main()

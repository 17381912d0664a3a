"""Draw each preset's training curve from its metadata: test accuracy and loss by epoch.

One PNG per preset in `--output` (`docs/images/presets/NAME.png`): the test
accuracy on the full test set after every epoch, beside the paper's number
where the paper gives one, and the training loss. With `--runs-dir`, a run of
`experiments/presets.py` that is still going (its `progress.json`) is drawn
beside the shipped preset, labelled with the epochs it has done; a finished run
is the shipped preset itself and is not drawn twice. A preset trained further
from another (its metadata's `start`) has a line where the training resumed. Reads only
JSON: no model is built.

    python experiments/preset_curves.py
    python experiments/preset_curves.py --runs-dir ~/kc-runs  # with runs in progress
"""

import argparse
import json
import os
import sys

_REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _REPOSITORY)

PAPERS = {
    "capsnet_mnist": (99.75, "Sabour et al. 2017"),
    "efficient_capsnet_mnist": (99.84, "Mazzia et al. 2021"),
    "em_capsnet_mnist": (99.56, "Hinton et al. 2018, small model"),
}
"""The paper's test accuracy (%) for each preset, where a paper reports one."""


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--presets-dir", default=os.path.join(_REPOSITORY, "applications", "presets"))
    p.add_argument("--runs-dir", default=None, help="draw runs in progress from here too")
    p.add_argument("--output", default=os.path.join(_REPOSITORY, "docs", "images", "presets"))
    return p.parse_args(argv)


def _read(path):
    with open(path) as f:
        return json.load(f)


def _unfinished_run(runs_dir, name):
    """The history of the run of `name` in `runs_dir` while it has epochs to go, else []."""
    folder = os.path.join(os.path.expanduser(runs_dir), name)
    progress = os.path.join(folder, "progress.json")
    if not os.path.isfile(progress):
        return []
    with open(progress) as f:
        state = json.load(f)
    with open(os.path.join(folder, "recipe.json")) as f:
        epochs = json.load(f)["epochs"]
    if state.get("epochs_done", 0) >= epochs:
        return []
    return state.get("history") or []


def _series(history, key, scale=1.0):
    points = [(row["epoch"], row[key] * scale) for row in history if row.get(key) is not None]
    return [e for e, _ in points], [v for _, v in points]


def draw(name, shipped, running, path, started=None):
    """One figure: accuracy and loss against epoch for the shipped run (and one in progress).

    `started`: the epochs of the preset the run trained further, marked by a line.
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    from keras_capsules._atomic import replacing

    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.2), dpi=100)
    runs = [("shipped", shipped, "C0")]
    if running:
        runs.append((f"run in progress ({running[-1]['epoch']} epochs)", running, "C1"))
    for label, history, colour in runs:
        left.plot(*_series(history, "test_accuracy", 100), marker=".", color=colour, label=label)
        right.plot(*_series(history, "loss"), marker=".", color=colour, label=label)
    if started:
        for axis in (left, right):
            axis.axvline(
                started + 0.5,
                color="grey",
                linestyle=":",
                linewidth=1,
                label=f"trained further after epoch {started}",
            )
    if name in PAPERS:
        value, source = PAPERS[name]
        left.axhline(value, color="k", linestyle="--", linewidth=1, label=f"paper {value}%")
        left.set_title(f"{name}: test accuracy (paper: {source})", fontsize=9)
    else:
        left.set_title(f"{name}: test accuracy", fontsize=9)
    accuracies = [v for _, h, _ in runs for v in _series(h, "test_accuracy", 100)[1]]
    low = sorted(accuracies)[len(accuracies) // 4] if len(accuracies) > 3 else min(accuracies)
    top = max(accuracies + [PAPERS.get(name, (0,))[0]])
    left.set_ylim(low - 0.1 * (top - low + 0.1), top + 0.15 * (top - low + 0.1))
    left.set_xlabel("epoch")
    left.set_ylabel("test accuracy (%)")
    left.legend(fontsize=7, loc="best")
    margins = _series(shipped, "spread_margin")[1]
    right.set_title(
        f"training loss (spread margin raised {margins[0]:.2f} to {margins[-1]:.2f})"
        if margins
        else "training loss",
        fontsize=9,
    )
    right.set_xlabel("epoch")
    right.set_yscale("log")
    right.legend(fontsize=7)
    fig.tight_layout()
    with replacing(path) as partial:
        fig.savefig(partial, format="png")
    plt.close(fig)


def main(argv=None):
    args = parse_args(argv)
    os.makedirs(args.output, exist_ok=True)
    written = []
    for name in sorted(os.listdir(args.presets_dir)):
        metadata = os.path.join(args.presets_dir, name, "metadata.json")
        if not os.path.isfile(metadata):
            continue
        running = _unfinished_run(args.runs_dir, name) if args.runs_dir else []
        path = os.path.join(args.output, f"{name}.png")
        held = _read(metadata)
        # A preset trained further from another starts after that one's epochs.
        started = (held.get("start") or {}).get("epochs")
        draw(name, held.get("history") or [], running, path, started=started)
        written.append(path)
    print(json.dumps({"figures": written}, indent=2))


if __name__ == "__main__":
    main()

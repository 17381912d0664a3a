"""`keras-capsules figures`: the paper's figures for a trained model, as PNG files.

    keras-capsules figures --output figures     # the capsnet_mnist preset
    keras-capsules figures runs/mnist/model.keras --output figures

The test images follow the model's input size (`_images.test_images`); the
drawing is `keras_capsules.visualization`'s.
"""

import os

from keras_capsules._atomic import output_folder
from keras_capsules.cli._images import add_test_image_arguments
from keras_capsules.cli._images import fail
from keras_capsules.cli._images import test_images
from keras_capsules.cli._model import add_model_arguments
from keras_capsules.cli._model import load_model_or_preset
from keras_capsules.cli.argument_types import positive_int

KINDS = ("reconstructions", "dimensions", "multimnist", "routing", "routing_statistics")
FILES = {kind: f"{kind}.png" for kind in KINDS}


def add_parser(commands, catalog):
    """Add the `figures` subcommand and its arguments to `commands` (argparse subparsers)."""
    figures = commands.add_parser(
        "figures", help="draw the paper's figures for a trained model as PNG files"
    )
    add_model_arguments(figures, "a .keras file, e.g. runs/mnist/model.keras")
    figures.add_argument(
        "--kind",
        choices=KINDS + ("all",),
        default="all",
        help="which figure; all draws every one that fits the model and says which it skipped",
    )
    figures.add_argument("--output", default="figures", help="folder for the PNG files")
    figures.add_argument("--count", type=positive_int, default=8, help="images in the grids")
    figures.add_argument("--index", type=int, default=0, help="first test image to draw")
    figures.add_argument(
        "--dims", default=None, help="--kind dimensions: the rows, e.g. 0,3,7 (all)"
    )
    figures.add_argument(
        "--steps",
        default=None,
        help="tweaks, e.g. --steps=-0.1,0,0.1 (the paper: -0.25 to 0.25 by 0.05)",
    )
    figures.add_argument("--reduce", choices=("mean", "sum"), default="mean", help="routing")
    figures.add_argument(
        "--sample",
        type=positive_int,
        default=500,
        help="--kind routing_statistics: test images it averages over; --kind multimnist: "
        "test pairs it picks --count successes and --count failures from (500)",
    )
    figures.add_argument("--dpi", type=positive_int, default=100)
    add_test_image_arguments(figures)
    return figures


def _kinds(args, pairs):
    if args.kind != "all":
        if args.kind == "multimnist" and pairs is None:
            fail("--kind multimnist needs a model trained on MultiMNIST (36x36 input)", "figures")
        return [args.kind]
    kinds = ["reconstructions", "dimensions", "routing", "routing_statistics"]
    return kinds + ["multimnist"] if pairs is not None else kinds


def _parse_numbers(text, kind, name):
    try:
        return [kind(v) for v in text.split(",") if v.strip()]
    except ValueError:
        fail(f"--{name} takes comma-separated numbers, got {text!r}", "figures")


def run(args):
    """Write the figures `args.kind` asks for into `args.output`; print their paths."""
    import numpy as np

    from keras_capsules import visualization

    model, data = load_model_or_preset(args, "figures")
    x, labels, pairs = test_images(model, args, "figures", data)
    if not 0 <= args.index < len(x):
        fail(f"--index must be in [0, {len(x)}), got {args.index}", "figures")
    stop = args.index + args.count
    one = x[args.index]
    dims = None if args.dims is None else _parse_numbers(args.dims, int, "dims")
    steps = visualization.PAPER_STEPS
    if args.steps is not None:
        steps = np.asarray(_parse_numbers(args.steps, float, "steps"))
    draw = {
        "reconstructions": lambda path: visualization.reconstruction_grid(
            model, x[args.index : stop], path=path, dpi=args.dpi
        ),
        "dimensions": lambda path: visualization.perturbation_grid(
            model, one, dims=dims, steps=steps, path=path, dpi=args.dpi
        ),
        "multimnist": lambda path: visualization.multimnist_successes_and_failures(
            model,
            x[args.index : args.index + args.sample],
            pairs[args.index : args.index + args.sample],
            count=args.count,
            path=path,
            dpi=args.dpi,
        ),
        "routing": lambda path: visualization.routing_heatmap(
            model, one, reduce=args.reduce, path=path, dpi=args.dpi
        ),
        "routing_statistics": lambda path: visualization.routing_statistics_plot(
            model,
            x[: args.sample],
            labels=None if labels is None else labels[: args.sample],
            path=path,
            dpi=args.dpi,
        ),
    }
    output_folder(args.output, "figures")
    drawn = 0
    for kind in _kinds(args, pairs):
        path = os.path.join(args.output, FILES[kind])
        try:
            draw[kind](path)
        except ValueError as error:
            if args.kind != "all":
                fail(f"{kind}: {error}", "figures")
            # All the kinds that fit the model: say which does not, and why.
            print(f"skipped {kind}: {error}")
            continue
        print(path)
        drawn += 1
    if not drawn:
        fail("no figure fits this model", "figures")
    return 0

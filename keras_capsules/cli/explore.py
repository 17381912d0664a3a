"""`keras-capsules explore`: the capsule explorer, a Gradio page, for a trained model.

    keras-capsules explore                  # the capsnet_mnist preset
    keras-capsules explore --preset efficient_capsnet_mnist
    keras-capsules explore runs/mnist/model.keras

Pick or draw a digit and perturb its capsule with sliders
(`keras_capsules.visualization.launch_explorer`); needs the `explore` extra.
"""

from keras_capsules.cli._images import add_test_image_arguments
from keras_capsules.cli._images import fail
from keras_capsules.cli._images import test_images
from keras_capsules.cli._model import add_model_arguments
from keras_capsules.cli._model import load_model_or_preset
from keras_capsules.cli.argument_types import positive_int


def add_parser(commands, catalog):
    """Add the `explore` subcommand and its arguments to `commands` (argparse subparsers)."""
    explore = commands.add_parser(
        "explore",
        help="serve the capsule explorer: pick or draw a digit, perturb its capsule with sliders",
    )
    add_model_arguments(explore, "a .keras file with a decoder")
    explore.add_argument("--host", default="127.0.0.1", help="interface (127.0.0.1: this machine)")
    explore.add_argument("--port", type=int, default=7860)
    explore.add_argument(
        "--examples", type=positive_int, default=100, help="test images to pick from"
    )
    add_test_image_arguments(explore)
    explore.add_argument("--open", action="store_true", help="open the page in a browser")
    return explore


def run(args):
    """Serve the explorer for `args.model_path` until interrupted."""
    import importlib.util

    if importlib.util.find_spec("gradio") is None:
        raise SystemExit(
            "keras-capsules explore needs Gradio: pip install 'keras-capsules[explore]'"
        )
    from keras_capsules.visualization import launch_explorer

    model, data = load_model_or_preset(args, "explore")
    x, labels, pairs = test_images(model, args, "explore", data)
    if pairs is not None:
        labels = None  # two classes per image: the picker shows none
    n = min(args.examples, len(x))
    try:
        launch_explorer(
            model,
            x[:n],
            None if labels is None else labels[:n],
            host=args.host,
            port=args.port,
            open_browser=args.open,
        )
    except ValueError as error:
        fail(str(error), "explore")
    except OSError as error:  # the port is taken or cannot be bound
        fail(f"cannot serve on {args.host}:{args.port} (--host, --port): {error}", "explore")
    return 0

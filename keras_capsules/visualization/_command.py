"""`keras-capsules figures` and `explore`: their work (the arguments are in `keras_capsules.cli`).

The test images are chosen from the model's input size: 28x28 models get the
MNIST test set, 36x36 models the MultiMNIST test set, and 40x40 models the
MNIST test digits placed on a 40x40 canvas (`affine.expand`).
"""

import os

import numpy as np

KINDS = ("reconstructions", "dimensions", "multimnist", "routing")
FILES = {kind: f"{kind}.png" for kind in KINDS}


def _fail(message, command="figures"):
    raise SystemExit(f"keras-capsules {command}: {message}")


def _test_images(model, args, command="figures"):
    """`(images, labels, pair_labels)`: test images of the model's size and their classes."""
    from keras_capsules.datasets import affine
    from keras_capsules.datasets import mnist
    from keras_capsules.datasets import multimnist

    _, (x_test, y_test) = mnist.load_data(args.data_dir)
    size = tuple(model.image_shape)
    if size == (28, 28, 1):
        return x_test, y_test, None
    if size == (36, 36, 1):
        test = multimnist.test_set(x_test, y_test, seed=args.seed, rule=args.overlay)
        return test["images"], None, test["labels"]
    if size == (40, 40, 1):
        images, _ = affine.expand(x_test, seed=args.seed)
        return images, y_test, None
    _fail(f"no test images for a model of input shape {size}: it needs 28, 36 or 40 px", command)


def _kinds(args, pairs):
    if args.kind != "all":
        if args.kind == "multimnist" and pairs is None:
            _fail("--kind multimnist needs a model trained on MultiMNIST (36x36 input)")
        return [args.kind]
    kinds = ["reconstructions", "dimensions", "routing"]
    return kinds + ["multimnist"] if pairs is not None else kinds


def _parse_numbers(text, kind, name):
    try:
        return [kind(v) for v in text.split(",") if v.strip()]
    except ValueError:
        _fail(f"--{name} takes comma-separated numbers, got {text!r}")


def run(args):
    """Write the figures `args.kind` asks for into `args.output`; print their paths."""
    from keras_capsules import visualization
    from keras_capsules.cli import _load_model

    model = _load_model(args.model_path)
    x, _, pairs = _test_images(model, args)
    if not 0 <= args.index < len(x):
        _fail(f"--index must be in [0, {len(x)}), got {args.index}")
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
        "multimnist": lambda path: visualization.multimnist_reconstructions(
            model, x[args.index : stop], labels=pairs[args.index : stop], path=path, dpi=args.dpi
        ),
        "routing": lambda path: visualization.routing_heatmap(
            model, one, reduce=args.reduce, path=path, dpi=args.dpi
        ),
    }
    os.makedirs(args.output, exist_ok=True)
    for kind in _kinds(args, pairs):
        path = os.path.join(args.output, FILES[kind])
        try:
            draw[kind](path)
        except ValueError as error:
            _fail(f"{kind}: {error}")
        print(path)
    return 0


def explore(args):
    """Serve the explorer for `args.model_path` until interrupted."""
    import importlib.util

    from keras_capsules.cli import _load_model
    from keras_capsules.visualization import launch_explorer

    if importlib.util.find_spec("gradio") is None:
        raise SystemExit(
            "keras-capsules explore needs Gradio: pip install 'keras-capsules[explore]'"
        )
    model = _load_model(args.model_path)
    x, labels, pairs = _test_images(model, args, "explore")
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
        _fail(str(error), "explore")
    except OSError as error:  # the port is taken or cannot be bound
        _fail(f"cannot serve on {args.host}:{args.port} (--host, --port): {error}", "explore")
    return 0

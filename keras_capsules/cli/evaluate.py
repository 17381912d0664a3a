"""`keras-capsules evaluate`: a `.keras` model's or a preset's loss and accuracy on its test set.

    keras-capsules evaluate runs/mnist/model.keras
    keras-capsules evaluate --preset efficient_capsnet_fashion_mnist
    keras-capsules evaluate                # the capsnet_mnist preset

A preset is evaluated on the data set it was trained on. A `.keras` model
whose input is a stereo pair (two channels) is evaluated on smallNORB from
`--data-dir`, any other on MNIST.
"""

import json

from keras_capsules.cli._model import add_model_arguments
from keras_capsules.cli._model import load_model_or_preset
from keras_capsules.cli._types import data_dir
from keras_capsules.cli._types import positive_int


def add_parser(commands):
    """Add the `evaluate` subcommand and its arguments to `commands` (argparse subparsers)."""
    evaluate = commands.add_parser(
        "evaluate", help="evaluate a saved .keras model or a preset on its test set"
    )
    add_model_arguments(evaluate)
    evaluate.add_argument("--data-dir", type=data_dir, default=None)
    evaluate.add_argument("--batch-size", type=positive_int, default=32)
    evaluate.add_argument("--test-size", type=positive_int, default=None)
    return evaluate


def run(args):
    """Run `keras-capsules evaluate` with parsed arguments; return the exit status."""
    model, data = load_model_or_preset(args, "evaluate")
    norb = model.input_shape[-1] == 2  # a stereo pair: smallNORB
    try:
        if norb:
            from keras_capsules.datasets import smallnorb

            _, (x_test, y_test, _) = smallnorb.load_data(args.data_dir)
        else:
            from keras_capsules import datasets

            _, (x_test, y_test) = getattr(datasets, data or "mnist").load_data(args.data_dir)
    except ValueError as error:
        raise SystemExit(f"keras-capsules evaluate: {error}") from None
    x_test, y_test = x_test[: args.test_size], y_test[: args.test_size]
    if len(x_test) == 0:
        raise SystemExit(
            f"keras-capsules evaluate: {args.data_dir or 'the data'} holds no test images"
        )
    if norb:
        test = smallnorb.test_pipeline(x_test, y_test, args.batch_size)
        results = model.evaluate(test, return_dict=True)
    else:
        x_test = x_test[..., None]
        results = model.evaluate(x_test, y_test, batch_size=args.batch_size, return_dict=True)
    print(json.dumps({k: float(v) for k, v in results.items()}, indent=2))
    print(f"Test accuracy: {results['accuracy']:.4f} ({len(x_test)} images)")
    return 0

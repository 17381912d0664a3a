"""The `keras-capsules` argument parser: one subcommand per module of `keras_capsules.cli`.

Building it imports those modules, which import neither Keras nor TensorFlow
at import time, so `keras-capsules --help` answers at once.
"""

import argparse

from keras_capsules.cli import evaluate
from keras_capsules.cli import explore
from keras_capsules.cli import export
from keras_capsules.cli import figures
from keras_capsules.cli import serve
from keras_capsules.cli import train
from keras_capsules.cli import tune

# In the order `--help` lists them.
COMMANDS = {
    "train": train,
    "evaluate": evaluate,
    "export": export,
    "serve": serve,
    "figures": figures,
    "explore": explore,
    "tune": tune,
}


def build_parser(catalog):
    """The parser of `keras-capsules`; `args.command` names the subcommand's module.

    `catalog` (a `keras_capsules.cli.catalog.Catalog`) names the architectures
    and hypermodels `train` and `tune` take.
    """
    parser = argparse.ArgumentParser(
        prog="keras-capsules", description="Train, evaluate, export and serve capsule networks."
    )
    parser.add_argument(
        "--verbose",
        dest="show_tensorflow_banner",
        action="store_true",
        help="show the banner TensorFlow prints when it starts (left out by default)",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    for module in COMMANDS.values():
        module.add_parser(commands, catalog)
    return parser

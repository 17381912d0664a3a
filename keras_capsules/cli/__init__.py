"""The `keras-capsules` command: train, evaluate, export and serve capsule networks.

    keras-capsules train capsnet --epochs 1 --output runs/mnist
    keras-capsules evaluate runs/mnist/model.keras
    keras-capsules export runs/mnist/model.keras models/capsnet
    keras-capsules export runs/mnist/model.keras capsnet.onnx --format onnx
    keras-capsules serve models/capsnet --port 8501
    keras-capsules tune capsnet --tuner hyperband --max-trials 20 --output runs/tune
    keras-capsules figures runs/mnist/model.keras --output figures
    keras-capsules explore runs/mnist/model.keras

Each subcommand is a module of this package (`train`, `evaluate`, `export`,
`serve`, `figures`, `explore`, `tune`) with `add_parser(commands, catalog)`,
its arguments, and `run(args)`, its work. The models the commands build and
load come from a `keras_capsules.cli.catalog.Catalog` that the installed
models declare (`applications` does), so that this package names none.
"""

import os
import sys

__all__ = ["main"]


def main(argv=None, catalog=None):
    """Run the `keras-capsules` command with the arguments `argv`.

    TensorFlow's C++ info logs are left out (`TF_CPP_MIN_LOG_LEVEL=1`) unless
    the environment sets `TF_CPP_MIN_LOG_LEVEL`, and so is the banner its
    libraries print on import (oneDNN's note, the CPU features), unless
    `keras-capsules --verbose` asks for them. TensorFlow's pooling CPU
    allocator is selected as on any import of `keras_capsules`
    (`keras_capsules.use_pooled_cpu_allocator` says when, and how to keep
    TensorFlow's default).

    Args:
        argv: the arguments after `keras-capsules`, as a list of strings;
            `None` reads `sys.argv[1:]`. `--verbose` before the command
            shows TensorFlow's start-up banner.
        catalog: the `keras_capsules.cli.catalog.Catalog` of the models the
            commands offer; `None` loads the one the installed distributions
            declare (`applications.applications_catalog.CATALOG`).

    Returns:
        The exit status, 0 on success. A usage error exits through argparse
        (status 2, the message on standard error); a failure the command
        explains raises `SystemExit` with a one-line message.

    Example:

    >>> from keras_capsules.cli import main
    >>> main(["train", "capsnet", "--epochs", "0"])  # on stderr: ... --epochs: must be ...
    Traceback (most recent call last):
    ...
    SystemExit: 2
    """
    from keras_capsules.cli._parser import COMMANDS
    from keras_capsules.cli._parser import build_parser
    from keras_capsules.cli._quiet import import_tensorflow_quietly
    from keras_capsules.cli.catalog import installed_catalog

    # TensorFlow's C++ info logs stay out of the command's output unless the user
    # sets TF_CPP_MIN_LOG_LEVEL, and its import banner unless --verbose comes first;
    # loading the catalog imports the models, and TensorFlow with them.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] != ["--verbose"]:
        import_tensorflow_quietly()
    catalog = installed_catalog() if catalog is None else catalog
    parser = build_parser(catalog)
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # a command may say why, e.g. an option of another architecture
        explain = getattr(COMMANDS[args.command], "unknown_arguments", None)
        message = explain(args, unknown, catalog) if explain is not None else None
        if message is None:
            parser.error(f"unrecognized arguments: {' '.join(unknown)}")
        print(message, file=sys.stderr)
        raise SystemExit(2)
    args.catalog = catalog
    return COMMANDS[args.command].run(args)

"""`keras-capsules export`: a saved `.keras` model as a versioned SavedModel, ONNX or LiteRT.

    keras-capsules export runs/mnist/model.keras models/capsnet
    keras-capsules export runs/mnist/model.keras capsnet.onnx --format onnx
    keras-capsules export runs/mnist/model.keras capsnet.tflite --format litert
    keras-capsules export runs/bf16/model.keras capsnet.tflite --format litert --float32

A SavedModel (the default) goes to `output/<version>`, the layout TF Serving
and `keras-capsules serve` read (`keras_capsules.serving.export_saved_model`).
ONNX and LiteRT are one file, `output` itself (`export_onnx`, `export_litert`).
`--float32` exports a float32 copy of a mixed-precision model (`float32_copy`).
"""

import contextlib
import os
import sys
import threading

from keras_capsules._atomic import reason
from keras_capsules.cli._model import load_model
from keras_capsules.cli.argument_types import positive_int

FORMATS = ("saved_model", "onnx", "litert")
SUFFIXES = {"onnx": ".onnx", "litert": ".tflite"}


def add_parser(commands, catalog):
    """Add the `export` subcommand and its arguments to `commands` (argparse subparsers)."""
    export = commands.add_parser(
        "export", help="export a saved .keras model as a SavedModel, ONNX or LiteRT file"
    )
    export.add_argument("model_path")
    export.add_argument(
        "output_dir",
        metavar="output",
        help="saved_model: base directory, the model goes to output/<version>; "
        "onnx, litert: the file to write (.onnx, .tflite)",
    )
    export.add_argument(
        "--format",
        choices=FORMATS,
        default="saved_model",
        help="saved_model (default; TF Serving, KServe), onnx (ONNX Runtime) or litert "
        "(LiteRT's interpreter)",
    )
    export.add_argument(
        "--version",
        type=positive_int,
        default=None,
        help="SavedModel version number (default: the next one)",
    )
    export.add_argument(
        "--output-kind",
        choices=("probabilities", "logits"),
        default="probabilities",
        help="what the model's class scores are; logits are exported as their softmax",
    )
    export.add_argument(
        "--float32",
        action="store_true",
        help="export a float32 copy of a mixed_float16 or mixed_bfloat16 model (LiteRT and "
        "ONNX Runtime take no bfloat16; LiteRT's builtin operations no float16 either)",
    )
    return export


def run(args):
    """Run `keras-capsules export` with parsed arguments; return the exit status."""
    from keras_capsules import serving

    if args.format != "saved_model":
        if args.version is not None:
            raise SystemExit(
                "keras-capsules export: --version numbers SavedModel folders; "
                f"a {args.format} export is the one file named by output"
            )
        if not args.output_dir.endswith(SUFFIXES[args.format]):
            raise SystemExit(
                f"keras-capsules export: a {args.format} export is one file whose name ends "
                f"in {SUFFIXES[args.format]}; got {args.output_dir}"
            )
    _check_output(args)  # before the model is loaded and converted (seconds)
    if args.format == "saved_model":
        _remove_stale(args.output_dir)
    model = load_model(args.model_path)
    with _holding_stderr() as held:
        try:
            if args.float32:
                model = serving.float32_copy(model)
            if args.format == "saved_model":
                serving.export_saved_model(
                    model, args.output_dir, version=args.version, output_kind=args.output_kind
                )
            else:
                formats = {"onnx": serving.export_onnx, "litert": serving.export_litert}
                formats[args.format](model, args.output_dir, output_kind=args.output_kind)
        except (FileExistsError, ImportError, RuntimeError, ValueError) as error:
            raise SystemExit(f"keras-capsules export: {error}") from None
        except OSError as error:  # a full disk, a folder removed meanwhile
            held.clear()  # TensorFlow's logs of the failed write say it again, at length
            raise SystemExit(
                f"keras-capsules export: cannot write {args.output_dir}: {reason(error)}"
            ) from None
    return 0


def _remove_stale(output):
    """Remove the versions a killed export left half written in `output`, saying so."""
    from keras_capsules._atomic import remove_stale

    removed = remove_stale(output)
    if removed:
        print(
            f"Removed {len(removed)} version folder(s) that an export ended before finishing: "
            f"{', '.join(os.path.join(output, name) for name in removed)}",
            flush=True,
        )


class _Held:
    """What `_holding_stderr` holds: the bytes written so far, in `chunks`."""

    def __init__(self):
        self.chunks = []

    def clear(self):
        """Drop what was written so far."""
        self.chunks.clear()


@contextlib.contextmanager
def _holding_stderr():
    """Hold what is written to the standard error, TensorFlow's C++ logs too, until the end.

    Standard error (file descriptor 2) goes to a pipe, read by a thread,
    and what came is written out when the block ends, unless `clear` dropped
    it: TensorFlow logs a failed write (three lines, one per layer of it)
    before raising the error that the command reports in one line.
    """
    sys.stderr.flush()
    try:
        kept = os.dup(2)
    except OSError:  # no standard error to hold
        yield _Held()
        return
    held = _Held()
    reader, writer = os.pipe()
    os.dup2(writer, 2)
    os.close(writer)

    def drain():
        for chunk in iter(lambda: os.read(reader, 65536), b""):
            held.chunks.append(chunk)

    thread = threading.Thread(target=drain, daemon=True)
    thread.start()
    try:
        yield held
    finally:
        sys.stderr.flush()
        os.dup2(kept, 2)  # closes the pipe's last writer: the thread reads to its end
        os.close(kept)
        thread.join()
        os.close(reader)
        data = b"".join(held.chunks)
        while data:
            data = data[os.write(2, data) :]


def _check_output(args):
    """End the command, naming the path, unless the export can be written where asked."""
    from keras_capsules._atomic import check_writable

    output = args.output_dir
    if args.format == "saved_model":
        folder = output if os.path.isdir(output) else os.path.dirname(os.path.abspath(output))
        if os.path.exists(output) and not os.path.isdir(output):
            raise SystemExit(f"keras-capsules export: {output} is a file, not a folder")
        if not os.path.isdir(folder):
            ancestor = folder
            while not os.path.isdir(ancestor):  # the folders are created: check the first
                ancestor = os.path.dirname(ancestor)
            folder = ancestor
    else:
        if os.path.isdir(output):
            raise SystemExit(
                f"keras-capsules export: {output} is a folder; a {args.format} export is one file"
            )
        folder = os.path.dirname(os.path.abspath(output))
        if not os.path.isdir(folder):
            raise SystemExit(f"keras-capsules export: the folder of {output} does not exist")
    check_writable(folder, "export")

"""TensorFlow's start-up banner kept out of the commands' output.

TensorFlow's C++ libraries print their banner (oneDNN's note, the CPU
features it was not built for, absl's note on logging) to the process's
standard error while `import tensorflow` loads them, before any logging
setting applies: `TF_CPP_MIN_LOG_LEVEL` does not hold it back. The commands
import TensorFlow once, first, with standard error caught, and pass on every
line but the banner's.
"""

import importlib.util
import os
import sys
import tempfile

BANNER = (
    "All log messages before absl::InitializeLog() is called",
    "port.cc:",  # oneDNN custom operations are on ...
    "cpu_feature_guard.cc:",  # This TensorFlow binary is optimized ...
    "To enable the following instructions:",
    "rebuild TensorFlow with the appropriate compiler flags",
)
"""Text that marks a line of the banner."""


def is_banner(line):
    """Whether `line` of standard error is part of TensorFlow's start-up banner."""
    return any(mark in line for mark in BANNER)


def import_tensorflow_quietly():
    """Import TensorFlow, if installed, passing on what it prints to stderr but its banner.

    Returns:
        The lines left out, for a test or a `--verbose` that wants them.
    """
    if "tensorflow" in sys.modules or importlib.util.find_spec("tensorflow") is None:
        return []
    sys.stderr.flush()
    left_out = []
    with tempfile.TemporaryFile() as caught:
        saved = os.dup(2)
        os.dup2(caught.fileno(), 2)
        try:
            import tensorflow  # noqa: F401
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            text = caught.read().decode("utf-8", errors="replace")
            for line in text.splitlines(keepends=True):
                if is_banner(line):
                    left_out.append(line.rstrip("\n"))
                else:
                    sys.stderr.write(line)
            sys.stderr.flush()
    return left_out

"""Writing files a user keeps so that an interruption never leaves half of one."""

import contextlib
import json
import os
import shutil


@contextlib.contextmanager
def replacing(path):
    """Yield a temporary path beside `path`; on success it replaces `path` in one step.

    The temporary name keeps `path`'s suffix (Keras checks `.keras`) and lives
    in the same folder, so the final `os.replace` is a rename: a process killed
    at any moment leaves either the old file (or none) or the new one, never a
    partial one. A folder (an export) works the same way if `path` does not
    exist yet. On an error the temporary file or folder is removed.
    """
    folder, name = os.path.split(os.path.abspath(path))
    stem, suffix = os.path.splitext(name)
    temporary = os.path.join(folder, f".{stem}.{os.getpid()}.partial{suffix}")
    try:
        yield temporary
        if os.path.isfile(temporary):
            with open(temporary, "rb") as f:
                os.fsync(f.fileno())
        os.replace(temporary, path)
    finally:
        if os.path.isdir(temporary):
            shutil.rmtree(temporary, ignore_errors=True)
        elif os.path.exists(temporary):
            os.remove(temporary)


def write_json(path, value):
    """Write `value` as indented JSON to `path`, atomically."""
    with replacing(path) as temporary:
        with open(temporary, "w") as f:
            json.dump(value, f, indent=2)
            f.write("\n")


def check_writable(folder):
    """Raise `SystemExit` naming `folder` unless files can be created in it."""
    probe = os.path.join(folder, f".write-test.{os.getpid()}")
    try:
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as error:
        raise SystemExit(
            f"keras-capsules: cannot write to the output folder {folder}: {error.strerror}"
        ) from None

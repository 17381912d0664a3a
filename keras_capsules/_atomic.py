"""Writing files a user keeps so that an interruption never leaves half of one."""

import contextlib
import errno
import json
import os
import re
import shutil

# The temporary names of `replacing` (`.model.1234.partial.keras`, `.1.1234.partial`)
# and `check_writable` (`.write-test.1234`): the writer's process id is in the name.
_TEMPORARY_NAMES = (
    re.compile(r"^\.(?P<stem>.+)\.(?P<pid>\d{1,10})\.partial(?P<suffix>\.[^.]+)?$"),
    re.compile(r"^\.write-test\.(?P<pid>\d{1,10})$"),
)


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


def write_bytes(path, data):
    """Write the bytes `data` to `path`, atomically."""
    with replacing(path) as temporary:
        with open(temporary, "wb") as f:
            f.write(data)


def write_json(path, value):
    """Write `value` as indented JSON to `path`, atomically."""
    with replacing(path) as temporary:
        with open(temporary, "w") as f:
            json.dump(value, f, indent=2)
            f.write("\n")


def check_writable(folder, command=None):
    """Raise `SystemExit` naming `folder` unless files can be created in it.

    The message starts `keras-capsules COMMAND:` where `command` is given.
    """
    probe = os.path.join(folder, f".write-test.{os.getpid()}")
    try:
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as error:
        raise SystemExit(
            f"{_prefix(command)}: cannot write to the output folder {folder}: {reason(error)}"
        ) from None


def output_folder(folder, command):
    """Create `folder` and its missing parents, and check files can be written in it.

    Where it cannot be made (a read-only file system, a parent without
    permission, a file in the way) or written to, `keras-capsules COMMAND`
    ends with one line naming the folder and the system's reason.
    """
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as error:
        where = "" if error.filename in (None, folder) else f" ({error.filename})"
        raise SystemExit(
            f"{_prefix(command)}: cannot create the output folder {folder}{where}: {reason(error)}"
        ) from None
    check_writable(folder, command)


def _prefix(command):
    return "keras-capsules" if command is None else f"keras-capsules {command}"


def _writer(name):
    """The process id in a temporary name of `replacing` or `check_writable`, else None."""
    for pattern in _TEMPORARY_NAMES:
        match = pattern.match(name)
        if match:
            return int(match["pid"])
    return None


def _alive(pid):
    """Whether process `pid` runs; where that cannot be told, True."""
    if os.name == "nt" or pid == os.getpid():  # on Windows, signal 0 is CTRL_C_EVENT
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):  # another user's process, or no such number
        return True
    return True


def remove_stale(folder):
    """Remove the temporary files and folders in `folder` of processes that no longer run.

    A process killed while writing leaves its temporary name (`replacing`,
    `check_writable`) behind; that of a process that runs is kept. Returns
    the names removed, sorted.
    """
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    removed = []
    for name in sorted(names):
        pid = _writer(name)
        if pid is None or _alive(pid):
            continue
        path = os.path.join(folder, name)
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.remove(path)
        except FileNotFoundError:  # removed meanwhile
            continue
        removed.append(name)
    return removed


def final_path(path):
    """`path` with a temporary name of `replacing` turned into the name it is written for."""
    folder, name = os.path.split(path)
    match = _TEMPORARY_NAMES[0].match(name)
    if match is None:
        return path
    return os.path.join(folder, match["stem"] + (match["suffix"] or ""))


def reason(error):
    """Why `error`, an `OSError`, happened, in one line: the system's words for its errno."""
    if error.errno in errno.errorcode:
        return os.strerror(error.errno)
    text = str(error.strerror or error).strip()
    return text.splitlines()[0] if text else type(error).__name__

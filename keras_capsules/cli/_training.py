"""What `train` keeps in its output folder: the history, the backup, the model and `run.json`.

`fit_callbacks` are the callbacks of a training session; `usable_backup`
repairs or sets aside a damaged backup before Keras reads it; `previous_run`
compares the options with those `run.json` recorded, and `check_same_data`
the data's fingerprint with the one it recorded.
"""

import contextlib
import hashlib
import json
import os
import shutil
import socket
import time

from keras_capsules._atomic import replacing
from keras_capsules._compat import keras as keras_compat

# Options that do not change what a run trains: they may differ between the
# sessions of one run.
SESSION_OPTIONS = (
    "catalog",
    "command",
    "epochs",
    "output",
    "verbose",
    "data_dir",
    "test_size",
    "fresh",
    "steps_per_execution",
)
RUN_FILES = ("backup", "model.keras", "metrics.json", "history.csv", "run.json")


LOCK_FILE = ".lock"


@contextlib.contextmanager
def locked(output):
    """Hold `output`'s lock for a run; refuse, naming the holder, if another run holds it.

    The lock is an advisory `flock` on `OUTPUT/.lock`, which the system
    releases when the holder exits, however it ends, so a killed run leaves no
    stale lock. The file records the holder (process, host, start time) for
    the message. Where `fcntl` does not exist (Windows), runs are not locked.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    path = os.path.join(output, LOCK_FILE)
    with open(path, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.seek(0)
            holder = f.read().strip() or "another process"
            raise SystemExit(
                f"keras-capsules train: {output} is in use by another run ({holder}); wait for "
                "it to end, stop it, or choose another --output"
            ) from None
        f.seek(0)
        f.truncate()
        f.write(
            f"process {os.getpid()} on {socket.gethostname()}, "
            f"started {time.strftime('%Y-%m-%d %H:%M:%S')}\n"
        )
        f.flush()
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def finite_loss_counter():
    """A callback counting the training steps and those whose loss was NaN or infinite.

    With several steps per call of the compiled step, the logs are those of
    the call's last step and stand for all of its steps.
    """
    import keras
    import numpy as np

    from keras_capsules._steps import steps_run

    class FiniteLossCounter(keras.callbacks.Callback):
        """Counts the training steps and those whose loss was NaN or infinite."""

        def __init__(self):
            super().__init__()
            self.steps = 0
            self.nonfinite = 0
            self._begin = 0

        def on_train_batch_begin(self, batch, logs=None):
            self._begin = batch

        def on_train_batch_end(self, batch, logs=None):
            steps = steps_run(self, self._begin, batch)
            self.steps += steps
            if logs and "loss" in logs and not np.isfinite(float(logs["loss"])):
                self.nonfinite += steps

    return FiniteLossCounter()


def history_keeper(history_path):
    """A callback keeping `history.csv` to the epochs whose training the weights contain."""
    import keras

    class HistoryKeeper(keras.callbacks.Callback):
        """Keeps `history.csv` to the epochs whose training the weights contain.

        `CSVLogger` writes an epoch's row before `BackupAndRestore` saves
        that epoch, so a run killed between the two has a row for an epoch it
        trains again when it resumes. At the first epoch of a run, the rows
        from that epoch on are dropped (the file is cut in place: `CSVLogger`
        holds it open for appending).
        """

        def __init__(self):
            super().__init__()
            self.started = False

        def on_epoch_begin(self, epoch, logs=None):
            if self.started:
                return
            self.started = True
            if epoch > 0:
                print(
                    f"Resumed at epoch {epoch + 1}: the backup holds epochs 1-{epoch}", flush=True
                )
            if not os.path.exists(history_path):
                return
            with open(history_path, "r+", newline="") as f:
                lines = f.readlines()
                kept = lines[:1] + [line for line in lines[1:] if _row_epoch(line) < epoch]
                if len(kept) < len(lines):
                    f.seek(0)
                    f.writelines(kept)
                    f.truncate()

    return HistoryKeeper()


def _row_epoch(line):
    try:
        return int(line.split(",", 1)[0])
    except ValueError:  # not a row of CSVLogger's
        return -1


def model_saver(path):
    """A callback saving the model to `path` after every epoch, atomically."""
    import keras

    class ModelSaver(keras.callbacks.Callback):
        """Saves the model to `path` after every epoch, atomically.

        A run resumed from a backup that holds every epoch (killed while the
        last epoch's model was being saved) trains no epoch: the restored model
        is saved when `fit` ends, before the backup is deleted.
        """

        def on_train_begin(self, logs=None):
            self.saved = False

        def on_epoch_end(self, epoch, logs=None):
            self._save()

        def on_train_end(self, logs=None):
            if not self.saved:
                self._save()

        def _save(self):
            with replacing(path) as temporary:
                self.model.save(temporary)
            self.saved = True

    return ModelSaver()


def fit_callbacks(output):
    """The callbacks that keep `output`'s history, backup and model, in the order they must run.

    At the end of an epoch callbacks run in this order: the history row is
    written before the backup, so a killed run never lacks the row of an epoch
    its backup holds; `history_keeper` drops a row the backup lacks. The backup
    is deleted by `train`, once the model and metrics are on disk.
    """
    import keras

    history_path = os.path.join(output, "history.csv")
    return [
        keras.callbacks.CSVLogger(history_path, append=True),
        history_keeper(history_path),
        keras_compat.backup_and_restore(os.path.join(output, "backup")),
        model_saver(os.path.join(output, "model.keras")),
    ]


def close_files(callbacks):
    """Close the files `callbacks` hold open, after `fit` failed (it then ends none of them).

    A file whose buffered lines cannot be written (a full disk) is closed
    all the same: left open, it would report the failure again when Python
    collects it.
    """
    for callback in callbacks:
        handle = getattr(callback, "csv_file", None)  # CSVLogger's history.csv
        if handle is None or handle.closed:
            continue
        try:
            handle.close()
        except OSError:
            pass


def usable_backup(backup_dir):
    """Make `backup_dir` loadable, from its `.bkp` copy if need be, or set it aside.

    Keras's `BackupAndRestore` keeps the previous epoch's weights and metadata
    as `.bkp` files; a run killed while writing the latest ones leaves them
    empty or truncated, and Keras then fails at every resume. An empty folder
    (made for a first backup that was never written) is removed. Returns
    whether a usable backup is in place.
    """
    if not os.path.isdir(backup_dir):
        return False
    if not os.listdir(backup_dir):
        os.rmdir(backup_dir)
        return False
    weights = os.path.join(backup_dir, "latest.weights.h5")
    metadata = os.path.join(backup_dir, "training_metadata.json")
    if _readable_backup(weights, metadata):
        return True
    if _readable_backup(weights + ".bkp", metadata + ".bkp"):
        print(f"The latest backup in {backup_dir} is unreadable: using the one before", flush=True)
        for path in (weights, metadata):
            with replacing(path) as temporary:
                shutil.copyfile(f"{path}.bkp", temporary)
        return True
    aside = f"{backup_dir}.unreadable-{time.strftime('%Y%m%d-%H%M%S')}"
    os.replace(backup_dir, aside)
    print(f"The backup in {backup_dir} is unreadable (moved to {aside}): starting over", flush=True)
    return False


def backup_epoch(backup_dir):
    """The epochs the backup in `backup_dir` holds, which a resumed run starts after (0 if none).

    The backup is made usable first (`usable_backup`), so the number is the
    one Keras's `BackupAndRestore` resumes from.
    """
    if not usable_backup(backup_dir):
        return 0
    with open(os.path.join(backup_dir, "training_metadata.json")) as f:
        return int(json.load(f)["epoch"])


def _readable_backup(weights, metadata):
    import h5py

    try:
        with open(metadata) as f:
            epoch = json.load(f)["epoch"]
        with h5py.File(weights, "r"):
            pass
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return isinstance(epoch, int) and epoch >= 0


def run_config(args):
    """The options of `args` that define the run, as `run.json` holds them."""
    options = {k: v for k, v in sorted(vars(args).items()) if k not in SESSION_OPTIONS}
    return json.loads(json.dumps(options))  # as run.json will hold them (tuples as lists)


def option_changes(recorded, options):
    """The options that differ between two runs, as `--name old -> new`, comma-separated."""
    differing = sorted(k for k in set(options) | set(recorded) if options.get(k) != recorded.get(k))
    return ", ".join(
        f"--{k.replace('_', '-')} {recorded.get(k)!r} -> {options.get(k)!r}" for k in differing
    )


def previous_run(args):
    """How this run relates to what `args.output` holds: the epochs it has finished.

    Returns 0 for a new run (or an interrupted one, which its backup resumes)
    and the number of epochs of a finished run, which `train` continues.
    Refuses, naming the options, a folder whose run was trained with other
    settings, unless `--fresh` clears it first. A `run.json` beside no model
    and no backup (a run that ended before its first epoch) binds nothing.
    """
    config_path = os.path.join(args.output, "run.json")
    config = run_config(args)
    if args.fresh:
        for name in RUN_FILES:
            path = os.path.join(args.output, name)
            if os.path.isdir(path):
                shutil.rmtree(path)
            elif os.path.exists(path):
                os.remove(path)
    recorded = None
    if os.path.exists(config_path) and has_trained(args.output):
        try:
            with open(config_path) as f:
                recorded = json.load(f)["options"]
        except (OSError, ValueError, KeyError, TypeError):
            held = [
                name
                for name in RUN_FILES
                if name != "run.json" and os.path.exists(os.path.join(args.output, name))
            ]
            if held:
                raise SystemExit(
                    f"keras-capsules train: {config_path} is unreadable, so the options of the "
                    f"run in {args.output} ({', '.join(held)}) cannot be checked against these. "
                    "Restore it, choose another --output, or pass --fresh to start a new run "
                    "there (its files are deleted)."
                ) from None
    if recorded is not None and recorded != config:
        changes = option_changes(recorded, config)
        raise SystemExit(
            f"keras-capsules train: {args.output} holds a run trained with other options "
            f"({changes}). Rerun with the recorded options to continue it, choose another "
            "--output, or pass --fresh to start a new run there (its files are deleted)."
        )
    metrics_path = os.path.join(args.output, "metrics.json")
    model_path = os.path.join(args.output, "model.keras")
    backup_dir = os.path.join(args.output, "backup")
    if (os.path.isdir(backup_dir) and os.listdir(backup_dir)) or not os.path.exists(model_path):
        return 0
    try:
        with open(metrics_path) as f:
            return int(json.load(f)["epochs"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def has_trained(output):
    """Whether `output` holds a run to resume or continue: a model or a backup with files."""
    backup_dir = os.path.join(output, "backup")
    return os.path.exists(os.path.join(output, "model.keras")) or bool(
        os.path.isdir(backup_dir) and os.listdir(backup_dir)
    )


def builtin_fingerprint(name, module, train_count, test_count):
    """The fingerprint of a built-in data set (`--data`): which, its sizes, its files' identity.

    `module` is the data set's module; its `FILES` stand for the files: the
    SHA-256 each file of MNIST and Fashion-MNIST is verified against as it is
    read, the names of smallNORB's. The test images are recorded but not
    compared: `--test-size` may change between sessions.
    """
    files = getattr(module, "FILES", None) or {}
    identity = {
        "data": name,
        "train_images": int(train_count),
        "files": dict(sorted(files.items())),
    }
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
    return {"kind": "data", "digest": digest, **identity, "test_images": int(test_count)}


def data_changes(recorded, current):
    """How the data of fingerprint `current` differs from the `recorded` one, or `None`."""
    from keras_capsules.datasets import image_folder

    if not isinstance(recorded, dict) or "digest" not in recorded:
        return "its run.json records no fingerprint of the data it read, so it cannot be checked"
    if recorded["digest"] == current["digest"]:
        return None
    if recorded.get("kind") != current["kind"]:
        return "the run read other data"
    if current["kind"] == "folder":
        return image_folder.folder_changes(recorded, current)
    if recorded.get("train_images") != current["train_images"]:
        return (
            f"{current['data']} has {current['train_images']} training images, the run's had "
            f"{recorded.get('train_images')}"
        )
    return f"the files of {current['data']} changed"


def check_same_data(args, fingerprint):
    """Refuse to resume or continue the run in `args.output` if its data changed.

    The change is named in one line (e.g. "class 'three' added"); a run with
    nothing trained yet is not checked, and one whose `run.json` records no
    fingerprint is refused too. A folder's fingerprint recorded without the
    files' contents (by an older version) is checked by paths, sizes and
    times, and says so.
    """
    if not has_trained(args.output):
        return
    try:
        with open(os.path.join(args.output, "run.json")) as f:
            recorded = json.load(f).get("data")
    except (OSError, ValueError, AttributeError):
        recorded = None  # no readable record: nothing shows the data is the same
    change = data_changes(recorded, fingerprint)
    if change is None and fingerprint.get("content") and not recorded.get("content"):
        print(
            f"The run.json of the run in {args.output} records its images' paths, sizes and "
            "times but not their contents (an older keras-capsules wrote it): checked by "
            "those, and their contents recorded from now on",
            flush=True,
        )
    if change is not None:
        raise SystemExit(
            f"keras-capsules train: the data of the run in {args.output} changed since it was "
            f"trained: {change}. Restore the data to resume or continue the run, choose another "
            "--output, or pass --fresh to start over on this data (the run's files are deleted)."
        )

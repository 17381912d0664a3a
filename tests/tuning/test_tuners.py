import glob
import json
import os
import re
import threading

import keras
import keras_tuner as kt
import pytest

from applications import CapsNetHyperModel
from keras_capsules import cli
from keras_capsules.tuning import best_trials_table
from keras_capsules.tuning import create_tuner
from tests.tuning.helpers import TINY_CAPSNET
from tests.tuning.helpers import fixed


class DenseHyperModel(kt.HyperModel):
    """A tiny non-capsule hypermodel: the oracle mechanics do not depend on the model."""

    def build(self, hp):
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(hp.Int("units", 1, 50))])
        model.compile(loss="mse")
        return model


def events(directory):
    with open(os.path.join(directory, "search", "trial_log.jsonl")) as f:
        return [json.loads(line) for line in f]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"tuner": "grid"}, "tuner"),
        ({"max_trials": 0}, "max_trials"),
        ({"tuner": "random", "max_trials": None}, "max_trials"),
        ({"max_epochs": 1.5}, "max_epochs"),
        ({"factor": 1}, "factor"),
        ({"objective": "val_f1"}, "objective"),
        ({"max_retries_per_trial": -1}, "max_retries_per_trial"),
        ({"lease_seconds": 5, "heartbeat_seconds": 5}, "lease_seconds"),
    ],
)
def test_create_tuner_rejects_bad_arguments(kwargs, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        create_tuner(CapsNetHyperModel(), directory=str(tmp_path), **kwargs)


def chief_tuner(directory, monkeypatch, max_trials=3):
    """A chief's tuner whose oracle the tests drive directly, as the gRPC service would."""
    monkeypatch.setenv("KERASTUNER_ORACLE_IP", "127.0.0.1")
    monkeypatch.setenv("KERASTUNER_ORACLE_PORT", "1")  # nothing listens: no search is run
    monkeypatch.setenv("KERASTUNER_TUNER_ID", "chief")
    return create_tuner(
        DenseHyperModel(),
        "random",
        objective="loss",
        max_trials=max_trials,
        directory=directory,
        lease_seconds=5,
        heartbeat_seconds=1,
        seed=1,
    )


def chief_oracle(directory, monkeypatch, max_trials=3):
    """A chief's oracle, its state saved as `search` does on the chief."""
    tuner = chief_tuner(directory, monkeypatch, max_trials)
    tuner.save()  # a restarted chief reloads this state
    return tuner.oracle


def test_lost_worker_trial_is_retried_and_late_results_ignored(tmp_path, monkeypatch):
    """The chief's oracle, driven directly (the gRPC service only forwards these calls)."""
    directory = str(tmp_path)
    tuner = chief_tuner(directory, monkeypatch)
    oracle = tuner.oracle
    first, second = oracle.create_trial("w0"), oracle.create_trial("w1")
    oracle.get_trial(first.trial_id)  # w0's heartbeat
    assert oracle.reap() == []
    oracle._last_seen["w1"] -= 60  # w1 has been silent for a minute: killed
    assert oracle.reap() == [second.trial_id]
    assert "w1" not in oracle.ongoing_trials and "w1" not in oracle.tuner_ids
    assert oracle.trials[second.trial_id].status == "INVALID"  # one retry left

    late = kt.engine.trial.Trial(oracle.get_space(), trial_id=second.trial_id, status="COMPLETED")
    oracle.end_trial(late)  # w1 was not dead after all: its result comes too late
    assert oracle.trials[second.trial_id].status == "INVALID"
    retried = oracle.create_trial("w2")
    assert retried.trial_id == second.trial_id  # the next free worker runs it again

    # The chief is interrupted: a new one reloads the state and keeps the running
    # trials with their workers (keras-tuner alone would queue them to run again).
    tuner.save()
    chief = create_tuner(
        DenseHyperModel(), "random", objective="loss", max_trials=3, directory=directory
    )
    oracle = chief.oracle
    assert {k: t.trial_id for k, t in oracle.ongoing_trials.items()} == {
        "w0": first.trial_id,
        "w2": second.trial_id,
    }
    assert oracle._retry_queue == [] and oracle.tuner_ids == {"w0", "w2"}
    assert oracle.create_trial("w0").trial_id == first.trial_id  # w0 restarted: same trial
    for trial, loss in ((first, 0.5), (second, 0.25)):
        oracle.update_trial(trial.trial_id, {"loss": loss})
        trial.status = "COMPLETED"
        oracle.end_trial(trial)
    assert not oracle.finished()  # one more trial to go
    log = events(directory)
    assert [e["event"] for e in log if e["trial_id"] == second.trial_id] == [
        "start",
        "lost",
        "end",
        "ignored",
        "start",
        "end",
    ]
    assert log[-1]["status"] == "COMPLETED" and log[-1]["tuner_id"] == "w2"
    table = best_trials_table(chief)
    assert table.splitlines()[0] == "Best trials (loss, min):"
    assert table.splitlines()[2].split() == ["trial", second.trial_id, first.trial_id]
    assert table.splitlines()[3].split() == ["loss", "0.2500", "0.5000"]
    assert table.splitlines()[4].split()[0] == "units"


def complete(oracle, trial, loss):
    oracle.update_trial(trial.trial_id, {"loss": loss})
    trial.status = "COMPLETED"
    oracle.end_trial(trial)


def test_restarted_chief_repairs_a_state_cut_off_between_writes(tmp_path, monkeypatch):
    """The chief killed between its writes: the restarted one runs on, its log made whole."""
    directory = str(tmp_path)
    project = os.path.join(directory, "search")
    oracle = chief_oracle(directory, monkeypatch)
    first = oracle.create_trial("w0")
    complete(oracle, first, 0.5)
    second = oracle.create_trial("w1")
    with open(os.path.join(project, "oracle.json")) as f:
        state = json.load(f)
    with open(os.path.join(project, "trial_log.jsonl")) as f:
        lines = f.readlines()
    oracle.create_trial("w2")  # killed while creating it: its file written, not the state
    # keras-tuner saves the state of an ended trial while still counting it as running,
    # and that of a new trial before its display records it; the chief was killed
    # before it logged the end of the first trial.
    state["ongoing_trials"]["w0"] = first.trial_id
    for name in ("trial_start", "trial_number"):
        del state["display"][name][second.trial_id]
    with open(os.path.join(project, "oracle.json"), "w") as f:
        json.dump(state, f)
    with open(os.path.join(project, "trial_log.jsonl"), "w") as f:
        f.writelines(line for line in lines if '"end"' not in line)

    oracle = chief_oracle(directory, monkeypatch)
    assert {k: t.trial_id for k, t in oracle.ongoing_trials.items()} == {"w1": second.trial_id}
    assert sorted(oracle.trials) == [first.trial_id, second.trial_id]  # the third is forgotten
    assert oracle._retry_queue == [] and oracle.trials[first.trial_id].status == "COMPLETED"
    log = events(directory)
    assert log[-1]["event"] == "end" and log[-1]["recovered"]
    assert (log[-1]["trial_id"], log[-1]["tuner_id"], log[-1]["status"]) == ("0", "w0", "COMPLETED")
    third = oracle.create_trial("w0")  # w0's first trial is over: it gets a new one
    assert third.trial_id == "2" and third.status == "RUNNING"
    complete(oracle, second, 0.25)  # the display had not seen it start
    complete(oracle, third, 0.75)
    oracle.end_trial(third)  # sent again: its answer was cut off by a restart
    assert oracle.finished()
    assert [(e["event"], e["trial_id"]) for e in events(directory)[len(log) :]] == [
        ("start", "2"),
        ("end", "1"),
        ("end", "2"),
    ]


def test_free_workers_wait_for_a_trial_that_may_be_lost(tmp_path, monkeypatch):
    oracle = chief_oracle(str(tmp_path), monkeypatch, max_trials=2)
    first, second = oracle.create_trial("w0"), oracle.create_trial("w1")
    complete(oracle, first, 0.5)
    assert oracle.create_trial("w0").status == "IDLE"  # w1's trial may need it
    assert oracle.tuner_ids == {"w0", "w1"}
    oracle._last_seen["w1"] -= 60
    assert oracle.reap() == [second.trial_id]
    assert oracle.create_trial("w0").trial_id == second.trial_id
    complete(oracle, second, 0.25)
    assert oracle.create_trial("w0").status == "STOPPED" and oracle.finished()


def test_calls_about_unknown_trials_are_answered_and_never_block_the_oracle(tmp_path, monkeypatch):
    oracle = chief_oracle(str(tmp_path), monkeypatch)
    trial = oracle.create_trial("w0")
    assert oracle.get_trial("7").status == "STOPPED"  # a worker's heartbeat
    assert oracle.update_trial("7", {"loss": 1.0}).status == "STOPPED"
    oracle.end_trial(kt.engine.trial.Trial(oracle.get_space(), trial_id="7", status="COMPLETED"))
    assert events(str(tmp_path))[-1]["event"] == "ignored"

    def call(method, *args):  # in a thread of its own, as the gRPC service does
        outcome = []

        def run():
            try:
                outcome.append(method(*args))
            except Exception as error:
                outcome.append(error)

        thread = threading.Thread(target=run)
        thread.start()
        thread.join(timeout=10)
        assert outcome, f"{method.__name__} is blocked"
        return outcome[0]

    assert isinstance(call(oracle.update_trial, trial.trial_id, {"mse": 1.0}), ValueError)
    assert call(oracle.reap) == []  # the failed call released the oracle's lock
    assert call(oracle.get_trial, trial.trial_id).trial_id == trial.trial_id


def test_worker_carries_on_when_the_chief_refuses_a_result(tmp_path, monkeypatch, capsys):
    import grpc

    from keras_capsules.tuning._service import _worker_client

    oracle = chief_oracle(str(tmp_path), monkeypatch)
    monkeypatch.setenv("KERASTUNER_TUNER_ID", "w0")
    client = _worker_client(oracle, idle_seconds=0.1)  # connects on its first call

    class Refused(grpc.RpcError):
        def code(self):
            return grpc.StatusCode.UNKNOWN

        def details(self):
            return "Exception calling application: '2'"

    class Stub:
        def EndTrial(self, request, **kwargs):
            raise Refused()

    client.stub = Stub()
    trial = kt.engine.trial.Trial(client._oracle.get_space(), trial_id="2", status="COMPLETED")
    client.end_trial(trial)
    assert "did not take the end of trial 2 (UNKNOWN" in capsys.readouterr().out


class Interrupt(keras.callbacks.Callback):
    """Raises KeyboardInterrupt (Ctrl-C) when the `at`-th training starts."""

    trainings = []  # keras-tuner copies the callbacks for every trial: count across copies

    def __init__(self, at):
        super().__init__()
        self.at = at

    def on_train_begin(self, logs=None):
        Interrupt.trainings.append(1)
        if len(Interrupt.trainings) == self.at:
            raise KeyboardInterrupt


def test_interrupted_search_resumes(mnist_data, tmp_path, monkeypatch, capsys):
    if keras.backend.backend() != "tensorflow":
        pytest.skip("searches run on TensorFlow in CI (time budget); JAX runs the issue example")
    for name in ("KERASTUNER_ORACLE_IP", "KERASTUNER_ORACLE_PORT", "KERASTUNER_TUNER_ID"):
        monkeypatch.delenv(name, raising=False)
    (x, y), _ = mnist_data
    directory = str(tmp_path)

    def search(callbacks):
        tuner = create_tuner(
            CapsNetHyperModel(decoder_units=None),
            "random",
            max_trials=2,
            max_epochs=1,
            directory=directory,
            hyperparameters=fixed(**TINY_CAPSNET),
            seed=3,
        )
        tuner.search(
            x[:100], y[:100], validation_split=0.2, batch_size=40, callbacks=callbacks, verbose=0
        )
        return tuner

    Interrupt.trainings.clear()
    with pytest.raises(KeyboardInterrupt):
        search([Interrupt(at=2)])  # Ctrl-C in the second trial
    tuner = search([])
    assert "Reloading Tuner" in capsys.readouterr().out
    assert [t.status for t in tuner.oracle.trials.values()] == ["COMPLETED", "COMPLETED"]
    starts = [e["trial_id"] for e in events(directory) if e["event"] == "start"]
    assert starts == ["0", "1", "1"]  # the finished trial is not run again
    assert not glob.glob(os.path.join(directory, "**", "*.partial"), recursive=True)
    table = best_trials_table(tuner).splitlines()  # title, rank, trial, objective, the space
    assert len(table) == 4 + len(tuner.oracle.get_space().space)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--fixed", "width=3"], "unknown hyperparameter 'width'"),
        (["--fixed", "iterations"], "NAME=VALUE"),
        (["--max-trials", "0"], "--max-trials"),
        (["--validation-split", "0.9"], "--validation-split"),
        (["--retrain-epochs", "-1"], "--retrain-epochs"),
        (["--heartbeat-seconds", "200"], "--heartbeat-seconds must be below --lease-seconds"),
        (["--oracle", "127.0.0.1:1"], "--oracle needs --chief or --worker"),
        (["--worker", "chief2"], "--worker"),
        (["--chief", "--oracle", "nowhere"], "HOST:PORT"),
        (["--objective", "val_precision"], "objective"),
    ],
)
def test_tune_command_rejects_bad_arguments(args, message, tmp_path, monkeypatch, capsys):
    for name in ("KERASTUNER_ORACLE_IP", "KERASTUNER_ORACLE_PORT", "KERASTUNER_TUNER_ID"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["tune", "capsnet", "--output", str(tmp_path), *args])
    # The command's own message, or argparse's usage error naming the argument.
    assert re.search(message, f"{exit_info.value.code} {capsys.readouterr().err}")


def test_tune_command_names_an_output_folder_that_cannot_be_made(read_only_folder, monkeypatch):
    for name in ("KERASTUNER_ORACLE_IP", "KERASTUNER_ORACLE_PORT", "KERASTUNER_TUNER_ID"):
        monkeypatch.delenv(name, raising=False)
    output = os.path.join(read_only_folder, "tune")
    with pytest.raises(SystemExit) as refused:  # was a traceback from os.makedirs
        cli.main(["tune", "capsnet", "--tuner", "random", "--output", output])
    assert re.fullmatch(
        rf"keras-capsules tune: cannot create the output folder {re.escape(output)}: "
        "(Read-only file system|Permission denied)",
        str(refused.value.code),
    )


def test_tune_command_refuses_to_mix_searches_and_names_a_torn_state(tmp_path, monkeypatch):
    for name in ("KERASTUNER_ORACLE_IP", "KERASTUNER_ORACLE_PORT", "KERASTUNER_TUNER_ID"):
        monkeypatch.delenv(name, raising=False)
    output = str(tmp_path / "tune")
    search = ["tune", "capsnet", "--tuner", "random", "--max-epochs", "1", "--seed", "0"]
    search += ["--output", output, "--train-size", "200", "--test-size", "100", "--verbose", "0"]
    search += ["--validation-split", "0.25", "--batch-size", "50"]
    search += ["--fixed", "conv_filters=8", "--fixed", "primary_capsule_types=2"]
    assert cli.main([*search, "--max-trials", "1"]) == 0
    # Other options: refused by name before anything is read or trained.
    for change, message in (
        (["--train-size", "300"], r"--train-size 200 -> 300"),
        (["--tuner", "hyperband"], r"--tuner 'random' -> 'hyperband'"),
        (["--fixed", "capsule_dim=8"], r"--fixed \[.*\] -> \[.*'capsule_dim=8'"),
    ):
        with pytest.raises(SystemExit, match=rf"other options \({message}.*--overwrite"):
            cli.main([*search, "--max-trials", "2", *change])
    # A torn state file, the oracle's, a tuner's or a trial's: named, with the ways out.
    project = os.path.join(output, "search")
    trials = sorted(name for name in os.listdir(project) if name.startswith("trial_"))
    for torn in ("tuner0.json", os.path.join(trials[0], "trial.json"), "oracle.json"):
        path = os.path.join(project, torn)
        with open(path) as f:
            whole = f.read()
        with open(path, "w") as f:
            f.write(whole[: len(whole) // 2])
        pattern = re.escape(torn) + r" is unreadable .*Restore it.*--overwrite"
        with pytest.raises(SystemExit, match=pattern):
            cli.main([*search, "--max-trials", "2"])
        if torn != "oracle.json":
            with open(path, "w") as f:
                f.write(whole)
    assert cli.main([*search, "--max-trials", "1", "--overwrite", "--train-size", "300"]) == 0
    with open(os.path.join(output, "search.json")) as f:
        assert json.load(f)["options"]["train_size"] == 300

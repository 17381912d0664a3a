"""A distributed search: a chief and two workers as separate processes on 127.0.0.1."""

import collections
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from tests._local_http import free_port
from tests.conftest import BACKEND

pytestmark = pytest.mark.skipif(
    BACKEND != "tensorflow",
    reason="process tests run on the TensorFlow backend only (CI time budget)",
)

TINY = [
    "--train-size",
    "200",
    "--test-size",
    "100",
    "--validation-split",
    "0.25",
    "--batch-size",
    "50",
    "--fixed",
    "conv_filters=8",
    "--fixed",
    "primary_capsule_types=2",
    "--fixed",
    "primary_capsule_dim=4",
    "--fixed",
    "capsule_dim=4",
    "--fixed",
    "reconstruction_weight=0",
    "--verbose",
    "2",
]
DEADLINE = 300  # seconds for the whole test: it can never hang CI


class Search:
    """The processes of one search, their logs in files, all killed by `close()`."""

    def __init__(self, tmp_path):
        self.tmp_path = tmp_path
        self.output = str(tmp_path / "search")
        self.port = free_port()
        self.processes = []
        self.start = time.time()

    def launch(self, name, *role, epochs=1):
        args = ["tune", "capsnet", "--tuner", "random", "--max-trials", "3"]
        args += ["--max-epochs", str(epochs), "--output", self.output, "--seed", "0"]
        # A lease far above the heartbeat: a loaded CI machine can delay heartbeats
        # by seconds, and a trial must be declared lost only when its worker died.
        args += ["--oracle", f"127.0.0.1:{self.port}", "--lease-seconds", "15"]
        args += ["--heartbeat-seconds", "0.5", *TINY, *role]
        log = open(self.tmp_path / f"{name}.log", "w")
        env = dict(os.environ, PYTHONUNBUFFERED="1", KERAS_BACKEND="tensorflow")
        process = subprocess.Popen(
            [sys.executable, "-m", "keras_capsules.cli", *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        self.processes.append(process)
        return process

    def log(self, name):
        return (self.tmp_path / f"{name}.log").read_text()

    def events(self):
        path = os.path.join(self.output, "search", "trial_log.jsonl")
        if not os.path.exists(path):
            return []
        with open(path) as f:
            return [json.loads(line) for line in f if line.endswith("\n")]

    def wait_for(self, condition, what):
        while not condition(self.events()):
            if time.time() - self.start > DEADLINE:
                raise AssertionError(f"timed out waiting for {what}: {self.events()}")
            time.sleep(0.2)

    def wait(self, process):
        return process.wait(timeout=max(1, DEADLINE - (time.time() - self.start)))

    def close(self):
        for process in self.processes:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=30)


def running(log):
    """The tuner ids running a trial, according to the chief's log of events."""
    owners = {}
    for event in log:
        if event["event"] == "start":
            owners[event["trial_id"]] = event["tuner_id"]
        elif event["event"] in ("end", "lost"):
            owners.pop(event["trial_id"], None)
    return set(owners.values())


def test_chief_and_two_workers_share_trials_and_survive_failures(tmp_path, mnist_data):
    search = Search(tmp_path)
    try:
        chief = search.launch("chief", "--chief")
        # w1 trains its trial for many epochs (it never finishes one: it is killed),
        # so that w0, started once w1 runs its trial, starts one too however slowly.
        w1 = search.launch("w1", "--worker", "w1", epochs=1000)
        search.wait_for(lambda log: running(log) == {"w1"}, "w1 to run a trial")
        w0 = search.launch("w0", "--worker", "w0")

        # A worker is killed in the middle of its trial while the other one runs one.
        search.wait_for(lambda log: running(log) == {"w0", "w1"}, "both workers to run a trial")
        w1.send_signal(signal.SIGKILL)
        w1.wait(timeout=30)

        # The chief is killed once a trial has finished, and started again. w0 asks
        # for its next trial meanwhile: the call may reach the first chief, the second
        # (sent again), or both (its answer cut off by the kill).
        search.wait_for(
            lambda log: any(e["event"] == "end" and e["status"] == "COMPLETED" for e in log),
            "a finished trial",
        )
        chief.send_signal(signal.SIGKILL)
        chief.wait(timeout=30)
        restarted = time.time()
        chief = search.launch("chief2", "--chief")
        assert search.wait(chief) == 0, search.log("chief2")
        assert search.wait(w0) == 0, search.log("w0")
    finally:
        search.close()

    log = search.events()
    assert "Traceback" not in search.log("w0"), search.log("w0")
    ends = {e["trial_id"]: e for e in log if e["event"] == "end"}  # the last end of each
    assert sorted(ends) == ["0", "1", "2"], log
    assert all(e["status"] == "COMPLETED" for e in ends.values()), log
    # w1's trial, and only it, is lost (no live worker's lease ran out); no result
    # comes too late.
    assert [(e["trial_id"], e["tuner_id"]) for e in log if e["event"] == "lost"] == [("0", "w1")]
    assert not [e for e in log if e["event"] == "ignored"], log

    # Each run of a trial, and who ran it: w1's trial is run again by w0, no other
    # trial twice. A start may repeat a run (`resumed`, or `recovered` by the
    # restarted chief): only w0's run started around the chief's kill, on the
    # restarted chief.
    runs = collections.defaultdict(set)
    for e in log:
        if e["event"] == "start":
            runs[e["trial_id"], e["run"]].add(e["tuner_id"])
    assert runs == {("0", 1): {"w1"}, ("0", 2): {"w0"}, ("1", 1): {"w0"}, ("2", 1): {"w0"}}, log
    new = [
        (e["trial_id"], e["run"])
        for e in log
        if e["event"] == "start" and e.get("resumed") is False
    ]
    repeated = [e for e in log if e["event"] == "start" and e.get("resumed") is not False]
    assert len(new) == len(set(new)), log
    assert len({(e["trial_id"], e["run"]) for e in repeated}) <= 1, log
    assert all(e["tuner_id"] == "w0" and e["time"] > restarted for e in repeated), log

    # The restarted chief resumed the search, and ran the two trials left to the end.
    finished = (e for e in log if e["event"] == "end" and e["status"] == "COMPLETED")
    first_finished = next(finished)["trial_id"]
    assert sorted(t for t, e in ends.items() if e["time"] > restarted) == sorted(
        {"0", "1", "2"} - {first_finished}
    ), log
    chief_log = search.log("chief2")
    assert "Resuming the search" in chief_log
    assert "Best trials (val_accuracy, max):" in chief_log
    assert "Test accuracy of the best model" in chief_log
    summary = json.load(open(os.path.join(search.output, "best.json")))
    assert summary["trials"] == 3 and summary["test_images"] == 100
    best_score = max(e["score"] for e in ends.values())
    assert summary["best_score"] == pytest.approx(best_score)

    import keras

    import applications  # noqa: F401  (registers the model class)

    model = keras.saving.load_model(os.path.join(search.output, "best_model.keras"))
    _, (x_test, y_test) = mnist_data
    probabilities = model.predict(x_test[:100, ..., None], verbose=0)["probabilities"]
    assert probabilities.shape == (100, 10)
    accuracy = float(np.mean(probabilities.argmax(axis=1) == y_test[:100]))
    assert accuracy == pytest.approx(summary["test_accuracy"], abs=1e-6)

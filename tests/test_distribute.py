import json
import os
import signal
import subprocess
import sys
import time

import keras
import numpy as np
import pytest

from keras_capsules import cli
from keras_capsules import distribute
from tests.conftest import BACKEND

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.skipif(BACKEND not in ("tensorflow", "jax"), reason="TensorFlow and JAX engines")
def test_two_devices_give_the_single_device_losses_and_weights():
    """MirroredStrategy (TF) or DataParallel (JAX) over a CPU split in two devices.

    Four Adam steps of a small CapsNetMNIST on 64 real MNIST images, global
    batch 16, from the same initial weights. Tolerance: losses to 1e-5
    relative, weights to 1e-5 absolute (the steps move them by ~4e-3); only the
    order of the gradient sums differs. Measured: 7e-8 relative, 4e-8 (TF) and
    2e-7 (JAX) absolute.
    """
    result = subprocess.run(
        [sys.executable, "-m", "tests._data_parallel_run"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
        env=dict(os.environ, KERAS_BACKEND=BACKEND),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    run = json.loads(result.stdout.strip().splitlines()[-1])
    assert run["replicas"] == 2
    np.testing.assert_allclose(run["distributed_losses"], run["single_losses"], rtol=1e-5)
    assert run["single_losses"][-1] < run["single_losses"][0]  # it trained
    assert run["max_weight_change"] > 1e-3
    assert run["max_weight_difference"] < 1e-5
    # The loss trackers report the global batch, not a replica's share of it.
    evaluated = run["distributed_evaluate"]
    assert evaluated["margin_loss"] + evaluated["reconstruction_loss"] == pytest.approx(
        evaluated["loss"], rel=1e-5
    )


def test_without_a_strategy_losses_are_not_scaled():
    assert distribute.replicas_in_sync() == 1
    assert distribute.scale_loss(3.0) == 3.0 and distribute.unscale_loss(3.0) == 3.0


@pytest.mark.skipif(BACKEND != "tensorflow", reason="TensorFlow's strategies")
def test_tensorflow_scope_and_argument_errors():
    import tensorflow as tf

    with distribute.data_parallel() as strategy:
        assert isinstance(strategy, tf.distribute.MirroredStrategy)
        assert tf.distribute.get_strategy() is strategy
    with pytest.raises(ValueError, match="`devices` cannot be combined"):
        with distribute.data_parallel(devices=["/cpu:0"], multi_worker=True):
            pass


def jax_devices():
    import jax

    return jax.devices()


@pytest.mark.skipif(BACKEND != "jax", reason="the Keras distribution API on JAX")
def test_jax_scope_and_argument_errors():
    with distribute.data_parallel() as distribution:
        assert isinstance(distribution, keras.distribution.DataParallel)
        assert keras.distribution.distribution() is distribution
    assert keras.distribution.distribution() is None
    with pytest.raises(ValueError, match="`devices` cannot be combined with `multi_worker`"):
        with distribute.data_parallel(devices=jax_devices(), multi_worker=True):
            pass
    assert distribute.process_index() == 0  # one process


@pytest.mark.skipif(BACKEND in ("tensorflow", "jax"), reason="backends without an engine")
def test_other_backends_are_refused():
    with pytest.raises(ValueError, match="TensorFlow or JAX backend"):
        with distribute.data_parallel():
            pass


# Several processes on this machine's loopback -----------------------------------

TRAIN = ["train", "capsnet", "--conv-filters", "16", "--primary-capsule-types", "4"]
TRAIN += ["--test-size", "40", "--batch-size", "20", "--seed", "0", "--max-shift", "0"]
TRAIN += ["--verbose", "2"]


def _free_port():
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _train(output, options, process=None, port=None, log=None):
    """Start `keras-capsules train` on JAX: alone, or as process `process` of two."""
    pytest.importorskip("jax")
    env = dict(os.environ, KERAS_BACKEND="jax")
    args = [*TRAIN, *options, "--output", str(output)]
    if process is not None:
        env.update(
            KERAS_DISTRIBUTION_JOB_ADDRESSES=f"127.0.0.1:{port}",
            KERAS_DISTRIBUTION_NUM_PROCESSES="2",
            KERAS_DISTRIBUTION_PROCESS_ID=str(process),
        )
        args.append("--distribute")
    return subprocess.Popen(
        [sys.executable, "-m", "keras_capsules.cli", *args],
        cwd=ROOT,
        env=env,
        stdout=log or subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _finish(processes, timeout=600):
    for process in processes:
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            for other in processes:
                other.kill()
            pytest.fail(f"a training process ran past {timeout} s")
    return [process.returncode for process in processes]


def _losses(output):
    import csv

    with open(os.path.join(output, "history.csv")) as f:
        return {int(row["epoch"]): float(row["loss"]) for row in csv.DictReader(f)}


def _weights(path):
    import applications  # noqa: F401  (registers the model)

    return keras.saving.load_model(path, compile=False).get_weights()


# The processes run JAX whatever the suite's backend; slow, so one lane runs them.
@pytest.mark.slow
def test_two_processes_train_as_one_on_the_same_global_batch(tmp_path):
    """Two JAX processes joined on loopback (Gloo) give the one-process losses and weights.

    Each process feeds half of every global batch of 20. Tolerance as for two
    devices of one process: 1e-5 (only the order of the gradient sums differs).
    """
    options = ["--train-size", "160", "--epochs", "2"]
    single = _train(tmp_path / "one", options)
    assert _finish([single]) == [0], single.stdout.read()[-3000:]
    port = _free_port()
    logs = [open(tmp_path / f"process-{i}.log", "w") for i in (0, 1)]
    both = [_train(tmp_path / "two", options, i, port, logs[i]) for i in (0, 1)]
    statuses = _finish(both)
    for log in logs:
        log.close()
    assert statuses == [0, 0], (tmp_path / "process-1.log").read_text()[-3000:]
    assert "Process 1 of 2: waiting for the others" in (tmp_path / "process-1.log").read_text()
    one, two = _losses(tmp_path / "one"), _losses(tmp_path / "two")
    assert sorted(two) == [0, 1]
    np.testing.assert_allclose([two[0], two[1]], [one[0], one[1]], rtol=1e-5)
    for a, b in zip(
        _weights(tmp_path / "two" / "model.keras"), _weights(tmp_path / "one" / "model.keras")
    ):
        np.testing.assert_allclose(a, b, atol=1e-5)
    metrics = json.load(open(tmp_path / "two" / "metrics.json"))
    assert metrics["replicas"] == 2 and metrics["train_steps_this_session"] == 16
    # The run's files are the chief's; process 1 keeps its own in .worker-1.
    assert sorted(os.listdir(tmp_path / "two")) == sorted(
        [".lock", ".worker-1", "history.csv", "metrics.json", "model.keras", "run.json"]
    )
    assert os.path.exists(tmp_path / "two" / ".worker-1" / "model.keras")


@pytest.mark.slow
def test_a_killed_process_resumes_with_the_other_from_their_backups(tmp_path):
    """SIGKILL one of two processes in the second epoch; the same two commands resume the run."""
    options = ["--train-size", "640", "--epochs", "3"]
    output = tmp_path / "run"
    port = _free_port()
    logs = [open(tmp_path / f"first-{i}.log", "w") for i in (0, 1)]
    first = [_train(output, options, i, port, logs[i]) for i in (0, 1)]
    deadline = time.monotonic() + 600
    while len(_losses(output) if os.path.exists(output / "history.csv") else {}) < 1:
        if time.monotonic() > deadline or any(p.poll() is not None for p in first):
            for p in first:
                p.kill()
            pytest.fail(
                "the first epoch did not end: " + (tmp_path / "first-0.log").read_text()[-2000:]
            )
        time.sleep(0.2)
    time.sleep(1.0)  # into the second epoch (32 steps)
    first[1].send_signal(signal.SIGKILL)
    # The chief learns that its peer died from JAX's coordination service and ends.
    try:
        first[0].wait(timeout=300)
    except subprocess.TimeoutExpired:
        first[0].kill()
        pytest.fail("the chief kept waiting for its killed peer")
    for log in logs:
        log.close()
    assert first[0].returncode != 0
    assert sorted(_losses(output)) == [0]  # the second epoch did not end
    port = _free_port()
    logs = [open(tmp_path / f"second-{i}.log", "w") for i in (0, 1)]
    second = [_train(output, options, i, port, logs[i]) for i in (0, 1)]
    statuses = _finish(second)
    for log in logs:
        log.close()
    assert statuses == [0, 0], (tmp_path / "second-0.log").read_text()[-3000:]
    assert "Resuming the interrupted run" in (tmp_path / "second-0.log").read_text()
    assert sorted(_losses(output)) == [0, 1, 2]  # no epoch lost or repeated
    metrics = json.load(open(output / "metrics.json"))
    assert metrics["train_steps_this_session"] == 2 * 32 and metrics["epochs"] == 3


@pytest.mark.skipif(BACKEND != "tensorflow", reason="TensorFlow's multi-worker strategy")
def test_tensorflow_multi_worker_training_is_refused_with_the_reason(tmp_path, monkeypatch):
    from keras_capsules import cli

    cluster = {"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}}
    monkeypatch.setenv("TF_CONFIG", json.dumps({**cluster, "task": {"type": "worker", "index": 0}}))
    with pytest.raises(SystemExit, match="MultiWorkerMirroredStrategy.*72388"):
        cli.main([*TRAIN, "--distribute", "--output", str(tmp_path)])


@pytest.mark.parametrize(
    "variables, match",
    [
        ({"KERAS_DISTRIBUTION_JOB_ADDRESSES": "not-an-address"}, "each address must be HOST:PORT"),
        ({"KERAS_DISTRIBUTION_JOB_ADDRESSES": "host:99999"}, "port from 1 to 65535"),
        ({"KERAS_DISTRIBUTION_NUM_PROCESSES": "abc"}, "NUM_PROCESSES='abc': set it to the number"),
        ({"KERAS_DISTRIBUTION_PROCESS_ID": "5"}, r"PROCESS_ID=5 of .*NUM_PROCESSES=2: .* 0 to 1"),
        ({"KERAS_DISTRIBUTION_PROCESS_ID": None}, "PROCESS_ID=None: set it to this process"),
        ({"KERAS_DISTRIBUTION_JOB_ADDRESSES": "a:1,b:2,c:3"}, "lists 3 addresses for"),
    ],
)
def test_bad_process_variables_name_the_variable_and_its_form(
    monkeypatch, tmp_path, variables, match
):
    good = {
        "KERAS_DISTRIBUTION_JOB_ADDRESSES": "127.0.0.1:1234",
        "KERAS_DISTRIBUTION_NUM_PROCESSES": "2",
        "KERAS_DISTRIBUTION_PROCESS_ID": "1",
    }
    for name, value in {**good, **variables}.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=match):
        distribute.check_process_variables()
    output = tmp_path / "run"
    with pytest.raises(SystemExit, match=match):
        cli.main(["train", "capsnet", "--distribute", "--output", str(output)])
    assert not output.exists()


def test_the_coordinator_refuses_a_port_in_use(monkeypatch):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setenv("KERAS_DISTRIBUTION_JOB_ADDRESSES", f"127.0.0.1:{port}")
        monkeypatch.setenv("KERAS_DISTRIBUTION_NUM_PROCESSES", "2")
        monkeypatch.setenv("KERAS_DISTRIBUTION_PROCESS_ID", "0")
        with pytest.raises(ValueError, match=f"coordinator's port {port} cannot be listened on"):
            distribute.check_process_variables(coordinator_port=True)
        assert distribute.check_process_variables() == ([f"127.0.0.1:{port}"], 2, 0)

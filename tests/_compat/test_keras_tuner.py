"""keras-tuner's internals that keras_capsules.tuning uses are there, or fail by name."""

import importlib
import re
import threading

import pytest

kt = pytest.importorskip("keras_tuner")

from keras_capsules._compat import InternalChanged  # noqa: E402
from keras_capsules._compat import keras_tuner as compat  # noqa: E402


def _version():
    return re.escape(kt.__version__)


def test_keras_tuners_internals_are_there():
    compat.check()


def test_a_moved_module_attribute_is_named_with_keras_tuners_version(monkeypatch):
    monkeypatch.delattr(importlib.import_module("keras_tuner.src.engine.oracle"), "LOCKS")
    with pytest.raises(InternalChanged, match=rf"engine\.oracle\.LOCKS.*keras_tuner {_version()}"):
        compat.check()


@pytest.mark.parametrize("name", ["_populate_initial_space", "_is_worker", "_get_tuner_fname"])
def test_a_renamed_private_method_of_the_tuner_is_named(monkeypatch, name):
    owner = next(cls for cls in kt.Tuner.__mro__ if name in vars(cls))
    monkeypatch.delattr(owner, name)
    with pytest.raises(InternalChanged, match=rf"Tuner\.{name}.*keras_tuner {_version()}"):
        compat.check()


def test_a_renamed_attribute_of_the_oracle_is_named(monkeypatch):
    oracle_class = importlib.import_module("keras_tuner.src.engine.oracle").Oracle
    original = oracle_class.__init__

    def without_run_times(self, *args, **kwargs):
        original(self, *args, **kwargs)
        del self._run_times

    monkeypatch.setattr(oracle_class, "__init__", without_run_times)
    with pytest.raises(InternalChanged, match=rf"Oracle\._run_times.*keras_tuner {_version()}"):
        compat.check()


def test_the_worker_client_wraps_the_workers_oracle(monkeypatch):
    monkeypatch.setenv("KERASTUNER_ORACLE_IP", "127.0.0.1")
    monkeypatch.setenv("KERASTUNER_ORACLE_PORT", "1")  # the client connects on its first call
    monkeypatch.setenv("KERASTUNER_TUNER_ID", "w0")
    oracle = kt.oracles.RandomSearchOracle(objective="loss", max_trials=1)
    client = compat.oracle_client_class()(oracle)
    assert compat.local_oracle(client) is oracle
    del client._oracle
    with pytest.raises(InternalChanged, match=r"OracleClient\._oracle"):
        compat.local_oracle(client)


def test_synchronized_shares_keras_tuners_lock_and_releases_it_on_errors():
    class Oracle(kt.oracles.RandomSearchOracle):
        @compat.synchronized
        def fail(self):
            raise ValueError("a bug")

        @kt.synchronized
        def inner(self):
            return "inner"

        @compat.synchronized
        def outer(self):
            return self.inner()  # keras-tuner's decorator sees the lock held by this thread

    oracle = Oracle(objective="loss", max_trials=1)
    with pytest.raises(ValueError):
        oracle.fail()
    locks = importlib.import_module("keras_tuner.src.engine.oracle").LOCKS
    assert not locks[oracle].locked()
    outcome = []
    thread = threading.Thread(target=lambda: outcome.append(oracle.outer()), daemon=True)
    thread.start()
    thread.join(timeout=10)
    assert outcome == ["inner"], "a second lock: the call is blocked"

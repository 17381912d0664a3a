"""keras-tuner's internals: its oracles' lock, its distributed mode's gRPC parts, its writer.

keras-tuner exports its tuners and oracles but not the parts of its
distributed mode: `keras_capsules.tuning` serves its chief's oracle with
keras-tuner's gRPC service and gives its workers a subclass of keras-tuner's
client. Its oracles and tuners subclass keras-tuner's and use the private
members listed here; `check()` makes sure each is still there.
"""

import functools
import os
import tempfile
import threading

from keras_capsules._compat import changed
from keras_capsules._compat import internal

_LIBRARY = "keras_tuner"

# The private members of keras-tuner's classes that keras_capsules.tuning's subclasses
# use, and `_set_project_dir`, which sets the project's `_directory` they read.
_ORACLE_METHODS = ("_get_oracle_fname", "_get_trial_dir", "_set_project_dir")
_ORACLE_ATTRIBUTES = ("_directory", "_project_dir", "_display", "_run_times", "_retry_queue")
_DISPLAY_ATTRIBUTES = ("search_start", "trial_start", "trial_number")
_TUNER_METHODS = ("_populate_initial_space", "_is_worker", "_get_tuner_fname")


def project_dir(oracle):
    """The folder of `oracle`'s project, or None before the tuner has given it one."""
    if getattr(oracle, "_directory", None) is None:
        return None
    return oracle._project_dir


def oracle_file(oracle):
    """The file keras-tuner saves `oracle`'s state in."""
    return oracle._get_oracle_fname()


def trial_dir(oracle, trial_id):
    """The folder of `oracle`'s trial `trial_id`."""
    return oracle._get_trial_dir(trial_id)


def display(oracle):
    """`oracle`'s progress display (its `search_start`, `trial_start` and `trial_number`)."""
    return oracle._display


def run_times(oracle):
    """How many times `oracle` has run each trial: `{trial_id: runs}`, 0 for one not run."""
    return oracle._run_times


def retry_queue(oracle):
    """The ids of the trials `oracle` will run again, as the list it pops them from."""
    return oracle._retry_queue


def set_retry_queue(oracle, trial_ids):
    """Make the list `trial_ids` the trials `oracle` runs again."""
    oracle._retry_queue = trial_ids


def is_worker(tuner):
    """Whether `tuner` is a worker of a distributed search."""
    return tuner._is_worker()


def tuner_file(tuner):
    """The file keras-tuner saves `tuner`'s state in."""
    return tuner._get_tuner_fname()


class DeclaredSpaceTuner:
    """A keras-tuner `Tuner` mixin: a hypermodel that declares its space is not built to find it.

    keras-tuner builds the hypermodel before the search to discover its
    hyperparameters. A tuner with this mixin first calls its
    `declare_initial_space()`: when it returns True (it has filled the
    oracle's space), keras-tuner's discovery is skipped.
    """

    def declare_initial_space(self):
        """Fill the oracle's space and return True, or return False to let keras-tuner find it."""
        return False

    def _populate_initial_space(self):
        if not self.declare_initial_space():
            super()._populate_initial_space()


def _oracle_module():
    return internal(_LIBRARY, "keras_tuner.src.engine.oracle")


def synchronized(method):
    """`keras_tuner.synchronized` that releases the oracle's lock when `method` raises.

    keras-tuner's decorator leaves the lock held after an exception, so that
    every later call of the oracle (the workers' calls, the chief's lease
    checks) waits forever. It shares keras-tuner's lock, so the keras-tuner
    methods called from `method` do not take it again.
    """

    @functools.wraps(method)
    def wrapped(self, *args, **kwargs):
        oracle_module = _oracle_module()
        locks, threads = oracle_module.LOCKS, oracle_module.THREADS
        thread = threading.current_thread().name
        if threads[self] == thread:  # called from a method holding the lock
            return method(self, *args, **kwargs)
        with locks[self]:
            threads[self] = thread
            try:
                return method(self, *args, **kwargs)
            finally:
                threads[self] = None

    return wrapped


def save_json(path, state):
    """keras-tuner's JSON writer, which also writes to remote file systems (`gs://`)."""
    return internal(_LIBRARY, "keras_tuner.src.utils", "save_json")(path, state)


def service_grpc():
    """The gRPC module of keras-tuner's oracle service (`OracleStub`, `add_...to_server`)."""
    return internal(_LIBRARY, "keras_tuner.src.protos", "get_service_grpc")()


def service_messages():
    """The protobuf messages of keras-tuner's oracle service (`GetTrialRequest`, ...)."""
    return internal(_LIBRARY, "keras_tuner.src.protos", "get_service")()


def oracle_servicer(oracle):
    """keras-tuner's gRPC servicer of `oracle`; its `stop_triggered` tells when to stop."""
    servicer = internal(_LIBRARY, "keras_tuner.src.distribute.oracle_chief", "OracleServicer")
    return servicer(oracle)


def oracle_client_class():
    """keras-tuner's `OracleClient`, through which a worker reaches the chief's oracle."""
    return internal(_LIBRARY, "keras_tuner.src.distribute.oracle_client", "OracleClient")


def client_timeout():
    """How long (s) keras-tuner's client waits for the chief in each call."""
    return internal(_LIBRARY, "keras_tuner.src.distribute.oracle_client", "TIMEOUT")


def local_oracle(client):
    """The worker's own oracle that keras-tuner's `OracleClient` `client` wraps."""
    try:
        return client._oracle
    except AttributeError as error:
        raise changed(_LIBRARY, "OracleClient._oracle", error) from error


def check():
    """Make sure every keras-tuner internal that keras-capsules uses is there.

    Raises:
        InternalChanged: one is gone; the message names it and keras-tuner's version.
    """
    import keras_tuner as kt

    oracle_module = _oracle_module()
    for name in ("LOCKS", "THREADS"):
        internal(_LIBRARY, "keras_tuner.src.engine.oracle", name)
    save_json_function = internal(_LIBRARY, "keras_tuner.src.utils", "save_json")
    grpc_module = service_grpc()
    for name in ("OracleStub", "add_OracleServicer_to_server"):
        if not hasattr(grpc_module, name):
            raise changed(_LIBRARY, f"the oracle service's {name}")
    if not hasattr(service_messages(), "GetTrialRequest"):
        raise changed(_LIBRARY, "the oracle service's GetTrialRequest")
    client_timeout()
    client_class = oracle_client_class()
    for name in ("create_trial", "end_trial"):
        if not callable(getattr(client_class, name, None)):
            raise changed(_LIBRARY, f"OracleClient.{name}")
    for name in _TUNER_METHODS:
        if not callable(getattr(kt.Tuner, name, None)):
            raise changed(_LIBRARY, f"Tuner.{name}")
    for name in _ORACLE_METHODS:
        if not callable(getattr(oracle_module.Oracle, name, None)):
            raise changed(_LIBRARY, f"Oracle.{name}")
    oracle = kt.oracles.RandomSearchOracle(objective="loss", max_trials=1)
    if not hasattr(oracle_servicer(oracle), "stop_triggered"):
        raise changed(_LIBRARY, "OracleServicer.stop_triggered")
    with tempfile.TemporaryDirectory() as directory:
        oracle._set_project_dir(directory, "check")
        for name in _ORACLE_ATTRIBUTES:
            if not hasattr(oracle, name):
                raise changed(_LIBRARY, f"Oracle.{name}")
        for name in _DISPLAY_ATTRIBUTES:
            if not hasattr(oracle._display, name):
                raise changed(_LIBRARY, f"Oracle._display.{name}")
        path = os.path.join(directory, "state.json")
        save_json_function(path, {"check": 1})
        if not os.path.exists(path):
            raise changed(_LIBRARY, "keras_tuner.src.utils.save_json", "it wrote no file")

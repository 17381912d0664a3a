"""keras-tuner tuners that survive lost workers and interrupted chiefs, and a results table.

`create_tuner` returns a `keras_tuner.Hyperband`, `RandomSearch`-like or
`BayesianOptimization`-like tuner (subclasses of `keras_tuner.Tuner`) for a
hypermodel. On one machine it behaves as keras-tuner's own tuners, and
resumes an interrupted search from the state in its directory. In
keras-tuner's distributed mode (the `KERASTUNER_TUNER_ID`,
`KERASTUNER_ORACLE_IP` and `KERASTUNER_ORACLE_PORT` environment variables:
one process whose tuner id contains `chief` runs the oracle, the others are
workers that ask it for trials over gRPC), it adds what keras-tuner lacks:

- **Lost workers.** A worker sends a heartbeat to the chief every
  `heartbeat_seconds` while it runs a trial. A trial whose worker has been
  silent for `lease_seconds` (killed, its machine lost) is ended as invalid:
  keras-tuner runs it again on the next free worker while
  `max_retries_per_trial` allows, then marks it failed; the search goes on. A
  worker restarted with the same tuner id takes its interrupted trial back
  at once. A late result for a trial that was given up is ignored. While
  a trial that may be run again is running, the free workers wait for it
  instead of stopping, so a lost trial always finds a worker.
- **Interrupted chief.** Started again with the same directory, the chief
  reloads the oracle state (trials, brackets, random state) and keeps the
  running trials assigned to their workers, which wait for it and carry on
  (a call cut off when the chief died is sent again once it is back). The
  chief answers a worker only once it has saved the state and logged the
  event, so the restarted chief knows every trial a worker was told about:
  a trial it created but never handed out is forgotten (the worker asks
  again), one it ended but still counted as running is not resumed, and an
  event it did not log before it died is logged on the restart (marked
  `"recovered": true`). A call for a trial the chief does not know, or no
  longer runs, gets a harmless answer, and a worker whose result the chief
  refuses carries on.
- **Killed at any time.** The state files are written atomically (to a
  temporary file, then renamed), so a process killed while saving leaves the
  previous state, never a torn file.
- **Ending.** The chief stops once every trial has ended and every worker
  has been told to stop, checking twice a second (keras-tuner's own chief
  checks every 20 seconds).

The oracle (the chief's, or the single process's) appends what happens to the
trials (`start`, `end`, `lost`, `ignored`, with the trial id, the tuner id,
the status and the score) to `DIRECTORY/PROJECT_NAME/trial_log.jsonl`, one
JSON object per line. A `start` event has the run number of the trial (2 for
its first retry) and `resumed: true` when the worker was given back a trial
it already had (a worker restarted, or a call sent again to a restarted chief).
"""

import functools
import json
import os
import threading
import time
from datetime import datetime

import keras_tuner as kt
from keras_tuner.src.engine import oracle as _kt_oracle

TUNERS = ("hyperband", "random", "bayesian")


def _role():
    """`"chief"`, `"worker"` or `None` (one process), from keras-tuner's environment variables."""
    if "KERASTUNER_ORACLE_IP" not in os.environ:
        return None
    if "chief" in os.environ.get("KERASTUNER_TUNER_ID", ""):
        return "chief"
    return "worker"


def _oracle_address():
    return f"{os.environ['KERASTUNER_ORACLE_IP']}:{os.environ['KERASTUNER_ORACLE_PORT']}"


def _save_json(path, state):
    """Write `state` as JSON to `path` atomically: a process killed meanwhile tears no file."""
    text = json.dumps(state)
    if "://" in str(path):  # a remote file system: keras-tuner's own writer
        from keras_tuner.src import utils

        return utils.save_json(path, state)
    partial = f"{path}.{os.getpid()}.partial"
    with open(partial, "w") as f:
        f.write(text)
    os.replace(partial, path)
    return text


# Oracles ------------------------------------------------------------------------------------


def _synchronized(method):
    """`keras_tuner.synchronized` that releases the oracle's lock when `method` raises.

    keras-tuner's decorator leaves the lock held after an exception, so that
    every later call of the oracle (the workers' calls, the chief's lease
    checks) waits forever. It shares keras-tuner's lock, so the keras-tuner
    methods called from `method` do not take it again.
    """

    @functools.wraps(method)
    def wrapped(self, *args, **kwargs):
        thread = threading.current_thread().name
        if _kt_oracle.THREADS[self] == thread:  # called from a method holding the lock
            return method(self, *args, **kwargs)
        with _kt_oracle.LOCKS[self]:
            _kt_oracle.THREADS[self] = thread
            try:
                return method(self, *args, **kwargs)
            finally:
                _kt_oracle.THREADS[self] = None

    return wrapped


class _LeaseOracleMixin:
    """Oracle additions: worker leases, an event log, ongoing trials kept by a restarted chief."""

    def __init__(self, *args, lease_seconds=120.0, **kwargs):
        super().__init__(*args, **kwargs)
        self.lease_seconds = float(lease_seconds)
        self._last_seen = {}
        self._restored = {}
        self._saved_retry_queue = []
        self.fatal_error = None

    def _event(self, event, **fields):
        if getattr(self, "_directory", None) is None:
            return
        record = {"time": round(time.time(), 3), "event": event, **fields}
        with open(os.path.join(self._project_dir, "trial_log.jsonl"), "a") as f:
            f.write(json.dumps(record) + "\n")

    def _events(self):
        path = os.path.join(self._project_dir, "trial_log.jsonl")
        if not os.path.exists(path):
            return []
        records = []
        with open(path) as f:
            for line in f:
                try:
                    records.append(json.loads(line))
                except ValueError:  # a line torn by a kill
                    pass
        return records

    def _unknown(self, trial_id):
        """The answer about a trial this oracle does not know: a stopped trial without results."""
        return kt.engine.trial.Trial(self.get_space(), trial_id=trial_id, status="STOPPED")

    def _owner(self, trial_id):
        for tuner_id, trial in self.ongoing_trials.items():
            if trial.trial_id == trial_id:
                return tuner_id
        return None

    def _touch(self, trial_id):
        owner = self._owner(trial_id)
        if owner is not None:
            self._last_seen[owner] = time.time()
        return owner

    def _may_run_again(self):
        """Whether a running trial could be lost and run again: a worker is still needed."""
        return any(
            self._run_times[trial.trial_id] < self.max_retries_per_trial
            for trial in self.ongoing_trials.values()
        )

    @_synchronized
    def create_trial(self, tuner_id):
        self._last_seen[tuner_id] = time.time()
        resumed = tuner_id in self.ongoing_trials
        trial = super().create_trial(tuner_id)
        if trial.status == "RUNNING":
            self.save()  # again: keras-tuner saves before its display records the trial
            self._event(
                "start",
                trial_id=trial.trial_id,
                tuner_id=tuner_id,
                run=self._run_times[trial.trial_id] + 1,
                resumed=resumed,
            )
        elif trial.status == "STOPPED" and self._may_run_again():
            # No new trial, but a running one may be lost: the worker waits for it.
            self.tuner_ids.add(tuner_id)
            trial.status = "IDLE"
        return trial

    @_synchronized
    def get_trial(self, trial_id):
        self._touch(trial_id)  # workers call this as their heartbeat
        if trial_id not in self.trials:
            return self._unknown(trial_id)
        return super().get_trial(trial_id)

    @_synchronized
    def update_trial(self, trial_id, metrics, step=0):
        if self._touch(trial_id) is None:  # a late report for a trial given up: ignored
            return self.trials.get(trial_id) or self._unknown(trial_id)
        return super().update_trial(trial_id, metrics, step=step)

    @_synchronized
    def end_trial(self, trial):
        owner = self._touch(trial.trial_id)
        if owner is None:
            ended = self.trials.get(trial.trial_id)
            if ended is not None and ended.status == trial.status:
                if trial.trial_id in self.end_order or trial.trial_id in self._retry_queue:
                    return  # the same end sent again: its answer was cut off by a restart
            print(
                f"Ignoring the late result of trial {trial.trial_id}: it was given up "
                "(its worker stopped reporting) or has ended already.",
                flush=True,
            )
            self._event("ignored", trial_id=trial.trial_id, status=trial.status)
            return
        self._end(trial, owner)

    def _end(self, trial, owner):
        # keras-tuner's display fails on a trial it did not see start (a restarted
        # chief's display misses the trials started just before the state was saved).
        display, now = self._display, datetime.now()
        display.search_start = display.search_start or now
        display.trial_start.setdefault(trial.trial_id, now)
        display.trial_number.setdefault(trial.trial_id, len(self.trials))
        try:
            super().end_trial(trial)
        except RuntimeError as error:  # too many consecutive failed trials
            self.fatal_error = str(error)
            raise
        finally:
            self._event_end(self.trials[trial.trial_id], owner)
        self.save()  # again: keras-tuner saves before the trial stops counting as running

    def _event_end(self, trial, owner, **fields):
        score = None if trial.score is None else float(trial.score)
        self._event(
            "end",
            trial_id=trial.trial_id,
            tuner_id=owner,
            status=trial.status,
            score=score,
            **fields,
        )

    @_synchronized
    def reap(self):
        """End the trials of workers silent for more than `lease_seconds`.

        Returns:
            The ids of the trials ended. Each is run again by the next free
            worker while `max_retries_per_trial` allows, else marked failed.
        """
        now = time.time()
        lost = []
        for tuner_id, trial in list(self.ongoing_trials.items()):
            silent = now - self._last_seen.setdefault(tuner_id, now)
            if silent <= self.lease_seconds:
                continue
            message = (
                f"Worker {tuner_id!r} stopped reporting {silent:.0f} s ago (lease "
                f"{self.lease_seconds:g} s) while running trial {trial.trial_id}."
            )
            print(message, flush=True)
            self._event("lost", trial_id=trial.trial_id, tuner_id=tuner_id)
            trial.status = "INVALID"
            trial.message = message
            self.tuner_ids.discard(tuner_id)
            try:
                self._end(trial, tuner_id)
            except RuntimeError:
                pass  # recorded in fatal_error; the chief stops
            lost.append(trial.trial_id)
        for tuner_id in list(self.tuner_ids):
            idle = now - self._last_seen.setdefault(tuner_id, now)
            if tuner_id not in self.ongoing_trials and idle > self.lease_seconds:
                self.tuner_ids.discard(tuner_id)
        return lost

    def save(self):
        _save_json(self._get_oracle_fname(), self.get_state())

    def _save_trial(self, trial):
        path = os.path.join(self._get_trial_dir(trial.trial_id), "trial.json")
        _save_json(path, trial.get_state())

    @_synchronized
    def finished(self):
        """Whether all `max_trials` trials have ended (none running or waiting for a retry)."""
        return bool(
            self.max_trials
            and len(self.trials) >= self.max_trials
            and not self.ongoing_trials
            and not self._retry_queue
        )

    def set_state(self, state):
        super().set_state(state)
        self._saved_retry_queue = list(state["retry_queue"])
        # keras-tuner saves the state of an ended trial (in `end_order`, or queued
        # for a retry) while still counting it as running: it is not running.
        ended = set(self.end_order) | set(self._saved_retry_queue)
        self._restored = {
            tuner_id: trial
            for tuner_id, trial in self.ongoing_trials.items()
            if trial.trial_id not in ended
        }

    def reload(self):
        super().reload()  # queues the trials that were running (and ended ones) for a retry
        self._retry_queue = self._saved_retry_queue
        # A trial file written without the state: the chief stopped while creating
        # the trial, before any worker was told about it; the worker asks again.
        for trial_id in [t for t in self.trials if t not in self.start_order]:
            del self.trials[trial_id]
        now = time.time()
        for tuner_id, trial in self._restored.items():
            trial.status = "RUNNING"  # its file may have been saved ended, before the state
            if _role() == "chief":
                # Its worker may still be running it: keep it assigned; the lease
                # gives it up if the worker does not report.
                self.ongoing_trials[tuner_id] = trial
                self.tuner_ids.add(tuner_id)
                self._last_seen[tuner_id] = now
            else:
                self._retry_queue.append(trial.trial_id)
        self._recover_events()
        self._restored = {}

    def _recover_events(self):
        """Log the starts and ends of the state that a killed process did not log."""
        if getattr(self, "_directory", None) is None:
            return
        last = {}  # trial id: its last start or end event
        for record in self._events():
            if record.get("event") in ("start", "end"):
                last[record["trial_id"]] = record
        running = {trial.trial_id for trial in self._restored.values()}
        for trial_id, record in last.items():
            trial = self.trials.get(trial_id)
            if record["event"] == "start" and trial is not None and trial_id not in running:
                self._event_end(trial, record["tuner_id"], recovered=True)
        for tuner_id, trial in self.ongoing_trials.items():
            if last.get(trial.trial_id, {}).get("event") != "start":
                run = self._run_times[trial.trial_id] + 1
                self._event(
                    "start", trial_id=trial.trial_id, tuner_id=tuner_id, run=run, recovered=True
                )


class _HyperbandOracle(_LeaseOracleMixin, kt.oracles.HyperbandOracle):
    pass


class _RandomSearchOracle(_LeaseOracleMixin, kt.oracles.RandomSearchOracle):
    pass


class _BayesianOptimizationOracle(_LeaseOracleMixin, kt.oracles.BayesianOptimizationOracle):
    pass


# The chief's server and the workers' client ----------------------------------------------


def _serve(oracle, poll_seconds=0.5):
    """Serve `oracle` to the workers until the search is over (keras-tuner's gRPC service)."""
    from concurrent import futures

    import grpc
    from keras_tuner.src import protos
    from keras_tuner.src.distribute.oracle_chief import OracleServicer

    address = _oracle_address()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    servicer = OracleServicer(oracle)
    protos.get_service_grpc().add_OracleServicer_to_server(servicer, server)
    try:
        bound = server.add_insecure_port(address)
    except RuntimeError:
        bound = 0
    if not bound:
        raise RuntimeError(f"The chief oracle cannot listen on {address}: is the port in use?")
    server.start()
    print(f"Chief oracle serving on {address}", flush=True)
    try:
        while oracle.fatal_error is None:
            time.sleep(poll_seconds)
            oracle.reap()
            done = servicer.stop_triggered or oracle.finished()
            if done and not oracle.ongoing_trials and not oracle.tuner_ids:
                break
    finally:
        server.stop(grace=1).wait()
    if oracle.fatal_error is not None:
        raise RuntimeError(oracle.fatal_error)


class _RetryingStub:
    """A gRPC stub whose calls are sent again when the connection drops mid-call.

    Calls wait for the chief to be up (`wait_for_ready`), but one in flight
    when the chief dies fails as UNAVAILABLE; it is sent again once the chief
    is back. Each call is safe to repeat: a restarted chief gives a worker its
    running trial back (or a new one if it never saved the first), ignores a
    second end of a trial, and overwrites a metric reported twice.
    """

    def __init__(self, stub, patience):
        self._stub = stub
        self._patience = patience

    def __getattr__(self, name):
        import grpc

        method = getattr(self._stub, name)

        def call(request, **kwargs):
            deadline = time.time() + self._patience
            while True:
                try:
                    return method(request, **kwargs)
                except grpc.RpcError as error:
                    if error.code() != grpc.StatusCode.UNAVAILABLE or time.time() > deadline:
                        raise
                    time.sleep(0.5)

        return call


_CLIENT_CLASS = []


def _worker_client(local_oracle, idle_seconds):
    """keras-tuner's `OracleClient`, reconnecting faster, with heartbeats and a pause on IDLE."""
    if not _CLIENT_CLASS:
        import grpc
        from keras_tuner.src import protos
        from keras_tuner.src.distribute import oracle_client

        class WorkerClient(oracle_client.OracleClient):
            def __init__(self, oracle, idle_seconds):
                super().__init__(oracle)
                options = [
                    ("grpc.initial_reconnect_backoff_ms", 500),
                    ("grpc.min_reconnect_backoff_ms", 500),
                    ("grpc.max_reconnect_backoff_ms", 2000),
                ]
                channel = grpc.insecure_channel(_oracle_address(), options=options)
                self.raw_stub = protos.get_service_grpc().OracleStub(channel)
                self.stub = _RetryingStub(self.raw_stub, patience=oracle_client.TIMEOUT)
                self.idle_seconds = idle_seconds

            def create_trial(self, tuner_id):
                trial = super().create_trial(tuner_id)
                if trial.status == "IDLE":  # waiting for other trials: do not spin
                    time.sleep(self.idle_seconds)
                return trial

            def end_trial(self, trial):
                try:
                    super().end_trial(trial)
                except grpc.RpcError as error:  # the chief refused it: the search goes on
                    print(
                        f"Worker {self.tuner_id}: the chief did not take the end of trial "
                        f"{trial.trial_id} ({error.code().name}: {error.details()}).",
                        flush=True,
                    )

            def heartbeat(self, trial_id, timeout):
                self.raw_stub.GetTrial(
                    protos.get_service().GetTrialRequest(trial_id=trial_id),
                    wait_for_ready=True,
                    timeout=timeout,
                )

        _CLIENT_CLASS.append(WorkerClient)
    return _CLIENT_CLASS[0](local_oracle, idle_seconds)


class _Heartbeat:
    """A thread telling the chief every `interval` seconds that a trial is still running."""

    def __init__(self, client, trial_id, interval):
        self._stop = threading.Event()

        def beat():
            while not self._stop.wait(interval):
                try:
                    client.heartbeat(trial_id, timeout=max(1.0, interval))
                except Exception:  # the chief may be restarting: keep trying
                    pass

        self._thread = threading.Thread(target=beat, name=f"heartbeat-{trial_id}", daemon=True)
        self._thread.start()

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=5)


# Tuners -------------------------------------------------------------------------------------


class _TunerMixin:
    def __init__(
        self, oracle, hypermodel, *, epochs=None, heartbeat_seconds=10.0, poll_seconds=0.5, **kw
    ):
        kt.Tuner.__init__(self, oracle=oracle, hypermodel=hypermodel, **kw)
        self._epochs = epochs
        self._heartbeat_seconds = heartbeat_seconds
        self._poll_seconds = poll_seconds
        self._heartbeat = None
        if _role() == "worker":
            self.oracle = _worker_client(self.oracle._oracle, idle_seconds=poll_seconds)

    def _populate_initial_space(self):
        from keras_capsules.tuning._base import CapsuleHyperModel

        if not isinstance(self.hypermodel, CapsuleHyperModel):
            return super()._populate_initial_space()
        # The capsule hypermodels declare their whole space (it has no conditional
        # parts): no need to build a model, as keras-tuner does, to discover it.
        hp = self.oracle.get_space()
        self.hypermodel.declare_hyperparameters(hp)
        self.oracle.update_space(hp)

    def save(self):
        if not self._is_worker():
            self.oracle.save()
        _save_json(self._get_tuner_fname(), self.get_state())

    def search(self, *fit_args, **fit_kwargs):
        if _role() == "chief":
            if "verbose" in fit_kwargs:
                self.oracle.verbose = fit_kwargs["verbose"]
            self.save()
            _serve(self.oracle, self._poll_seconds)
            return
        super().search(*fit_args, **fit_kwargs)

    def run_trial(self, trial, *fit_args, **fit_kwargs):
        if self._epochs is not None:
            fit_kwargs.setdefault("epochs", self._epochs)
        return super().run_trial(trial, *fit_args, **fit_kwargs)

    def on_trial_begin(self, trial):
        super().on_trial_begin(trial)
        if hasattr(self.oracle, "heartbeat"):  # a worker: the chief's display shows the trials
            print(f"Worker {self.tuner_id}: running trial {trial.trial_id}", flush=True)
            self._heartbeat = _Heartbeat(self.oracle, trial.trial_id, self._heartbeat_seconds)

    def on_trial_end(self, trial):
        if self._heartbeat is not None:
            self._heartbeat.stop()
            self._heartbeat = None
        super().on_trial_end(trial)


class _Tuner(_TunerMixin, kt.Tuner):
    pass


class _HyperbandTuner(_TunerMixin, kt.Hyperband):
    pass


def create_tuner(
    hypermodel,
    tuner="hyperband",
    *,
    objective="val_accuracy",
    max_trials=10,
    max_epochs=3,
    directory="runs/tune",
    project_name="search",
    overwrite=False,
    seed=None,
    hyperparameters=None,
    factor=3,
    max_retries_per_trial=1,
    max_consecutive_failed_trials=3,
    lease_seconds=120.0,
    heartbeat_seconds=10.0,
    **kwargs,
):
    """Create a keras-tuner tuner for a hypermodel that survives lost workers.

    The tuner is a `keras_tuner.Tuner` (a `keras_tuner.Hyperband` for
    `"hyperband"`): `search`, `results_summary`, `get_best_models` and
    `get_best_hyperparameters` work as usual. See the module documentation
    for what it adds in keras-tuner's distributed mode.

    Args:
        hypermodel: a `keras_tuner.HyperModel`, e.g. `CapsNetHyperModel`.
        tuner: `"hyperband"` (keras-tuner's `Hyperband`: many models for few
            epochs, the best ones trained further), `"random"` (random search)
            or `"bayesian"` (Bayesian optimisation with a Gaussian process;
            needs scikit-learn, `pip install "keras-tuner[bayesian]"`).
        objective: the metric to maximise (a name ending in `accuracy`) or
            minimise (any other name); for the capsule hypermodels it must be
            one they report (see their `objectives()`).
        max_trials: most trials to run (hyperband: a cap on top of its
            brackets); `None` for no cap (hyperband only).
        max_epochs: epochs of a trial: the most a hyperband trial trains, the
            epochs of every random or bayesian trial.
        directory: folder of the search state, shared by all the processes of
            a distributed search.
        project_name: subfolder of `directory` for this search.
        overwrite: start afresh instead of resuming the search found in
            `directory/project_name`.
        seed: seed of the oracle's random choices.
        hyperparameters: a `keras_tuner.HyperParameters` registering values
            first, to fix (`hp.Fixed`) or narrow (`hp.Choice`) them.
        factor: hyperband's reduction factor (3).
        max_retries_per_trial: times a crashed trial, or one whose worker was
            lost, is run again before it is marked failed (1).
        max_consecutive_failed_trials: the search stops after this many
            failed trials in a row (3).
        lease_seconds: distributed mode: seconds of silence after which the
            chief gives up a worker's trial (120).
        heartbeat_seconds: distributed mode: seconds between a worker's
            heartbeats (10); must be well below `lease_seconds`.
        **kwargs: other `keras_tuner.Tuner` arguments, such as
            `executions_per_trial`.

    Returns:
        The tuner.

    Example:

    >>> from keras_capsules.tuning import CapsNetHyperModel, best_trials_table, create_tuner
    >>> tuner = create_tuner(CapsNetHyperModel(), "hyperband", max_trials=20,
    ...                      max_epochs=3, directory="runs/tune")  # doctest: +SKIP
    >>> tuner.search(x_train, y_train, validation_split=0.1)  # doctest: +SKIP
    >>> print(best_trials_table(tuner))  # doctest: +SKIP

    Reference:
        Li, Jamieson, DeSalvo, Rostamizadeh, Talwalkar. Hyperband: A Novel
        Bandit-Based Approach to Hyperparameter Optimization. JMLR 2018.
    """
    if tuner not in TUNERS:
        raise ValueError(f"`tuner` must be one of {TUNERS}. Received: tuner={tuner!r}")
    for name, value, optional in (
        ("max_trials", max_trials, tuner == "hyperband"),
        ("max_epochs", max_epochs, False),
        ("factor", factor, False),
    ):
        if value is None and optional:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"`{name}` must be a positive integer. Received: {name}={value!r}")
    if tuner == "hyperband" and factor < 2:
        raise ValueError(f"`factor` must be at least 2. Received: factor={factor!r}")
    if not isinstance(max_retries_per_trial, int) or max_retries_per_trial < 0:
        raise ValueError(
            "`max_retries_per_trial` must be a non-negative integer. "
            f"Received: max_retries_per_trial={max_retries_per_trial!r}"
        )
    if not heartbeat_seconds > 0 or not lease_seconds > heartbeat_seconds:
        raise ValueError(
            "`heartbeat_seconds` must be positive and `lease_seconds` larger. Received: "
            f"heartbeat_seconds={heartbeat_seconds!r}, lease_seconds={lease_seconds!r}"
        )
    if isinstance(objective, str):
        known = getattr(hypermodel, "objectives", None)
        if known is not None and objective not in known():
            raise ValueError(
                f"`objective` must be a metric the models report, one of {known()}. "
                f"Received: objective={objective!r}"
            )
        direction = "max" if objective.endswith("accuracy") else "min"
        objective = kt.Objective(objective, direction=direction)
    common = {
        "objective": objective,
        "seed": seed,
        "hyperparameters": hyperparameters,
        "max_retries_per_trial": max_retries_per_trial,
        "max_consecutive_failed_trials": max_consecutive_failed_trials,
        "lease_seconds": lease_seconds,
    }
    if tuner == "hyperband":
        oracle = _HyperbandOracle(max_epochs=max_epochs, factor=factor, **common)
        oracle.max_trials = max_trials
        tuner_class, epochs = _HyperbandTuner, None
    elif tuner == "random":
        oracle = _RandomSearchOracle(max_trials=max_trials, **common)
        tuner_class, epochs = _Tuner, max_epochs
    else:
        try:
            import sklearn  # noqa: F401  (keras-tuner's Gaussian process)
        except ImportError:
            raise ImportError(
                "tuner='bayesian' needs scikit-learn: pip install \"keras-tuner[bayesian]\""
            ) from None
        oracle = _BayesianOptimizationOracle(max_trials=max_trials, **common)
        tuner_class, epochs = _Tuner, max_epochs
    return tuner_class(
        oracle,
        hypermodel,
        epochs=epochs,
        heartbeat_seconds=heartbeat_seconds,
        directory=directory,
        project_name=project_name,
        overwrite=overwrite,
        **kwargs,
    )


def best_trials_table(tuner, num_trials=5):
    """A text table of the best completed trials: their objective and hyperparameters.

    One column per trial, best first; one row for the trial id, the
    objective, the epochs trained (hyperband) and each hyperparameter.

    Args:
        tuner: a keras-tuner tuner (any, not only those of `create_tuner`).
        num_trials: most trials to show (5).

    Returns:
        The table, a string; `"No completed trial."` if there is none.

    Example:

    >>> print(best_trials_table(tuner, 3))  # doctest: +SKIP
    """
    oracle = tuner.oracle
    trials = [t for t in oracle.get_best_trials(num_trials) if t.status == "COMPLETED"]
    if not trials:
        return "No completed trial."
    objective = oracle.objective
    names = []
    for trial in trials:
        for name in trial.hyperparameters.values:
            if name not in names and not name.startswith("tuner/"):
                names.append(name)

    def fmt(value):
        if isinstance(value, float):
            return f"{value:.4g}"
        return "-" if value is None else str(value)

    rows = [("rank", [f"#{i + 1}" for i in range(len(trials))])]
    rows.append(("trial", [t.trial_id for t in trials]))
    rows.append((getattr(objective, "name", "score"), [f"{t.score:.4f}" for t in trials]))
    if any("tuner/epochs" in t.hyperparameters.values for t in trials):
        rows.append(("epochs", [fmt(t.hyperparameters.values.get("tuner/epochs")) for t in trials]))
    for name in names:
        rows.append((name, [fmt(t.hyperparameters.values.get(name)) for t in trials]))
    label_width = max(len(label) for label, _ in rows)
    widths = [max(len(cells[i]) for _, cells in rows) for i in range(len(trials))]
    lines = [
        "  ".join([label.ljust(label_width)] + [c.rjust(w) for c, w in zip(cells, widths)])
        for label, cells in rows
    ]
    direction = getattr(objective, "direction", "")
    header = f"Best trials ({getattr(objective, 'name', 'score')}, {direction}):"
    return "\n".join([header] + lines)

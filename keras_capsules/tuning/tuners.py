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

import keras_tuner as kt

from keras_capsules._compat import keras_tuner as keras_tuner_compat
from keras_capsules._validation import check_positive_int
from keras_capsules.tuning._oracles import _BayesianOptimizationOracle
from keras_capsules.tuning._oracles import _HyperbandOracle
from keras_capsules.tuning._oracles import _RandomSearchOracle
from keras_capsules.tuning._oracles import _save_json
from keras_capsules.tuning._service import _Heartbeat
from keras_capsules.tuning._service import _serve
from keras_capsules.tuning._service import _worker_client
from keras_capsules.tuning._service import role

TUNERS = ("hyperband", "random", "bayesian")


def process_role():
    """This process's part in keras-tuner's distributed mode: `"chief"`, `"worker"` or `None`.

    Read from keras-tuner's environment variables: with
    `KERASTUNER_ORACLE_IP` set, the process whose `KERASTUNER_TUNER_ID`
    contains `chief` is the chief (it runs the oracle and trains nothing) and
    every other one a worker; without it, `None`, a search in one process.
    The tuners of `create_tuner` act on it; a script can, for example, print
    the results on the chief alone.

    Example:

    >>> from unittest import mock
    >>> from keras_capsules.tuning import process_role
    >>> chief = {"KERASTUNER_ORACLE_IP": "10.0.0.1", "KERASTUNER_ORACLE_PORT": "8000",
    ...          "KERASTUNER_TUNER_ID": "chief"}
    >>> with mock.patch.dict("os.environ", chief):
    ...     process_role()
    'chief'
    >>> with mock.patch.dict("os.environ", {**chief, "KERASTUNER_TUNER_ID": "w0"}):
    ...     process_role()
    'worker'
    """
    return role()


class _TunerMixin(keras_tuner_compat.DeclaredSpaceTuner):
    def __init__(
        self, oracle, hypermodel, *, epochs=None, heartbeat_seconds=10.0, poll_seconds=0.5, **kw
    ):
        kt.Tuner.__init__(self, oracle=oracle, hypermodel=hypermodel, **kw)
        self._epochs = epochs
        self._heartbeat_seconds = heartbeat_seconds
        self._poll_seconds = poll_seconds
        self._heartbeat = None
        if role() == "worker":
            local_oracle = keras_tuner_compat.local_oracle(self.oracle)
            self.oracle = _worker_client(local_oracle, idle_seconds=poll_seconds)

    def declare_initial_space(self):
        from keras_capsules.tuning.capsule_hyper_model import CapsuleHyperModel

        if not isinstance(self.hypermodel, CapsuleHyperModel):
            return False
        # The capsule hypermodels declare their whole space (it has no conditional
        # parts): no need to build a model, as keras-tuner does, to discover it.
        hp = self.oracle.get_space()
        self.hypermodel.declare_hyperparameters(hp)
        self.oracle.update_space(hp)
        return True

    def save(self):
        if not keras_tuner_compat.is_worker(self):
            self.oracle.save()
        _save_json(keras_tuner_compat.tuner_file(self), self.get_state())

    def search(self, *fit_args, **fit_kwargs):
        if role() == "chief":
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

    >>> from applications import CapsNetHyperModel
    >>> from keras_capsules.tuning import best_trials_table, create_tuner
    >>> tuner = create_tuner(CapsNetHyperModel(), "hyperband", max_trials=20,
    ...                      max_epochs=3, directory="runs/tune")  # doctest: +SKIP
    >>> tuner.search(x_train, y_train, validation_split=0.1)  # doctest: +SKIP
    >>> print(best_trials_table(tuner))  # doctest: +SKIP

    Reference:
        Li, Jamieson, DeSalvo, Rostamizadeh, Talwalkar. Hyperband: A Novel
        Bandit-Based Approach to Hyperparameter Optimization. JMLR 2018.
    """
    _check_tuner_arguments(
        tuner,
        max_trials,
        max_epochs,
        factor,
        max_retries_per_trial,
        heartbeat_seconds,
        lease_seconds,
    )
    common = {
        "objective": _objective(objective, hypermodel),
        "seed": seed,
        "hyperparameters": hyperparameters,
        "max_retries_per_trial": max_retries_per_trial,
        "max_consecutive_failed_trials": max_consecutive_failed_trials,
        "lease_seconds": lease_seconds,
    }
    oracle, tuner_class, epochs = _oracle(tuner, max_trials, max_epochs, factor, common)
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


def _check_tuner_arguments(
    tuner, max_trials, max_epochs, factor, max_retries_per_trial, heartbeat_seconds, lease_seconds
):
    """Refuse an unknown tuner, bad counts and a lease not longer than the heartbeat."""
    if tuner not in TUNERS:
        raise ValueError(f"`tuner` must be one of {TUNERS}. Received: tuner={tuner!r}")
    for name, value, optional in (
        ("max_trials", max_trials, tuner == "hyperband"),
        ("max_epochs", max_epochs, False),
        ("factor", factor, False),
    ):
        if value is None and optional:
            continue
        check_positive_int(name, value)
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


def _objective(objective, hypermodel):
    """`objective` as a `kt.Objective`: a metric name is checked and given its direction."""
    if isinstance(objective, str):
        known = getattr(hypermodel, "objectives", None)
        if known is not None and objective not in known():
            raise ValueError(
                f"`objective` must be a metric the models report, one of {known()}. "
                f"Received: objective={objective!r}"
            )
        direction = "max" if objective.endswith("accuracy") else "min"
        objective = kt.Objective(objective, direction=direction)
    return objective


def _oracle(tuner, max_trials, max_epochs, factor, common):
    """`(oracle, tuner class, epochs per trial)` for the `tuner` name."""
    if tuner == "hyperband":
        oracle = _HyperbandOracle(max_epochs=max_epochs, factor=factor, **common)
        oracle.max_trials = max_trials
        return oracle, _HyperbandTuner, None
    if tuner == "random":
        return _RandomSearchOracle(max_trials=max_trials, **common), _Tuner, max_epochs
    try:
        import sklearn  # noqa: F401  (keras-tuner's Gaussian process)
    except ImportError:
        raise ImportError(
            "tuner='bayesian' needs scikit-learn: pip install \"keras-tuner[bayesian]\""
        ) from None
    return _BayesianOptimizationOracle(max_trials=max_trials, **common), _Tuner, max_epochs


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

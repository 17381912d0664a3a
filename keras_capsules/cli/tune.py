"""`keras-capsules tune`: search hyperparameters with keras-tuner, on one machine or several.

    keras-capsules tune capsnet --tuner hyperband --max-trials 20 --output runs/tune
    keras-capsules tune capsnet --chief --oracle 10.0.0.1:8000 --output runs/tune
    keras-capsules tune capsnet --worker w1 --oracle 10.0.0.1:8000 --output runs/tune

The search is `keras_capsules.tuning`'s (`create_tuner`, the hypermodels); a
chief runs the oracle for remote workers, which run the trials.
"""

import json
import os
import time

from keras_capsules._atomic import output_folder
from keras_capsules._atomic import replacing
from keras_capsules._atomic import write_json
from keras_capsules.cli._training import option_changes
from keras_capsules.cli.argument_types import data_dir
from keras_capsules.cli.argument_types import held_out_fraction
from keras_capsules.cli.argument_types import non_negative_int
from keras_capsules.cli.argument_types import positive_float
from keras_capsules.cli.argument_types import positive_int
from keras_capsules.cli.train import recipe

DEFAULT_ORACLE = "127.0.0.1:8000"
ENVIRONMENT = ("KERASTUNER_TUNER_ID", "KERASTUNER_ORACLE_IP", "KERASTUNER_ORACLE_PORT")


def add_parser(commands, catalog):
    """Add the `tune` subcommand and its arguments to `commands` (argparse subparsers)."""
    tune = commands.add_parser(
        "tune", help="search hyperparameters with keras-tuner, on one machine or chief + workers"
    )
    hypermodels = catalog.hypermodels()
    tune.add_argument(
        "model",
        choices=tuple(hypermodels),
        help="; ".join(f"{name}: {text}" for name, text in hypermodels.items()),
    )
    _add_search_options(tune.add_argument_group("search"))
    _add_data_options(tune.add_argument_group("data"))
    _add_distributed_options(tune.add_argument_group("distributed search (chief and workers)"))
    tune.add_argument("--verbose", type=int, default=1, choices=(0, 1, 2))
    return tune


def _add_search_options(group):
    group.add_argument("--tuner", choices=("hyperband", "random", "bayesian"), default="hyperband")
    group.add_argument("--max-trials", type=positive_int, default=10, help="most trials to run")
    group.add_argument(
        "--max-epochs",
        type=positive_int,
        default=3,
        help="hyperband: most epochs of a trial, else all",
    )
    group.add_argument("--output", default="runs/tune", help="folder of the search and its results")
    group.add_argument("--objective", default="val_accuracy", help="metric to optimise")
    group.add_argument(
        "--fixed",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="fix a hyperparameter instead of searching it (repeatable)",
    )
    group.add_argument("--overwrite", action="store_true", help="start afresh instead of resuming")
    group.add_argument("--seed", type=int, default=None)
    group.add_argument("--top", type=positive_int, default=5, help="trials in the final table")
    group.add_argument(
        "--retrain-epochs",
        type=non_negative_int,
        default=0,
        help="retrain the best configuration for N epochs",
    )
    group.add_argument("--export", metavar="DIR", default=None, help="export the best model here")


def _add_data_options(group):
    group.add_argument(
        "--data-dir", type=data_dir, default=None, help="folder of the MNIST IDX files"
    )
    group.add_argument(
        "--train-size", type=positive_int, default=None, help="use the first N images"
    )
    group.add_argument(
        "--test-size", type=positive_int, default=None, help="evaluate on the first N"
    )
    group.add_argument(
        "--validation-split", type=held_out_fraction, default=0.1, help="held out of training"
    )
    group.add_argument(
        "--batch-size",
        type=positive_int,
        default=None,
        help="100 for capsnet, 32 for the EM model",
    )


def _add_distributed_options(group):
    role = group.add_mutually_exclusive_group()
    role.add_argument("--chief", action="store_true", help="run the oracle for remote workers")
    role.add_argument("--worker", metavar="ID", default=None, help="run trials for the chief")
    group.add_argument(
        "--oracle", metavar="HOST:PORT", default=None, help="the chief's address (127.0.0.1:8000)"
    )
    group.add_argument(
        "--max-retries", type=non_negative_int, default=1, help="reruns of a crashed trial"
    )
    group.add_argument(
        "--lease-seconds",
        type=positive_float,
        default=120.0,
        help="chief: give up a silent worker's trial",
    )
    group.add_argument(
        "--heartbeat-seconds",
        type=positive_float,
        default=10.0,
        help="worker: seconds between heartbeats",
    )


SEARCH_FILE = "search.json"
# Options that do not change what the search's trials train: they may differ between
# the sessions of one search (more --max-trials continues it).
SESSION_OPTIONS = (
    "catalog",
    "command",
    "max_trials",
    "output",
    "verbose",
    "top",
    "retrain_epochs",
    "export",
    "chief",
    "worker",
    "oracle",
    "max_retries",
    "lease_seconds",
    "heartbeat_seconds",
    "data_dir",
    "test_size",
    "overwrite",
)


def _search_options(args):
    """The options that define the search, with defaults filled in, as `search.json` holds them."""
    options = {k: v for k, v in sorted(vars(args).items()) if k not in SESSION_OPTIONS}
    options["fixed"] = sorted(args.fixed)
    if options["batch_size"] is None:
        options["batch_size"] = recipe(args).batch_size
    return json.loads(json.dumps(options))


def _read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as error:
        _fail(
            f"{path} is unreadable ({error}), so the search in {os.path.dirname(path)} cannot "
            "resume from it. Restore it from a copy, or pass --overwrite to start the search "
            "afresh (its trials are deleted)."
        )


def _check_search(args, project_dir):
    """Refuse to resume a search made with other options; record this search's options."""
    path = os.path.join(args.output, SEARCH_FILE)
    options = _search_options(args)
    if not args.overwrite and os.path.exists(os.path.join(project_dir, "oracle.json")):
        # Every file keras-tuner reloads: a torn one is named here, not in its traceback.
        for name in _search_state_files(project_dir):
            _read_json(os.path.join(project_dir, name))
        if not os.path.exists(path):
            _fail(
                f"{args.output} holds a search but no {SEARCH_FILE} recording its options, so "
                "they cannot be checked. Pass --overwrite to start the search afresh."
            )
        recorded = _read_json(path)
        recorded = recorded.get("options") if isinstance(recorded, dict) else None
        if recorded != options:
            changes = option_changes(recorded if isinstance(recorded, dict) else {}, options)
            _fail(
                f"{args.output} holds a search made with other options ({changes}). Rerun "
                "with the recorded options to resume it, choose another --output, or pass "
                "--overwrite to start a new search there (its trials are deleted)."
            )
    write_json(path, {"options": options})


def _search_state_files(project_dir):
    """The JSON files keras-tuner reloads to resume: the oracle's, the tuners', each trial's."""
    names = ["oracle.json"]
    for entry in sorted(os.listdir(project_dir)):
        if entry.startswith("tuner") and entry.endswith(".json"):
            names.append(entry)
        trial = os.path.join(entry, "trial.json")
        if entry.startswith("trial_") and os.path.isfile(os.path.join(project_dir, trial)):
            names.append(trial)
    return names


def _fail(message):
    raise SystemExit(f"keras-capsules tune: {message}")


def _parse_value(text):
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _fixed(hypermodel, assignments):
    """A `HyperParameters` fixing `NAME=VALUE` assignments, names checked against the space."""
    import keras_tuner as kt

    known = [hp.name for hp in hypermodel.search_space().space]
    hp = kt.HyperParameters()
    for assignment in assignments:
        name, sep, value = assignment.partition("=")
        name = name.strip()
        if not sep or not value.strip():
            _fail(f"--fixed takes NAME=VALUE, got {assignment!r}")
        if name not in known:
            _fail(f"--fixed: unknown hyperparameter {name!r}; the space has {', '.join(known)}")
        hp.Fixed(name, _parse_value(value))
    return hp if assignments else None


def _configure_environment(args):
    """Set keras-tuner's `KERASTUNER_*` variables for `--chief`/`--worker`; return the role."""
    if args.chief or args.worker is not None:
        address = args.oracle
        if address is None and "KERASTUNER_ORACLE_IP" in os.environ:
            address = f"{os.environ['KERASTUNER_ORACLE_IP']}:{os.environ['KERASTUNER_ORACLE_PORT']}"
        host, sep, port = (address or DEFAULT_ORACLE).rpartition(":")
        if not sep or not host or not port.isdigit():
            _fail(f"--oracle takes HOST:PORT, got {args.oracle!r}")
        if args.worker is not None and (not args.worker or "chief" in args.worker):
            _fail(f"--worker needs an id without 'chief' in it, got {args.worker!r}")
        os.environ["KERASTUNER_ORACLE_IP"] = host
        os.environ["KERASTUNER_ORACLE_PORT"] = port
        os.environ["KERASTUNER_TUNER_ID"] = "chief" if args.chief else args.worker
    elif args.oracle is not None:
        _fail("--oracle needs --chief or --worker")
    from keras_capsules.tuning import process_role

    return process_role()


def _check(args):
    # Each value is checked as argparse reads it (`_types`); this pair only together.
    if not args.heartbeat_seconds < args.lease_seconds:
        _fail("--heartbeat-seconds must be below --lease-seconds")


def _load_mnist(args):
    from keras_capsules.datasets import mnist

    (x_train, y_train), (x_test, y_test) = mnist.load_data(args.data_dir)
    x_train, y_train = x_train[: args.train_size], y_train[: args.train_size]
    x_test, y_test = x_test[: args.test_size], y_test[: args.test_size]
    return (x_train, y_train), (x_test[..., None], y_test)


def run(args):
    """Run `keras-capsules tune` with parsed arguments; return the exit status."""
    _check(args)
    saved = {name: os.environ.get(name) for name in ENVIRONMENT}
    try:
        return _run(args, _configure_environment(args))
    finally:  # `main` may be called from Python: leave the environment as it was
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _run(args, role):
    import keras

    from keras_capsules.tuning import best_trials_table
    from keras_capsules.tuning import create_tuner

    if args.seed is not None:
        keras.utils.set_random_seed(args.seed)
    hypermodel = args.catalog.hypermodel(args.model)
    hyperparameters = _fixed(hypermodel, args.fixed)
    project_dir = os.path.join(args.output, "search")
    overwrite = args.overwrite and role != "worker"  # only the chief or a lone tuner starts anew
    resuming = os.path.exists(os.path.join(project_dir, "oracle.json"))
    output_folder(args.output, "tune")
    if role != "worker":
        _check_search(args, project_dir)
    if role != "worker" and not overwrite and resuming:
        print(f"Resuming the search in {project_dir}", flush=True)
    try:
        tuner = create_tuner(
            hypermodel,
            args.tuner,
            objective=args.objective,
            max_trials=args.max_trials,
            max_epochs=args.max_epochs,
            directory=args.output,
            project_name="search",
            overwrite=overwrite,
            seed=args.seed,
            hyperparameters=hyperparameters,
            max_retries_per_trial=args.max_retries,
            lease_seconds=args.lease_seconds,
            heartbeat_seconds=args.heartbeat_seconds,
        )
    except (ValueError, ImportError) as error:
        _fail(str(error))

    start = time.time()
    if role == "chief":
        tuner.search(verbose=args.verbose)
    else:
        (x_train, y_train), _ = _load_mnist(args)
        tuner.search(
            x_train,
            y_train,
            validation_split=args.validation_split,
            batch_size=args.batch_size,
            seed=args.seed,
            verbose=args.verbose,
        )
    search_seconds = time.time() - start
    if role == "worker":
        print(f"Worker {os.environ['KERASTUNER_TUNER_ID']}: no trials left, stopping.", flush=True)
        return 0
    return _report(args, tuner, hypermodel, search_seconds, best_trials_table)


def _report(args, tuner, hypermodel, search_seconds, best_trials_table):
    """The table of the best trials, the best model's test accuracy, retraining and export."""
    print(best_trials_table(tuner, args.top), flush=True)
    completed = [t for t in tuner.oracle.get_best_trials(1) if t.status == "COMPLETED"]
    if not completed:
        print("No trial completed: nothing to evaluate or export.", flush=True)
        return 1
    best_trial = completed[0]
    best_hp = best_trial.hyperparameters
    (x_train, y_train), (x_test, y_test) = _load_mnist(args)
    batch_size = args.batch_size or hypermodel.batch_size
    model = tuner.get_best_models(1)[0]
    if args.retrain_epochs:
        print(
            f"Retraining the best configuration (trial {best_trial.trial_id}) on "
            f"{len(x_train)} images for {args.retrain_epochs} epochs",
            flush=True,
        )
        model = hypermodel.build(best_hp)
        hypermodel.fit(
            best_hp,
            model,
            x_train,
            y_train,
            epochs=args.retrain_epochs,
            batch_size=batch_size,
            seed=args.seed,
            verbose=args.verbose,
        )
    results = model.evaluate(x_test, y_test, batch_size=batch_size, verbose=0, return_dict=True)
    model_path = os.path.join(args.output, "best_model.keras")
    with replacing(model_path) as temporary:  # a kill leaves the old model or the new one
        model.save(temporary)
    summary = {
        "model": args.model,
        "tuner": args.tuner,
        "objective": tuner.oracle.objective.name,
        "best_trial": best_trial.trial_id,
        "best_score": float(best_trial.score),
        "hyperparameters": {k: v for k, v in best_hp.values.items() if not k.startswith("tuner/")},
        "trials": len(tuner.oracle.trials) if hasattr(tuner.oracle, "trials") else None,
        "search_seconds_this_session": round(search_seconds, 1),
        "retrain_epochs": args.retrain_epochs,
        "test_images": int(len(x_test)),
        "test_accuracy": float(results["accuracy"]),
    }
    write_json(os.path.join(args.output, "best.json"), summary)
    print(f"Test accuracy of the best model: {summary['test_accuracy']:.4f} ({len(x_test)} images)")
    print(f"Model: {model_path}; summary: {os.path.join(args.output, 'best.json')}", flush=True)
    if args.export:
        from keras_capsules.serving import export_saved_model

        try:
            export_saved_model(model, args.export)
        except (FileExistsError, RuntimeError, ValueError) as error:
            _fail(f"export: {error}")
    return 0

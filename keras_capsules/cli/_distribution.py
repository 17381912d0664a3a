"""How `train` spreads a run over devices and processes, and how many steps a call runs."""

import contextlib
import os


def multi_process(args):
    """Whether this process trains with others (JAX's multi-process data parallelism)."""
    from keras_capsules import distribute

    return args.distribute and distribute.MULTI_PROCESS_VARIABLE in os.environ


def worker_folder(args):
    """Where a process other than the chief of a multi-process run keeps its run, or None.

    Every process trains the same replicated model and keeps the files a run
    needs to resume and continue: the chief (process 0) in `--output`, which
    holds the run's model and metrics, and process N in `OUTPUT/.worker-N`.
    TensorFlow's multi-worker training is refused: Keras 3's `fit` cannot run
    `MultiWorkerMirroredStrategy`.
    """
    from keras_capsules import distribute

    if not args.distribute:
        return None
    import keras

    if keras.backend.backend() == "tensorflow" and "TF_CONFIG" in os.environ:
        raise SystemExit(
            "keras-capsules train: --distribute across processes (TF_CONFIG) does not work on "
            "TensorFlow: Keras 3's fit cannot train with MultiWorkerMirroredStrategy (it fails "
            "reducing the first batch and the step's logs across workers; "
            "github.com/tensorflow/tensorflow/issues/72388). Train across processes with "
            "KERAS_BACKEND=jax and KERAS_DISTRIBUTION_JOB_ADDRESSES (docs/data-parallel.md), or "
            "unset TF_CONFIG to train on this machine's devices."
        )
    if distribute.MULTI_PROCESS_VARIABLE not in os.environ:
        return None
    index = distribute.process_index()
    return None if index == 0 else os.path.join(args.output, f".worker-{index}")


def check_steps_per_execution(args):
    """Refuse more than one step per call where Keras runs one (PyTorch, several processes)."""
    import keras

    if (args.steps_per_execution or 1) > 1 and keras.backend.backend() == "torch":
        raise SystemExit(
            "keras-capsules train: --steps-per-execution must be 1 on the PyTorch backend, "
            f"whose Keras trainer runs one step per call (got {args.steps_per_execution})"
        )
    if (args.steps_per_execution or 1) > 1 and multi_process(args):
        raise SystemExit(
            "keras-capsules train: --steps-per-execution must be 1 across processes: each "
            "process runs one step per call there, and Keras would run whole calls past the "
            f"end of an epoch (got {args.steps_per_execution})"
        )


def distribution_scope(args):
    """`data_parallel()` with `--distribute`, else a scope that does nothing."""
    if not args.distribute:
        return contextlib.nullcontext()
    from keras_capsules.distribute import data_parallel

    # First: TensorFlow configures a multi-worker strategy's collectives only
    # before anything else has started its runtime (the seed, the data sets).
    scope = data_parallel()
    if multi_process(args):
        print(
            f"Process {os.environ.get('KERAS_DISTRIBUTION_PROCESS_ID', '0')} of "
            f"{os.environ.get('KERAS_DISTRIBUTION_NUM_PROCESSES', '?')}: waiting for the "
            f"others at {os.environ['KERAS_DISTRIBUTION_JOB_ADDRESSES']}",
            flush=True,
        )
    return scope

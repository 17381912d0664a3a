"""Data-parallel training with the engine each Keras backend already has.

On one machine's devices: TensorFlow's `tf.distribute.MirroredStrategy` or
the Keras distribution API on JAX (`keras.distribution.DataParallel`). Across
processes and machines, JAX alone: `keras.distribution.initialize()` joins
the processes (configured by `KERAS_DISTRIBUTION_JOB_ADDRESSES`,
`KERAS_DISTRIBUTION_NUM_PROCESSES` and `KERAS_DISTRIBUTION_PROCESS_ID`) and
`DataParallel` spans the devices of all of them. TensorFlow's
`MultiWorkerMirroredStrategy` does not train with Keras 3's `fit`, which
fails reducing the first batch and the step's logs across workers for any
model
([tensorflow/tensorflow#72388](https://github.com/tensorflow/tensorflow/issues/72388));
Keras 3 does not support that strategy
([keras-team/keras#20585](https://github.com/keras-team/keras/issues/20585)),
so `keras-capsules train --distribute` refuses `TF_CONFIG`.

Build, compile and `fit` the model inside `data_parallel()`:

```python
from keras_capsules.distribute import data_parallel

with data_parallel():
    model = applications.CapsNetMNIST()
    model.fit(dataset, epochs=10)  # each global batch is split across the devices
```

The applications' losses are means over the global batch whatever the number
of replicas, so a distributed step computes the same loss and the same update
as a single-device step on the same global batch.
"""

import contextlib
import os

import keras

MULTI_PROCESS_VARIABLE = "KERAS_DISTRIBUTION_JOB_ADDRESSES"
"""Set, with `KERAS_DISTRIBUTION_NUM_PROCESSES` and `_PROCESS_ID`: JAX runs across processes."""


def check_process_variables(coordinator_port=False):
    """The run's `(addresses, num_processes, process_id)` from the environment, checked.

    Raises a `ValueError` that names the variable and the form it takes:
    `KERAS_DISTRIBUTION_JOB_ADDRESSES` is `HOST:PORT` of the coordinator
    (process 0), or every process's, separated by commas;
    `KERAS_DISTRIBUTION_NUM_PROCESSES` a positive integer; and
    `KERAS_DISTRIBUTION_PROCESS_ID` an integer from 0 to one less. With
    `coordinator_port`, process 0 also checks that it can listen on the
    coordinator's port.
    """
    text = os.environ[MULTI_PROCESS_VARIABLE]
    addresses = [address.strip() for address in text.split(",")]
    for address in addresses:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(
                f"{MULTI_PROCESS_VARIABLE}={text!r}: each address must be HOST:PORT with a port "
                "from 1 to 65535, the coordinator's (process 0's) first, separated by commas, "
                "e.g. 10.0.0.1:1234"
            )
    counts = {}
    for name, default in (("NUM_PROCESSES", None), ("PROCESS_ID", None)):
        variable = f"KERAS_DISTRIBUTION_{name}"
        value = os.environ.get(variable, default)
        if value is None or not value.strip().isdigit():
            raise ValueError(
                f"{variable}={value!r}: set it to "
                + (
                    "the number of processes, a positive integer"
                    if name == "NUM_PROCESSES"
                    else "this process's index, an integer from 0 (the coordinator)"
                )
                + f" beside {MULTI_PROCESS_VARIABLE}"
            )
        counts[name] = int(value)
    processes, index = counts["NUM_PROCESSES"], counts["PROCESS_ID"]
    if processes < 1 or index >= processes:
        raise ValueError(
            f"KERAS_DISTRIBUTION_PROCESS_ID={index} of KERAS_DISTRIBUTION_NUM_PROCESSES="
            f"{processes}: the index must be from 0 to {processes - 1}"
        )
    if len(addresses) > 1 and len(addresses) != processes:
        raise ValueError(
            f"{MULTI_PROCESS_VARIABLE} lists {len(addresses)} addresses for "
            f"KERAS_DISTRIBUTION_NUM_PROCESSES={processes}: give the coordinator's alone, or "
            "one per process"
        )
    if coordinator_port and index == 0:
        _check_coordinator_port(addresses[0])
    return addresses, processes, index


def _check_coordinator_port(address):
    """Process 0 listens on the coordinator's port: refuse, naming it, a port in use there."""
    import socket

    port = address.rpartition(":")[2]
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("", int(port)))
        except OSError as error:
            raise ValueError(
                f"{MULTI_PROCESS_VARIABLE}: the coordinator's port {port} cannot be listened on "
                f"by process 0 ({error.strerror or error}); choose a free port"
            ) from None


def process_index():
    """This process's index among the processes of a run: 0 on one machine, and for the chief.

    JAX's process index once `data_parallel()` has joined the processes;
    before, and for TensorFlow, the index `KERAS_DISTRIBUTION_PROCESS_ID` or
    `TF_CONFIG` names (0 when neither is set).
    """
    if keras.backend.backend() == "jax" and _jax_processes_initialized():
        import jax

        return jax.process_index()
    if MULTI_PROCESS_VARIABLE in os.environ:
        return check_process_variables()[2]
    if "TF_CONFIG" in os.environ:
        import json

        task = json.loads(os.environ["TF_CONFIG"]).get("task", {})
        return 0 if task.get("type") == "chief" else int(task.get("index", 0))
    return 0


def _jax_processes_initialized():
    import jax

    return jax.distributed.is_initialized()


def _initialize_jax_processes():
    """Join this process to the others (`keras.distribution.initialize`), once.

    On CPUs the processes exchange gradients through Gloo, JAX's collectives
    for CPU, which must be chosen before JAX starts its backend.
    """
    if _jax_processes_initialized():
        return
    check_process_variables(coordinator_port=True)
    import jax

    if jax.config.jax_platforms in (None, "", "cpu"):
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    keras.distribution.initialize()


def replicas_in_sync():
    """Replicas a loss is summed over: `tf.distribute`'s count, else 1.

    Only TensorFlow's strategies sum per-replica losses; JAX's data
    parallelism computes one loss over the global batch.
    """
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        return tf.distribute.get_strategy().num_replicas_in_sync
    return 1


def scale_loss(value):
    """Scale a loss computed on one replica's batch for summing across replicas.

    Use it for loss terms that are not reduced by a `keras.losses.Loss` (which
    scales itself), such as regularization penalties, inside `compute_loss`.
    """
    replicas = replicas_in_sync()
    return value if replicas == 1 else value * (1.0 / replicas)


def unscale_loss(value):
    """Undo `scale_loss`: the loss of the global batch, for metrics."""
    replicas = replicas_in_sync()
    return value if replicas == 1 else value * float(replicas)


@contextlib.contextmanager
def data_parallel(devices=None, multi_worker=None):
    """Context in which models are built and trained data-parallel.

    Args:
        devices: device names to replicate over (TensorFlow, e.g.
            `["/cpu:0", "/cpu:1"]`) or JAX devices; `None` uses every device
            the backend sees (all GPUs; the CPU once, unless split into
            logical devices).
        multi_worker: train across processes, one per machine. JAX:
            `keras.distribution.initialize()` first, configured by
            `KERAS_DISTRIBUTION_JOB_ADDRESSES`,
            `KERAS_DISTRIBUTION_NUM_PROCESSES` and
            `KERAS_DISTRIBUTION_PROCESS_ID` (by default when the first is
            set), then `DataParallel` over the devices of all processes.
            TensorFlow: `MultiWorkerMirroredStrategy`, configured by
            `TF_CONFIG` (by default when it is set), for a custom training
            loop only: Keras 3's `fit` cannot train with it
            (tensorflow/tensorflow#72388, keras-team/keras#20585).

    Yields:
        The `tf.distribute.Strategy` or `keras.distribution.DataParallel`.

    Raises:
        ValueError: on a backend without a data-parallel engine (PyTorch:
            use `torchrun` with your own DistributedDataParallel loop).

    Example:

    >>> from keras_capsules.distribute import data_parallel
    >>> with data_parallel() as strategy:  # doctest: +SKIP
    ...     model = applications.CapsNetMNIST()
    ...     model.fit(x, y, batch_size=100)
    """
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        if multi_worker is None:
            multi_worker = "TF_CONFIG" in os.environ
        if multi_worker:
            if devices is not None:
                raise ValueError(
                    "`devices` cannot be combined with `multi_worker`: "
                    "MultiWorkerMirroredStrategy uses every local device of each worker."
                )
            strategy = tf.distribute.MultiWorkerMirroredStrategy()
        else:
            strategy = tf.distribute.MirroredStrategy(devices)
        with strategy.scope():
            yield strategy
    elif backend == "jax":
        if multi_worker is None:
            multi_worker = MULTI_PROCESS_VARIABLE in os.environ
        if multi_worker:
            if devices is not None:
                raise ValueError(
                    "`devices` cannot be combined with `multi_worker`: the distribution "
                    "spans every device of every process."
                )
            _initialize_jax_processes()
        distribution = keras.distribution.DataParallel(devices=devices)
        with distribution.scope():
            yield distribution
    else:
        raise ValueError(
            f"Data-parallel training needs the TensorFlow or JAX backend (current: {backend!r})."
        )

"""TensorFlow's pooling (BFC) CPU allocator: chosen on import, or by `use_pooled_cpu_allocator`."""

import os
import platform
import sys
import warnings

from keras_capsules._devices import cpu_flags

ENVIRONMENT_VARIABLE = "TF_CPU_ALLOCATOR_USE_BFC"

ONEDNN_VARIABLE = "TF_ENABLE_ONEDNN_OPTS"

ONEDNN_CPU_FLAGS = ("avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16")
"""The CPU features (as /proc/cpuinfo names them) on which TensorFlow runs oneDNN by default."""


def use_pooled_cpu_allocator(enabled=True):
    """Pool TensorFlow's CPU memory instead of returning it to the system at every step.

    TensorFlow's default CPU allocator takes every large tensor from the C
    library, which maps it fresh from the operating system and unmaps it when
    the tensor is freed. The next step's tensor of the same size then faults
    its pages in again, one page at a time. Capsule layers create tensors of
    tens of MB per step (EM routing's votes, dynamic routing's weighted
    inputs), so on a CPU a large share of a training step went to page faults
    (system time).

    TensorFlow's BFC allocator keeps freed memory in a pool and reuses it,
    which removes those faults. It is chosen with the `TF_CPU_ALLOCATOR_USE_BFC`
    environment variable, which this function sets for the whole process (and
    the processes it starts). TensorFlow reads the variable once, when its
    runtime starts at the first TensorFlow operation (building a model runs
    some): call this function before that. Importing TensorFlow or Keras first
    is fine. It has no effect on the JAX and PyTorch backends.

    Importing `keras_capsules` (and so `applications`, or the `keras-capsules`
    command) already selects the pool, the same way, where TensorFlow will
    run its Eigen kernels (oneDNN off), unless the variable is set (a value
    the user set is kept: `TF_CPU_ALLOCATOR_USE_BFC=false` keeps
    TensorFlow's default allocator) or TensorFlow's runtime has started (then
    nothing changes, silently). Call this function to choose explicitly: it
    overrides the variable.

    Where TensorFlow runs its oneDNN kernels (its default on Linux x86 CPUs
    with AVX-512 VNNI, AVX-512 BF16, AVX-VNNI or AMX, or with
    `TF_ENABLE_ONEDNN_OPTS=1`), it takes most CPU memory from oneDNN's own
    allocator, which pools large tensors itself, and training measured
    slower with the variable set: the import then leaves it unset, judging
    from `TF_ENABLE_ONEDNN_OPTS` and the CPU's features as TensorFlow does.

    The pool holds what the process needed at its peak, plus what
    fragmentation costs, until the process ends; the Results page ("CPU
    memory allocator") has measured speed and peak memory with and without it.

    Args:
        enabled: `True` selects the pool (`TF_CPU_ALLOCATOR_USE_BFC=true`),
            `False` TensorFlow's default allocator (`"false"`).

    Returns:
        `True` if TensorFlow's runtime had not started yet, so the choice
        applies. `False` if it had, with a `RuntimeWarning`: the variable is
        still set, but it changes nothing in this process.

    Example:

    >>> import os
    >>> import warnings
    >>> import keras_capsules
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     applies = keras_capsules.use_pooled_cpu_allocator()
    >>> os.environ["TF_CPU_ALLOCATOR_USE_BFC"]
    'true'
    >>> applies == (not caught)  # warned if TensorFlow's runtime had started
    True
    """
    os.environ[ENVIRONMENT_VARIABLE] = "true" if enabled else "false"
    if not _tensorflow_started():
        return True
    warnings.warn(
        "use_pooled_cpu_allocator() was called after TensorFlow ran its first "
        f"operation: TensorFlow reads {ENVIRONMENT_VARIABLE} once, when its runtime "
        "starts, so the setting changes nothing in this process. Call it before "
        "building a model or running any TensorFlow operation (importing Keras first "
        "is fine).",
        RuntimeWarning,
        stacklevel=2,
    )
    return False


def onednn_by_default():
    """Whether TensorFlow will run its oneDNN kernels in this process, told without importing it.

    As TensorFlow decides: `TF_ENABLE_ONEDNN_OPTS` when it is set to `1`,
    `true`, `0` or `false` (in any case); otherwise on on Linux x86 CPUs with
    one of `ONEDNN_CPU_FLAGS`, and off elsewhere.

    Example:

    >>> import os
    >>> from keras_capsules._allocator import onednn_by_default
    >>> os.environ.get("TF_ENABLE_ONEDNN_OPTS") != "0" or not onednn_by_default()
    True
    """
    value = os.environ.get(ONEDNN_VARIABLE, "").strip().lower()
    if value in ("1", "true"):
        return True
    if value in ("0", "false"):
        return False
    if not sys.platform.startswith("linux") or platform.machine().lower() not in (
        "x86_64",
        "amd64",
    ):
        return False
    return bool(cpu_flags() & set(ONEDNN_CPU_FLAGS))


def _choose_default():
    """Select the pool on import where it is faster, unless the user set the variable.

    Nothing is set where TensorFlow will run oneDNN (`onednn_by_default`), or
    its runtime has started (too late).

    Returns:
        `True` if this call set the variable.
    """
    if ENVIRONMENT_VARIABLE in os.environ or onednn_by_default() or _tensorflow_started():
        return False
    os.environ[ENVIRONMENT_VARIABLE] = "true"
    return True


def _tensorflow_started():
    """Whether TensorFlow's runtime has started in this process, so its CPU allocator is chosen.

    Importing TensorFlow does not start it; its first eager operation does. Where
    TensorFlow's internals do not tell, an imported TensorFlow counts as started.
    A TF1 `Session`, or a reset eager context, is not seen.
    """
    if "tensorflow" not in sys.modules:
        return False
    from keras_capsules._compat import InternalChanged
    from keras_capsules._compat import tensorflow as tensorflow_compat

    try:
        return tensorflow_compat.runtime_started()
    except InternalChanged:
        return True

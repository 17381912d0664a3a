"""TensorFlow's pooling (BFC) CPU allocator: chosen on import, or by `use_pooled_cpu_allocator`."""

import os
import sys
import warnings

ENVIRONMENT_VARIABLE = "TF_CPU_ALLOCATOR_USE_BFC"


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
    command) already selects the pool, the same way, unless the variable is
    set (a value the user set is kept: `TF_CPU_ALLOCATOR_USE_BFC=false` keeps
    TensorFlow's default allocator) or TensorFlow's runtime has started (then
    nothing changes, silently). Call this function to choose explicitly: it
    overrides the variable.

    Where TensorFlow runs its oneDNN kernels (its default on CPUs with VNNI,
    AVX-512 VNNI or AVX-VNNI, or newer extensions, or with
    `TF_ENABLE_ONEDNN_OPTS=1`), it takes CPU memory from oneDNN's own
    allocator instead, which pools large tensors itself: the
    variable then changes nothing.

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


def _choose_default():
    """Select the pool on import, unless the user set the variable or it is too late.

    Returns:
        `True` if this call set the variable.
    """
    if ENVIRONMENT_VARIABLE in os.environ or _tensorflow_started():
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

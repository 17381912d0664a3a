"""`use_pooled_cpu_allocator`: TensorFlow's pooling (BFC) CPU allocator, chosen explicitly."""

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
    the processes it starts). TensorFlow reads the variable once, when it
    first allocates a tensor: call this function first thing, before anything
    imports TensorFlow or Keras. Importing `keras_capsules` changes nothing;
    the `keras-capsules` command calls it unless the variable is already set.
    It has no effect on the JAX and PyTorch backends.

    Where TensorFlow runs its oneDNN kernels (its default on CPUs with
    AVX-512, or with `TF_ENABLE_ONEDNN_OPTS=1`), it takes CPU memory from
    oneDNN's own allocator instead, which pools large tensors itself: the
    variable then changes nothing.

    The pool holds what the process needed at its peak, plus what
    fragmentation costs, until the process ends; the Results page ("CPU
    memory allocator") has measured speed and peak memory with and without it.

    Args:
        enabled: `True` selects the pool (`TF_CPU_ALLOCATOR_USE_BFC=true`),
            `False` TensorFlow's default allocator (`"false"`).

    Returns:
        `True` if TensorFlow had not been imported yet, so the choice applies.
        `False` if it had, with a `RuntimeWarning`: the variable is still set,
        but it changes nothing if TensorFlow has already allocated a tensor.

    Example:

    >>> import os
    >>> import warnings
    >>> import keras_capsules
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     applies = keras_capsules.use_pooled_cpu_allocator()
    >>> os.environ["TF_CPU_ALLOCATOR_USE_BFC"]
    'true'
    >>> applies == (not caught)  # warned if TensorFlow was imported already
    True
    """
    os.environ[ENVIRONMENT_VARIABLE] = "true" if enabled else "false"
    if "tensorflow" not in sys.modules:
        return True
    warnings.warn(
        f"use_pooled_cpu_allocator() was called after TensorFlow was imported: "
        f"TensorFlow reads {ENVIRONMENT_VARIABLE} once, at its first allocation, so if it "
        "has allocated a tensor already the setting changes nothing. Call it before "
        "importing TensorFlow or Keras.",
        RuntimeWarning,
        stacklevel=2,
    )
    return False

"""TensorFlow's internals: whether its runtime has started, and whether it runs oneDNN.

TensorFlow has no public way to tell whether its runtime has started (its
first eager operation starts it; importing TensorFlow does not), which
`keras_capsules.use_pooled_cpu_allocator` needs to know: TensorFlow reads the
allocator's environment variable then. Its eager context tells, through the
private handle it holds once started.
"""

from keras_capsules._compat import changed
from keras_capsules._compat import internal

_LIBRARY = "tensorflow"


def runtime_started():
    """Whether TensorFlow's runtime has started in this process. Imports TensorFlow.

    Raises:
        InternalChanged: TensorFlow's eager context no longer tells.
    """
    context_safe = internal(_LIBRARY, "tensorflow.python.eager.context", "context_safe")
    current = context_safe()
    if current is None:  # no context yet: no operation has run
        return False
    try:
        return current._context_handle is not None
    except AttributeError as error:
        raise changed(_LIBRARY, "the eager Context's _context_handle", error) from error


def onednn_enabled():
    """Whether TensorFlow runs its oneDNN kernels in this process, as TensorFlow says. Imports it.

    Raises:
        InternalChanged: TensorFlow no longer tells.
    """
    return bool(internal(_LIBRARY, "tensorflow.python.util._pywrap_util_port", "IsMklEnabled")())


def check():
    """Make sure the TensorFlow internals that keras-capsules uses are there.

    Raises:
        InternalChanged: one is gone; the message names it and TensorFlow's version.
    """
    context = internal(_LIBRARY, "tensorflow.python.eager.context")
    internal(_LIBRARY, "tensorflow.python.eager.context", "context_safe")
    if not hasattr(context.context(), "_context_handle"):  # creates the context, starts nothing
        raise changed(_LIBRARY, "the eager Context's _context_handle")
    runtime_started()
    onednn_enabled()

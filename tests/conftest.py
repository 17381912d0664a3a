import os

import keras_capsules  # noqa: F401  (before TensorFlow runs: it selects the pooled allocator)

# Before JAX starts, here and in the processes tests start (they inherit the
# variable): XLA's CPU compiler at LLVM's default optimisation takes seconds per
# program, up to 9 s for a random normal initializer of a new shape, and the JAX
# tests spent 70% of their time compiling (measured on 2 cores). The suite's arrays
# are tiny: unoptimised code runs them as fast, and computes the same values (to
# rounding: no fused multiply-adds).
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = " ".join(
        [os.environ.get("XLA_FLAGS", ""), "--xla_backend_optimization_level=0"]
    ).strip()

import keras  # noqa: E402
import numpy as np
import pytest

# A script run in its own process (`python -m tests._data_parallel_run`): importing
# it splits the CPU into two devices, so `--doctest-modules` must not collect it.
collect_ignore = ["_data_parallel_run.py"]

BACKEND = keras.backend.backend()

requires_tensorflow = pytest.mark.skipif(
    BACKEND != "tensorflow", reason="SavedModel export is the TensorFlow part"
)


def gradient(fn, x):
    """Gradient of `sum(fn(x))` with respect to `x`, on whichever backend runs."""
    x = keras.ops.convert_to_tensor(x)
    if BACKEND == "tensorflow":
        import tensorflow as tf

        with tf.GradientTape() as tape:
            tape.watch(x)
            y = keras.ops.sum(keras.ops.cast(fn(x), "float32"))
        return keras.ops.convert_to_numpy(tape.gradient(y, x)).astype("float32")
    if BACKEND == "jax":
        import jax

        return np.asarray(
            jax.grad(lambda v: keras.ops.sum(keras.ops.cast(fn(v), "float32")))(x)
        ).astype("float32")
    if BACKEND == "torch":
        x = x.detach().requires_grad_(True)
        keras.ops.sum(keras.ops.cast(fn(x), "float32")).backward()
        return x.grad.float().cpu().numpy()
    raise NotImplementedError(BACKEND)


@pytest.fixture
def mixed_precision(request):
    """Run a test under a global dtype policy, restored afterwards."""
    previous = keras.mixed_precision.dtype_policy()
    keras.mixed_precision.set_dtype_policy(request.param)
    yield request.param
    keras.mixed_precision.set_dtype_policy(previous)


@pytest.fixture(scope="session")
def mnist_data():
    from keras_capsules.datasets import mnist

    return mnist.load_data()


@pytest.fixture(autouse=True)
def _seed():
    keras.utils.set_random_seed(int(os.environ.get("TEST_SEED", "1234")))
    yield


@pytest.fixture(params=["mode 0o555", "read-only file system"])
def read_only_folder(request, tmp_path, monkeypatch):
    """A folder in which no folder can be made: by its mode, or as on a read-only file system.

    Its mode stops no one running as root, so that case is skipped for root;
    a read-only file system is simulated: `os.mkdir` fails in the folder
    with `EROFS`, as the system does.
    """
    import errno

    folder = tmp_path / "read-only"
    folder.mkdir()
    if request.param == "mode 0o555":
        if os.geteuid() == 0:
            pytest.skip("root creates folders whatever a folder's mode")
        folder.chmod(0o555)
        yield str(folder)
        folder.chmod(0o755)  # for pytest to remove it
        return
    mkdir = os.mkdir

    def read_only(path, *args, **kwargs):
        if os.path.abspath(path).startswith(str(folder) + os.sep):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), path)
        return mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", read_only)  # what `os.makedirs` calls
    yield str(folder)

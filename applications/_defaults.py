"""What the applications share: the dtype policy they resolve and their default compile."""

import functools
import warnings

import keras

_BFLOAT16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
"""CPU features that compute bfloat16 natively; without them it is emulated, slowly."""


def dtype_policy(dtype):
    """The policy of an application's layers: `dtype` if given, else the global policy.

    A bfloat16 policy on a CPU without native bfloat16 and no accelerator warns
    once: there the convolutions' bfloat16 gradients train about 10x slower
    than float32.
    """
    policy = keras.dtype_policies.get(dtype or keras.mixed_precision.dtype_policy())
    if policy.compute_dtype == "bfloat16":
        _warn_if_bfloat16_is_emulated(policy.name)
    return policy


@functools.lru_cache(maxsize=1)
def cpu_flags():
    """The CPU's feature flags from `/proc/cpuinfo` (Linux); empty where unreadable."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def _has_accelerator():
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return bool(
            tf.config.list_physical_devices("GPU") or tf.config.list_physical_devices("TPU")
        )
    if backend == "jax":
        import jax

        return jax.default_backend() != "cpu"
    if backend == "torch":
        import torch

        return torch.cuda.is_available()
    return False


_warned = []


def _warn_if_bfloat16_is_emulated(name):
    flags = cpu_flags()
    if _warned or not flags or any(f in flags for f in _BFLOAT16_CPU_FLAGS):
        return
    if _has_accelerator():
        return
    _warned.append(name)
    warnings.warn(
        f"The dtype policy {name!r} computes in bfloat16, which this CPU has no instructions "
        f"for ({' or '.join(_BFLOAT16_CPU_FLAGS)}): it is emulated, and training runs about 10x "
        "slower than in float32. Use float32 on this machine.",
        stacklevel=3,
    )


class DefaultCompile:
    """`compile()` with no arguments: the paper's optimizer, loss and metrics.

    The optimizer is Adam with the learning rate schedule of the class's
    `RECIPE` (`applications.Recipe`); the loss is the model's own
    (`_loss_for_compile`) and the metrics `_default_metrics()`. A model saved
    on TensorFlow or JAX with `steps_per_execution > 1` in its compile config
    loads on PyTorch, whose Keras trainer runs one step per call, with one
    (and a warning).
    """

    RECIPE = None
    """The architecture's `applications.Recipe`."""

    def _default_metrics(self):
        """The metrics of `compile(metrics="auto")`; subclasses with other targets override it."""
        return ["accuracy"]

    def _loss_for_compile(self, loss):
        """The `loss` to give `keras.Model.compile` for the argument `loss`."""
        return loss

    def compile(self, optimizer="auto", loss="auto", metrics="auto", **kwargs):
        """Configure the model for training; with no arguments, as its paper trains it.

        Args:
            optimizer: `"auto"` (default): Adam with the learning rate
                schedule of the class's `RECIPE`; or any Keras optimizer.
            loss: `"auto"` (default): the model's own loss, which its
                docstring describes.
            metrics: `"auto"` (default): the class's metrics (accuracy); or a
                list of Keras metrics.
            **kwargs: the other arguments of `keras.Model.compile`, e.g.
                `steps_per_execution` or `jit_compile`.
        """
        if isinstance(optimizer, str) and optimizer == "auto":
            optimizer = self.RECIPE.optimizer()
        if isinstance(metrics, str) and metrics == "auto":
            metrics = self._default_metrics()
        loss = self._loss_for_compile(loss)
        steps = kwargs.get("steps_per_execution", 1)
        if keras.backend.backend() == "torch" and steps != 1:
            warnings.warn(
                f"steps_per_execution={steps} is taken as 1: PyTorch's Keras trainer runs one "
                "step per call.",
                stacklevel=2,
            )
            kwargs["steps_per_execution"] = 1
        super().compile(optimizer=optimizer, loss=loss, metrics=metrics, **kwargs)

    def compile_from_config(self, config):
        # Keras loads the compile state of a model whose `compile` is its own
        # only through this method, as its warning on load asks.
        self.compile(**keras.saving.deserialize_keras_object(config))
        if self.built:
            self.optimizer.build(self.trainable_variables)


def own_loss(model, loss):
    """`None` for `loss="auto"` (or `None`): a model computing its own loss takes no other."""
    if loss is None or (isinstance(loss, str) and loss == "auto"):
        return None
    raise ValueError(
        f"{type(model).__name__} computes its own loss (see its docstring), so `compile` "
        f"takes loss='auto' only. Received: loss={loss!r}"
    )

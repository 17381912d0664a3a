"""A custom gradient whose backward pass differentiates a recomputation.

`keras.ops.custom_gradient` lets a function define its own gradient, but
Keras has no backend-independent way to differentiate *inside* that gradient
(a vector-Jacobian product). Both routing procedures need one: their backward
passes recompute the cheap part of the forward pass and differentiate it with
respect to a few small tensors, then form the gradient of the large votes
themselves (`keras_capsules._em_route.em_route` and `dynamic_routing`). On
TensorFlow the result is a first-order gradient only: the values a backward
pass reuses from its forward pass are constants to an outer tape. This module
is the only place that touches a backend directly; on backends it does not
cover, callers use plain automatic differentiation instead.

`inference_only()` turns the structured gradients off while a forward pass is
traced for export: nothing differentiates an exported graph, and a converter
(tf2onnx, LiteRT's) then sees plain operations only, not the custom-gradient
wrappers of the training path.
"""

import contextlib
import threading

import keras

_state = threading.local()


@contextlib.contextmanager
def inference_only():
    """Within it, routings trace their plain forward pass, with no custom gradient.

    `supports_recompute_gradient()` is `False` (so `gradient="auto"` takes
    the plain automatic-differentiation path) and `recompute_gradient` returns
    `forward`'s outputs alone (for an explicit `gradient="structured"`). The
    values are the same; only the gradient machinery is left out, which is
    what an exported inference graph wants.
    """
    previous = getattr(_state, "inference_only", False)
    _state.inference_only = True
    try:
        yield
    finally:
        _state.inference_only = previous


def _inference_only():
    return getattr(_state, "inference_only", False)


def supports_recompute_gradient():
    """Whether `recompute_gradient` works on the current backend (and is wanted)."""
    return keras.backend.backend() in ("tensorflow", "jax") and not _inference_only()


def recompute_gradient(forward, backward):
    """A function of tensors with the gradient `backward` defines.

    Args:
        forward: `forward(*args) -> (outputs, saved)`: a tuple of tensors, and
            a list of (small) tensors the backward pass reuses instead of
            computing them again.
        backward: `backward(args, saved, upstream) -> grads`: `upstream` holds
            one cotangent per output (zeros where the output is unused), and
            `grads` one gradient per argument.

    Returns:
        A function with the values of `forward` and the gradient of `backward`.
        Only the arguments and `saved` stay alive between the forward and
        backward passes, and the backward pass starts only once `upstream`
        exists: a graph runtime may not run it early, during the forward pass,
        where its temporaries would add to the forward pass's memory.
    """
    if _inference_only():
        return lambda *args: tuple(forward(*args)[0])
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        @tf.custom_gradient
        def function(*args):
            outputs, saved = forward(*args)

            def grad(*upstream):
                upstream = [
                    tf.zeros_like(o) if u is None else u
                    for u, o in zip(upstream, outputs, strict=True)
                ]
                with tf.control_dependencies(upstream):
                    args_after = [tf.identity(a) for a in args]
                return tuple(backward(args_after, saved, upstream))

            return outputs, grad

        return function
    if backend == "jax":
        import jax

        @jax.custom_vjp
        def function(*args):
            return forward(*args)[0]

        def function_forward(*args):
            outputs, saved = forward(*args)
            return outputs, (args, saved)

        def function_backward(residuals, upstream):
            args, saved = residuals
            return tuple(backward(args, saved, list(upstream)))

        function.defvjp(function_forward, function_backward)
        return function
    raise NotImplementedError(f"recompute_gradient does not support the {backend} backend.")


def with_gradient(values, constants, args, gradient):
    """`values`, already computed from `args`, with the gradient `gradient` defines.

    A recomputation inside a backward pass (`recompute_gradient`) reuses the
    values the forward pass saved instead of computing them again, while the
    derivatives with respect to their inputs still flow through it.

    Args:
        values: a tuple of tensors, the values of some function of `args` and
            `constants` that the caller computed earlier.
        constants: a tuple of tensors the gradient needs; no gradient reaches
            them.
        args: a tuple of tensors to differentiate with respect to.
        gradient: `gradient(constants, upstream) -> grads`: one cotangent per
            value in, one gradient per arg out.

    Returns:
        `values`, as a tuple of tensors.
    """
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        @tf.custom_gradient
        def function(*args):
            def grad(*upstream):
                upstream = [
                    tf.zeros_like(v) if u is None else u
                    for u, v in zip(upstream, values, strict=True)
                ]
                return tuple(gradient(constants, upstream))

            return tuple(tf.identity(v) for v in values), grad

        return function(*args)
    if backend == "jax":
        import jax

        @jax.custom_vjp
        def function(values, constants, args):
            return values

        def function_forward(values, constants, args):
            return values, constants

        def function_backward(constants, upstream):
            return None, None, tuple(gradient(constants, list(upstream)))

        function.defvjp(function_forward, function_backward)
        return function(tuple(values), tuple(constants), tuple(args))
    raise NotImplementedError(f"with_gradient does not support the {backend} backend.")


def vjp(function, primals, cotangents):
    """The gradients of `sum(cotangents * function(*primals)[0])` w.r.t. `primals`.

    `function` returns `(outputs, aux)`: a tuple of tensors to differentiate and
    anything else, returned as computed. Returns `(grads, aux)`, with zeros for
    primals the outputs do not depend on.
    """
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        with tf.GradientTape() as tape:
            for p in primals:
                tape.watch(p)
            outputs, aux = function(*primals)
        grads = tape.gradient(
            list(outputs),
            list(primals),
            output_gradients=list(cotangents),
            unconnected_gradients=tf.UnconnectedGradients.ZERO,
        )
        return grads, aux
    if backend == "jax":
        import jax

        _, pullback, aux = jax.vjp(function, *primals, has_aux=True)
        return list(pullback(tuple(cotangents))), aux
    if backend == "torch":
        import torch

        primals = [p.detach().requires_grad_(True) for p in primals]
        with torch.enable_grad():
            outputs, aux = function(*primals)
            grads = torch.autograd.grad(
                list(outputs), primals, grad_outputs=list(cotangents), allow_unused=True
            )
        grads = [torch.zeros_like(p) if g is None else g for g, p in zip(grads, primals)]
        return grads, aux
    raise NotImplementedError(f"vjp does not support the {backend} backend.")

"""A custom gradient whose backward pass differentiates a recomputation.

`keras.ops.custom_gradient` lets a function define its own gradient, but
Keras has no backend-independent way to differentiate *inside* that gradient
(a vector-Jacobian product). EM routing needs one: its backward pass recomputes
the cheap part of the forward pass and differentiates it with respect to a few
small tensors, then forms the gradient of the large votes itself
(`keras_capsules.routing.em_route`). This module is the only place that
touches a backend directly; on backends it does not cover, callers use plain
automatic differentiation instead.
"""

import keras


def supports_recompute_gradient():
    """Whether `recompute_gradient` works on the current backend."""
    return keras.backend.backend() in ("tensorflow", "jax")


def recompute_gradient(forward, backward):
    """A function of tensors with the gradient `backward` defines.

    Args:
        forward: `forward(*args) -> outputs`, a tuple of tensors.
        backward: `backward(args, upstream) -> grads`: `upstream` holds one
            cotangent per output (zeros where the output is unused), and
            `grads` one gradient per argument.

    Returns:
        A function with the values of `forward` and the gradient of `backward`.
        Only the arguments stay alive between the forward and backward passes.
    """
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        @tf.custom_gradient
        def function(*args):
            outputs = forward(*args)

            def grad(*upstream):
                upstream = [
                    tf.zeros_like(o) if u is None else u
                    for u, o in zip(upstream, outputs, strict=True)
                ]
                return tuple(backward(args, upstream))

            return outputs, grad

        return function
    if backend == "jax":
        import jax

        @jax.custom_vjp
        def function(*args):
            return forward(*args)

        def function_forward(*args):
            return forward(*args), args

        def function_backward(args, upstream):
            return tuple(backward(args, list(upstream)))

        function.defvjp(function_forward, function_backward)
        return function
    raise NotImplementedError(f"recompute_gradient does not support the {backend} backend.")


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
    raise NotImplementedError(f"vjp does not support the {backend} backend.")

"""The votes of a fully connected capsule layer, shared by its routing layers."""

from keras import ops


def votes_inputs_first(inputs, kernel, capsule_types, capsule_dim, dtype):
    """`u_hat[j|i] = W[i, j] @ u_i`, laid out `(num_inputs, batch, capsule_types, capsule_dim)`.

    One `(batch x input_dim) @ (input_dim x capsule_types * capsule_dim)`
    product per input capsule `i` (a batched product over `i`, no tiling of
    inputs or weights). `kernel` is `(num_inputs, input_dim, capsule_types *
    capsule_dim)`, or `(input_dim, capsule_types * capsule_dim)` shared by all
    inputs.
    """
    inputs = ops.cast(inputs, dtype)
    kernel = ops.cast(kernel, dtype)
    batch, num_inputs = ops.shape(inputs)[0], ops.shape(inputs)[1]
    flat = ops.matmul(ops.transpose(inputs, (1, 0, 2)), kernel)
    return ops.reshape(flat, (num_inputs, batch, capsule_types, capsule_dim))

"""NumPy references of the papers' procedures, which the tests hold the library to.

Each function writes a procedure out as the paper states it, loop by loop where
the paper is, in float64 and without the library's tricks (no rescaling, no
structured gradients, no gathered patches), so that a test comparing the library
with it compares two independent writings of the same equations.

The papers:

- Sabour, Frosst, Hinton. Dynamic Routing Between Capsules. NIPS 2017
  ("Sabour et al.").
- Hinton, Sabour, Frosst. Matrix capsules with EM routing. ICLR 2018
  ("Hinton et al.").
- Mazzia, Salvetti, Chiaberge. Efficient-CapsNet: Capsule Network with
  Self-Attention Routing. Scientific Reports 2021 ("Mazzia et al.").
- Tsai, Srivastava, Goh, Salakhutdinov. Capsules with Inverted Dot-Product
  Attention Routing. ICLR 2020 ("Tsai et al.").

This module imports NumPy only: pytest imports it for `--doctest-modules` too,
and it must not import a backend or change the process.
"""

import numpy as np

EM_EPSILON = 1e-7
"""The floor of EM routing's denominators, `keras_capsules._em_route.EM_EPSILON`."""


# Sabour et al. 2017: vector capsules and dynamic routing.


def squash(s):
    """Sabour et al., equation 1: `v = |s|^2 / (1 + |s|^2) * s / |s|` over the last axis.

    A zero capsule squashes to zero.
    """
    norm = np.linalg.norm(s, axis=-1, keepdims=True)
    return np.where(norm > 0, norm**2 / (1 + norm**2) * s / np.maximum(norm, 1e-30), 0.0)


def capsule_votes(u, kernel):
    """Sabour et al., equation 2: the prediction vectors `u_hat[j|i] = W_ij u_i`.

    Args:
        u: input capsules, `(batch, num_inputs, input_dim)`.
        kernel: `W`, `(num_inputs, input_dim, num_outputs, output_dim)`.

    Returns:
        `(batch, num_inputs, num_outputs, output_dim)`.
    """
    batch, num_inputs, _ = u.shape
    num_outputs = kernel.shape[2]
    return np.stack(
        [
            [[u[n, i] @ kernel[i, :, j] for j in range(num_outputs)] for i in range(num_inputs)]
            for n in range(batch)
        ]
    )


def swap_parents_and_children(x):
    """Votes or coupling between the references' layout, `(batch, inputs, outputs, ...)`,
    and routing's, `(batch, outputs, inputs, ...)`: the swap is its own inverse."""
    return np.swapaxes(np.asarray(x), 1, 2)


def dynamic_routing(votes, iterations):
    """Sabour et al., Procedure 1 (routing by agreement), written out loop by loop.

    Args:
        votes: `u_hat`, `(batch, num_inputs, num_outputs, dim)`.
        iterations: the number of iterations `r`.

    Returns:
        `(outputs, coupling)`: the squashed `v_j`, `(batch, num_outputs, dim)`,
        and the coupling coefficients `c_ij` of the last iteration,
        `(batch, num_inputs, num_outputs)`.
    """
    batch, num_inputs, num_outputs, _ = votes.shape
    votes = votes.astype("float64")
    outputs = np.zeros((batch, num_outputs, votes.shape[-1]))
    coupling = np.zeros((batch, num_inputs, num_outputs))
    for n in range(batch):
        b = np.zeros((num_inputs, num_outputs))
        for r in range(iterations):
            for i in range(num_inputs):  # softmax over the parents j of child i
                e = np.exp(b[i] - b[i].max())
                coupling[n, i] = e / e.sum()
            for j in range(num_outputs):
                s = sum(coupling[n, i, j] * votes[n, i, j] for i in range(num_inputs))
                norm2 = float(s @ s)
                outputs[n, j] = norm2 / (1 + norm2) * s / np.sqrt(norm2) if norm2 > 0 else 0
            if r < iterations - 1:
                for i in range(num_inputs):
                    for j in range(num_outputs):
                        b[i, j] += votes[n, i, j] @ outputs[n, j]
    return outputs, coupling


def margin_loss(labels, lengths, m_plus=0.9, m_minus=0.1, down_weight=0.5):
    """Sabour et al., equation 4, summed over the classes and averaged over the batch.

    `L_k = T_k max(0, m+ - |v_k|)^2 + lambda (1 - T_k) max(0, |v_k| - m-)^2`,
    with `T_k = 1` for the class of integer `labels` and `lambda = down_weight`.
    """
    t = np.eye(lengths.shape[1])[labels]
    per_class = (
        t * np.maximum(0, m_plus - lengths) ** 2
        + down_weight * (1 - t) * np.maximum(0, lengths - m_minus) ** 2
    )
    return per_class.sum(1).mean()


def reconstruction_loss(images, reconstructions, weight=0.0005):
    """Sabour et al., section 4.1: the sum of squared pixel differences, scaled by 0.0005.

    Averaged over the batch; each example is flattened to its pixels.
    """
    batch = len(images)
    differences = images.reshape(batch, -1) - reconstructions.reshape(batch, -1)
    return weight * (differences**2).sum(1).mean()


def bilinear_resize(images, height, width):
    """Images `(batch, h, w, c)` resized to `(height, width)` by bilinear interpolation.

    Half-pixel centres: output pixel `i` samples the input at
    `(i + 0.5) * h / height - 0.5`, clamped to the image, between its two
    nearest rows (and likewise for columns).
    """

    def weights(size, new):
        position = np.clip((np.arange(new) + 0.5) * size / new - 0.5, 0, size - 1)
        low = np.floor(position).astype(int)
        high = np.minimum(low + 1, size - 1)
        matrix = np.zeros((new, size))
        matrix[np.arange(new), low] += 1 - (position - low)
        matrix[np.arange(new), high] += position - low
        return matrix

    rows = weights(images.shape[1], height)
    columns = weights(images.shape[2], width)
    return np.einsum("yi,bijc,xj->byxc", rows, images, columns)


# Hinton et al. 2018: matrix capsules and EM routing.


def spread_loss(labels, activations, margin):
    """Hinton et al., section 3.1: `L = sum_{i != t} max(0, m - (a_t - a_i))^2`.

    Averaged over the batch; `labels` are integer targets `t`, or sets of
    them (several targets: each against every non-target).
    """
    losses = []
    for targets, a in zip(labels, activations):
        targets = {int(targets)} if np.ndim(targets) == 0 else {int(t) for t in targets}
        losses.append(
            sum(
                max(0.0, margin - (a[t] - a[i])) ** 2
                for t in targets
                for i in range(len(a))
                if i not in targets
            )
        )
    return np.mean(losses)


def sigmoid(x):
    """The logistic function of Procedure 1's M-step."""
    return 1.0 / (1.0 + np.exp(-x))


def inverse_temperatures(iterations, final, schedule="rescaled"):
    """The inverse temperature `lambda` of each EM iteration, from the formulas.

    `"authors"`: `final * (1 - 0.95 ** (t + 1))`, the authors' answer on
    OpenReview and their code. `"rescaled"`, the library's default: the same
    growth, rescaled to end at `final`.
    """
    if schedule == "authors":
        return [final * (1 - 0.95 ** (t + 1)) for t in range(iterations)]
    return [final * (1 - 0.95 ** (t + 1)) / (1 - 0.95**iterations) for t in range(iterations)]


def tempering_schedule(tempering, iterations):
    """The E-step exponent `tau` of each of the `iterations - 1` E-steps."""
    return list(tempering) if isinstance(tempering, list) else [tempering] * (iterations - 1)


def em_routing_on_edges(
    votes,
    child_of,
    parent_of,
    child_act,
    beta_v,
    beta_a,
    parent_type,
    lambdas,
    var_eps,
    tempering=None,
    per_type=False,
    epsilon=EM_EPSILON,
):
    """Hinton et al., Procedure 1 (EM routing) on an explicit list of edges.

    In float64 with direct squares. votes: (E, 16); child_of / parent_of: (E,)
    ids; child_act: per child id; beta_v / beta_a indexed by parent type;
    parent_type: per parent id; lambdas: the inverse temperature of each
    iteration; tempering: the exponent of each E-step, R ∝ (a p) ** tau
    (default 1, Procedure 1). Procedure 1 splits each child over all its
    parents, R = 1 / |parents| first; `per_type` splits it per parent type over
    the parents of that type instead, R = 1 / |types| first (the authors'
    `update_conv_routing`). Returns per-parent means, activations and the last
    R per edge (None after one iteration, which has no E-step).
    """
    votes = votes.astype("float64")
    num_parents = parent_type.shape[0]
    num_children = child_act.shape[0]
    iterations = len(lambdas)
    tempering = [1.0] * (iterations - 1) if tempering is None else tempering
    edge_type = parent_type[parent_of]
    num_types = parent_type.max() + 1
    # The edges each child's R is normalised over.
    if per_type:
        groups = [
            np.flatnonzero((child_of == c) & (edge_type == k))
            for c in range(num_children)
            for k in range(num_types)
        ]
    else:
        groups = [np.flatnonzero(child_of == c) for c in range(num_children)]
    r = np.zeros(len(votes))
    for mine in groups:
        r[mine] = 1.0 / num_types if per_type else 1.0 / max(len(mine), 1)
    last_r = None
    for t, lam in enumerate(lambdas):
        mu = np.zeros((num_parents, 16))
        var = np.zeros((num_parents, 16))
        act = np.zeros(num_parents)
        for j in range(num_parents):
            e = parent_of == j
            w = r[e] * child_act[child_of[e]]
            total = w.sum()
            mu[j] = (w[:, None] * votes[e]).sum(0) / (total + epsilon)
            var[j] = (w[:, None] * (votes[e] - mu[j]) ** 2).sum(0) / (total + epsilon)
            var[j] += var_eps
            k = parent_type[j]
            cost = (16 * beta_v[k] + np.log(np.sqrt(var[j])).sum()) * total
            act[j] = sigmoid(lam * (beta_a[k] - cost))
        if t == iterations - 1:
            return mu, act, last_r
        log_p = np.array(
            [
                np.sum(
                    -((votes[e] - mu[parent_of[e]]) ** 2) / (2 * var[parent_of[e]])
                    - 0.5 * np.log(2 * np.pi * var[parent_of[e]])
                )
                for e in range(len(votes))
            ]
        )
        logits = tempering[t] * (np.log(act[parent_of]) + log_p)
        for mine in groups:
            if len(mine):
                z = np.exp(logits[mine] - logits[mine].max())
                r[mine] = z / z.sum()
        last_r = r.copy()


def em_routing_fully_connected(
    votes, activations, beta_v, beta_a, iterations, lam, eps, tempering=None, lambdas=None
):
    """Hinton et al., Procedure 1 with every child voting for every parent.

    Args:
        votes: `(batch, num_inputs, num_outputs, 16)`.
        activations: `(batch, num_inputs)`.
        beta_v, beta_a: one per output.
        iterations, lam: the rescaled schedule's length and final `lambda`,
            unless `lambdas` gives every iteration's `lambda`.
        eps: the variances' floor.
        tempering: the exponent of each E-step (1 by default).

    Returns:
        `(poses, activations, responsibilities)`: `(batch, num_outputs, 16)`,
        `(batch, num_outputs)` and the last `R`, `(batch, num_inputs,
        num_outputs)` (uniform after one iteration).
    """
    batch, num_in, num_out, _ = votes.shape
    child_of, parent_of = np.divmod(np.arange(num_in * num_out), num_out)
    poses, acts, resp = [], [], []
    for n in range(batch):
        mu, act, r = em_routing_on_edges(
            votes[n].reshape(-1, 16),
            child_of,
            parent_of,
            activations[n].astype("float64"),
            beta_v,
            beta_a,
            np.arange(num_out),
            inverse_temperatures(iterations, lam) if lambdas is None else lambdas,
            eps,
            tempering,
        )
        poses.append(mu)
        acts.append(act)
        resp.append(
            np.full((num_in, num_out), 1 / num_out) if r is None else r.reshape(num_in, num_out)
        )
    return np.stack(poses), np.stack(acts), np.stack(resp)


def convolution_readers(height, width, kernel_size, strides):
    """Which child each patch entry of a valid convolution reads, enumerated by position.

    Patch entry `(oy, ox, ky, kx)`, in that order, reads the child at
    `(strides * oy + ky, strides * ox + kx)` (Hinton et al., section 3: the
    convolutional capsule layers).

    Returns:
        `(children, readers)`: the child position (`row * width + column`) of
        each entry, and for each child position read, the entries reading it.
    """
    out_h = (height - kernel_size) // strides + 1
    out_w = (width - kernel_size) // strides + 1
    children, readers = [], {}
    for oy in range(out_h):
        for ox in range(out_w):
            for ky in range(kernel_size):
                for kx in range(kernel_size):
                    child = (strides * oy + ky) * width + strides * ox + kx
                    readers.setdefault(child, []).append(len(children))
                    children.append(child)
    return children, readers


def convolutional_em_routing(
    poses,
    activations,
    kernel,
    beta_v,
    beta_a,
    kernel_size,
    strides,
    lambdas,
    variance_epsilon,
    tempering,
    per_type=False,
):
    """Hinton et al., a convolutional capsule layer: every (child, parent) edge by position.

    A child of type `i` at kernel offset `(ky, kx)` of the patch of output
    position `(oy, ox)` votes for the parent of type `j` there with
    `V = M @ W[(ky * kernel_size + kx) * types + i, j]`; Procedure 1 routes
    all the edges (`em_routing_on_edges`).

    Args:
        poses: `(batch, height, width, types, 16)`.
        activations: `(batch, height, width, types)`.
        kernel: `W`, `(kernel_size * kernel_size * types, capsule_types, 4, 4)`.
        beta_v, beta_a: one per output type.
        kernel_size, strides: the valid convolution's.
        lambdas, variance_epsilon, tempering, per_type: as `em_routing_on_edges`.

    Returns:
        `(poses, activations, responsibilities)`: `(batch, out_h, out_w,
        capsule_types, 16)`, `(batch, out_h, out_w, capsule_types)` and the
        last `R`, `(batch, out_h, out_w, k, k, types, capsule_types)` (zero
        after one iteration).
    """
    kernel = kernel.astype("float64")
    batch, height, width, types, _ = poses.shape
    k, s, c_out = kernel_size, strides, kernel.shape[1]
    out_h, out_w = (height - k) // s + 1, (width - k) // s + 1
    edges = []  # (oy, ox, ky, kx, i, j)
    for oy in range(out_h):
        for ox in range(out_w):
            for ky in range(k):
                for kx in range(k):
                    for i in range(types):
                        for j in range(c_out):
                            edges.append((oy, ox, ky, kx, i, j))
    edges = np.array(edges)
    oy, ox, ky, kx, i, j = edges.T
    cy, cx = oy * s + ky, ox * s + kx
    child_of = (cy * width + cx) * types + i
    parent_of = (oy * out_w + ox) * c_out + j
    parent_type = np.tile(np.arange(c_out), out_h * out_w)
    w = kernel[(ky * k + kx) * types + i, j]  # (E, 4, 4)
    results = []
    for n in range(batch):
        m = poses[n, cy, cx, i].reshape(-1, 4, 4).astype("float64")
        votes = np.einsum("ekl,elm->ekm", m, w).reshape(-1, 16)
        mu, act, r = em_routing_on_edges(
            votes,
            child_of,
            parent_of,
            activations[n].reshape(-1).astype("float64"),
            beta_v,
            beta_a,
            parent_type,
            lambdas,
            variance_epsilon,
            tempering,
            per_type=per_type,
        )
        resp = np.zeros((out_h, out_w, k, k, types, c_out))
        if r is not None:
            resp[oy, ox, ky, kx, i, j] = r
        results.append(
            (mu.reshape(out_h, out_w, c_out, 16), act.reshape(out_h, out_w, c_out), resp)
        )
    return [np.stack(x) for x in zip(*results)]


def class_capsules(
    poses,
    activations,
    kernel,
    beta_v,
    beta_a,
    lambdas,
    variance_epsilon,
    tempering,
    coordinate_addition=True,
):
    """Hinton et al., section 3 (class capsules) with section 2.1's coordinate addition.

    Every child of a `height x width` grid votes for each class with
    `V = M @ W[type, class]`; with coordinate addition the centre of its cell,
    `((row + 0.5) / height, (column + 0.5) / width)`, is added to the first two
    entries of the right-hand column of the vote. Procedure 1 routes the votes
    (`em_routing_fully_connected`).

    Args:
        poses: `(batch, height, width, types, 16)`.
        activations: `(batch, height, width, types)`.
        kernel: `W`, `(types, num_classes, 4, 4)`.
        beta_v, beta_a: one per class.
        lambdas: the inverse temperature of each iteration.
        variance_epsilon, tempering: as `em_routing_on_edges`.

    Returns:
        As `em_routing_fully_connected`, the children ordered row, column, type.
    """
    kernel = kernel.astype("float64")
    num_classes = kernel.shape[1]
    batch, height, width, types, _ = poses.shape
    m = poses.reshape(batch, height, width, types, 4, 4).astype("float64")
    votes = np.einsum("byxikl,ijlm->byxijkm", m, kernel)
    if coordinate_addition:
        for y in range(height):
            for x in range(width):
                votes[:, y, x, :, :, 0, 3] += (y + 0.5) / height
                votes[:, y, x, :, :, 1, 3] += (x + 0.5) / width
    votes = votes.reshape(batch, height * width * types, num_classes, 16)
    return em_routing_fully_connected(
        votes,
        activations.reshape(batch, -1),
        beta_v,
        beta_a,
        len(lambdas),
        None,
        variance_epsilon,
        tempering,
        lambdas=lambdas,
    )


# Mazzia, Salvetti, Chiaberge 2021: Efficient-CapsNet.


def exponential_squash(s):
    """Mazzia et al., equation 5: `v = (1 - exp(-|s|)) * s / |s|` over the last axis."""
    norm = np.linalg.norm(s, axis=-1, keepdims=True)
    return np.where(norm > 0, (1 - np.exp(-norm)) * s / np.maximum(norm, 1e-300), 0.0)


def self_attention_routing(votes, bias=None):
    """Mazzia et al., equations 6-8, written out with each output's attention matrix.

    For every example and output capsule `j`: `A = U U^T / sqrt(d)` (`U` the
    `n x d` votes for `j`), `c[i, j] = softmax_j(sum_k A[i, k])`, and
    `v_j = squash(sum_i (c[i, j] + bias[i, j]) U[i])`.

    Args:
        votes: `(batch, num_inputs, num_outputs, output_dim)`.
        bias: `(num_inputs, num_outputs)` or `None`.

    Returns:
        `(outputs, coupling)`: `(batch, num_outputs, output_dim)` and the
        coefficients `c + bias`, `(batch, num_inputs, num_outputs)`.
    """
    votes = np.asarray(votes, np.float64)
    batch, num_inputs, num_outputs, dim = votes.shape
    bias = np.zeros((num_inputs, num_outputs)) if bias is None else np.asarray(bias, np.float64)
    logits = np.zeros((batch, num_inputs, num_outputs))
    for n in range(batch):
        for j in range(num_outputs):
            attention = votes[n, :, j] @ votes[n, :, j].T / np.sqrt(dim)
            logits[n, :, j] = attention.sum(axis=1)
    logits -= logits.max(axis=-1, keepdims=True)
    coupling = np.exp(logits) / np.exp(logits).sum(axis=-1, keepdims=True) + bias
    outputs = np.zeros((batch, num_outputs, dim))
    for n in range(batch):
        for j in range(num_outputs):
            outputs[n, j] = exponential_squash(coupling[n, :, j] @ votes[n, :, j])
    return outputs, coupling


# Tsai et al. 2020: inverted dot-product attention routing.


def inverted_dot_product_routing(
    votes, iterations, gamma=None, beta=None, epsilon=1e-5, agreement_scale=1.0
):
    """Tsai et al. 2020, Procedure 1, written out loop by loop in float64.

    `votes[n, i, j]` is child `i`'s vote for parent `j` in example `n`. The
    poses start at zero; every iteration computes the agreements with the
    previous iteration's poses, the softmax over the parents, the weighted sums
    and their layer norm. Returns the poses `(batch, num_outputs, output_dim)`
    and the routing coefficients of the last iteration `(batch, num_inputs,
    num_outputs)`.
    """
    votes = np.asarray(votes, np.float64)
    batch, num_inputs, num_outputs, dim = votes.shape
    gamma = np.broadcast_to(1.0 if gamma is None else gamma, (num_outputs, dim))
    beta = np.broadcast_to(0.0 if beta is None else beta, (num_outputs, dim))
    poses = np.zeros((batch, num_outputs, dim))
    routing = np.zeros((batch, num_inputs, num_outputs))
    for n in range(batch):
        p = np.zeros((num_outputs, dim))
        for _ in range(iterations):
            r = np.zeros((num_inputs, num_outputs))
            for i in range(num_inputs):
                a = [
                    agreement_scale * float(np.dot(p[j], votes[n, i, j]))
                    for j in range(num_outputs)
                ]
                e = np.exp(np.array(a) - max(a))
                r[i] = e / e.sum()
            new_p = np.zeros((num_outputs, dim))  # every parent from the previous poses
            for j in range(num_outputs):
                s = sum(r[i, j] * votes[n, i, j] for i in range(num_inputs))
                mean = s.mean()
                variance = ((s - mean) ** 2).mean()
                new_p[j] = (s - mean) / np.sqrt(variance + epsilon) * gamma[j] + beta[j]
            p = new_p
        poses[n], routing[n] = p, r
    return poses, routing


def in_reference_layout(routing_function):
    """`routing_function` on votes laid out as the references take them.

    The votes `(batch, num_inputs, num_outputs, dim)` are swapped to routing's
    layout before the call, and the coupling it returns swapped back.
    """
    from keras import ops

    def routed(votes, *args, return_coupling=False, **kwargs):
        votes = ops.swapaxes(ops.convert_to_tensor(votes), 1, 2)
        result = routing_function(votes, *args, return_coupling=return_coupling, **kwargs)
        if not return_coupling:
            return result
        *outputs, coupling = result
        return (*outputs, ops.swapaxes(coupling, 1, 2))

    return routed

"""Which parents share a child: normalising `log R` over outputs or over convolution sites."""

from keras import ops

from keras_capsules._validation import check_choice

NORMALIZATIONS = ("types_and_positions", "positions")
"""How a convolutional capsule layer normalises a child's `R` (see `normalize_over_positions`)."""


def normalize_over_outputs(logits):
    """`log R` when each child's parents are the outputs of its site (axis 2)."""
    return logits - ops.logsumexp(logits, axis=2, keepdims=True)


def convolution_sites(height, width, kernel_size, strides):
    """Which child each patch entry of a valid convolution reads, and its inverse.

    A convolutional capsule layer with `kernel_size` and `strides` over a
    `height x width` grid has `out_h x out_w` sites (output positions), each
    reading a `kernel_size x kernel_size` patch. Entry `p = (site, kh, kw)`
    of the flattened patches reads the child at position `children[p]`
    (`row * width + column`). `parents_of[c]` lists the patch entries that read
    child position `c`, padded with `len(children)`; `counts[c]` is their number
    (0 for positions that no patch covers).

    Returns:
        `(children, parents_of, counts, (out_h, out_w))`, NumPy arrays.
    """
    import numpy as np

    out_h = (height - kernel_size) // strides + 1
    out_w = (width - kernel_size) // strides + 1
    if out_h < 1 or out_w < 1:
        raise ValueError(
            f"A {kernel_size}x{kernel_size} kernel does not fit a {height}x{width} grid "
            f"of capsules. Received: kernel_size={kernel_size}, input grid {height}x{width}"
        )
    oy, ox, ky, kx = np.meshgrid(
        np.arange(out_h),
        np.arange(out_w),
        np.arange(kernel_size),
        np.arange(kernel_size),
        indexing="ij",
    )
    children = ((oy * strides + ky) * width + (ox * strides + kx)).reshape(-1)
    counts = np.bincount(children, minlength=height * width)
    parents_of = np.full((height * width, max(int(counts.max()), 1)), len(children))
    filled = np.zeros(height * width, dtype=int)
    for entry, child in enumerate(children):
        parents_of[child, filled[child]] = entry
        filled[child] += 1
    return children.astype("int32"), parents_of.astype("int32"), counts, (out_h, out_w)


def normalize_over_positions(logits, children, parents_of, normalization="types_and_positions"):
    """`log R` for a convolutional layer: each child over the parents that read it.

    A child is read by the parents of every site whose patch contains it.
    `normalization` says which of them share it:

    - `"types_and_positions"` (default), Procedure 1's text: all of them, the
      output types of every such site; `exp(log R)` sums to 1 per child.
    - `"positions"`, the authors' code (`update_conv_routing`): for each
      output type, the parents of that type at those sites; `exp(log R)`
      sums to 1 per child and output type, so types do not compete.

    Args:
        logits: `(batch, sites, num_outputs, patch_size, num_input_types)`.
        children, parents_of: from `convolution_sites` (`sites * patch_size`
            patch entries).
        normalization: `"types_and_positions"` or `"positions"`.

    Returns:
        `log R`, shaped like `logits`.
    """
    check_choice("normalization", normalization, NORMALIZATIONS)
    shape = ops.shape(logits)
    # Every size but the batch's is given: a reshape to -1 is ambiguous for an
    # empty batch in ONNX Runtime and LiteRT.
    batch, sites, patch, types = shape[0], shape[1], shape[3], shape[4]
    if normalization == "types_and_positions":
        # Per patch entry: log-sum-exp over the output types of its site.
        local = ops.logsumexp(logits, axis=2)  # (batch, sites, patch, types)
        groups = 1
    else:
        local = ops.transpose(logits, (0, 1, 3, 2, 4))  # (batch, sites, patch, outputs, types)
        groups = shape[2]
    local = ops.reshape(local, (batch, sites * patch, groups * types))
    padding = ops.full((batch, 1, ops.shape(local)[2]), -1e30, dtype=local.dtype)
    local = ops.concatenate([local, padding], axis=1)
    # Per child: log-sum-exp over the patch entries that read it.
    per_child = ops.logsumexp(ops.take(local, parents_of, axis=1), axis=2)
    per_entry = ops.take(per_child, children, axis=1)  # (batch, sites * patch, groups * types)
    if groups == 1:
        return logits - ops.reshape(per_entry, (batch, sites, 1, patch, types))
    per_entry = ops.reshape(per_entry, (batch, sites, patch, groups, types))
    return logits - ops.transpose(per_entry, (0, 1, 3, 2, 4))

"""Shifting images by whole pixels: one gather of rows and one of columns."""

from keras_capsules._optional import require


def shifted_windows(images, starts, size, pad):
    """Each image zero padded by `pad` pixels, then the `size` window at its `starts`.

    Args:
        images: a `tf.Tensor` `(n, height, width[, channels])`.
        starts: int32 `(n, 2)`, the window's first row and column in the
            padded image (`pad` leaves an image where it was).
        size: `(rows, columns)` of the windows.
        pad: pixels of zeros added on every side, or `(rows, columns)`: added
            above and below, and left and right.

    Returns:
        `(n, rows, columns[, channels])`, the dtype of `images`.
    """
    tf = require("tensorflow", "Shifting images")

    pad_rows, pad_cols = (pad, pad) if isinstance(pad, int) else pad
    paddings = [[0, 0], [pad_rows, pad_rows], [pad_cols, pad_cols]]
    paddings += [[0, 0]] * (len(images.shape) - 3)
    padded = tf.pad(images, paddings)
    rows = starts[:, :1] + tf.range(size[0])[None, :]
    cols = starts[:, 1:] + tf.range(size[1])[None, :]
    picked = tf.gather(padded, rows, batch_dims=1)
    return tf.gather(picked, cols, axis=2, batch_dims=1)

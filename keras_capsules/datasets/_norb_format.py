"""The binary matrix format of the official smallNORB files, read into NumPy arrays.

`read_matrix` (re-exported by `keras_capsules.datasets.smallnorb`) reads any
file of the format; `read` also checks the header before reading and can
convert images to channels-last; the `check_*` functions are the checks of
the three kinds of smallNORB file.
"""

import gzip
import os
import struct
import zlib

import numpy as np

MAGIC = {
    0x1E3D4C51: np.dtype("<f4"),
    0x1E3D4C53: np.dtype("<f8"),
    0x1E3D4C54: np.dtype("<i4"),
    0x1E3D4C55: np.dtype("u1"),
    0x1E3D4C56: np.dtype("<i2"),
}
"""Magic number of each supported matrix type: single, double, integer, byte, short."""

_PACKED_MAGIC = 0x1E3D4C52
_MAX_NDIM = 32


def _open(filename):
    with open(filename, "rb") as f:
        compressed = f.read(2) == b"\x1f\x8b"
    return gzip.open(filename, "rb") if compressed else open(filename, "rb")


def _read_exact(f, buffer):
    """Fill `buffer` (a writable byte view) from `f`; return the bytes read."""
    view = memoryview(buffer)
    got = 0
    while got < len(view):
        count = f.readinto(view[got:])
        if not count:
            break
        got += count
    return got


def _read_header(f, filename):
    head = f.read(8)
    if len(head) < 8:
        raise ValueError(f"smallNORB file {filename} is truncated: the header is incomplete.")
    magic, ndim = struct.unpack("<Ii", head)
    if magic == _PACKED_MAGIC:
        raise ValueError(f"smallNORB file {filename} is a packed matrix, which is not supported.")
    if magic not in MAGIC:
        raise ValueError(
            f"smallNORB file {filename} is not a binary matrix: bad magic number 0x{magic:08X} "
            f"(expected one of {', '.join(f'0x{m:08X}' for m in MAGIC)})."
        )
    if not 1 <= ndim <= _MAX_NDIM:
        raise ValueError(
            f"smallNORB file {filename} is corrupt: its header announces {ndim} dimensions "
            f"(expected 1 to {_MAX_NDIM})."
        )
    stored = max(3, ndim)
    dims = f.read(4 * stored)
    if len(dims) < 4 * stored:
        raise ValueError(f"smallNORB file {filename} is truncated: the header is incomplete.")
    # Fewer than 3 dimensions still store 3; the padding (1 in the official files) is ignored.
    shape = struct.unpack(f"<{stored}i", dims)[:ndim]
    if any(d < 0 for d in shape):
        raise ValueError(f"smallNORB file {filename} is corrupt: negative dimension in {shape}.")
    return MAGIC[magic], shape, 8 + 4 * stored


def _fill(f, array, filename, shape, dtype, header_size, offset=0):
    """Read `array.nbytes` payload bytes into `array`, `offset` bytes into the payload."""
    got = _read_exact(f, array.reshape(-1).view(np.uint8))
    if got < array.nbytes:
        expected = header_size + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        raise ValueError(
            f"smallNORB file {filename} is truncated: its header announces shape {shape} of "
            f"{dtype.name}, {expected} bytes in all, but the data ends after "
            f"{header_size + offset + got} bytes."
        )


def _allocate(shape, dtype, filename):
    try:
        return np.empty(shape, dtype)
    except (MemoryError, ValueError) as error:
        raise ValueError(
            f"smallNORB file {filename} is corrupt: its header announces shape {shape} of "
            f"{dtype.name}, which cannot be allocated ({error})."
        ) from error


def read(filename, check=None, chunk_rows=None):
    """Read a matrix file; `check(filename, dtype, shape)` may refuse its header.

    With `chunk_rows`, the file's `(n, c, h, w)` matrix is returned
    channels-last, `(n, h, w, c)`, converted `chunk_rows` rows at a time.
    """
    filename = os.fspath(filename)
    with _open(filename) as f:
        try:
            dtype, shape, header_size = _read_header(f, filename)
            if check is not None:
                check(filename, dtype, shape)
            if chunk_rows is not None:
                # (n, c, h, w) in the file, (n, h, w, c) in memory, a chunk at a time.
                n, channels, height, width = shape
                array = _allocate((n, height, width, channels), dtype, filename)
                chunk = _allocate((min(chunk_rows, n), channels, height, width), dtype, filename)
                for start in range(0, n, chunk_rows):
                    part = chunk[: min(chunk_rows, n - start)]
                    _fill(f, part, filename, shape, dtype, header_size, start * chunk[0].nbytes)
                    array[start : start + len(part)] = part.transpose(0, 2, 3, 1)
            else:
                array = _allocate(shape, dtype, filename)
                _fill(f, array, filename, shape, dtype, header_size)
            if f.read(1):
                raise ValueError(
                    f"smallNORB file {filename} is corrupt: it holds more data than the "
                    f"{array.nbytes} bytes its header announces for shape {shape}."
                )
        except (OSError, EOFError, zlib.error) as error:
            raise ValueError(
                f"smallNORB file {filename} is corrupt or truncated: {error}"
            ) from error
    return array.astype(dtype.newbyteorder("="), copy=False)


def read_matrix(filename):
    """Read one file of the smallNORB binary matrix format into a NumPy array.

    The format (little-endian): an int32 magic number giving the element type
    (`0x1E3D4C55` byte/uint8, `0x1E3D4C54` integer/int32, `0x1E3D4C56`
    short/int16, `0x1E3D4C51` single/float32, `0x1E3D4C53` double/float64;
    see `MAGIC`), an int32 number of dimensions `ndim`, `max(3, ndim)` int32
    dimensions (those past `ndim` are padding and ignored), then the data in
    row-major order. Gzipped files are recognized by their content, whatever
    their name.

    Args:
        filename: path of the file (`.mat` or `.mat.gz`).

    Returns:
        An array of the file's shape and element type, in native byte order.

    Raises:
        ValueError: the magic number or the header is invalid, the data is
            shorter or longer than the header announces, or the gzip stream is
            corrupt; the message names the file.
        FileNotFoundError: the file does not exist.

    Example:

    With the official file in the working folder (not shipped with this
    package):

    >>> from keras_capsules.datasets import smallnorb
    >>> labels = smallnorb.read_matrix(  # doctest: +SKIP
    ...     "smallnorb-5x46789x9x18x6x2x96x96-training-cat.mat.gz"
    ... )
    >>> labels.shape, labels.dtype  # doctest: +SKIP
    ((24300,), dtype('int32'))
    """
    return read(filename)


def check_dat(filename, dtype, shape):
    if dtype != np.uint8 or len(shape) != 4 or tuple(shape[1:]) != (2, 96, 96):
        raise ValueError(
            f"smallNORB file {filename} does not hold stereo pairs: expected a byte matrix of "
            f"shape (n, 2, 96, 96), found {dtype.name} of shape {shape}."
        )


def check_cat(filename, dtype, shape):
    if dtype.kind not in "iu" or len(shape) != 1:
        raise ValueError(
            f"smallNORB file {filename} does not hold labels: expected an integer matrix of "
            f"shape (n,), found {dtype.name} of shape {shape}."
        )


def check_info(filename, dtype, shape):
    if dtype.kind not in "iu" or len(shape) != 2 or shape[1] != 4:
        raise ValueError(
            f"smallNORB file {filename} does not hold the example information: expected an "
            f"integer matrix of shape (n, 4), found {dtype.name} of shape {shape}."
        )

"""Reader of the IDX binary format of MNIST (LeCun et al.)."""

import numpy as np

_DTYPES = {
    0x08: np.dtype("uint8"),
    0x09: np.dtype("int8"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}


def parse(data, name="<bytes>"):
    """Parse the bytes of an IDX file into a NumPy array.

    Args:
        data: the (decompressed) file content.
        name: the file's name, used in error messages.

    Returns:
        An array with the file's shape and element type (native byte order).

    Raises:
        ValueError: the header is malformed or the data is shorter or longer
            than the header says; the message names the file.
    """
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise ValueError(f"{name} is not an IDX file: bad magic number.")
    code, ndim = data[2], data[3]
    if code not in _DTYPES:
        raise ValueError(f"{name}: unknown IDX element type 0x{code:02x}.")
    header = 4 + 4 * ndim
    if len(data) < header:
        raise ValueError(f"{name} is truncated: the header is incomplete.")
    shape = tuple(int.from_bytes(data[4 + 4 * k : 8 + 4 * k], "big") for k in range(ndim))
    dtype = _DTYPES[code]
    expected = header + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(data) != expected:
        raise ValueError(
            f"{name} is truncated or corrupt: {len(data)} bytes, the header announces "
            f"{expected} for shape {shape}."
        )
    array = np.frombuffer(data, dtype=dtype, offset=header).reshape(shape)
    return array.astype(dtype.newbyteorder("="))

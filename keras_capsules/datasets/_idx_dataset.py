"""Data sets distributed as four IDX files, as MNIST: one loader for all of them.

`mnist` and `fashion_mnist` describe their files with an `IdxDataset`, and
their `load_data()` is `IdxDataset.load_data()`: find the four files (`.gz` or
decompressed), check each against the SHA-256 of the decompressed canonical
file, parse it, and fall back to TensorFlow Datasets when none of the files is
there. Error messages name the data set and the file.
"""

import dataclasses
import gzip
import hashlib
import os
import zlib

from keras_capsules._optional import require
from keras_capsules.datasets import _files
from keras_capsules.datasets import idx

TRAIN_IMAGES = "train-images-idx3-ubyte"
TRAIN_LABELS = "train-labels-idx1-ubyte"
TEST_IMAGES = "t10k-images-idx3-ubyte"
TEST_LABELS = "t10k-labels-idx1-ubyte"
NAMES = (TRAIN_IMAGES, TRAIN_LABELS, TEST_IMAGES, TEST_LABELS)
"""The four files of the canonical distribution, without `.gz`."""


@dataclasses.dataclass(frozen=True)
class IdxDataset:
    """A data set of four IDX files: training and test images and labels.

    Attributes:
        title: the data set's name in messages ("MNIST").
        module: the loader's module in `keras_capsules.datasets` ("mnist").
        tfds_name: the TensorFlow Datasets name of the fallback ("mnist").
        default_path: the folder of the copy shipped with the package.
        files: SHA-256 of each decompressed canonical file, keyed by the
            names in `NAMES`.
    """

    title: str
    module: str
    tfds_name: str
    default_path: str
    files: dict

    def read(self, filename, expected_sha256=None):
        """Parse `filename` (gzipped if it ends in `.gz`); check its SHA-256 if one is given."""
        try:
            opener = gzip.open if filename.endswith(".gz") else open
            with opener(filename, "rb") as f:
                data = f.read()
        except (OSError, EOFError, zlib.error) as error:  # gzip.BadGzipFile is an OSError
            raise ValueError(
                f"{self.title} file {filename} is corrupt or truncated: {error}"
            ) from error
        if expected_sha256 is not None:
            digest = hashlib.sha256(data).hexdigest()
            if digest != expected_sha256:
                raise ValueError(
                    f"{self.title} file {filename} does not match the canonical {self.title}: "
                    f"SHA-256 of its decompressed content is {digest}, expected "
                    f"{expected_sha256}. The file is corrupt or truncated; replace it with "
                    "the original."
                )
        return idx.parse(data, filename)

    def load_tfds(self):
        """Both splits from TensorFlow Datasets, as uint8 arrays like the files'."""
        tfds = require(
            "tensorflow_datasets", f"{self.module}.load_data without the {self.title} files"
        )
        splits = []
        for split in ("train", "test"):
            images, labels = tfds.as_numpy(
                tfds.load(self.tfds_name, split=split, batch_size=-1, as_supervised=True)
            )
            splits.append((images[..., 0].astype("uint8"), labels.astype("uint8")))
        return tuple(splits)

    def load_data(self, path=None, verify=True, load_tfds=None):
        """`(x_train, y_train), (x_test, y_test)` from the four files in `path`.

        Args:
            path: the folder (default: `default_path`).
            verify: check each file against `files`.
            load_tfds: the fallback when no file is in `path` (default:
                `self.load_tfds`); the loaders pass their module's own, so
                that it can be replaced in tests.
        """
        path = self.default_path if path is None else os.fspath(path)
        found = {name: _files.find(path, name) for name in NAMES}
        if not any(found.values()):
            try:
                return (load_tfds or self.load_tfds)()
            except Exception as error:
                where = (
                    "The package's copy is missing"
                    if path == self.default_path
                    else (
                        f"Folder {path} holds none of the {self.title} files ({', '.join(NAMES)})"
                    )
                )
                raise ValueError(
                    f"{where}, and TensorFlow Datasets could not load '{self.tfds_name}' "
                    f"({type(error).__name__}: {error})."
                ) from None
        missing = [name for name, filename in found.items() if filename is None]
        if missing:
            raise ValueError(
                f"{self.title} folder {path} lacks {', '.join(missing)} (.gz or decompressed)."
            )
        arrays = {
            name: self.read(filename, self.files[name] if verify else None)
            for name, filename in found.items()
        }
        return (
            (arrays[TRAIN_IMAGES], arrays[TRAIN_LABELS]),
            (arrays[TEST_IMAGES], arrays[TEST_LABELS]),
        )

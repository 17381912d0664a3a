"""Data sets distributed as four IDX files, as MNIST: one loader for all of them.

`mnist` and `fashion_mnist` describe their files with an `IdxDataset`, and
their `load_data()` is `IdxDataset.load_data()`: find the four files (`.gz` or
decompressed) in the folder given, in the `keras-capsules-datasets`
distribution, or in Keras's cache after downloading them once; check each
against the SHA-256 of the decompressed canonical file, and parse it. Error
messages name the data set and the file.
"""

import dataclasses
import gzip
import hashlib
import os
import zlib

from keras_capsules import _download
from keras_capsules.datasets import _files
from keras_capsules.datasets import idx

TRAIN_IMAGES = "train-images-idx3-ubyte"
TRAIN_LABELS = "train-labels-idx1-ubyte"
TEST_IMAGES = "t10k-images-idx3-ubyte"
TEST_LABELS = "t10k-labels-idx1-ubyte"
NAMES = (TRAIN_IMAGES, TRAIN_LABELS, TEST_IMAGES, TEST_LABELS)
"""The four files of the canonical distribution, without `.gz`."""

DATASETS_URL_VARIABLE = "KERAS_CAPSULES_DATASETS_URL"
"""The environment variable naming a mirror: `$KERAS_CAPSULES_DATASETS_URL/mnist/...gz`."""


@dataclasses.dataclass(frozen=True)
class IdxDataset:
    """A data set of four IDX files: training and test images and labels.

    Attributes:
        title: the data set's name in messages ("MNIST").
        module: the loader's module in `keras_capsules.datasets` ("mnist"),
            also its folder in `keras-capsules-datasets` and in the cache.
        url: the folder of the canonical `.gz` files on the web.
        files: SHA-256 of each decompressed canonical file, keyed by the
            names in `NAMES`.
    """

    title: str
    module: str
    url: str
    files: dict

    def installed_path(self):
        """The folder of the files in `keras-capsules-datasets`, or `None` if not installed."""
        return _download.installed_folder("keras_capsules_datasets", self.module)

    def download(self):
        """The folder in Keras's cache holding the four `.gz` files, downloaded if absent.

        The files come from `url`, or from `$KERAS_CAPSULES_DATASETS_URL/MODULE/`
        where that variable names a mirror.
        """
        mirror = os.environ.get(DATASETS_URL_VARIABLE)
        base = f"{mirror.rstrip('/')}/{self.module}/" if mirror else self.url
        subdir = os.path.join("datasets", "keras_capsules", self.module)
        try:
            paths = [
                _download.download(base + name + ".gz", name + ".gz", subdir) for name in NAMES
            ]
        except OSError as error:
            raise ValueError(
                f"{self.title} is not installed and {error}. Install the data sets: "
                f"{_download.install_hint(_download.DATASETS_DISTRIBUTION)}, or pass `path`, "
                f"a folder holding the four files."
            ) from None
        return os.path.dirname(paths[0])

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

    def load_data(self, path=None, verify=True):
        """`(x_train, y_train), (x_test, y_test)` from the four files in `path`.

        Args:
            path: the folder. Default: `keras-capsules-datasets`'s copy, or
                else the copy in Keras's cache, downloaded if absent.
            verify: check each file against `files`. A downloaded file that
                fails the check is removed, so that the next call downloads
                it again.
        """
        downloaded = False
        if path is None:
            path = self.installed_path()
            if path is None:
                path, downloaded = self.download(), True
        path = os.fspath(path)
        found = {name: _files.find(path, name) for name in NAMES}
        missing = [name for name, filename in found.items() if filename is None]
        if len(missing) == len(NAMES):
            raise ValueError(
                f"Folder {path} holds none of the {self.title} files ({', '.join(NAMES)}, "
                ".gz or decompressed)."
            )
        if missing:
            raise ValueError(
                f"{self.title} folder {path} lacks {', '.join(missing)} (.gz or decompressed)."
            )
        arrays = {}
        for name, filename in found.items():
            try:
                arrays[name] = self.read(filename, self.files[name] if verify else None)
            except ValueError as error:
                if not downloaded:
                    raise
                os.remove(filename)
                raise ValueError(
                    f"{error} It was downloaded from "
                    f"{os.environ.get(DATASETS_URL_VARIABLE) or self.url} and is removed: "
                    "loading again downloads it again."
                ) from None
        return (
            (arrays[TRAIN_IMAGES], arrays[TRAIN_LABELS]),
            (arrays[TEST_IMAGES], arrays[TEST_LABELS]),
        )

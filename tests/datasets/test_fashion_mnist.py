import gzip
import os
import shutil

import numpy as np
import pytest

import keras_capsules.datasets
from keras_capsules.datasets import fashion_mnist
from keras_capsules.datasets import mnist

INSTALLED = fashion_mnist._DATASET.installed_path()  # keras-capsules-datasets's copy
MNIST_INSTALLED = mnist._DATASET.installed_path()


@pytest.fixture(scope="module")
def fashion_data():
    return fashion_mnist.load_data()


def test_load_data_is_the_canonical_fashion_mnist(fashion_data):
    (x_train, y_train), (x_test, y_test) = fashion_data
    assert x_train.shape == (60000, 28, 28) and x_test.shape == (10000, 28, 28)
    assert y_train.shape == (60000,) and y_test.shape == (10000,)
    for array in (x_train, y_train, x_test, y_test):
        assert array.dtype == np.uint8
    assert list(np.bincount(y_train)) == [6000] * 10
    assert list(np.bincount(y_test)) == [1000] * 10
    assert y_train.max() == len(fashion_mnist.CLASS_NAMES) - 1
    assert list(y_train[:8]) == [9, 0, 0, 3, 0, 2, 7, 2]
    assert x_train.max() == 255 and x_train.min() == 0
    assert fashion_mnist.CLASS_NAMES[0] == "T-shirt/top"
    assert fashion_mnist.CLASS_NAMES[9] == "Ankle boot"


def test_the_datasets_distribution_carries_the_files_and_the_licence():
    assert "fashion_mnist" in keras_capsules.datasets.__all__
    names = sorted(os.listdir(INSTALLED))
    assert names == ["LICENSE"] + sorted(name + ".gz" for name in fashion_mnist.FILES)
    with open(os.path.join(INSTALLED, "LICENSE"), encoding="utf-8") as f:
        licence = f.read()
    assert "MIT" in licence and "2017 Zalando SE" in licence


def test_shipped_checksums_match_the_shared_reference():
    sums = os.path.join(
        os.path.dirname(__file__), "..", "..", "..", "shared", "datasets", "SHA256SUMS"
    )
    if not os.path.exists(sums):
        pytest.skip("no shared/ checkout beside the repository")
    with open(sums) as f:
        reference = {line.split()[1]: line.split()[0] for line in f if line.strip()}
    for name, digest in fashion_mnist.FILES.items():
        assert reference["fashion-mnist/" + name] == digest
    # The files' own digests are checked by every load_data() with verify=True.


@pytest.fixture
def fashion_copy(tmp_path):
    """A folder of links to the shipped files; a test replaces the one it changes."""
    for name in fashion_mnist.FILES:
        os.symlink(os.path.join(INSTALLED, name + ".gz"), tmp_path / (name + ".gz"))
    return tmp_path


def _own_copy(folder, name):
    target = folder / (name + ".gz")
    os.remove(target)
    shutil.copy(os.path.join(INSTALLED, name + ".gz"), target)
    return target


def test_truncated_file_is_a_clear_error_naming_it(fashion_copy):
    target = _own_copy(fashion_copy, "train-images-idx3-ubyte")
    data = target.read_bytes()
    target.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"Fashion-MNIST file .*train-images-idx3-ubyte.gz"):
        fashion_mnist.load_data(fashion_copy)


def test_modified_file_fails_the_checksum(fashion_copy):
    target = _own_copy(fashion_copy, "train-labels-idx1-ubyte")
    with gzip.open(target) as f:
        data = bytearray(f.read())
    data[100] = (data[100] + 1) % 10
    with gzip.open(target, "wb") as f:
        f.write(bytes(data))
    with pytest.raises(ValueError, match=r"train-labels-idx1-ubyte.gz .*Fashion-MNIST.*SHA-256"):
        fashion_mnist.load_data(fashion_copy)
    (_, y_train), _ = fashion_mnist.load_data(fashion_copy, verify=False)
    assert y_train[100 - 8] == data[100]


def test_mnist_files_are_not_fashion_mnist(fashion_copy):
    name = "t10k-labels-idx1-ubyte"
    os.remove(fashion_copy / (name + ".gz"))
    shutil.copy(os.path.join(MNIST_INSTALLED, name + ".gz"), fashion_copy)
    with pytest.raises(ValueError, match=f"{name}.gz does not match the canonical Fashion-MNIST"):
        fashion_mnist.load_data(fashion_copy)


def test_decompressed_file_is_accepted(fashion_copy):
    name = "t10k-labels-idx1-ubyte"
    with gzip.open(fashion_copy / (name + ".gz")) as f:
        (fashion_copy / name).write_bytes(f.read())
    os.remove(fashion_copy / (name + ".gz"))
    _, (_, y_test) = fashion_mnist.load_data(fashion_copy)
    assert list(np.bincount(y_test)) == [1000] * 10


def test_missing_files_are_named(fashion_copy):
    os.remove(fashion_copy / "train-images-idx3-ubyte.gz")
    os.remove(fashion_copy / "t10k-labels-idx1-ubyte.gz")
    with pytest.raises(
        ValueError,
        match=r"Fashion-MNIST folder .* lacks train-images-idx3-ubyte, t10k-labels-idx1-ubyte",
    ):
        fashion_mnist.load_data(fashion_copy)


def test_a_folder_without_the_files_says_so(tmp_path):
    with pytest.raises(ValueError, match=r"holds none of the Fashion-MNIST files"):
        fashion_mnist.load_data(tmp_path)

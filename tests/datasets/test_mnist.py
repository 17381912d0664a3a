import gzip
import hashlib
import os
import shutil

import numpy as np
import pytest

from keras_capsules.datasets import idx
from keras_capsules.datasets import mnist

INSTALLED = mnist._DATASET.installed_path()  # keras-capsules-datasets's copy


def test_load_data_is_the_canonical_mnist(mnist_data):
    (x_train, y_train), (x_test, y_test) = mnist_data
    assert x_train.shape == (60000, 28, 28) and x_test.shape == (10000, 28, 28)
    assert x_train.dtype == np.uint8 and y_train.dtype == np.uint8
    assert list(np.bincount(y_test)) == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
    assert list(y_train[:8]) == [5, 0, 4, 1, 9, 2, 1, 3]
    assert x_train.max() == 255 and x_train.min() == 0


def test_shipped_checksums_match_the_shared_reference():
    sums = os.path.join(
        os.path.dirname(__file__), "..", "..", "..", "shared", "datasets", "SHA256SUMS"
    )
    if not os.path.exists(sums):
        pytest.skip("no shared/ checkout beside the repository")
    with open(sums) as f:
        reference = {line.split()[1]: line.split()[0] for line in f if line.strip()}
    for name, digest in mnist.FILES.items():
        assert reference["mnist/" + name] == digest
        with gzip.open(os.path.join(INSTALLED, name + ".gz")) as f:
            assert hashlib.sha256(f.read()).hexdigest() == digest


@pytest.fixture
def mnist_copy(tmp_path):
    for name in mnist.FILES:
        shutil.copy(os.path.join(INSTALLED, name + ".gz"), tmp_path)
    return tmp_path


def test_truncated_file_is_a_clear_error_naming_it(mnist_copy):
    target = mnist_copy / "t10k-labels-idx1-ubyte.gz"
    data = target.read_bytes()
    target.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="t10k-labels-idx1-ubyte"):
        mnist.load_data(mnist_copy)


def test_modified_file_fails_the_checksum(mnist_copy):
    target = mnist_copy / "t10k-labels-idx1-ubyte.gz"
    with gzip.open(target) as f:
        data = bytearray(f.read())
    data[100] = (data[100] + 1) % 10
    with gzip.open(target, "wb") as f:
        f.write(bytes(data))
    with pytest.raises(ValueError, match="t10k-labels-idx1-ubyte.*SHA-256"):
        mnist.load_data(mnist_copy)
    (_, _), (_, y_test) = mnist.load_data(mnist_copy, verify=False)
    assert y_test[100 - 8] == data[100]


def test_decompressed_files_are_accepted(mnist_copy):
    for name in mnist.FILES:
        with gzip.open(mnist_copy / (name + ".gz")) as f:
            (mnist_copy / name).write_bytes(f.read())
        os.remove(mnist_copy / (name + ".gz"))
    (_, y_train), _ = mnist.load_data(mnist_copy)
    assert len(y_train) == 60000


def test_missing_files_are_named(mnist_copy):
    os.remove(mnist_copy / "train-images-idx3-ubyte.gz")
    with pytest.raises(ValueError, match="train-images-idx3-ubyte"):
        mnist.load_data(mnist_copy)


def test_idx_parser_rejects_bad_headers():
    with pytest.raises(ValueError, match="magic"):
        idx.parse(b"\x01\x02\x08\x01", "f")
    with pytest.raises(ValueError, match="element type"):
        idx.parse(b"\x00\x00\x07\x01\x00\x00\x00\x01\x00", "f")
    with pytest.raises(ValueError, match="truncated"):
        idx.parse(b"\x00\x00\x08\x01\x00\x00\x00\x05\x00\x01", "f")
    array = idx.parse(b"\x00\x00\x0b\x01\x00\x00\x00\x02\x01\x00\xff\xff", "f")
    assert list(array) == [256, -1]


def test_training_pipeline_shifts_within_two_pixels(mnist_data):
    (x_train, y_train), _ = mnist_data
    x, y = x_train[:64], y_train[:64]
    dataset = mnist.training_pipeline(x, y, batch_size=32, shuffle=False, seed=3)
    batches = list(dataset.as_numpy_iterator())
    assert [b[0].shape for b in batches] == [(32, 28, 28, 1)] * 2
    images = np.concatenate([b[0] for b in batches])[..., 0]
    np.testing.assert_array_equal(np.concatenate([b[1] for b in batches]), y)
    shifted = 0
    for original, augmented in zip(x.astype("float32"), images):
        padded = np.pad(original, 2)
        matches = [
            (dy, dx)
            for dy in range(5)
            for dx in range(5)
            if np.array_equal(padded[dy : dy + 28, dx : dx + 28], augmented)
        ]
        assert matches, "every augmented image is the original shifted by at most 2 px"
        shifted += matches[0] != (2, 2)
    assert shifted > 32  # most images moved


def test_training_pipeline_shifts_anew_every_epoch_and_repeats_with_the_seed(mnist_data):
    (x_train, y_train), _ = mnist_data
    x, y = x_train[:64], y_train[:64]

    def epochs(seed):
        dataset = mnist.training_pipeline(x, y, batch_size=32, shuffle=False, seed=seed)
        return [np.concatenate([b[0] for b in dataset.as_numpy_iterator()]) for _ in range(2)]

    first, second = epochs(7)
    assert not np.array_equal(first, second)  # new shifts in the second epoch
    again = epochs(7)
    np.testing.assert_array_equal(first, again[0])
    np.testing.assert_array_equal(second, again[1])


def test_training_pipeline_without_shift_and_errors(mnist_data):
    (x_train, y_train), _ = mnist_data
    dataset = mnist.training_pipeline(
        x_train[:10], y_train[:10], batch_size=10, max_shift=0, shuffle=False
    )
    images, _ = next(iter(dataset.as_numpy_iterator()))
    np.testing.assert_array_equal(images[..., 0], x_train[:10])
    for bad in (-1, 8, 100, 2.5):
        with pytest.raises(ValueError, match="max_shift` must be an integer from 0 to 7"):
            mnist.training_pipeline(x_train[:10], y_train[:10], max_shift=bad)
    with pytest.raises(ValueError, match="differ"):
        mnist.training_pipeline(x_train[:10], y_train[:9])

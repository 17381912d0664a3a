import gzip
import struct

import numpy as np
import pytest

from keras_capsules.datasets import smallnorb

MAGIC = {dtype: magic for magic, dtype in smallnorb.MAGIC.items()}


def write_matrix(filename, array, compress=False, magic=None, ndim=None, pad=1, extra=b""):
    """Write `array` in the smallNORB binary matrix format (dims padded to 3 with `pad`)."""
    array = np.asarray(array)
    dtype = array.dtype.newbyteorder("<") if array.dtype.itemsize > 1 else array.dtype
    magic = MAGIC[dtype] if magic is None else magic
    dims = list(array.shape) + [pad] * (3 - array.ndim)
    header = struct.pack("<Ii", magic, array.ndim if ndim is None else ndim)
    data = header + struct.pack(f"<{len(dims)}i", *dims) + array.astype(dtype).tobytes() + extra
    with (gzip.open if compress else open)(filename, "wb") as f:
        f.write(data)
    return filename


def make_split(rng, n):
    dat = rng.integers(0, 256, (n, 2, 96, 96), dtype=np.uint8)
    cat = rng.integers(0, 5, n).astype(np.int32)
    info = np.stack(
        [
            rng.integers(0, 10, n),
            rng.integers(0, 9, n),
            2 * rng.integers(0, 18, n),
            rng.integers(0, 6, n),
        ],
        axis=1,
    ).astype(np.int32)
    return dat, cat, info


@pytest.fixture
def norb(tmp_path):
    """A folder of the six files: 6 training pairs gzipped, 4 test pairs decompressed."""
    rng = np.random.default_rng(0)
    splits = {"train": make_split(rng, 6), "test": make_split(rng, 4)}
    for split, compress in (("train", True), ("test", False)):
        for kind, array in zip(("dat", "cat", "info"), splits[split]):
            name = smallnorb.FILES[split][kind] + (".gz" if compress else "")
            write_matrix(tmp_path / name, array, compress=compress)
    return tmp_path, splits


def path_of(folder, split, kind):
    name = smallnorb.FILES[split][kind]
    return folder / (name + ".gz") if split == "train" else folder / name


def test_load_data_reads_the_official_files_exactly(norb):
    folder, splits = norb
    loaded = smallnorb.load_data(folder)
    for (x, y, info), (dat, cat, expected_info) in zip(loaded, (splits["train"], splits["test"])):
        assert x.dtype == np.uint8 and x.shape == (len(dat), 96, 96, 2)
        np.testing.assert_array_equal(x, dat.transpose(0, 2, 3, 1))
        np.testing.assert_array_equal(x[..., 1], dat[:, 1])
        assert y.dtype == np.int32 and info.dtype == np.int32
        np.testing.assert_array_equal(y, cat)
        np.testing.assert_array_equal(info, expected_info)


def test_load_data_reads_dat_files_longer_than_one_chunk(tmp_path, monkeypatch):
    monkeypatch.setattr(smallnorb, "_CHUNK", 4)
    rng = np.random.default_rng(1)
    for split, n in (("train", 10), ("test", 3)):
        for kind, array in zip(("dat", "cat", "info"), make_split(rng, n)):
            write_matrix(tmp_path / smallnorb.FILES[split][kind], array)
    dat = smallnorb.read_matrix(tmp_path / smallnorb.FILES["train"]["dat"])
    (x, _, _), _ = smallnorb.load_data(tmp_path)
    np.testing.assert_array_equal(x, dat.transpose(0, 2, 3, 1))


@pytest.mark.parametrize("dtype", ["uint8", "int32", "int16", "float32", "float64"])
@pytest.mark.parametrize("compress", [False, True])
def test_read_matrix_round_trips_every_type(tmp_path, dtype, compress):
    array = (np.arange(24).reshape(2, 3, 4) - 5).astype(dtype)
    if dtype == "uint8":
        array = array + np.uint8(5)
    filename = write_matrix(tmp_path / "m.mat", array, compress=compress)
    read = smallnorb.read_matrix(filename)
    assert read.dtype == np.dtype(dtype) and read.dtype.isnative
    np.testing.assert_array_equal(read, array)


@pytest.mark.parametrize("pad", [1, 0, 7])
def test_padding_dimensions_are_ignored(tmp_path, pad):
    labels = np.array([0, 4, 2], np.int32)
    read = smallnorb.read_matrix(write_matrix(tmp_path / "cat.mat", labels, pad=pad))
    assert read.shape == (3,)
    np.testing.assert_array_equal(read, labels)
    info = np.arange(8, dtype=np.int32).reshape(2, 4)
    read = smallnorb.read_matrix(write_matrix(tmp_path / "info.mat.gz", info, True, pad=pad))
    np.testing.assert_array_equal(read, info)
    # Four or more dimensions store exactly ndim dims, no padding.
    dat = np.arange(16, dtype=np.uint8).reshape(1, 2, 2, 4)
    np.testing.assert_array_equal(smallnorb.read_matrix(write_matrix(tmp_path / "d", dat)), dat)


@pytest.mark.parametrize("compress", [False, True])
def test_truncated_file_is_an_error_naming_it(tmp_path, compress):
    array = np.arange(40, dtype=np.int32).reshape(10, 4)
    filename = tmp_path / ("info.mat.gz" if compress else "info.mat")
    raw = tmp_path / "full.mat"
    write_matrix(raw, array)
    data = raw.read_bytes()[:-7]
    if compress:
        filename.write_bytes(gzip.compress(data))
    else:
        filename.write_bytes(data)
    with pytest.raises(ValueError, match="info.mat.* is truncated"):
        smallnorb.read_matrix(filename)
    filename.write_bytes(gzip.compress(data)[:-12] if compress else data[:10])
    with pytest.raises(ValueError, match="info.mat.*truncated"):
        smallnorb.read_matrix(filename)


def test_oversized_file_is_an_error(tmp_path):
    for compress in (False, True):
        filename = write_matrix(tmp_path / "cat.mat", np.zeros(5, np.int32), compress, extra=b"x")
        with pytest.raises(ValueError, match="cat.mat is corrupt.*more data"):
            smallnorb.read_matrix(filename)


def test_corrupt_gzip_is_an_error_naming_it(tmp_path):
    filename = write_matrix(tmp_path / "dat.mat.gz", np.arange(4000, dtype=np.int32), True)
    data = bytearray(filename.read_bytes())
    data[len(data) // 2] ^= 0xFF
    filename.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="dat.mat.gz is corrupt"):
        smallnorb.read_matrix(filename)


def test_bad_headers_are_errors(tmp_path):
    labels = np.zeros(3, np.int32)
    with pytest.raises(ValueError, match="m.mat is not a binary matrix: bad magic number"):
        smallnorb.read_matrix(write_matrix(tmp_path / "m.mat", labels, magic=0x1E3D4C99))
    with pytest.raises(ValueError, match="packed"):
        smallnorb.read_matrix(write_matrix(tmp_path / "m.mat", labels, magic=0x1E3D4C52))
    for ndim in (0, -1, 99):
        with pytest.raises(ValueError, match=f"m.mat is corrupt.*announces {ndim} dimensions"):
            smallnorb.read_matrix(write_matrix(tmp_path / "m.mat", labels, ndim=ndim))
    (tmp_path / "m.mat").write_bytes(struct.pack("<Ii", 0x1E3D4C54, 1) + b"\x03\x00")
    with pytest.raises(ValueError, match="m.mat is truncated: the header"):
        smallnorb.read_matrix(tmp_path / "m.mat")
    (tmp_path / "m.mat").write_bytes(struct.pack("<Iiiii", 0x1E3D4C54, 1, -3, 1, 1))
    with pytest.raises(ValueError, match="negative"):
        smallnorb.read_matrix(tmp_path / "m.mat")
    with pytest.raises(FileNotFoundError):
        smallnorb.read_matrix(tmp_path / "absent.mat")


def test_split_files_must_agree_on_the_number_of_examples(norb):
    folder, splits = norb
    write_matrix(path_of(folder, "train", "cat"), splits["train"][1][:5], compress=True)
    with pytest.raises(ValueError, match="disagree.*training-dat.mat.gz holds 6.*cat.mat.gz 5"):
        smallnorb.load_data(folder)


def test_files_of_the_wrong_kind_or_range_are_errors(norb):
    folder, splits = norb
    dat, cat, info = splits["test"]
    write_matrix(path_of(folder, "test", "dat"), dat[:, :1])
    with pytest.raises(ValueError, match="testing-dat.mat does not hold stereo pairs"):
        smallnorb.load_data(folder)
    write_matrix(path_of(folder, "test", "dat"), dat)
    write_matrix(path_of(folder, "test", "cat"), np.where(np.arange(len(cat)) == 2, 5, cat))
    with pytest.raises(ValueError, match="testing-cat.mat is corrupt: labels"):
        smallnorb.load_data(folder)
    write_matrix(path_of(folder, "test", "cat"), cat)
    write_matrix(path_of(folder, "test", "info"), info[:, :3])
    with pytest.raises(ValueError, match="testing-info.mat does not hold"):
        smallnorb.load_data(folder)
    info = info.copy()
    info[0, 2] = 36
    write_matrix(path_of(folder, "test", "info"), info)
    with pytest.raises(ValueError, match="testing-info.mat is corrupt: azimuth"):
        smallnorb.load_data(folder)


def test_missing_files_are_named(norb):
    folder, _ = norb
    path_of(folder, "test", "info").unlink()
    with pytest.raises(ValueError, match="lacks smallnorb-5x01235x9x18x6x2x96x96-testing-info.mat"):
        smallnorb.load_data(folder)


def fake_tfds(monkeypatch, load):
    import tensorflow_datasets as tfds

    monkeypatch.setattr(tfds, "load", load)
    monkeypatch.setattr(tfds, "as_numpy", lambda data: data)


def test_no_files_and_no_tfds_is_a_clear_error(tmp_path, monkeypatch):
    def unavailable(name, split, batch_size):
        raise ConnectionError("no network")

    fake_tfds(monkeypatch, unavailable)
    with pytest.raises(ValueError, match=f"Folder {tmp_path} holds no smallNORB.*no network"):
        smallnorb.load_data(tmp_path)
    with pytest.raises(ValueError, match="No folder was given.*TensorFlow Datasets"):
        smallnorb.load_data()


def test_absent_files_fall_back_to_tfds(tmp_path, monkeypatch):
    calls = []

    def load(name, split, batch_size):
        calls.append((name, split, batch_size))
        n = 3 if split == "train" else 2
        return {
            "image": np.full((n, 96, 96, 1), 10, np.uint8),
            "image2": np.full((n, 96, 96, 1), 20, np.uint8),
            "label_category": np.arange(n, dtype=np.int64),
            "instance": np.full(n, 4, np.int64),
            "label_elevation": np.full(n, 8, np.int64),
            "label_azimuth": np.full(n, 17, np.int64),
            "label_lighting": np.full(n, 5, np.int64),
        }

    fake_tfds(monkeypatch, load)
    (x_train, y_train, info_train), (x_test, _, _) = smallnorb.load_data(tmp_path)
    assert calls == [("smallnorb", "train", -1), ("smallnorb", "test", -1)]
    assert x_train.shape == (3, 96, 96, 2) and x_train.dtype == np.uint8
    assert x_test.shape == (2, 96, 96, 2)
    assert (x_train[..., 0] == 10).all() and (x_train[..., 1] == 20).all()
    assert y_train.dtype == np.int32 and info_train.dtype == np.int32
    assert info_train.tolist() == [[4, 8, 34, 5]] * 3  # azimuth as in the files


def reference_preprocess(x):
    pooled = x.astype(np.float64).reshape(len(x), 48, 2, 48, 2, 2).mean(axis=(2, 4))
    mean = pooled.mean(axis=(1, 2, 3), keepdims=True)
    std = pooled.std(axis=(1, 2, 3), keepdims=True)
    return (pooled - mean) / std


@pytest.fixture
def images():
    rng = np.random.default_rng(5)
    x = rng.integers(0, 256, (6, 96, 96, 2), dtype=np.uint8)
    x[0] //= 4  # different brightness and contrast per image
    x[1, ..., 1] //= 8  # one dark camera
    return x, np.arange(6, dtype=np.int32)


def test_preprocess_downsamples_and_standardizes_each_image(images):
    x, _ = images
    out = smallnorb.preprocess(x)
    assert out.shape == (6, 48, 48, 2) and out.dtype == np.float32
    np.testing.assert_allclose(out.mean(axis=(1, 2, 3)), 0, atol=1e-5)
    np.testing.assert_allclose(out.std(axis=(1, 2, 3)), 1, atol=1e-4)
    np.testing.assert_allclose(out, reference_preprocess(x), atol=1e-4)
    uniform = smallnorb.preprocess(np.full((1, 4, 4, 2), 7, np.uint8))
    np.testing.assert_array_equal(uniform, 0)
    with pytest.raises(ValueError, match="even"):
        smallnorb.preprocess(x[:, :95])
    with pytest.raises(ValueError, match="even"):
        smallnorb.preprocess(x[0])


def epoch(dataset):
    batches = list(dataset.as_numpy_iterator())
    return np.concatenate([b[0] for b in batches]), np.concatenate([b[1] for b in batches])


def crop_offsets(crops, full):
    """The (top, left) of each crop in `full`, or None where it is no crop of it."""
    size = crops.shape[1]
    offsets = []
    for crop, image in zip(crops, full):
        found = [
            (top, left)
            for top in range(image.shape[0] - size + 1)
            for left in range(image.shape[1] - size + 1)
            if np.allclose(image[top : top + size, left : left + size], crop, atol=1e-5)
        ]
        offsets.append(found[0] if found else None)
    return offsets


def test_training_pipeline_takes_new_random_crops_every_epoch(images):
    x, y = images
    preprocessed = smallnorb.preprocess(x)
    dataset = smallnorb.training_pipeline(
        x, y, batch_size=4, shuffle=False, seed=7, brightness=0, contrast=None
    )
    batches = list(dataset.as_numpy_iterator())
    shapes = [(b[0].shape, b[0].dtype, b[1].shape) for b in batches]
    assert shapes == [((4, 32, 32, 2), np.float32, (4,)), ((2, 32, 32, 2), np.float32, (2,))]
    first, labels = np.concatenate([b[0] for b in batches]), np.concatenate([b[1] for b in batches])
    second, _ = epoch(dataset)
    np.testing.assert_array_equal(labels, y)
    offsets = crop_offsets(first, preprocessed)
    assert None not in offsets and None not in crop_offsets(second, preprocessed)
    assert len(set(offsets)) > 1
    assert not np.array_equal(first, second)
    # The same seed gives the same epochs; another seed other crops.
    again = smallnorb.training_pipeline(
        x, y, batch_size=4, shuffle=False, seed=7, brightness=0, contrast=None
    )
    np.testing.assert_array_equal(epoch(again)[0], first)
    np.testing.assert_array_equal(epoch(again)[0], second)
    other = smallnorb.training_pipeline(
        x, y, batch_size=4, shuffle=False, seed=8, brightness=0, contrast=None
    )
    assert crop_offsets(epoch(other)[0], preprocessed) != offsets
    # Preprocessed float input gives the same crops as raw uint8 input.
    floats = smallnorb.training_pipeline(
        preprocessed, y, batch_size=4, shuffle=False, seed=7, brightness=0, contrast=None
    )
    np.testing.assert_allclose(epoch(floats)[0], first, atol=1e-6)


def test_training_pipeline_brightness_and_contrast_stay_in_range(images):
    x, y = images
    preprocessed = smallnorb.preprocess(x)
    dataset = smallnorb.training_pipeline(x, y, batch_size=6, shuffle=False, seed=1, crop=48)
    augmented, _ = epoch(dataset)
    factors, deltas = [], []
    for original, out in zip(preprocessed, augmented):
        # out = factor * p + (1 - factor) * mean_c(p) + delta, per channel c.
        slopes = [np.polyfit(original[..., c].ravel(), out[..., c].ravel(), 1) for c in (0, 1)]
        factor = slopes[0][0]
        np.testing.assert_allclose(slopes[1][0], factor, rtol=1e-4)
        delta = [slopes[c][1] - (1 - factor) * original[..., c].mean() for c in (0, 1)]
        np.testing.assert_allclose(delta[0], delta[1], atol=1e-4)
        factors.append(factor)
        deltas.append(delta[0])
    assert all(0.5 - 1e-4 <= f <= 1.5 + 1e-4 for f in factors)
    assert all(abs(d) <= 0.2 + 1e-4 for d in deltas)
    assert np.ptp(factors) > 0.05 and np.ptp(deltas) > 0.02


def test_training_pipeline_shuffles_every_epoch(images):
    x, y = images
    dataset = smallnorb.training_pipeline(x, y, batch_size=3, seed=0)
    orders = [epoch(dataset)[1].tolist() for _ in range(4)]
    assert all(sorted(order) == y.tolist() for order in orders)
    assert len({tuple(order) for order in orders}) > 1


def test_test_pipeline_is_the_centre_crop(images):
    x, y = images
    preprocessed = smallnorb.preprocess(x)
    expected = preprocessed[:, 8:40, 8:40]
    for source in (x, preprocessed):
        dataset = smallnorb.test_pipeline(source, y, batch_size=4)
        crops, labels = epoch(dataset)
        assert crops.dtype == np.float32 and crops.shape == (6, 32, 32, 2)
        np.testing.assert_allclose(crops, expected, atol=1e-6)
        np.testing.assert_array_equal(labels, y)
        np.testing.assert_array_equal(epoch(dataset)[0], crops)
    crops, _ = epoch(smallnorb.test_pipeline(x, y, crop=47))
    np.testing.assert_allclose(crops, preprocessed[:, :47, :47], atol=1e-6)


def test_pipeline_arguments_are_checked(images):
    x, y = images
    with pytest.raises(ValueError, match="crop"):
        smallnorb.training_pipeline(x, y, crop=49)
    with pytest.raises(ValueError, match="crop"):
        smallnorb.test_pipeline(smallnorb.preprocess(x)[:, :20], y)
    with pytest.raises(ValueError, match="differ"):
        smallnorb.test_pipeline(x, y[:5])
    with pytest.raises(ValueError, match="uint8"):
        smallnorb.test_pipeline(x.astype(np.int32), y)
    with pytest.raises(ValueError, match="batch_size"):
        smallnorb.training_pipeline(x, y, batch_size=0)
    with pytest.raises(ValueError, match="brightness"):
        smallnorb.training_pipeline(x, y, brightness=-0.1)
    with pytest.raises(ValueError, match="contrast"):
        smallnorb.training_pipeline(x, y, contrast=(1.5, 0.5))

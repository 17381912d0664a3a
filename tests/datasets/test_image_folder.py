"""A folder of class subfolders: checked file by file, then read by Keras."""

import os
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from keras_capsules.datasets import image_folder
from tests.conftest import requires_tensorflow


def _png_header(path, width, height):
    """A PNG file whose header claims `width` x `height` pixels and holds no pixel data."""

    def chunk(kind, data):
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IEND", b""))


def _write(path, size, mode, value):
    """An image of `size` (width, height) and `mode` filled with `value`, in `path`'s format."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    colour = value if mode in ("L", "P") else (value,) * len(mode)
    Image.new(mode, size, colour).save(path)


def mixed_folder(root):
    """Three classes in every format, size and colour a user's folder mixes."""
    _write(f"{root}/cat/a.png", (30, 20), "L", 10)
    _write(f"{root}/cat/b.jpg", (30, 20), "RGB", 20)
    _write(f"{root}/cat/c.bmp", (40, 40), "RGBA", 30)
    _write(f"{root}/dog/a.gif", (30, 20), "P", 200)
    _write(f"{root}/dog/nested/b.png", (30, 20), "RGBA", 210)
    _write(f"{root}/owl/a.jpeg", (25, 25), "L", 120)
    with open(f"{root}/owl/notes.txt", "w") as f:
        f.write("not an image")
    return root


def test_a_mixed_folder_is_summarised(tmp_path):
    summary = image_folder.check_folder(mixed_folder(str(tmp_path)))
    assert summary.class_names == ("cat", "dog", "owl")
    assert summary.counts == (3, 2, 1) and summary.images == 6
    assert summary.image_size == (20, 30)  # the commonest (height, width)
    assert summary.color_mode == "rgb" and summary.channels == 3
    assert summary.ignored == 1 and summary.skipped == ()


def test_grey_images_are_read_grey_and_the_asked_size_wins(tmp_path):
    for name in ("a", "b"):
        _write(f"{tmp_path}/{name}/x.png", (12, 10), "L", 50)
    summary = image_folder.check_folder(str(tmp_path), image_size=(8, 9))
    assert (summary.color_mode, summary.image_size) == ("grayscale", (8, 9))
    assert image_folder.check_folder(str(tmp_path), color_mode="rgb").color_mode == "rgb"


@pytest.mark.parametrize(
    "layout, match",
    [
        ("missing", "No folder .*missing"),
        ("no_classes", "holds no class folders"),
        ("one_class", r"one class folder \(only\)"),
        ("empty_class", r"class folder .*empty holds no images"),
        ("corrupt", r"b[/\\]broken.png cannot be read as an image.*--skip-bad-images"),
        ("truncated", r"truncated.jpg cannot be read as an image"),
        ("huge", r"huge.png is 100000x90000 pixels: decoding it would take 36.0 GB"),
    ],
)
def test_bad_folders_are_refused_by_name(tmp_path, layout, match):
    root = str(tmp_path / "root")
    os.makedirs(root)
    if layout == "no_classes":
        _write(f"{root}/loose.png", (5, 5), "L", 0)
    elif layout == "one_class":
        _write(f"{root}/only/a.png", (5, 5), "L", 0)
    elif layout != "missing":
        _write(f"{root}/a/x.png", (5, 5), "L", 0)
        if layout == "empty_class":
            os.makedirs(f"{root}/empty")
        elif layout == "corrupt":
            os.makedirs(f"{root}/b")
            with open(f"{root}/b/broken.png", "wb") as f:
                f.write(b"\x89PNG not really")
        elif layout == "truncated":
            _write(f"{root}/b/whole.jpg", (64, 64), "RGB", 90)
            with open(f"{root}/b/whole.jpg", "rb") as f:
                data = f.read()
            with open(f"{root}/b/truncated.jpg", "wb") as f:
                f.write(data[: len(data) // 2])
        elif layout == "huge":
            os.makedirs(f"{root}/b")
            _png_header(f"{root}/b/huge.png", 100_000, 90_000)
    with pytest.raises(ValueError, match=match):
        image_folder.check_folder(root if layout != "missing" else str(tmp_path / "missing"))


def test_unreadable_files_can_be_skipped_and_are_counted(tmp_path):
    root = mixed_folder(str(tmp_path))
    with open(f"{root}/dog/broken.png", "wb") as f:
        f.write(b"garbage")
    summary = image_folder.check_folder(root, skip_bad_images=True)
    assert summary.skipped == (f"{root}/dog/broken.png",) and summary.counts == (3, 2, 1)
    # A class with no readable image is still an error, and a huge image is never skipped.
    for name in os.listdir(f"{root}/owl"):
        os.remove(f"{root}/owl/{name}")
    with open(f"{root}/owl/broken.png", "wb") as f:
        f.write(b"garbage")
    with pytest.raises(ValueError, match="owl holds no readable images"):
        image_folder.check_folder(root, skip_bad_images=True)
    _png_header(f"{root}/cat/huge.png", 20_000, 20_000)
    with pytest.raises(ValueError, match="huge.png is 20000x20000"):
        image_folder.check_folder(root, skip_bad_images=True)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"image_size": (0, 5)}, "image_size"),
        ({"image_size": (5,)}, "image_size"),
        ({"color_mode": "rgba"}, "color_mode"),
    ],
)
def test_bad_arguments(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        image_folder.check_folder(mixed_folder(str(tmp_path)), **kwargs)


@requires_tensorflow
def test_keras_reads_the_folder_at_one_size_with_names_in_order(tmp_path):
    root = mixed_folder(str(tmp_path))
    with open(f"{root}/dog/broken.png", "wb") as f:
        f.write(b"garbage")
    summary = image_folder.check_folder(root, skip_bad_images=True)
    train, validation = image_folder.load_folder(summary, batch_size=4, shuffle=False)
    assert validation is None
    batches = list(train)
    images = np.concatenate([np.asarray(x) for x, _ in batches])
    labels = np.concatenate([np.asarray(y) for _, y in batches])
    assert images.shape == (6, 20, 30, 3) and images.dtype == np.float32
    assert sorted(labels.tolist()) == [0, 0, 0, 1, 1, 2]  # the broken file left out
    assert 0 <= images.min() and images.max() <= 255
    # The grey owl (value 120) arrives as equal RGB channels.
    owl = images[labels == 2][0]
    np.testing.assert_allclose(owl, 120, atol=1)
    train, validation = image_folder.load_folder(
        image_folder.check_folder(root, skip_bad_images=True, color_mode="grayscale"),
        batch_size=2,
        validation_split=0.5,
        seed=3,
    )
    counted = [sum(int(np.asarray(y).shape[0]) for _, y in split) for split in (train, validation)]
    assert sum(counted) == 6 and counted[1] >= 2
    assert next(iter(train))[0].shape[-1] == 1
    with pytest.raises(ValueError, match="validation_split"):
        image_folder.load_folder(summary, validation_split=1.0)

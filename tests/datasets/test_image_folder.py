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
    """An image of `size` (width, height) and `mode` filled with `value`, in `path`'s format.

    Grey for modes "L" and "P"; a colour (its channels unequal) for "RGB" and "RGBA".
    """
    os.makedirs(os.path.dirname(path), exist_ok=True)
    colour = value if mode in ("L", "P") else (value, value // 2, 255 - value, 255)[: len(mode)]
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


def _grey_pngs(folder, count, value=100, size=(12, 12)):
    """`count` small grey PNG files in `folder`."""
    os.makedirs(folder, exist_ok=True)
    for i in range(count):
        Image.fromarray(np.full(size[::-1], value + i, "uint8")).save(f"{folder}/{i}.png")


def test_a_symlink_loop_is_refused_in_one_line(tmp_path):
    root = str(tmp_path / "root")
    for name in ("zero", "one"):
        _grey_pngs(f"{root}/{name}", 2)
    os.symlink("..", f"{root}/zero/up")  # zero/up/zero/up/... once read 1,640 images
    with pytest.raises(ValueError, match=r"zero[/\\]up leads back to .*root.*symlink loop") as e:
        image_folder.check_folder(root)
    assert "\n" not in str(e.value)


def test_self_links_are_refused_at_once(tmp_path):
    import time

    root = str(tmp_path / "root")
    for name in ("zero", "one"):
        _grey_pngs(f"{root}/{name}", 2)
    os.symlink(".", f"{root}/zero/l1")  # two of them: a walk that followed them is exponential
    os.symlink(".", f"{root}/zero/l2")
    start = time.time()
    with pytest.raises(ValueError, match="symlink loop"):
        image_folder.check_folder(root)
    assert time.time() - start < 5


def test_a_folder_reached_twice_through_symlinks_is_refused(tmp_path):
    root = str(tmp_path / "root")
    _grey_pngs(f"{root}/zero", 2)
    _grey_pngs(f"{tmp_path}/elsewhere", 2)
    os.makedirs(f"{root}/one")
    os.symlink(f"{tmp_path}/elsewhere", f"{root}/one/a")
    os.symlink(f"{tmp_path}/elsewhere", f"{root}/one/b")
    with pytest.raises(ValueError, match=r"one[/\\]b is the folder .*one[/\\]a again"):
        image_folder.check_folder(root)


@requires_tensorflow
def test_a_class_in_a_symlinked_folder_is_checked_and_read(tmp_path):
    root = str(tmp_path / "root")
    _grey_pngs(f"{root}/zero", 3)
    _grey_pngs(f"{tmp_path}/shared/ones", 2, value=200)
    os.makedirs(f"{root}/one")
    os.symlink(f"{tmp_path}/shared/ones", f"{root}/one/linked")  # its only images
    summary = image_folder.check_folder(root)
    assert summary.class_names == ("one", "zero") and summary.counts == (2, 3)
    train, _ = image_folder.load_folder(summary, batch_size=8, shuffle=False)
    labels = np.concatenate([np.asarray(y) for _, y in train])
    assert labels.tolist() == [0, 0, 1, 1, 1]  # what the check counted, in its order


def _pillow_only(path, kind):
    """A file Pillow reads but TensorFlow cannot decode, under an image extension."""
    pixels = np.random.default_rng(0).integers(0, 255, (16, 16, 3)).astype("uint8")
    image = Image.fromarray(pixels)
    if kind == "bmp_1bit":
        image = image.convert("1")
    formats = {"tiff": "TIFF", "bmp_1bit": "BMP", "ico": "ICO", "ppm": "PPM", "tga": "TGA"}
    image.save(path, formats[kind])
    with Image.open(path) as reopened:  # Pillow reads it back
        reopened.load()


# A TIFF named .jpg, a 1-bit BMP, an ICO named .png, a PPM named .bmp; and a TGA named .png.
PILLOW_ONLY = [
    ("tiff", "a.jpg"),
    ("bmp_1bit", "b.bmp"),
    ("ico", "c.png"),
    ("ppm", "d.bmp"),
    ("tga", "e.png"),
]


@requires_tensorflow
@pytest.mark.parametrize("kind, name", PILLOW_ONLY)
def test_files_tensorflow_cannot_decode_are_named_before_training(tmp_path, kind, name):
    root = str(tmp_path / "root")
    for label in ("zero", "one"):
        _grey_pngs(f"{root}/{label}", 2)
    _pillow_only(f"{root}/one/{name}", kind)
    with pytest.raises(ValueError, match=rf"one[/\\]{name} cannot be read as an image: TensorF"):
        image_folder.check_folder(root)


@requires_tensorflow
def test_skipped_undecodable_files_are_not_read(tmp_path):
    root = str(tmp_path / "root")
    for label in ("zero", "one"):
        _grey_pngs(f"{root}/{label}", 3)
    for kind, name in PILLOW_ONLY:
        _pillow_only(f"{root}/one/{name}", kind)
    summary = image_folder.check_folder(root, skip_bad_images=True)
    assert summary.counts == (3, 3) and len(summary.skipped) == len(PILLOW_ONLY)
    for split in image_folder.load_folder(summary, batch_size=4, validation_split=0.5, seed=1):
        assert sum(int(np.asarray(y).shape[0]) for _, y in split) == 3  # no decoding error


@requires_tensorflow
def test_the_check_lists_keras_files_in_keras_order_and_split(tmp_path):
    import keras

    root = mixed_folder(str(tmp_path / "root"))
    _grey_pngs(f"{root}/dog/deeper/more", 3)
    _grey_pngs(f"{root}/dog/deeper-by-name", 2)  # sorts before deeper/ as Keras sorts paths
    summary = image_folder.check_folder(root)
    options = dict(class_names=list(summary.class_names), batch_size=None, verbose=False)
    keras_order = keras.utils.image_dataset_from_directory(root, shuffle=False, **options)
    assert list(summary.files) == keras_order.file_paths
    keras_train, keras_validation = keras.utils.image_dataset_from_directory(
        root, validation_split=0.3, subset="both", seed=5, **options
    )
    train, validation = image_folder.load_folder(summary, validation_split=0.3, seed=5)
    keras_labels = [int(y) for _, y in keras_validation]
    assert [int(y) for _, labels in validation for y in labels] == keras_labels
    assert sum(int(np.asarray(y).shape[0]) for _, y in train) == len(keras_train.file_paths)


def test_a_class_folder_named_in_no_utf8_is_named_by_its_bytes(tmp_path):
    root = str(tmp_path / "root")
    _grey_pngs(f"{root}/zero", 2)
    folder = os.path.join(os.fsencode(root), b"caf\xe9")
    os.makedirs(folder)
    _grey_pngs(os.fsdecode(folder), 2)
    with pytest.raises(ValueError, match=r"class folder b'caf\\xe9' in .* not UTF-8") as e:
        image_folder.check_folder(root)
    assert "\n" not in str(e.value)


def _fingerprint(root):
    return image_folder.check_folder(root).fingerprint


def edit_in_place(path):
    """Give the PNG image at `path` other pixels, keeping its byte size and modification time.

    The new image is of one grey value, padded after its end to the old size.
    """
    info = os.stat(path)
    old = Image.open(path)
    value = 255 - int(np.asarray(old.convert("L"))[0, 0])
    Image.new("L", old.size, value).save(path)
    padding = info.st_size - os.path.getsize(path)
    assert padding >= 0
    with open(path, "ab") as f:
        f.write(b"\0" * padding)  # decoders stop at the PNG's end
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_size, after.st_mtime_ns) == (info.st_size, info.st_mtime_ns)


@pytest.mark.parametrize(
    "change, expected",
    [
        ("add", "class 'three' added"),
        ("rename", "class 'two' renamed 'deux'"),
        ("remove", "class 'two' renamed or removed"),
        ("swap", "classes reordered ('one' holds what 'two' held, 'two' holds what 'one' held)"),
        ("modify", "1 file changed in class 'one' (1 modified)"),
        ("replace", "2 files changed in class 'two' (1 added, 1 removed)"),
        ("edit", "1 file changed in class 'one' (1 edited in place keeping its size and time)"),
    ],
)
def test_the_fingerprint_names_what_changed(tmp_path, change, expected):
    from keras_capsules.datasets import _folder_walk

    root = str(tmp_path / "root")
    for value, name in ((10, "one"), (90, "two"), (170, "zero")):
        _grey_pngs(f"{root}/{name}", 3, value=value)
    before = _fingerprint(root)
    assert before["classes"] == ["one", "two", "zero"] and before["counts"] == [3, 3, 3]
    assert _folder_walk.folder_changes(before, _fingerprint(root)) is None
    if change == "add":
        _grey_pngs(f"{root}/three", 2)
    elif change == "rename":
        os.rename(f"{root}/two", f"{root}/deux")
    elif change == "remove":
        for name in os.listdir(f"{root}/two"):
            os.remove(f"{root}/two/{name}")
        os.rmdir(f"{root}/two")
    elif change == "swap":
        os.rename(f"{root}/one", f"{root}/tmp")
        os.rename(f"{root}/two", f"{root}/one")
        os.rename(f"{root}/tmp", f"{root}/two")
    elif change == "modify":  # the same name, other pixels and size
        Image.fromarray(np.zeros((20, 20), "uint8")).save(f"{root}/one/1.png")
    elif change == "replace":
        os.rename(f"{root}/two/0.png", f"{root}/two/zero.png")
    elif change == "edit":  # other pixels, the same size and time
        edit_in_place(f"{root}/one/1.png")
    assert _folder_walk.folder_changes(before, _fingerprint(root)) == expected


def test_the_fingerprint_records_the_digest_of_each_files_bytes(tmp_path):
    import hashlib

    root = str(tmp_path / "root")
    _grey_pngs(f"{root}/one", 2, value=10)
    _grey_pngs(f"{root}/two", 2, value=90)
    fingerprint = _fingerprint(root)
    assert fingerprint["content"] == "sha256"
    with open(f"{root}/one/1.png", "rb") as f:
        content = hashlib.sha256(f.read()).hexdigest()
    key = hashlib.sha256(b"1.png\0" + content.encode()).hexdigest()[:8]
    keys = fingerprint["file_keys"]["one"]  # 24 hex digits a file: path, size and time, content
    assert len(keys) == 2 * 24 and keys[24 + 16 :] == key


def test_a_fingerprint_without_contents_is_compared_by_path_size_and_time(tmp_path):
    from keras_capsules.datasets import _folder_walk

    root = str(tmp_path / "root")
    _grey_pngs(f"{root}/one", 3, value=10)
    _grey_pngs(f"{root}/two", 3, value=90)
    listing = image_folder.list_folder(root)
    older = _folder_walk.fingerprint(listing, [3, 3], [])  # as runs recorded it before contents
    assert "content" not in older
    edit_in_place(f"{root}/one/1.png")
    assert _folder_walk.folder_changes(older, _fingerprint(root)) is None
    Image.fromarray(np.zeros((20, 20), "uint8")).save(f"{root}/two/1.png")
    assert _folder_walk.folder_changes(older, _fingerprint(root)) == (
        "1 file changed in class 'two' (1 modified)"
    )

"""Your own images: a folder with one subfolder of images per class.

    flowers/
        daisy/     0001.jpg 0002.png ...
        tulip/     a.bmp b.gif ...

One walk and one decoder: `check_folder` lists the folder once
(`list_folder`: the class folders sorted, then their files in Keras's
order, symlinked folders followed, a symlink loop refused), reads every file
once and decodes it with TensorFlow's `tf.io.decode_image`, as training
does, before anything is trained or written; the SHA-256 of the bytes it
decoded is its fingerprint's record of the file's content. It names the
folder that is missing, the class folder that is empty, the file that
TensorFlow cannot decode, or the image whose decoding would need gigabytes,
and chooses an image size and colour mode the images agree on; its summary
holds the files it accepted.
`load_folder` reads exactly those files, decoded the same way and resized
to one size (PNG, JPEG, BMP and GIF, any size, grey, RGB or RGBA), as
`tf.data` pipelines of float32 pixel values in [0, 255], the range the
applications take, with Keras's `image_dataset_from_directory`'s split.
"""

import collections
import dataclasses
import hashlib
import os
import struct

from keras_capsules.datasets._folder_walk import EXTENSIONS
from keras_capsules.datasets._folder_walk import Listing
from keras_capsules.datasets._folder_walk import fingerprint
from keras_capsules.datasets._folder_walk import folder_changes
from keras_capsules.datasets._folder_walk import list_folder
from keras_capsules.datasets._folder_walk import shown

__all__ = [
    "EXTENSIONS",
    "MAX_PIXELS",
    "FolderSummary",
    "Listing",
    "check_folder",
    "count_files",
    "folder_changes",
    "list_folder",
    "load_folder",
    "shown",
]

MAX_PIXELS = 40_000_000
"""The largest image read, in pixels (width x height): 40 megapixels decode to 160 MB as
RGBA; a larger one is refused before it is decoded."""


@dataclasses.dataclass(frozen=True)
class FolderSummary:
    """What `check_folder` found: the classes, their images and the size and colour to use.

    Attributes:
        directory: the folder.
        class_names: the class folders' names, sorted (the labels' order).
        counts: the number of readable images of each class, in that order.
        image_size: `(height, width)`: the one asked for, or the commonest.
        color_mode: `"grayscale"` or `"rgb"`: the one asked for, or
            `"grayscale"` when every image is grey.
        skipped: the unreadable files passed over (with `skip_bad_images`).
        ignored: files that are no image of a readable kind (by their
            extension), passed over.
        files: the readable images' paths, class by class in the walk's
            order: what `load_folder` reads.
        labels: each file's class index in `class_names`.
        fingerprint: what the folder holds (`_folder_walk.fingerprint`):
            each file's path, size, time and the SHA-256 of the bytes
            decoded; `train` records it in `run.json`.
    """

    directory: str
    class_names: tuple
    counts: tuple
    image_size: tuple
    color_mode: str
    skipped: tuple = ()
    ignored: int = 0
    files: tuple = dataclasses.field(default=(), repr=False)
    labels: tuple = dataclasses.field(default=(), repr=False)
    fingerprint: dict = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def images(self):
        """The number of readable images."""
        return sum(self.counts)

    @property
    def channels(self):
        """1 for `"grayscale"`, 3 for `"rgb"`."""
        return 1 if self.color_mode == "grayscale" else 3


class _TooLarge(ValueError):
    """An image too large to decode: refused even where unreadable files are skipped."""


def _tensorflow():
    try:
        import tensorflow as tf
    except ImportError:
        raise ValueError(
            "reading a folder of images needs TensorFlow, which decodes them: "
            "pip install tensorflow"
        ) from None
    return tf


def _decode(contents):
    """The image of the encoded `contents`, as training decodes it: uint8, three channels."""
    tf = _tensorflow()
    return tf.io.decode_image(contents, channels=3, expand_animations=False)


def _header_size(contents):
    """`(width, height)` that a PNG, GIF, BMP or JPEG header claims, or `None`."""
    try:
        if contents[:8] == b"\x89PNG\r\n\x1a\n":
            return struct.unpack(">II", contents[16:24])
        if contents[:4] == b"GIF8":
            return struct.unpack("<HH", contents[6:10])
        if contents[:2] == b"BM":
            if struct.unpack("<I", contents[14:18])[0] == 12:
                return struct.unpack("<HH", contents[18:22])
            width, height = struct.unpack("<ii", contents[18:26])
            return abs(width), abs(height)
    except struct.error:
        return None
    if contents[:2] == b"\xff\xd8":
        tf = _tensorflow()
        try:
            height, width, _ = (int(d) for d in tf.io.extract_jpeg_shape(contents))
        except tf.errors.OpError:
            return None  # the decoder names the fault
        return width, height
    return None


def _too_large(path, width, height):
    if width * height > MAX_PIXELS:
        raise _TooLarge(
            f"{shown(path)} is {width}x{height} pixels: decoding it would take "
            f"{width * height * 4 / 1e9:.1f} GB. Shrink it, or remove it "
            f"(images up to {MAX_PIXELS // 1_000_000} megapixels are read)"
        )


def _op_message(error):
    """TensorFlow's message without its op's name and brackets."""
    text = str(getattr(error, "message", error)).strip()
    if text.startswith("{{"):
        text = text.split("}}", 1)[-1].strip()
    return text.split(" [Op:", 1)[0].strip().rstrip(".")


def _read(path):
    """The bytes of the file at `path`; a `ValueError` names a file that cannot be read."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as error:
        raise ValueError(
            f"{shown(path)} cannot be read as an image: {error.strerror or error}"
        ) from None


def _inspect(path, contents):
    """`((height, width), grey)` of the image `contents` of `path`, decoded as training does.

    A `ValueError` names what is wrong: a file that TensorFlow cannot
    decode; `_TooLarge` an image over `MAX_PIXELS`.
    """
    tf = _tensorflow()
    size = _header_size(contents)
    if size is not None:
        _too_large(path, *size)
    try:
        image = _decode(contents).numpy()
    except tf.errors.OpError as error:
        raise ValueError(
            f"{shown(path)} cannot be read as an image: TensorFlow, which training decodes "
            f"with, cannot decode it ({_op_message(error)})"
        ) from None
    height, width = image.shape[:2]
    _too_large(path, width, height)
    grey = bool((image[..., 0] == image[..., 1]).all() and (image[..., 1] == image[..., 2]).all())
    return (height, width), grey


def check_folder(
    directory,
    image_size=None,
    color_mode=None,
    skip_bad_images=False,
    progress=None,
    min_classes=2,
):
    """Check a folder of class subfolders of images before anything is trained on it.

    Every file training would read is listed once (`list_folder`) and
    decoded by TensorFlow as training decodes it, in training's order.

    Args:
        directory: the folder; each subfolder is a class, named by its name.
            Or the `Listing` that `list_folder` made of it.
        image_size: `(height, width)` to resize every image to; by default the
            commonest size among the images.
        color_mode: `"grayscale"` or `"rgb"`; by default `"grayscale"` when
            every image is grey (its three decoded channels equal), else
            `"rgb"` (RGBA loses its alpha).
        skip_bad_images: pass over files that cannot be decoded, counting
            them in `skipped`, instead of stopping at the first; `load_folder`
            leaves them out.
        progress: a `keras.utils.Progbar` (or any object with `add(n)`)
            advanced by one for each file inspected, or `None`.
        min_classes: the fewest class folders accepted (2 for a classifier
            to train; 1 to evaluate on some of a model's classes).

    Returns:
        A `FolderSummary`.

    Raises:
        ValueError: naming the folder or file: a missing folder, no class
            subfolders or too few, a class folder with no images, a symlink
            loop, an image that cannot be decoded (without
            `skip_bad_images`), an image of more than `MAX_PIXELS` pixels, a
            bad `image_size` or `color_mode`.

    Example:

    >>> import os, tempfile
    >>> from PIL import Image
    >>> from keras_capsules.datasets import image_folder
    >>> root = tempfile.mkdtemp()
    >>> for name, colour in (("red", (255, 0, 0)), ("blue", (0, 0, 255))):
    ...     os.makedirs(os.path.join(root, name))
    ...     Image.new("RGB", (20, 10), colour).save(os.path.join(root, name, "a.png"))
    >>> summary = image_folder.check_folder(root)
    >>> summary.class_names, summary.counts, summary.image_size, summary.color_mode
    (('blue', 'red'), (1, 1), (10, 20), 'rgb')
    """
    if color_mode not in (None, "grayscale", "rgb"):
        raise ValueError(f"`color_mode` must be 'grayscale' or 'rgb'. Received: {color_mode!r}")
    if image_size is not None:
        image_size = tuple(image_size)
        if len(image_size) != 2 or not all(isinstance(d, int) and d > 0 for d in image_size):
            raise ValueError(
                f"`image_size` must be (height, width), positive integers. Received: {image_size!r}"
            )
    listing = directory if isinstance(directory, Listing) else list_folder(directory, min_classes)
    sizes, counts, skipped, all_grey = collections.Counter(), [], [], True
    files, labels, contents = [], [], {}
    for label, (name, paths) in enumerate(zip(listing.class_names, listing.files)):
        count = 0
        for path in paths:
            try:
                read = _read(path)
                contents[path] = hashlib.sha256(read).hexdigest()
                size, grey = _inspect(path, read)
            except _TooLarge:
                raise
            except ValueError as error:
                if not skip_bad_images:
                    raise ValueError(
                        f"{error}. Remove the file, or skip unreadable files "
                        "(skip_bad_images=True, --skip-bad-images)"
                    ) from None
                skipped.append(path)
                continue
            finally:
                if progress is not None:
                    progress.add(1)
            sizes[size] += 1
            all_grey = all_grey and grey
            files.append(path)
            labels.append(label)
            count += 1
        if not count:
            raise ValueError(
                f"The class folder {os.path.join(listing.directory, name)} holds no readable "
                f"images ({len(paths)} could not be decoded)"
            )
        counts.append(count)
    if image_size is None:
        image_size = max(sizes.items(), key=lambda item: item[1])[0]
    if color_mode is None:
        color_mode = "grayscale" if all_grey else "rgb"
    return FolderSummary(
        directory=listing.directory,
        class_names=listing.class_names,
        counts=tuple(counts),
        image_size=tuple(image_size),
        color_mode=color_mode,
        skipped=tuple(skipped),
        ignored=listing.ignored,
        files=tuple(files),
        labels=tuple(labels),
        fingerprint=fingerprint(listing, counts, skipped, contents),
    )


def count_files(directory):
    """The number of image files under `directory`'s class folders (for a progress bar).

    The files `check_folder` inspects: 0 where the folder cannot be listed.
    """
    try:
        return list_folder(directory, min_classes=1).total
    except ValueError:
        return 0


def _shuffled(items, seed):
    """`items` in the order Keras's `index_directory` shuffles them for `seed`."""
    import numpy as np

    items = list(items)
    np.random.RandomState(seed).shuffle(items)
    return items


def load_folder(summary, batch_size=32, validation_split=None, seed=None, shuffle=True):
    """`(train, validation)`: `tf.data` pipelines of the files `check_folder` accepted.

    Each yields `(images, labels)` batches: images `(batch, height, width,
    channels)` as float32 pixel values in [0, 255] (what the applications
    take), labels int32 class indices in `summary.class_names`' order. Each
    of `summary.files` is decoded as `check_folder` decoded it (three
    channels), resized to `summary.image_size` (bilinear, the aspect ratio
    not kept) and made grey where `summary.color_mode` is; files
    `check_folder` skipped are not read.

    Args:
        summary: a `FolderSummary` from `check_folder`.
        batch_size: images per batch.
        validation_split: the fraction of the images held out for
            validation (Keras's split: the files shuffled by `seed`, the last
            fraction held out, so the same files for the same seed), or
            `None` for none (`validation` is then `None`).
        seed: the shuffle and split seed (0 when `None` and a split is asked for).
        shuffle: shuffle the training images each epoch (always, with a split).
    """
    import numpy as np

    tf = _tensorflow()
    if validation_split is not None and not 0 < validation_split < 1:
        raise ValueError(
            f"`validation_split` must be in (0, 1). Received: validation_split={validation_split!r}"
        )
    if validation_split is not None:
        shuffle, seed = True, 0 if seed is None else seed
    if shuffle and seed is None:
        seed = int(np.random.randint(1e6))
    paths = [os.fsencode(path) for path in summary.files]  # any file name, as bytes
    labels = list(summary.labels)
    if shuffle:
        paths, labels = _shuffled(paths, seed), _shuffled(labels, seed)
    splits = [(paths, labels, shuffle), None]
    if validation_split is not None:
        held_out = int(validation_split * len(paths))
        if held_out in (0, len(paths)):
            raise ValueError(
                f"`validation_split` {validation_split} of {len(paths)} images leaves no "
                "training or no validation images"
            )
        splits = [
            (paths[:-held_out], labels[:-held_out], True),
            (paths[-held_out:], labels[-held_out:], False),
        ]
        print(f"Using {len(paths) - held_out} files for training.", flush=True)  # as Keras says
        print(f"Using {held_out} files for validation.", flush=True)
    image_size, grey = tuple(summary.image_size), summary.color_mode == "grayscale"

    def load(path, label):
        image = tf.image.resize(_decode(tf.io.read_file(path)), image_size, method="bilinear")
        image.set_shape((*image_size, 3))
        if grey:
            image = tf.image.rgb_to_grayscale(image)
        return image, label

    pipelines = []
    for split in splits:
        if split is None:
            pipelines.append(None)
            continue
        split_paths, split_labels, shuffled = split
        dataset = tf.data.Dataset.from_tensor_slices(
            (tf.constant(split_paths, tf.string), tf.constant(split_labels, tf.int32))
        )
        if shuffled:
            dataset = dataset.shuffle(1024, seed=seed)
        dataset = dataset.map(load, num_parallel_calls=tf.data.AUTOTUNE)
        pipelines.append(dataset.batch(batch_size).prefetch(tf.data.AUTOTUNE))
    return tuple(pipelines)

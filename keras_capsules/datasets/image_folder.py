"""Your own images: a folder with one subfolder of images per class.

    flowers/
        daisy/     0001.jpg 0002.png ...
        tulip/     a.bmp b.gif ...

`check_folder` looks at every image before anything is trained or written: it
names the folder that is missing, the class folder that is empty, the file
that cannot be decoded, or the image whose decoding would need gigabytes,
and chooses an image size and colour mode the images agree on. `load_folder`
then reads the images with Keras's own `keras.utils.image_dataset_from_directory`
(PNG, JPEG, BMP and GIF, any size, grey, RGB or RGBA), resized to one size,
as `tf.data` pipelines of uint8-valued pixels in [0, 255], the range the
applications take.
"""

import collections
import dataclasses
import os

EXTENSIONS = (".bmp", ".gif", ".jpeg", ".jpg", ".png")
"""The files `image_dataset_from_directory` reads; it passes over any other."""

MAX_PIXELS = 40_000_000
"""The largest image read, in pixels (width x height): 40 megapixels decode to 160 MB as
RGBA; a larger one is refused before it is decoded."""

_GREY_MODES = ("1", "L", "LA", "I", "I;16", "F")


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
            extension), which Keras passes over too.
    """

    directory: str
    class_names: tuple
    counts: tuple
    image_size: tuple
    color_mode: str
    skipped: tuple = ()
    ignored: int = 0

    @property
    def images(self):
        """The number of readable images."""
        return sum(self.counts)

    @property
    def channels(self):
        """1 for `"grayscale"`, 3 for `"rgb"`."""
        return 1 if self.color_mode == "grayscale" else 3


def _image_files(folder):
    """`(images, others)`: the image files under `folder` (any depth), sorted, and a count."""
    images, others = [], 0
    for root, _, files in sorted(os.walk(folder, followlinks=True)):
        for name in sorted(files):
            if name.lower().endswith(EXTENSIONS):
                images.append(os.path.join(root, name))
            elif not name.startswith("."):
                others += 1
    return images, others


class _TooLarge(ValueError):
    """An image too large to decode: refused even where unreadable files are skipped."""


def _inspect(path):
    """`((height, width), grey)` of the image at `path`; a `ValueError` naming what is wrong."""
    from PIL import Image

    bomb_limit = Image.MAX_IMAGE_PIXELS
    Image.MAX_IMAGE_PIXELS = None  # the size is checked below, with the file's name
    try:
        with Image.open(path) as image:
            Image.MAX_IMAGE_PIXELS = bomb_limit
            width, height = image.size
            if width * height > MAX_PIXELS:
                raise _TooLarge(
                    f"{path} is {width}x{height} pixels: decoding it would take "
                    f"{width * height * 4 / 1e9:.1f} GB. Shrink it, or remove it "
                    f"(images up to {MAX_PIXELS // 1_000_000} megapixels are read)"
                )
            grey = image.mode in _GREY_MODES or (image.mode == "P" and _palette_is_grey(image))
            image.load()  # decodes every pixel: a truncated or corrupt file fails here
    except ValueError:
        raise
    except Exception as error:  # PIL raises many kinds for a bad file
        raise ValueError(f"{path} cannot be read as an image: {error}") from None
    finally:
        Image.MAX_IMAGE_PIXELS = bomb_limit
    return (height, width), grey


def _palette_is_grey(image):
    colours = image.convert("RGB").getcolors(maxcolors=1 << 16) or []
    return all(r == g == b for _, (r, g, b) in colours)


def check_folder(directory, image_size=None, color_mode=None, skip_bad_images=False, progress=None):
    """Check a folder of class subfolders of images before anything is trained on it.

    Args:
        directory: the folder; each subfolder is a class, named by its name.
        image_size: `(height, width)` to resize every image to; by default the
            commonest size among the images.
        color_mode: `"grayscale"` or `"rgb"`; by default `"grayscale"` when
            every image is grey, else `"rgb"` (RGBA loses its alpha).
        skip_bad_images: pass over files that cannot be decoded, counting
            them in `skipped`, instead of stopping at the first.
        progress: a `keras.utils.Progbar` (or any object with `add(n)`)
            advanced by one for each file inspected, or `None`.

    Returns:
        A `FolderSummary`.

    Raises:
        ValueError: naming the folder or file: a missing folder, no class
            subfolders or only one, a class folder with no images, an image
            that cannot be decoded (without `skip_bad_images`), an image of
            more than `MAX_PIXELS` pixels, a bad `image_size` or `color_mode`.

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
    directory = os.fspath(directory)
    if not os.path.isdir(directory):
        raise ValueError(f"No folder {directory}: it should hold one subfolder of images per class")
    classes = sorted(
        name
        for name in os.listdir(directory)
        if os.path.isdir(os.path.join(directory, name)) and not name.startswith(".")
    )
    if not classes:
        raise ValueError(
            f"{directory} holds no class folders: put each class's images in a subfolder "
            "named after the class"
        )
    if len(classes) < 2:
        raise ValueError(
            f"{directory} holds one class folder ({classes[0]}): a classifier needs two "
            "classes or more"
        )
    if color_mode not in (None, "grayscale", "rgb"):
        raise ValueError(f"`color_mode` must be 'grayscale' or 'rgb'. Received: {color_mode!r}")
    if image_size is not None:
        image_size = tuple(image_size)
        if len(image_size) != 2 or not all(isinstance(d, int) and d > 0 for d in image_size):
            raise ValueError(
                f"`image_size` must be (height, width), positive integers. Received: {image_size!r}"
            )
    files = {name: _image_files(os.path.join(directory, name)) for name in classes}
    empty = [name for name, (images, _) in files.items() if not images]
    if empty:
        raise ValueError(
            f"The class folder {os.path.join(directory, empty[0])} holds no images "
            f"({', '.join(EXTENSIONS)})"
            + (f"; {len(empty) - 1} more are empty" if empty[1:] else "")
        )
    sizes, counts, skipped, all_grey = collections.Counter(), [], [], True
    for name in classes:
        count = 0
        for path in files[name][0]:
            try:
                size, grey = _inspect(path)
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
            count += 1
        if not count:
            raise ValueError(
                f"The class folder {os.path.join(directory, name)} holds no readable images "
                f"({len(files[name][0])} could not be decoded)"
            )
        counts.append(count)
    if image_size is None:
        image_size = max(sizes.items(), key=lambda item: item[1])[0]
    if color_mode is None:
        color_mode = "grayscale" if all_grey else "rgb"
    return FolderSummary(
        directory=directory,
        class_names=tuple(classes),
        counts=tuple(counts),
        image_size=tuple(image_size),
        color_mode=color_mode,
        skipped=tuple(skipped),
        ignored=sum(others for _, others in files.values()),
    )


def count_files(directory):
    """The number of image files under `directory`'s class folders (for a progress bar)."""
    if not os.path.isdir(directory):
        return 0
    return sum(
        len(_image_files(os.path.join(directory, name))[0])
        for name in os.listdir(directory)
        if os.path.isdir(os.path.join(directory, name))
    )


def load_folder(summary, batch_size=32, validation_split=None, seed=None, shuffle=True):
    """`(train, validation)`: `tf.data` pipelines of the folder `check_folder` summarised.

    Each yields `(images, labels)` batches: images `(batch, height, width,
    channels)` as float32 pixel values in [0, 255] (what the applications
    take), labels int32 class indices in `summary.class_names`' order. The
    images are read by `keras.utils.image_dataset_from_directory`, resized
    to `summary.image_size` (bilinear, the aspect ratio not kept), files
    `check_folder` skipped left out.

    Args:
        summary: a `FolderSummary` from `check_folder`.
        batch_size: images per batch.
        validation_split: the fraction of the images held out for
            validation (Keras's split: the same files for the same seed),
            or `None` for none (`validation` is then `None`).
        seed: the shuffle and split seed (0 when `None` and a split is asked for).
        shuffle: shuffle the training images each epoch.
    """
    import keras
    import tensorflow as tf

    if validation_split is not None and not 0 < validation_split < 1:
        raise ValueError(
            f"`validation_split` must be in (0, 1). Received: validation_split={validation_split!r}"
        )
    if validation_split is not None and seed is None:
        seed = 0
    options = dict(
        labels="inferred",
        label_mode="int",
        class_names=list(summary.class_names),
        # Read as RGB, which TensorFlow decodes from every format (it decodes no GIF
        # to one channel), then made grey below where the folder is grey.
        color_mode="rgb",
        batch_size=None,  # batched below, after any unreadable file is dropped
        image_size=summary.image_size,
        seed=seed,
        verbose=False,
    )
    if validation_split is None:
        splits = [
            keras.utils.image_dataset_from_directory(summary.directory, shuffle=shuffle, **options),
            None,
        ]
    else:
        splits = keras.utils.image_dataset_from_directory(
            summary.directory,
            shuffle=True,
            validation_split=validation_split,
            subset="both",
            **options,
        )
    pipelines = []
    for split in splits:
        if split is None:
            pipelines.append(None)
            continue
        if summary.skipped:
            split = split.ignore_errors()
        if summary.color_mode == "grayscale":
            split = split.map(
                lambda images, labels: (tf.image.rgb_to_grayscale(images), labels),
                num_parallel_calls=tf.data.AUTOTUNE,
            )
        pipelines.append(split.batch(batch_size).prefetch(tf.data.AUTOTUNE))
    return tuple(pipelines)

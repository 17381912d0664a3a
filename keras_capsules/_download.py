"""Files too large for the library's wheel: read from their distribution, or downloaded once.

MNIST, Fashion-MNIST and the presets' weights live in their own distributions
(`keras-capsules-datasets`, `keras-capsules-presets`), so that the library's
wheel is code. Where one is installed its files are read in place; where not,
they are downloaded with `keras.utils.get_file` into Keras's cache
(`$KERAS_HOME`, by default `~/.keras`) and checked against the SHA-256 that
the library records, never one that comes with the download.
"""

import importlib.util
import os

DATASETS_DISTRIBUTION = "keras-capsules-datasets"
PRESETS_DISTRIBUTION = "keras-capsules-presets"


def installed_folder(package, *parts):
    """The folder `parts` inside the installed package `package`, or `None`.

    The package is found without importing it.
    """
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    for location in (spec.submodule_search_locations or []) if spec else []:
        folder = os.path.join(location, *parts)
        if os.path.isdir(folder):
            return folder
    return None


def cache_dir():
    """Keras's cache folder: `$KERAS_HOME`, or `~/.keras`."""
    return os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")


def install_hint(distribution):
    """How to install `distribution`, from PyPI or from a checkout of the repository."""
    return (
        f"pip install {distribution} (from a checkout of keras-capsules: "
        f"pip install -e distributions/{distribution})"
    )


def download(url, filename, subdir, sha256=None):
    """`url` saved as `filename` in the cache's `subdir`, unless it is there already.

    Args:
        url: where the file is.
        filename: its name in the cache.
        subdir: its folder in the cache, relative to `cache_dir()`.
        sha256: the file's SHA-256; a cached file that does not match it is
            downloaded again, and a download that does not match is removed.

    Returns:
        The path of the cached file.

    Raises:
        OSError: the download failed or did not match `sha256` (the message
            says which, with the URL).
    """
    import keras

    # get_file falls back to /tmp/.keras when the cache folder is not there yet.
    os.makedirs(os.path.join(cache_dir(), subdir), exist_ok=True)
    try:
        return keras.utils.get_file(
            fname=filename,
            origin=url,
            file_hash=sha256,
            hash_algorithm="sha256",
            cache_subdir=subdir,
            cache_dir=cache_dir(),
        )
    except Exception as error:  # get_file raises Exception for a failed fetch
        target = os.path.join(cache_dir(), subdir, filename)
        if os.path.exists(target):
            os.remove(target)
        raise OSError(f"could not download {url}: {error}") from None

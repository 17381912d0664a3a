"""The library's wheel is code; data sets and weights: their distributions, or a download."""

import functools
import gzip
import http.server
import os
import shutil
import subprocess
import sys
import threading
import zipfile

import numpy as np
import pytest

import applications
from keras_capsules import _download
from keras_capsules import utils
from keras_capsules.datasets import mnist
from tests.conftest import BACKEND

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_WHEEL_BYTES = 2 * 1024 * 1024
MNIST_FILES = mnist._DATASET.installed_path()  # keras-capsules-datasets's copy

# Building is the same on every backend: the TensorFlow run builds.
tensorflow_only = pytest.mark.skipif(BACKEND != "tensorflow", reason="backend-neutral")


def _wheel(project, tmp_path):
    """Build `project` (a folder of the repository) from a copy, and open the wheel."""
    source = tmp_path / "source"
    source.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", ".venv", "site")
    for name in os.listdir(project):
        path = os.path.join(project, name)
        if name.startswith(".") or name in ("tests", "docs", "benchmarks", "experiments"):
            continue
        if name == "distributions":
            continue
        if os.path.isdir(path):
            shutil.copytree(path, source / name, ignore=ignore)
        else:
            shutil.copy(path, source / name)
    out = tmp_path / "wheel"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
        + ["-w", str(out), str(source)],
        check=True,
        capture_output=True,
    )
    (wheel,) = out.iterdir()
    return wheel


@tensorflow_only
def test_the_library_wheel_is_code_and_the_presets_descriptions(tmp_path):
    wheel = _wheel(ROOT, tmp_path)
    assert wheel.name.startswith("keras_capsules-")
    assert wheel.stat().st_size <= MAX_WHEEL_BYTES, wheel.stat().st_size
    names = zipfile.ZipFile(wheel).namelist()
    assert not [n for n in names if n.endswith((".gz", ".h5", ".npz"))]
    for preset in applications.list_presets():
        assert f"applications/presets/{preset['name']}/metadata.json" in names
    assert "keras_capsules/_download.py" in names


@tensorflow_only
@pytest.mark.parametrize(
    "project, expected",
    [
        (
            "keras-capsules-datasets",
            [f"keras_capsules_datasets/mnist/{n}.gz" for n in mnist.FILES]
            + ["keras_capsules_datasets/fashion_mnist/LICENSE"],
        ),
        (
            "keras-capsules-presets",
            [
                f"keras_capsules_presets/{p['name']}/model.weights.h5"
                for p in applications.list_presets()
            ],
        ),
    ],
)
def test_each_data_distribution_carries_its_files(tmp_path, project, expected):
    wheel = _wheel(os.path.join(ROOT, "distributions", project), tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    assert set(expected) <= set(names)


# Downloads, from a server on 127.0.0.1 --------------------------------------


@pytest.fixture
def server(tmp_path):
    """A static file server over `tmp_path / "www"`: `(base URL, folder, requested paths)`."""
    root = tmp_path / "www"
    root.mkdir()
    requested = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def do_GET(self):
            requested.append(self.path)
            super().do_GET()

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Handler, directory=str(root))
    )
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", root, requested
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def not_installed(tmp_path, monkeypatch):
    """Neither data distribution is found; Keras's cache is a fresh folder."""
    # The data sets find their files through `_download`, the presets through the
    # public `utils` that `applications` reads: neither finds them.
    monkeypatch.setattr(_download, "installed_folder", lambda *parts: None)
    monkeypatch.setattr(utils, "installed_folder", lambda *parts: None)
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras_home"))
    return tmp_path / "keras_home"


def test_mnist_downloads_once_when_the_datasets_are_not_installed(
    server, not_installed, monkeypatch
):
    url, root, requested = server
    shutil.copytree(MNIST_FILES, root / "mnist")
    monkeypatch.setenv("KERAS_CAPSULES_DATASETS_URL", url)
    (_, y_train), (x_test, _) = mnist.load_data()
    assert len(requested) == 4 and y_train[:4].tolist() == [5, 0, 4, 1]
    assert (not_installed / "datasets" / "keras_capsules" / "mnist").is_dir()
    (_, y_again), _ = mnist.load_data()  # from the cache
    assert len(requested) == 4 and np.array_equal(y_again, y_train)


def test_a_downloaded_file_that_fails_the_checksum_is_removed(server, not_installed, monkeypatch):
    url, root, _ = server
    shutil.copytree(MNIST_FILES, root / "mnist")
    with gzip.open(root / "mnist" / "t10k-labels-idx1-ubyte.gz", "rb") as f:
        labels = bytearray(f.read())
    labels[-1] = (labels[-1] + 1) % 10
    with gzip.open(root / "mnist" / "t10k-labels-idx1-ubyte.gz", "wb") as f:
        f.write(bytes(labels))
    monkeypatch.setenv("KERAS_CAPSULES_DATASETS_URL", url)
    with pytest.raises(ValueError, match=r"t10k-labels-idx1-ubyte.*SHA-256.*downloads it again"):
        mnist.load_data()
    cached = not_installed / "datasets" / "keras_capsules" / "mnist"
    assert not (cached / "t10k-labels-idx1-ubyte.gz").exists()


def test_a_failed_download_names_the_distribution_to_install(server, not_installed, monkeypatch):
    url, _, _ = server  # serves nothing: every file is a 404
    monkeypatch.setenv("KERAS_CAPSULES_DATASETS_URL", url)
    with pytest.raises(
        ValueError, match=r"MNIST is not installed.*pip install keras-capsules-datasets"
    ):
        mnist.load_data()


def test_preset_weights_download_with_the_recorded_checksum(server, not_installed, monkeypatch):
    url, root, requested = server
    name = "em_capsnet_mnist"
    source = os.path.join(
        ROOT, "distributions", "keras-capsules-presets", "keras_capsules_presets", name
    )
    (root / name).mkdir()
    shutil.copy(os.path.join(source, "model.weights.h5"), root / name)
    monkeypatch.delenv("KERAS_CAPSULES_PRESETS_URL", raising=False)
    with pytest.raises(ValueError, match=r"not installed: pip install keras-capsules-presets"):
        applications.MatrixCapsNet.from_preset(name)
    monkeypatch.setenv("KERAS_CAPSULES_PRESETS_URL", url)
    model = applications.MatrixCapsNet.from_preset(name)
    assert requested == [f"/{name}/model.weights.h5"]
    reference = applications.MatrixCapsNet.from_config(model.get_config())
    reference.load_weights(os.path.join(source, "model.weights.h5"))
    for got, want in zip(model.get_weights(), reference.get_weights()):
        np.testing.assert_array_equal(got, want)
    # An altered file on the server is refused, and not kept.
    cached = not_installed / "models" / "keras_capsules" / name / "model.weights.h5"
    os.remove(cached)
    weights = root / name / "model.weights.h5"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"could not download .*model.weights.h5"):
        applications.MatrixCapsNet.from_preset(name)
    assert not cached.exists()

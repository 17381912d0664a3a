"""The capsule explorer: drawing preparation, the page's callbacks, and the page in Chromium."""

import io
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pytest

import applications
from keras_capsules.visualization import build_explorer
from keras_capsules.visualization import prepare_drawing
from keras_capsules.visualization.explorer import _display
from keras_capsules.visualization.explorer import _Session
from tests._local_http import free_port
from tests._local_http import wait_for_http
from tests.conftest import BACKEND
from tests.visualization.test_figures import tiny

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
# CI installs Chromium and sets this, so that a missing browser fails instead of skipping.
REQUIRE_BROWSER = os.environ.get("KERAS_CAPSULES_REQUIRE_BROWSER") == "1"


def stroke_canvas(size=280, box=(60, 100, 200, 140)):
    """A white opaque canvas with a dark filled rectangle: a tall '1'."""
    canvas = np.full((size, size, 3), 255, np.uint8)
    top, left, bottom, right = box
    canvas[top:bottom, left:right] = 0
    return canvas


def test_prepare_drawing_boxes_and_centres_like_mnist():
    image = prepare_drawing(stroke_canvas())
    assert image.shape == (28, 28, 1) and image.dtype == np.uint8
    ink = image[..., 0] > 127
    rows, cols = np.flatnonzero(ink.any(axis=1)), np.flatnonzero(ink.any(axis=0))
    # The 140 x 40 stroke is scaled to 20 px high, keeping its aspect (about 6 px wide).
    assert rows[-1] - rows[0] + 1 == 20
    assert 4 <= cols[-1] - cols[0] + 1 <= 7
    # Its centre of mass lands on the canvas centre, wherever it was drawn.
    ys, xs = np.nonzero(image[..., 0])
    weights = image[..., 0][ys, xs].astype(float)
    assert abs(np.average(ys, weights=weights) - 13.5) <= 1
    assert abs(np.average(xs, weights=weights) - 13.5) <= 1
    moved = prepare_drawing(stroke_canvas(box=(10, 10, 150, 50)))
    np.testing.assert_array_equal(moved, image)


def test_prepare_drawing_reads_transparent_rgba_and_editor_values():
    rgba = np.zeros((280, 280, 4), np.uint8)
    rgba[60:200, 100:140] = (0, 0, 0, 255)  # black ink, transparent elsewhere
    expected = prepare_drawing(stroke_canvas())
    np.testing.assert_array_equal(prepare_drawing(rgba), expected)
    np.testing.assert_array_equal(prepare_drawing({"composite": rgba}), expected)
    grey = stroke_canvas()[..., 0]
    np.testing.assert_array_equal(prepare_drawing(grey), expected)
    assert prepare_drawing(np.full((280, 280, 3), 255, np.uint8)) is None
    assert prepare_drawing({"composite": None}) is None
    # Larger canvases get the same 20-pixel digit, as expanded MNIST and MultiMNIST have.
    large = prepare_drawing(stroke_canvas(), image_shape=(40, 40, 1))
    assert large.shape == (40, 40, 1)
    assert np.flatnonzero((large[..., 0] > 127).any(axis=1)).size == 20
    with pytest.raises(ValueError, match="drawing"):
        prepare_drawing(np.zeros((2, 2, 2, 2)))


def test_session_decodes_the_perturbed_capsule_alone(mnist_data):
    _, (x_test, _) = mnist_data
    model = tiny()
    session = _Session(model)
    lengths, poses, winner = session.encode(x_test[0])
    assert list(lengths) == [str(c) for c in range(10)]
    np.testing.assert_allclose(list(lengths.values()), np.linalg.norm(poses, axis=-1), rtol=1e-6)
    assert winner == int(np.argmax(np.linalg.norm(poses, axis=-1)))
    deltas = np.zeros(16, "float32")
    deltas[3] = 0.25
    tweaked = poses.copy()
    tweaked[winner] += deltas
    expected = model.decode(tweaked[None], labels=np.array([winner]))[0, ..., 0]
    image = session.decode(poses, winner, deltas)
    np.testing.assert_array_equal(image, np.round(np.clip(expected, 0, 1) * 255).astype("uint8"))
    assert not np.array_equal(image, session.decode(poses, winner, np.zeros(16)))
    np.testing.assert_array_equal(
        poses[winner], session.encode(x_test[0])[1][winner]
    )  # no aliasing


def test_build_explorer_checks_its_arguments(mnist_data):
    pytest.importorskip("gradio")
    _, (x_test, y_test) = mnist_data
    model = tiny()
    with pytest.raises(ValueError, match="`images`"):
        build_explorer(model, x_test[:3, :20])
    with pytest.raises(ValueError, match="`labels`"):
        build_explorer(model, x_test[:3], y_test[:2])
    with pytest.raises(ValueError, match="decoder"):
        build_explorer(tiny(decoder_units=None), x_test[:3])
    with pytest.raises(ValueError, match="labels"):
        build_explorer(model, x_test[:3], [0, 1, 10])
    # Float images in [0, 255] and one-hot labels are taken as the figures take them.
    build_explorer(model, x_test[:3].astype("float32"), np.eye(10)[y_test[:3]])


def test_a_huge_drawing_is_refused_from_its_header(tmp_path):
    gr = pytest.importorskip("gradio")
    import PIL.Image
    from gradio.data_classes import FileData

    from keras_capsules.visualization import explorer

    sketchpad = explorer._bound_sketchpad(gr, gr.Sketchpad(type="numpy"))
    huge = tmp_path / "huge.png"
    PIL.Image.new("RGBA", (9000, 9000)).save(huge)  # a few hundred kB, 324 MB decoded
    start = time.perf_counter()
    with pytest.raises(gr.Error, match="9000x9000 pixels.*refused"):
        sketchpad.convert_and_format_image(FileData(path=str(huge)))
    assert time.perf_counter() - start < 1.0  # the pixels were never decoded
    (tmp_path / "junk.png").write_bytes(os.urandom(1000))
    with pytest.raises(gr.Error, match="not an image"):
        sketchpad.convert_and_format_image(FileData(path=str(tmp_path / "junk.png")))
    drawing = tmp_path / "drawing.png"
    PIL.Image.new("RGBA", (280, 280)).save(drawing)
    image = sketchpad.convert_and_format_image(FileData(path=str(drawing)))
    assert np.asarray(image).shape[:2] == (280, 280)


def test_the_explorer_limits_uploads(mnist_data):
    pytest.importorskip("gradio")
    from keras_capsules.visualization import launch_explorer

    app = launch_explorer(tiny(), port=free_port(), block=False)
    try:
        assert app.max_file_size == 2 * 1024 * 1024
        assert app.delete_cache == (600, 600)
    finally:
        app.close()


def test_closing_a_launched_explorer_removes_its_folder(tmp_path, monkeypatch):
    pytest.importorskip("gradio")
    from keras_capsules.visualization import launch_explorer

    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path))
    app = launch_explorer(tiny(), port=free_port(), block=False)
    try:
        (folder,) = tmp_path.glob("keras-capsules-explore-*")
        assert app.server_app.uploaded_file_dir == str(folder)
        assert os.environ["GRADIO_TEMP_DIR"] == str(tmp_path)  # restored once launched
    finally:
        app.close()
    assert not folder.exists()
    assert tmp_path.exists()


@pytest.mark.skipif(
    BACKEND != "tensorflow", reason="drives the CLI in a subprocess, as the CLI tests: TensorFlow"
)
@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM"])
def test_the_explorer_removes_its_files_when_it_stops(tmp_path, stop):
    """A drawing sent to `keras-capsules explore` and the images shown go when it is stopped.

    The page stays connected, as a browser tab does; a file of the user's in
    Gradio's upload folder stays.
    """
    pytest.importorskip("gradio")
    gradio_client = pytest.importorskip("gradio_client")
    import PIL.Image

    model_path = tmp_path / "model.keras"
    tiny().save(model_path)
    drawing = tmp_path / "drawing.png"
    PIL.Image.fromarray(stroke_canvas()).save(drawing)
    uploads = tmp_path / "gradio"
    kept = uploads / "mine" / "kept.png"
    kept.parent.mkdir(parents=True)
    kept.write_bytes(b"not the explorer's")
    port = free_port()
    with open(tmp_path / "out.log", "w") as out, open(tmp_path / "err.log", "w") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "keras_capsules.cli", "explore", str(model_path)]
            + ["--port", str(port), "--examples", "3"],
            stdout=out,
            stderr=err,
            # A shell without job control starts background jobs with SIGINT ignored,
            # which Python keeps: the explorer gets SIGINT as a terminal's Ctrl-C sends it.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
            env=dict(
                os.environ,
                PYTHONUNBUFFERED="1",
                PYTHONFAULTHANDLER="1",
                GRADIO_ANALYTICS_ENABLED="False",
                GRADIO_TEMP_DIR=str(uploads),
            ),
        )

    def logs():
        return (tmp_path / "out.log").read_text() + (tmp_path / "err.log").read_text()

    def files():
        return sorted(path for path in uploads.rglob("*") if path.is_file())

    try:
        try:
            wait_for_http(port, "/", process, timeout=180)
        except RuntimeError as error:
            raise AssertionError(f"{error}:\n{logs()}") from None
        client = gradio_client.Client(
            f"http://127.0.0.1:{port}/", verbose=False, download_files=False
        )
        try:
            upload = gradio_client.handle_file(str(drawing))
            sketch = {"background": None, "layers": [], "composite": upload}
            client.predict(sketch, api_name="/draw")
            written = [path for path in files() if path != kept]
            assert "drawing.png" in [path.name for path in written]
            assert len(written) == 3  # the drawing, the input and the reconstruction
            process.send_signal(getattr(signal, stop))
            try:
                code = process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                # Every thread's stack (faulthandler) into the log, to see what held it.
                process.send_signal(signal.SIGABRT)
                process.wait(timeout=30)
                raise AssertionError(f"still running 60 s after {stop}:\n{logs()}") from None
            assert code == 0, logs()
        finally:
            client.close()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert files() == [kept], logs()
    assert "Traceback" not in logs()


@pytest.fixture
def chromium():
    """A headless Chromium driven by Selenium, closed after the test."""
    if not (CHROMIUM and CHROMEDRIVER):
        if REQUIRE_BROWSER:
            pytest.fail("KERAS_CAPSULES_REQUIRE_BROWSER=1 but chromium/chromedriver are missing")
        pytest.skip("needs Chromium and chromedriver (Debian: chromium, chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
        options.add_argument(argument)
    options.add_argument("--window-size=1400,1400")
    options.binary_location = CHROMIUM
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


def wait_until(condition, timeout=60, what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def fetch_png(src):
    """The grey levels of the PNG an `<img>` shows (an http or a data URL)."""
    import matplotlib.image

    with urllib.request.urlopen(src, timeout=30) as response:
        image = matplotlib.image.imread(io.BytesIO(response.read()), format="png")
    if image.ndim == 3:
        image = image[..., 0]
    return np.round(image * 255).astype("uint8")


@pytest.mark.skipif(
    BACKEND != "tensorflow", reason="drives the CLI in a subprocess, as the CLI tests: TensorFlow"
)
def test_explorer_page_reconstruction_follows_a_slider(tmp_path, mnist_data, chromium):
    """`keras-capsules explore`, with no model: the capsnet_mnist preset, in headless Chromium.

    A slider redraws the reconstruction; a digit drawn with the brush is encoded.
    """
    pytest.importorskip("gradio")
    driver = chromium
    _, (x_test, _) = mnist_data
    model = applications.CapsNet.from_preset("capsnet_mnist")
    port = free_port()
    log = open(tmp_path / "explore.log", "w")
    process = subprocess.Popen(
        [sys.executable, "-m", "keras_capsules.cli", "explore"]
        + ["--port", str(port), "--examples", "10"],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=dict(os.environ, PYTHONUNBUFFERED="1", GRADIO_ANALYTICS_ENABLED="False"),
    )
    try:
        try:
            wait_for_http(port, "/", process, timeout=180)
        except RuntimeError as error:
            raise AssertionError(f"{error}:\n{(tmp_path / 'explore.log').read_text()}") from None
        from selenium.webdriver.common.action_chains import ActionChains
        from selenium.webdriver.common.by import By
        from selenium.webdriver.common.keys import Keys

        driver.get(f"http://127.0.0.1:{port}/")

        def reconstruction_src():
            found = driver.find_elements(By.CSS_SELECTOR, "#reconstruction img")
            return found[0].get_attribute("src") if found else None

        before = wait_until(reconstruction_src, what="the first reconstruction")
        # The first test digit is shown: the longest capsule heads the lengths, and the
        # reconstruction is decoded from it with all sliders at 0.
        session = _Session(model)
        _, poses, winner = session.encode(x_test[0])
        top = "#lengths [data-testid='label-output-value']"
        wait_until(
            lambda: driver.find_element(By.CSS_SELECTOR, top).text.strip() == str(winner),
            what=f"capsule {winner} at the top of the lengths",
        )
        zero = np.zeros(16, "float32")
        np.testing.assert_allclose(
            fetch_png(before), _display(session.decode(poses, winner, zero)), atol=1
        )

        # Move dimension 5's slider to its right end with the keyboard, as a user can.
        slider = driver.find_element(By.CSS_SELECTOR, "#dim-5 input[type=range]")
        slider.click()
        slider.send_keys(Keys.END)
        number = driver.find_element(By.CSS_SELECTOR, "#dim-5 input[type=number]")
        wait_until(
            lambda: float(number.get_attribute("value") or 0) == pytest.approx(0.25),
            what="the slider at 0.25",
        )
        deltas = zero.copy()
        deltas[5] = 0.25
        expected = _display(session.decode(poses, winner, deltas))
        assert np.abs(expected.astype(int) - fetch_png(before)).max() > 0

        def shows_expected():
            src = reconstruction_src()
            if not src or src == before:
                return False
            return np.abs(fetch_png(src).astype(int) - expected).max() <= 1

        wait_until(shows_expected, what="the reconstruction of the perturbed capsule")

        # Draw a vertical stroke with the brush and use it: the page shows it as a
        # 20-pixel-high MNIST-style digit and encodes exactly that image.
        def input_src():
            return driver.find_element(By.CSS_SELECTOR, "#input img").get_attribute("src")

        picked = input_src()
        sketch = driver.find_element(By.ID, "sketch")
        sketch.find_element(By.CSS_SELECTOR, "button[aria-label='Brush']").click()
        canvas = sketch.find_elements(By.CSS_SELECTOR, "canvas")[-1]
        stroke = ActionChains(driver).move_to_element_with_offset(canvas, 0, -100).click_and_hold()
        for _ in range(20):
            stroke.move_by_offset(0, 10)
        stroke.release().perform()
        driver.find_element(By.ID, "use-drawing").click()
        drawn_src = wait_until(
            lambda: (src := input_src()) != picked and src, what="the drawing as the input"
        )
        drawn = fetch_png(drawn_src)[::8, ::8]  # the page shows the 28x28 input 8 times larger
        rows = np.flatnonzero((drawn > 127).any(axis=1))
        cols = np.flatnonzero((drawn > 127).any(axis=0))
        assert drawn.shape == (28, 28) and rows[-1] - rows[0] + 1 == 20
        assert cols[-1] - cols[0] + 1 < 10
        _, _, drawn_winner = session.encode(drawn[..., None])
        wait_until(
            lambda: driver.find_element(By.CSS_SELECTOR, top).text.strip() == str(drawn_winner),
            what=f"capsule {drawn_winner} of the drawing at the top of the lengths",
        )
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def test_a_colour_model_with_class_names_is_explored_by_name():
    model = applications.CapsNet(
        input_shape=(20, 24, 3),
        class_names=["cat", "dog"],
        conv_filters=8,
        primary_capsule_types=2,
        decoder_units=(16,),
        compile=False,
    )
    session = _Session(model)
    image = np.random.default_rng(0).integers(0, 256, (20, 24, 3)).astype("float32")
    lengths, poses, winner = session.encode(image)
    assert list(lengths) == ["cat", "dog"]
    decoded = session.decode(poses, winner, np.zeros(16))
    assert decoded.shape == (20, 24, 3) and decoded.dtype == np.uint8
    drawn = prepare_drawing(stroke_canvas(), model.image_shape)
    assert drawn.shape == (20, 24, 3) and np.array_equal(drawn[..., 0], drawn[..., 2])
    pytest.importorskip("gradio")
    build_explorer(model, image[None], np.array([1]))


def test_a_multimnist_network_is_explored_on_its_pairs(mnist_data):
    from keras_capsules.datasets import multimnist

    _, (x_test, y_test) = mnist_data
    pairs = multimnist.test_set(x_test[:20], y_test[:20], seed=1)["images"]
    model = applications.EfficientCapsNetMultiMNIST(
        conv_filters=(4, 4, 4, 32), primary_capsule_types=4, decoder_units=(16,), compile=False
    )
    session = _Session(model)
    lengths, poses, winner = session.encode(pairs[0])
    assert list(lengths) == [str(digit) for digit in range(10)]
    decoded = session.decode(poses, winner, np.zeros(16))
    assert decoded.shape == (36, 36) and decoded.dtype == np.uint8
    pytest.importorskip("gradio")
    build_explorer(model, pairs[:5])  # two classes per image: no labels to pick by

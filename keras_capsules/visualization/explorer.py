"""An interactive capsule explorer in the browser, built with Gradio.

Pick a test digit or draw one; the page shows the class capsules' lengths and
the reconstruction from the winning capsule, and sixteen sliders (one per
capsule dimension) perturb that capsule while the reconstruction follows:
figure 4 of Sabour et al. 2017, live.

Gradio is an optional dependency: `pip install "keras-capsules[explore]"`.
"""

import contextlib
import os
import shutil
import signal
import tempfile
import threading

import numpy as np

from keras_capsules._class_names import class_name
from keras_capsules.visualization import _common
from keras_capsules.visualization._drawing import prepare_drawing

SLIDER_RANGE = 0.25
"""The sliders span [-0.25, 0.25], the paper's perturbation range."""

SLIDER_STEP = 0.01

CANVAS_SIZE = 280
"""The drawing canvas, in pixels: ten times MNIST's 28."""

MAX_DRAWING_SIZE = 4 * CANVAS_SIZE
"""Drawings wider or taller than this are refused from their header, before decoding."""

MAX_UPLOAD_SIZE = "2mb"
"""Gradio's limit on an uploaded file; a drawing of the canvas is some kilobytes."""


def _bound_sketchpad(gr, sketchpad):
    """Make `sketchpad` refuse images larger than `MAX_DRAWING_SIZE`, read from the header.

    Gradio decodes every image of the editor's value (background, layers,
    composite) with PIL before the page's function sees it; PIL's `open`
    reads the header only, so the size is checked before the pixels cost
    anything. (The instance's method is wrapped: a subclass of a Gradio
    component would make Gradio write a `.pyi` file beside this module.)
    """
    import io

    import PIL.Image

    convert = sketchpad.convert_and_format_image

    def bounded(file, flatten_on_white=False):
        if file is not None:
            source = io.BytesIO(file) if isinstance(file, (bytes, bytearray)) else file.path
            try:
                with PIL.Image.open(source) as image:
                    width, height = image.size
            except (OSError, ValueError, PIL.Image.DecompressionBombError):
                raise gr.Error("The drawing is not an image.") from None
            if max(width, height) > MAX_DRAWING_SIZE:
                raise gr.Error(
                    f"The drawing is {width}x{height} pixels; the canvas is "
                    f"{CANVAS_SIZE}x{CANVAS_SIZE}, and images above "
                    f"{MAX_DRAWING_SIZE}x{MAX_DRAWING_SIZE} are refused."
                )
        return convert(file, flatten_on_white)

    sketchpad.convert_and_format_image = bounded
    return sketchpad


class _Session:
    """The model-side work behind the page: encode an image, decode a perturbed capsule."""

    def __init__(self, model):
        _common.check_model(model)
        self.model = model
        self.class_names = [class_name(model, c) for c in range(model.num_classes)]

    def encode(self, image):
        """`(lengths dict, poses (classes, dim), winner)` of one image in [0, 255]."""
        x = _common.check_images(self.model, image, single=True)
        poses = np.asarray(self.model.predict(x, verbose=0)["poses"], "float32")[0]
        lengths = np.linalg.norm(poses, axis=-1)
        winner = int(np.argmax(lengths))
        return dict(zip(self.class_names, lengths.astype(float).tolist())), poses, winner

    def decode(self, poses, capsule, deltas):
        """The reconstruction from `capsule` with `deltas` added to its dimensions, uint8."""
        poses = np.array(poses, dtype="float32", copy=True)
        poses[capsule] += np.asarray(deltas, dtype="float32")
        image = self.model.decode(poses[None], labels=np.array([capsule], "int32"))[0]
        image = np.round(np.clip(image, 0.0, 1.0) * 255).astype("uint8")
        return image[..., 0] if image.shape[-1] == 1 else image  # grey (h, w) or RGB


def _display(image, scale=8):
    """A uint8 `(h, w[, c])` image enlarged `scale` times (nearest), grey `(h, w)` or RGB."""
    image = np.asarray(image)
    if image.ndim == 3:
        image = image[..., 0] if image.shape[-1] == 1 else image[..., :3]
    return np.repeat(np.repeat(image, scale, axis=0), scale, axis=1)


def build_explorer(model, images=None, labels=None, title="Capsule explorer"):
    """The explorer page as a `gradio.Blocks` app, not yet launched.

    Args:
        model: a capsule network with a decoder, such as a trained
            `applications.CapsNetMNIST`.
        images: test images to pick from, `(n, height, width)` or
            `(n,) + model.image_shape`, in [0, 255]; `None` for drawing only.
        labels: their classes `(n,)`, shown next to the picked image.
        title: the page's heading.

    Returns:
        A `gradio.Blocks`. Its components carry stable `elem_id`s:
        `index` (the test image slider) and `label` (with `images`),
        `sketch`, `use-drawing`, `input`, `lengths`, `capsule`, `dim-0` ...
        `dim-{capsule_dim - 1}`, `reset` and `reconstruction`.

    Example:

    >>> from keras_capsules.visualization import build_explorer
    >>> app = build_explorer(model, x_test[:100], y_test[:100])  # doctest: +SKIP
    >>> app.launch(server_name="127.0.0.1")  # doctest: +SKIP
    """
    import gradio as gr

    session = _Session(model)
    height, width, _ = model.image_shape
    if images is not None:
        images = _common.check_images(model, images, name="images")
        images = np.round(images).astype("uint8")  # checked to lie in [0, 255]
        labels = _common.check_labels(model, labels, len(images))
    _, blank_poses, _ = session.encode(np.zeros(model.image_shape, "float32"))
    capsule_dim = blank_poses.shape[-1]
    pick, draw, perturb = _callbacks(gr, session, model, images, capsule_dim)

    # Uploads and shown images older than 10 minutes are deleted every 10 minutes;
    # `launch_explorer` removes the rest with its own folder when it stops.
    with gr.Blocks(title=title, analytics_enabled=False, delete_cache=(600, 600)) as app:
        gr.Markdown(
            f"# {title}\n"
            "Pick a test digit or draw one. The bars are the class capsules' lengths; "
            "the sliders add to one dimension each of the chosen capsule (the longest "
            "by default), and the reconstruction is decoded from that capsule alone."
        )
        poses_state = gr.State(None)
        with gr.Row():
            index, label_box, sketch, use_drawing, input_view = _input_column(
                gr, images, labels, height, width
            )
            lengths, capsule, reconstruction = _capsule_column(gr, session, model.num_classes)
            sliders, reset = _slider_column(gr, capsule_dim)

        shown = [input_view, lengths, poses_state, capsule, *sliders, reconstruction]
        if images is not None:
            index.change(pick, index, shown, show_progress="hidden", trigger_mode="always_last")
            app.load(pick, index, shown, show_progress="hidden")
            if labels is not None:
                names = session.class_names
                last = len(images) - 1
                describe = lambda i: f"label: **{names[labels[min(int(i), last)]]}**"  # noqa: E731
                index.change(describe, index, label_box, show_progress="hidden")
                app.load(describe, index, label_box, show_progress="hidden")
        use_drawing.click(draw, sketch, shown, show_progress="hidden")
        inputs = [poses_state, capsule, *sliders]
        for control in (capsule, *sliders):
            control.change(
                perturb, inputs, reconstruction, show_progress="hidden", trigger_mode="always_last"
            )
        reset.click(lambda: [0.0] * capsule_dim, None, sliders, show_progress="hidden")
    return app


def _callbacks(gr, session, model, images, capsule_dim):
    """The page's functions `(pick, draw, perturb)`: a test image, a drawing, the sliders."""

    def show_image(image):
        """Encode `image`: input view, lengths, capsule choice, sliders at 0, reconstruction."""
        lengths, poses, winner = session.encode(image)
        zeros = [0.0] * capsule_dim
        return (
            _display(image),
            lengths,
            poses.tolist(),
            gr.update(value=str(winner)),
            *zeros,
            _display(session.decode(poses, winner, zeros)),
        )

    def pick(index):
        return show_image(images[min(int(index), len(images) - 1)])

    def draw(drawing):
        image = prepare_drawing(drawing, model.image_shape)
        if image is None:
            raise gr.Error("Draw a digit first.")
        return show_image(image)

    def perturb(poses, capsule, *deltas):
        if poses is None:
            return None
        return _display(session.decode(np.asarray(poses), int(capsule), deltas))

    return pick, draw, perturb


def _input_column(gr, images, labels, height, width):
    """The first column: `(index, label_box, sketch, use_drawing, input_view)`.

    `index` (the test image slider) and `label_box` are `None` without `images`.
    """
    index = label_box = None
    with gr.Column(scale=1):
        if images is not None:
            caption = "Test image" if labels is None else "Test image (label below)"
            # Gradio wants a range: one image gets a slider to 1, read as image 0.
            top = max(len(images) - 1, 1)
            index = gr.Slider(0, top, value=0, step=1, label=caption, elem_id="index")
            label_box = gr.Markdown(elem_id="label")
        sketch = gr.Sketchpad(
            label="…or draw a digit",
            canvas_size=(CANVAS_SIZE, CANVAS_SIZE),
            elem_id="sketch",
            type="numpy",
        )
        _bound_sketchpad(gr, sketch)
        use_drawing = gr.Button("Use the drawing", elem_id="use-drawing")
        input_view = gr.Image(
            label=f"Input ({height}x{width})",
            elem_id="input",
            interactive=False,
            format="png",
        )
    return index, label_box, sketch, use_drawing, input_view


def _capsule_column(gr, session, num_classes):
    """The second column: `(lengths, capsule, reconstruction)`."""
    with gr.Column(scale=1):
        lengths = gr.Label(
            label="Class capsule lengths (the probability that each digit is present)",
            num_top_classes=num_classes,
            elem_id="lengths",
        )
        capsule = gr.Dropdown(
            [(name, str(index)) for index, name in enumerate(session.class_names)],
            value="0",
            label="Capsule to perturb",
            elem_id="capsule",
        )
        reconstruction = gr.Image(
            label="Reconstruction",
            elem_id="reconstruction",
            interactive=False,
            format="png",
        )
    return lengths, capsule, reconstruction


def _slider_column(gr, capsule_dim):
    """The third column: `(sliders, reset)`, one slider per capsule dimension."""
    with gr.Column(scale=1):
        sliders = [
            gr.Slider(
                -SLIDER_RANGE,
                SLIDER_RANGE,
                value=0.0,
                step=SLIDER_STEP,
                label=f"dimension {d}",
                elem_id=f"dim-{d}",
            )
            for d in range(capsule_dim)
        ]
        reset = gr.Button("Reset the sliders", elem_id="reset")
    return sliders, reset


def launch_explorer(
    model, images=None, labels=None, host="127.0.0.1", port=7860, open_browser=False, block=True
):
    """Serve `build_explorer(model, images, labels)` on `host:port` (loopback by default).

    Uploads above `MAX_UPLOAD_SIZE` (2 MiB) are refused by Gradio, and drawings
    larger than `MAX_DRAWING_SIZE` pixels on a side from their header.

    The uploaded drawings and the images the page shows are written to a
    folder of this run's own, `keras-capsules-explore-*` inside Gradio's
    upload folder (`GRADIO_TEMP_DIR`, or `gradio` in the system's temporary
    folder), and the folder is removed when the explorer stops: with
    `block=True` on Ctrl-C, on SIGTERM (from the main thread) or on an error,
    with `block=False` on `app.close()` or at the interpreter's exit. Other
    files in Gradio's upload folder are left alone.

    Args:
        model: a capsule network with a decoder.
        images: test images to pick from.
        labels: their classes.
        host: interface to bind; `"127.0.0.1"` keeps the page on this machine.
        port: TCP port (7860, Gradio's).
        open_browser: open the page in the default browser.
        block: serve until interrupted (True), or return at once.

    Returns:
        The launched `gradio.Blocks`; `app.close()` stops it.
    """
    from gradio.utils import get_upload_folder

    options = dict(host=host, port=port, open_browser=open_browser)
    if not block:
        folder = _new_folder(get_upload_folder())
        try:
            app = _launch(model, images, labels, folder, **options)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        return _remove_on_close(app, folder)
    stop = threading.Event()
    app = None
    with _on_sigterm(stop.set):
        folder = _new_folder(get_upload_folder())
        try:
            app = _launch(model, images, labels, folder, **options)
            with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C stops the explorer
                while app.is_running and not stop.wait(0.1):
                    pass
        finally:
            if app is not None:
                app.close()
            shutil.rmtree(folder, ignore_errors=True)
    return app


def _new_folder(parent):
    """A new empty folder `keras-capsules-explore-*` in `parent`, made if missing."""
    os.makedirs(parent, exist_ok=True)
    return tempfile.mkdtemp(prefix="keras-capsules-explore-", dir=parent)


def _launch(model, images, labels, folder, host, port, open_browser):
    """Build and launch the explorer without blocking, its files going to `folder`.

    Gradio's components and server read `GRADIO_TEMP_DIR` when they are made,
    so it names `folder` while they are, and is restored afterwards. `folder`
    lies inside the upload folder Gradio reads later, which accepts its files.
    """
    with _environment("GRADIO_TEMP_DIR", folder):
        app = build_explorer(model, images, labels)
        app.launch(
            server_name=host,
            server_port=port,
            inbrowser=open_browser,
            share=False,
            prevent_thread_lock=True,
            show_error=True,
            quiet=False,
            footer_links=[],
            max_file_size=MAX_UPLOAD_SIZE,
        )
    return app


def _remove_on_close(app, folder):
    """Make `app.close()`, or the interpreter's exit, remove `folder` after the server stops."""
    import atexit

    close = app.close

    def close_and_remove(verbose=True):
        try:
            close(verbose)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    app.close = close_and_remove
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return app


@contextlib.contextmanager
def _environment(name, value):
    """Set the environment variable `name` to `value` inside the block, then restore it."""
    previous = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = previous


@contextlib.contextmanager
def _on_sigterm(callback):
    """Call `callback()` on SIGTERM inside the block, instead of dying at once.

    Outside the main thread, where Python cannot set signal handlers, SIGTERM is left alone.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: callback())
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)

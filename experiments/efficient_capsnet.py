"""Efficient-CapsNet on MNIST or Fashion-MNIST with the paper's schedule, within a budget.

Trains `applications.EfficientCapsNet` with the paper's schedule (batches of
16, Adam from 5e-4 decaying by 0.97 per epoch, as the model compiles itself)
on the 60,000 training images with the official code's augmentation, done in
NumPy (`augment`): a random rotation (angle ~ N(0, 10 degrees), clipped to 30
degrees, on half the images), a random shift within each image's empty
margin, and a 4x4 patch erased at random. The official code also squeezes the
width of some digits (its `image_squish_random`); that one is left out.
Evaluates on the 10,000 test images after every `--eval-every` epochs and
prints one JSON line per evaluation to stdout (and to `--log`), then a final
JSON object: the best and last test accuracy, seconds per epoch, the device.

The next epoch's images are augmented in a background thread while the
current epoch trains. `--steps-per-execution` runs that many steps per
compiled call (the model is small: at batch 16 the accelerator otherwise
waits on the host).

    python experiments/efficient_capsnet.py --data mnist --epochs 150
    KERAS_BACKEND=jax python experiments/efficient_capsnet.py --data fashion_mnist \\
        --minutes 8 --steps-per-execution 125

Smoke test:

    python experiments/efficient_capsnet.py --epochs 1 --train-size 320 --test-size 100
"""

import argparse
import concurrent.futures
import json
import math
import time

import numpy as np
from _training import device
from _training import log


def _margins(images):
    """Per image, the empty rows above/below and columns left/right of its ink: (n, 4)."""
    rows = images.max(axis=2) > 0
    cols = images.max(axis=1) > 0
    size = images.shape[1]
    top = np.where(rows.any(1), rows.argmax(1), 0)
    bottom = np.where(rows.any(1), rows[:, ::-1].argmax(1), 0)
    left = np.where(cols.any(1), cols.argmax(1), 0)
    right = np.where(cols.any(1), cols[:, ::-1].argmax(1), 0)
    del size
    return np.stack([top, bottom, left, right], axis=1)


def _warp(images, angles, dy, dx):
    """Rotate each image by `angles` (radians) about its centre, then shift it by (dy, dx).

    Bilinear, zero outside; OpenCV's `warpAffine` where it is installed, else NumPy.
    """
    n, height, width = images.shape
    cy, cx = (height - 1) / 2.0, (width - 1) / 2.0
    try:
        import cv2
    except ImportError:
        cv2 = None
    if cv2 is not None:
        out = np.empty_like(images)
        for i in range(n):
            matrix = cv2.getRotationMatrix2D((cx, cy), float(np.degrees(angles[i])), 1.0)
            matrix[:, 2] += (dx[i], dy[i])
            out[i] = cv2.warpAffine(images[i], matrix, (width, height), flags=cv2.INTER_LINEAR)
        return out
    # Output pixel (y, x) reads the input at R^-1 ((y, x) - c - d) + c.
    ys, xs = np.meshgrid(
        np.arange(height, dtype=np.float32), np.arange(width, dtype=np.float32), indexing="ij"
    )
    cos = np.cos(angles).astype(np.float32)[:, None, None]
    sin = np.sin(angles).astype(np.float32)[:, None, None]
    ry = ys[None] - cy - dy.astype(np.float32)[:, None, None]
    rx = xs[None] - cx - dx.astype(np.float32)[:, None, None]
    src_y = cos * ry - sin * rx + cy
    src_x = sin * ry + cos * rx + cx
    y0, x0 = np.floor(src_y), np.floor(src_x)
    wy, wx = src_y - y0, src_x - x0
    y0, x0 = y0.astype(np.int32), x0.astype(np.int32)
    flat = images.reshape(n, -1)
    out = np.zeros((n, height, width), np.float32)
    for oy, ox, weight in (
        (0, 0, (1 - wy) * (1 - wx)),
        (0, 1, (1 - wy) * wx),
        (1, 0, wy * (1 - wx)),
        (1, 1, wy * wx),
    ):
        yy, xx = y0 + oy, x0 + ox
        inside = (yy >= 0) & (yy < height) & (xx >= 0) & (xx < width)
        index = (np.clip(yy, 0, height - 1) * width + np.clip(xx, 0, width - 1)).reshape(n, -1)
        values = np.take_along_axis(flat, index, axis=1).reshape(n, height, width)
        out += np.where(inside, values, 0.0) * weight
    return out


def augment(images, rng, max_angle=30.0, patch=4):
    """The official code's MNIST augmentation in NumPy: rotate, shift, erase a patch.

    Args:
        images: float32 `(n, height, width)` in [0, 255].
        rng: a `numpy.random.Generator`.

    Returns:
        Augmented float32 images of the same shape.
    """
    n, height, width = images.shape
    # Rotation about the centre (on about half of the images) and a shift
    # drawn as a fraction of the empty margin in a random direction.
    amounts = np.clip(rng.normal(0.0, 0.33, size=n), -0.9999, 0.9999)
    angles = np.where(rng.random(n) > 0.5, 0.0, amounts * max_angle) * np.pi / 180.0
    margins = _margins(images)
    fractions = np.minimum(np.abs(rng.normal(0.0, 0.33, size=(n, 2))), 0.9999)
    down = rng.random(n) < 0.5
    right = rng.random(n) < 0.5
    dy = np.where(
        down, np.floor(fractions[:, 0] * margins[:, 1]), -np.floor(fractions[:, 0] * margins[:, 0])
    )
    dx = np.where(
        right, np.floor(fractions[:, 1] * margins[:, 3]), -np.floor(fractions[:, 1] * margins[:, 2])
    )
    ys, xs = np.meshgrid(np.arange(height), np.arange(width), indexing="ij")
    out = _warp(images, angles, dy, dx)
    # Erase a patch x patch square at a random place away from the border.
    py = rng.integers(4, height - 4 - patch + 1, size=n)
    px = rng.integers(4, width - 4 - patch + 1, size=n)
    erase = (
        (ys[None] >= py[:, None, None])
        & (ys[None] < py[:, None, None] + patch)
        & (xs[None] >= px[:, None, None])
        & (xs[None] < px[:, None, None] + patch)
    )
    out[erase] = 0.0
    return out


def _augment_in_chunks(images, seed, chunk=10000):
    rng = np.random.default_rng(seed)
    return np.concatenate(
        [augment(images[i : i + chunk], rng) for i in range(0, len(images), chunk)]
    )


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", choices=("mnist", "fashion_mnist"), default="mnist")
    parser.add_argument("--epochs", type=int, default=150)
    parser.add_argument("--minutes", type=float, default=math.inf, help="wall-clock budget")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--steps-per-execution", type=int, default=1)
    parser.add_argument("--eval-every", type=int, default=1)
    parser.add_argument("--train-size", type=int, default=60000)
    parser.add_argument("--test-size", type=int, default=10000)
    parser.add_argument("--no-augment", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log", default=None, help="also append each JSON line to this file")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    import keras

    import applications
    from keras_capsules import datasets

    keras.utils.set_random_seed(args.seed)
    (x, y), (x_test, y_test) = getattr(datasets, args.data).load_data()
    x, y = x[: args.train_size].astype("float32"), y[: args.train_size]
    x_test, y_test = x_test[: args.test_size, ..., None], y_test[: args.test_size]
    steps_per_epoch = math.ceil(len(x) / args.batch_size)
    model = applications.EfficientCapsNet(compile=False)
    model.compile(
        optimizer=model.RECIPE.optimizer(steps_per_epoch),
        steps_per_execution=args.steps_per_execution,
    )

    def lines(record):
        text = json.dumps(record)
        print(text, flush=True)
        if args.log:
            with open(args.log, "a") as f:
                f.write(text + "\n")

    pool = concurrent.futures.ThreadPoolExecutor(1)
    prepare = (
        (lambda epoch: x)
        if args.no_augment
        else (lambda epoch: _augment_in_chunks(x, seed=args.seed * 1000 + epoch))
    )
    upcoming = pool.submit(prepare, 0)
    start = time.perf_counter()
    budget = args.minutes * 60.0
    history, epoch_seconds = [], []
    for epoch in range(args.epochs):
        images = upcoming.result()
        if epoch + 1 < args.epochs:
            upcoming = pool.submit(prepare, epoch + 1)
        began = time.perf_counter()
        logs = model.fit(
            images[..., None],
            y,
            batch_size=args.batch_size,
            epochs=epoch + 1,
            initial_epoch=epoch,
            shuffle=True,
            verbose=0,
        ).history
        epoch_seconds.append(time.perf_counter() - began)
        record = {"epoch": epoch + 1, "seconds": round(epoch_seconds[-1], 2)}
        record.update({k: round(float(v[-1]), 5) for k, v in logs.items()})
        if (epoch + 1) % args.eval_every == 0 or epoch + 1 == args.epochs:
            scores = model.evaluate(x_test, y_test, batch_size=500, verbose=0, return_dict=True)
            record["test_accuracy"] = round(float(scores["accuracy"]), 5)
            history.append(record["test_accuracy"])
        lines(record)
        elapsed = time.perf_counter() - start
        if elapsed + 1.2 * max(epoch_seconds[-3:]) > budget:
            log(f"stopping after epoch {epoch + 1}: {elapsed:.0f} s of the {budget:.0f} s budget")
            break
    pool.shutdown(cancel_futures=True)
    if not history:
        scores = model.evaluate(x_test, y_test, batch_size=500, verbose=0, return_dict=True)
        history.append(round(float(scores["accuracy"]), 5))
    result = {
        "experiment": "efficient_capsnet",
        "data": args.data,
        "backend": keras.backend.backend(),
        "device": device(),
        "epochs_run": len(epoch_seconds),
        "epochs_planned": args.epochs,
        "batch_size": args.batch_size,
        "augment": not args.no_augment,
        "train_size": len(x),
        "test_size": len(x_test),
        "best_test_accuracy": max(history),
        "last_test_accuracy": history[-1],
        "seconds_per_epoch_median": round(float(np.median(epoch_seconds)), 2),
        "seconds_first_epoch": round(epoch_seconds[0], 2),
        "trainable_parameters_classifier": int(
            sum(np.prod(w.shape) for w in model.trainable_weights if "decoder" not in w.path)
        ),
    }
    lines(result)
    return result


if __name__ == "__main__":
    main()

import numpy as np
import pytest

from keras_capsules.datasets import affine


@pytest.fixture(scope="module")
def digits(mnist_data):
    _, (x_test, y_test) = mnist_data
    return x_test[:300], y_test[:300]


def moments(images):
    """Centre of mass `(n, 2)` as (x, y) and covariance `(n, 2, 2)` of each image's ink."""
    a = np.asarray(images, np.float64)
    ys, xs = np.mgrid[0 : a.shape[1], 0 : a.shape[2]]
    mass = a.sum((1, 2))
    centre = np.stack([(a * xs).sum((1, 2)), (a * ys).sum((1, 2))], -1) / mass[:, None]
    d = np.stack([xs[None] - centre[:, :1, None], ys[None] - centre[:, 1:, None]], -1)
    covariance = np.einsum("nhw,nhwi,nhwj->nij", a, d, d) / mass[:, None, None]
    return centre, covariance


def find_offset(canvas, digit):
    """The (row, column) where `digit` lies on `canvas`, all else black; None if nowhere."""
    size = canvas.shape[0] - digit.shape[0] + 1
    for r in range(size):
        for c in range(size):
            crop = canvas[r : r + digit.shape[0], c : c + digit.shape[1]]
            if np.array_equal(crop, digit) and canvas.sum(dtype=np.int64) == digit.sum(
                dtype=np.int64
            ):
                return r, c
    return None


def test_expand_places_every_digit_intact_at_a_random_position(digits):
    x, _ = digits
    images, offsets = affine.expand(x, seed=0)
    assert images.shape == (300, 40, 40) and images.dtype == np.uint8
    assert offsets.min() == 0 and offsets.max() == 12  # the whole 13 x 13 range is used
    for image, digit, (r, c) in zip(images, x, offsets):
        np.testing.assert_array_equal(image[r : r + 28, c : c + 28], digit)
        assert image.sum(dtype=np.int64) == digit.sum(dtype=np.int64)  # nothing else drawn
    again, _ = affine.expand(x[..., None], seed=0)
    np.testing.assert_array_equal(again, images)
    other, other_offsets = affine.expand(x, seed=1)
    assert not np.array_equal(other_offsets, offsets)
    small, small_offsets = affine.expand(x, seed=0, canvas_size=30)
    assert small.shape == (300, 30, 30) and small_offsets.max() == 2


def test_place_rejects_offsets_off_the_canvas(digits):
    x, _ = digits
    with pytest.raises(ValueError, match="offsets"):
        affine.place(x[:2], np.array([[0, 0], [13, 0]]))
    with pytest.raises(ValueError, match="canvas_size"):
        affine.expand(x[:2], canvas_size=20)
    with pytest.raises(ValueError, match="seed"):
        affine.expand(x[:2], seed=-1)


def test_training_pipeline_streams_seeded_positions_new_each_epoch(digits):
    x, y = digits
    x, y = x[:40], y[:40]
    dataset = affine.training_pipeline(x, y, batch_size=20, shuffle=False, seed=3)
    first = [(i.numpy(), label.numpy()) for i, label in dataset]
    second = [i.numpy() for i, _ in dataset]
    images = np.concatenate([i for i, _ in first])
    assert images.shape == (40, 40, 40, 1) and images.dtype == np.float32
    np.testing.assert_array_equal(np.concatenate([label for _, label in first]), y)
    offsets = [
        find_offset(image[..., 0].astype(np.uint8), digit) for image, digit in zip(images, x)
    ]
    assert None not in offsets and len(set(offsets)) > 20
    assert not np.array_equal(np.concatenate(second), images)  # new positions every epoch
    rerun = affine.training_pipeline(x, y, batch_size=20, shuffle=False, seed=3)
    np.testing.assert_array_equal(np.concatenate([i.numpy() for i, _ in rerun]), images)
    shuffled = affine.training_pipeline(x, y, batch_size=40, seed=3)
    labels = next(iter(shuffled))[1].numpy()
    assert sorted(labels.tolist()) == sorted(y.tolist()) and not np.array_equal(labels, y)


def test_affine_matrices_follow_the_documented_conventions():
    # 90 degrees counter-clockwise on the screen (rows grow downwards): right -> up.
    a = affine.affine_matrices([90.0], [0.0], [[1.0, 1.0]])[0]
    np.testing.assert_allclose(a @ [1.0, 0.0], [0.0, -1.0], atol=1e-12)
    sheared = affine.affine_matrices([0.0], [0.2], [[1.0, 1.0]])[0]
    np.testing.assert_allclose(sheared @ [0.0, 1.0], [0.2, 1.0])
    scaled = affine.affine_matrices([0.0], [0.0], [[0.8, 1.2]])[0]
    np.testing.assert_allclose(scaled, np.diag([0.8, 1.2]))


def test_random_affine_draws_in_the_affnist_ranges_and_keeps_the_digit_on_the_canvas(digits):
    x, y = digits
    out = affine.affnist_test_set(x, y, seed=0)
    assert out["images"].shape == (300, 40, 40) and out["images"].dtype == np.uint8
    np.testing.assert_array_equal(out["labels"], y)
    for name, (low, high) in affine.AFFNIST_RANGES.items():
        values = out[name]
        assert values.min() >= low and values.max() <= high
        assert values.min() < low + 0.1 * (high - low) and values.max() > high - 0.1 * (high - low)
    images = out["images"]
    border = np.concatenate([images[:, 0], images[:, -1], images[:, :, 0], images[:, :, -1]], 1)
    assert border.max() == 0  # the whole digit is on the canvas
    # Areas scale by det(A) = sx * sy: no ink is lost or clipped.
    ratio = images.sum((1, 2), dtype=np.float64) / x.sum((1, 2), dtype=np.float64)
    np.testing.assert_allclose(ratio, out["scale"].prod(1), rtol=0.05)
    # The ink's centre of mass and covariance move as the returned matrices say.
    matrices = out["matrices"]
    linear, offset = matrices[:, :, :2], matrices[:, :, 2]
    centre, covariance = moments(x)
    new_centre, new_covariance = moments(images)
    np.testing.assert_allclose(
        new_centre, np.einsum("nij,nj->ni", linear, centre) + offset, atol=0.5
    )
    expected = linear @ covariance @ linear.transpose(0, 2, 1)
    assert np.all(
        np.abs(new_covariance - expected).max((1, 2)) < 0.05 * np.abs(expected).max((1, 2))
    )
    # The digits spread over the canvas: centres far from the middle in every direction.
    assert new_centre.min() < 12 and new_centre.max() > 27


def _bilinear(images, points):
    """NumPy bilinear sampling of `(n, h, w)` images at `(n, m, 2)` (x, y) points; zero outside."""
    n, height, width = images.shape
    padded = np.pad(images.astype(np.float64), ((0, 0), (1, 1), (1, 1)))
    x = np.clip(points[..., 0], -1.0, width) + 1.0
    y = np.clip(points[..., 1], -1.0, height) + 1.0
    x0 = np.minimum(np.floor(x).astype(np.int64), width)
    y0 = np.minimum(np.floor(y).astype(np.int64), height)
    fx, fy = x - x0, y - y0
    batch = np.arange(n)[:, None]

    def at(yy, xx):
        return padded[batch, yy, xx]

    top = at(y0, x0) * (1 - fx) + at(y0, x0 + 1) * fx
    bottom = at(y0 + 1, x0) * (1 - fx) + at(y0 + 1, x0 + 1) * fx
    return top * (1 - fy) + bottom * fy


def test_random_affine_samples_the_digits_as_its_matrices_say(digits):
    """Every canvas pixel is the bilinear sample of the source at the inverse map (NumPy)."""
    x, _ = digits
    out = affine.random_affine(x, seed=3)
    size = out["images"].shape[1]
    linear, offset = out["matrices"][:, :, :2], out["matrices"][:, :, 2]
    grid_y, grid_x = np.mgrid[0:size, 0:size]
    grid = np.stack([grid_x.ravel(), grid_y.ravel()], -1).astype(np.float64)
    points = np.einsum("nij,nmj->nmi", np.linalg.inv(linear), grid[None] - offset[:, None])
    expected = np.clip(np.rint(_bilinear(x, points)), 0, 255).reshape(-1, size, size)
    difference = np.abs(out["images"].astype(int) - expected.astype(int))
    # float32 against float64: a value within rounding of .5 may round the other way.
    assert difference.max() <= 1 and (difference > 0).mean() < 1e-4


def test_random_affine_is_deterministic_for_a_seed(digits):
    x, _ = digits
    a = affine.random_affine(x[:50], seed=5)
    b = affine.random_affine(x[:50], seed=5)
    c = affine.random_affine(x[:50], seed=6)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    assert not np.array_equal(a["images"], c["images"])


def test_identity_ranges_give_the_digit_translated():
    digit = np.zeros((1, 28, 28), np.uint8)
    digit[0, 8:20, 12:16] = 200
    out = affine.random_affine(digit, seed=0, rotation=(0, 0), shear=(0, 0), scale=(1, 1))
    np.testing.assert_allclose(out["matrices"][0, :, :2], np.eye(2), atol=1e-12)
    assert abs(int(out["images"].sum()) - int(digit.sum())) <= 0.02 * int(digit.sum())


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"scale": (0.0, 1.0)}, "scale"),
        ({"rotation": (10, -10)}, "rotation"),
        ({"seed": 1.5}, "seed"),
    ],
)
def test_random_affine_bad_arguments(digits, kwargs, match):
    with pytest.raises(ValueError, match=match):
        affine.random_affine(digits[0][:2], **kwargs)

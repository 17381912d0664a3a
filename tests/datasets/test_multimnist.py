import numpy as np
import pytest

from keras_capsules.datasets import multimnist


def place(digit, dy, dx):
    """NumPy reference of one shifted digit: a 36x36 canvas with the digit at (4 + dy, 4 + dx)."""
    canvas = np.zeros((36, 36), np.int32)
    canvas[4 + dy : 32 + dy, 4 + dx : 32 + dx] = digit
    return canvas


def bounding_box(image):
    rows, cols = np.nonzero(image)
    return rows.min(), cols.min()


@pytest.fixture(scope="module")
def split(mnist_data):
    _, (x_test, y_test) = mnist_data
    return x_test[:300], y_test[:300]


@pytest.mark.parametrize("rule", ["sum", "max"])
def test_overlay_of_two_known_digits_matches_the_numpy_reference(mnist_data, rule):
    (x_train, y_train), _ = mnist_data
    assert (y_train[0], y_train[1]) == (5, 0)
    shifts = np.array([[[-4, 3], [2, -1]], [[4, 4], [-4, -4]]])
    indices = np.array([[0, 1], [1, 0]])
    images, digits = multimnist.overlay(x_train, indices, shifts, rule=rule)
    assert images.shape == (2, 36, 36) and images.dtype == np.uint8
    assert digits.shape == (2, 2, 36, 36)
    for k in range(2):
        a = place(x_train[indices[k, 0]], *shifts[k, 0])
        b = place(x_train[indices[k, 1]], *shifts[k, 1])
        np.testing.assert_array_equal(digits[k, 0], a)
        np.testing.assert_array_equal(digits[k, 1], b)
        expected = np.minimum(a + b, 255) if rule == "sum" else np.maximum(a, b)
        np.testing.assert_array_equal(images[k], expected)
    # The digits overlap, so the clipped sum saturates where the max does not.
    if rule == "sum":
        assert (images == 255).sum() > (np.maximum(digits[:, 0], digits[:, 1]) == 255).sum()


def test_pairs_have_two_classes_bounded_shifts_and_visit_every_digit(split):
    _, y = split
    indices, shifts = multimnist.pairs(y, pairs_per_digit=4, seed=0)
    n = len(y)
    assert indices.shape == (4 * n, 2) and shifts.shape == (4 * n, 2, 2)
    assert np.all(y[indices[:, 0]] != y[indices[:, 1]])
    assert shifts.min() == -4 and shifts.max() == 4
    for p in range(4):  # every pass uses each digit once as the base, in a new order
        base = indices[p * n : (p + 1) * n, 0]
        np.testing.assert_array_equal(np.sort(base), np.arange(n))
    assert not np.array_equal(indices[:n, 0], indices[n : 2 * n, 0])
    # Partners of a class-0 base come from all nine other classes.
    partners = y[indices[y[indices[:, 0]] == 0, 1]]
    assert set(partners.tolist()) == set(range(1, 10))


def test_same_seed_same_pairs_different_seed_different(split):
    _, y = split
    a = multimnist.pairs(y, pairs_per_digit=2, seed=7)
    b = multimnist.pairs(y, pairs_per_digit=2, seed=7)
    c = multimnist.pairs(y, pairs_per_digit=2, seed=8)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert not np.array_equal(a[0], c[0]) and not np.array_equal(a[1], c[1])


def test_test_set_is_fixed_and_consistent(split):
    x, y = split
    test = multimnist.test_set(x, y, pairs_per_digit=2, seed=1)
    again = multimnist.test_set(x, y, pairs_per_digit=2, seed=1)
    for key, value in test.items():
        np.testing.assert_array_equal(value, again[key])
    m = 2 * len(x)
    assert test["images"].shape == (m, 36, 36) and test["images"].dtype == np.uint8
    assert test["digits"].shape == (m, 2, 36, 36)
    np.testing.assert_array_equal(test["labels"], y[test["indices"]])
    assert np.all(test["labels"][:, 0] != test["labels"][:, 1])
    assert np.all(test["multi_hot"].sum(1) == 2)
    rows = np.arange(m)
    assert np.all(test["multi_hot"][rows, test["labels"][:, 0]] == 1)
    assert np.all(test["multi_hot"][rows, test["labels"][:, 1]] == 1)
    combined = np.minimum(test["digits"][:, 0].astype(int) + test["digits"][:, 1], 255)
    np.testing.assert_array_equal(test["images"], combined)
    # Each digit is whole on the canvas and moved by its shift from the centred position.
    for k in range(0, m, 37):
        for d in range(2):
            source = x[test["indices"][k, d]]
            assert test["digits"][k, d].astype(int).sum() == source.astype(int).sum()
            top, left = bounding_box(test["digits"][k, d])
            top0, left0 = bounding_box(source)
            dy, dx = test["shifts"][k, d]
            assert (top - top0 - 4, left - left0 - 4) == (dy, dx)
            assert -4 <= dy <= 4 and -4 <= dx <= 4


def test_pipeline_streams_the_test_set_examples(split):
    x, y = split
    test = multimnist.test_set(x, y, pairs_per_digit=2, seed=3)
    dataset = multimnist.training_pipeline(
        x, y, batch_size=128, pairs_per_digit=2, seed=3, as_dict=True
    )
    assert int(dataset.cardinality()) == -(-2 * len(x) // 128)
    batches = [{k: v.numpy() for k, v in batch.items()} for batch in dataset]
    first = batches[0]
    assert first["images"].shape == (128, 36, 36, 1) and first["images"].dtype == np.float32
    assert first["digits"].shape == (128, 2, 36, 36, 1) and first["digits"].dtype == np.float32
    assert first["labels"].shape == (128, 2) and first["labels"].dtype == np.int32
    assert first["multi_hot"].shape == (128, 10) and first["multi_hot"].dtype == np.float32
    stream = {k: np.concatenate([b[k] for b in batches]) for k in first}
    np.testing.assert_array_equal(stream["images"][..., 0], test["images"])
    np.testing.assert_array_equal(stream["digits"][..., 0], test["digits"])
    np.testing.assert_array_equal(stream["labels"], test["labels"])
    np.testing.assert_array_equal(stream["multi_hot"], test["multi_hot"])


@pytest.mark.parametrize("start", [1, 37, 300])
def test_pipeline_from_start_yields_the_rest_of_the_stream(split, start):
    x, y = split
    test = multimnist.test_set(x, y, pairs_per_digit=3, seed=3)
    dataset = multimnist.training_pipeline(
        x, y, batch_size=50, pairs_per_digit=3, seed=3, as_dict=True, start=start
    )
    assert int(dataset.cardinality()) == -(-(3 * len(x) - start) // 50)
    labels = np.concatenate([batch["labels"].numpy() for batch in dataset])
    images = np.concatenate([batch["images"].numpy()[..., 0] for batch in dataset])
    np.testing.assert_array_equal(labels, test["labels"][start:])
    np.testing.assert_array_equal(images, test["images"][start:])
    with pytest.raises(ValueError, match="`start`"):
        multimnist.training_pipeline(x, y, pairs_per_digit=3, start=3 * len(x))


def test_pipeline_is_deterministic_per_seed_and_fit_ready(split):
    x, y = split

    def first_batch(seed, rule="sum"):
        dataset = multimnist.training_pipeline(x, y, 64, pairs_per_digit=1, seed=seed, rule=rule)
        images, targets = next(iter(dataset))
        return images.numpy(), targets.numpy()

    a, b, c = first_batch(5), first_batch(5), first_batch(6)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert not np.array_equal(a[0], c[0])
    assert a[0].shape == (64, 36, 36, 1) and a[1].shape == (64, 10)
    assert np.all(a[1].sum(1) == 2) and a[0].max() <= 255
    maximum = first_batch(5, rule="max")[0]
    assert np.all(maximum <= a[0]) and np.any(maximum < a[0])
    dropped = multimnist.training_pipeline(x, y, 128, 1, seed=0, drop_remainder=True)
    assert int(dropped.cardinality()) == len(x) // 128


def test_paper_scale_stream_needs_no_materialisation(mnist_data):
    (x_train, y_train), _ = mnist_data
    dataset = multimnist.training_pipeline(x_train, y_train, batch_size=100, pairs_per_digit=1000)
    assert int(dataset.cardinality()) == 600_000  # 60M examples
    images, targets = next(iter(dataset))
    assert images.shape == (100, 36, 36, 1) and targets.shape == (100, 10)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"pairs_per_digit": 0}, "pairs_per_digit"),
        ({"seed": -1}, "seed"),
        ({"seed": 1.5}, "seed"),
        ({"rule": "mean"}, "rule"),
        ({"batch_size": 0}, "batch_size"),
        ({"num_classes": 1}, "num_classes"),
    ],
)
def test_invalid_arguments_are_named(split, kwargs, name):
    x, y = split
    with pytest.raises(ValueError, match=name):
        multimnist.training_pipeline(x, y, **kwargs)


def test_invalid_data_is_rejected(split):
    x, y = split
    with pytest.raises(ValueError, match="two classes"):
        multimnist.pairs(np.zeros(10, int), pairs_per_digit=1)
    with pytest.raises(ValueError, match="differ in length"):
        multimnist.test_set(x, y[:-1])
    with pytest.raises(ValueError, match="`x`"):
        multimnist.test_set(x[:, :, :, None, None], y)
    with pytest.raises(ValueError, match=r"`y`.*\[0, 10\)"):
        multimnist.test_set(x, y + 10)
    with pytest.raises(ValueError, match="shifts"):
        multimnist.overlay(x, np.array([[0, 1]]), np.full((1, 2, 2), 5))
    with pytest.raises(ValueError, match="indices"):
        multimnist.overlay(x, np.array([[0, len(x)]]), np.zeros((1, 2, 2), int))

import keras
import numpy as np
import pytest

import applications
from keras_capsules.datasets import multimnist
from keras_capsules.visualization import PAPER_STEPS
from keras_capsules.visualization import couplings
from keras_capsules.visualization import multimnist_reconstructions
from keras_capsules.visualization import multimnist_successes_and_failures
from keras_capsules.visualization import perturbation_grid
from keras_capsules.visualization import perturbations
from keras_capsules.visualization import reconstruction_grid
from keras_capsules.visualization import routing_heatmap
from keras_capsules.visualization import routing_statistics_plot
from keras_capsules.visualization.perturbation import GAP
from tests._references import dynamic_routing as numpy_procedure_1
from tests._references import swap_parents_and_children

matplotlib_image = pytest.importorskip("matplotlib.image")


def tiny(input_shape=(28, 28, 1), decoder_units=(32,)):
    keras.utils.set_random_seed(0)
    return applications.CapsNet(
        input_shape=input_shape,
        conv_filters=16,
        primary_capsule_types=4,
        capsule_dim=16,
        decoder_units=decoder_units,
        compile=False,
    )


@pytest.fixture(scope="module")
def model():
    return tiny()


@pytest.fixture(scope="module")
def digits(mnist_data):
    _, (x_test, y_test) = mnist_data
    return x_test[:4], y_test[:4]


def images_of(figure):
    """The arrays drawn by imshow, axis by axis (colour bars have none)."""
    return [ax.images[0].get_array() for ax in figure.axes if ax.images]


def check_png(path, figure, cell_shape):
    assert path.exists()
    png = matplotlib_image.imread(path)
    width, height = figure.get_size_inches() * figure.dpi
    assert png.shape[:2] == (round(height), round(width)) == cell_shape
    assert png.var() > 0
    assert len(np.unique(png.reshape(-1, png.shape[-1]), axis=0)) > 1


def test_reconstruction_grid_draws_inputs_over_reconstructions(model, digits, tmp_path):
    x, y = digits
    figure = reconstruction_grid(model, x, path=tmp_path / "a" / "rec.png", dpi=50)
    check_png(tmp_path / "a" / "rec.png", figure, (100, 200))
    drawn = images_of(figure)
    assert len(drawn) == 8
    np.testing.assert_allclose(drawn[0], x[0] / 255.0, atol=1e-6)
    expected = model.reconstruct(x)[..., 0]
    np.testing.assert_allclose(np.stack(drawn[4:]), expected, atol=1e-5)  # bottom row
    figure = reconstruction_grid(model, x[..., None], labels=y)
    poses = model.predict(x, verbose=0)["poses"]
    np.testing.assert_allclose(
        np.stack(images_of(figure)[4:]), model.decode(poses, labels=y)[..., 0], atol=1e-5
    )


def test_perturbation_grid_is_the_papers_figure(model, digits, tmp_path):
    x, _ = digits
    figure = perturbation_grid(model, x[0], path=tmp_path / "dims.png", cell_inches=0.5, dpi=40)
    check_png(tmp_path / "dims.png", figure, (round((16 * 0.5 + 0.6) * 40), round(6.1 * 40)))
    mosaic = np.asarray(images_of(figure)[0])
    assert mosaic.shape == (16 * 30 - GAP, 11 * 30 - GAP)
    drawn = np.stack(
        [[mosaic[r * 30 : r * 30 + 28, c * 30 : c * 30 + 28] for c in range(11)] for r in range(16)]
    )
    np.testing.assert_allclose(PAPER_STEPS, np.linspace(-0.25, 0.25, 11), atol=1e-12)
    # The untweaked column decodes the winning capsule as it is.
    np.testing.assert_allclose(
        drawn[:, 5], np.repeat(model.reconstruct(x[:1])[..., 0], 16, 0), atol=1e-6
    )
    for row in drawn:  # every tweak of every dimension changes the decoded image
        flat = row.reshape(11, -1)
        gaps = np.abs(flat[:, None] - flat[None]).max(-1)
        assert np.all(gaps[~np.eye(11, dtype=bool)] > 0)


def test_perturbations_tweak_the_chosen_capsule_and_dims(model, digits):
    x, _ = digits
    images, label = perturbations(model, x[1], dims=[0, 15], steps=[-0.1, 0.0, 0.1], label=3)
    assert label == 3 and images.shape == (2, 3, 28, 28, 1)
    poses = model.predict(x[1:2], verbose=0)["poses"]
    tweaked = poses.copy()
    tweaked[0, 3, 15] += 0.1
    np.testing.assert_allclose(images[1, 2], model.decode(tweaked, labels=[3])[0], atol=1e-5)
    np.testing.assert_allclose(images[0, 1], model.decode(poses, labels=[3])[0], atol=1e-5)


def test_multimnist_reconstructions_colour_each_digit(mnist_data, tmp_path):
    _, (x_test, y_test) = mnist_data
    test = multimnist.test_set(x_test[:20], y_test[:20], seed=2)
    model = tiny(input_shape=(36, 36, 1))
    x, labels = test["images"][:3], test["labels"][:3]
    figure = multimnist_reconstructions(model, x, labels, path=tmp_path / "mm.png", dpi=60)
    check_png(tmp_path / "mm.png", figure, (120, 180))
    composite = np.stack(images_of(figure)[3:])
    assert composite.shape == (3, 36, 36, 3)
    poses = model.predict(x, verbose=0)["poses"]
    background = 0.3 * x / 255.0
    for channel in range(2):
        decoded = model.decode(poses, labels=labels[:, channel])[..., 0]
        np.testing.assert_allclose(composite[..., channel], np.maximum(decoded, background), 1e-5)
    np.testing.assert_allclose(composite[..., 2], background, atol=1e-6)
    same = multimnist_reconstructions(model, x, test["multi_hot"][:3])
    np.testing.assert_allclose(
        np.sort(np.stack(images_of(same)[3:])[..., :2], -1), np.sort(composite[..., :2], -1)
    )
    predicted = np.argsort(-model.predict(x, verbose=0)["probabilities"], -1)[:, :2]
    default = np.stack(images_of(multimnist_reconstructions(model, x))[3:])
    decoded = model.decode(poses, labels=predicted[:, 0])[..., 0]
    np.testing.assert_allclose(default[..., 0], np.maximum(decoded, background), atol=1e-5)


def test_figure_5_draws_successes_then_failures_titled_as_the_paper(mnist_data):
    _, (x_test, y_test) = mnist_data
    test = multimnist.test_set(x_test[:200], y_test[:200], seed=2)
    model = tiny(input_shape=(36, 36, 1))
    x, labels = test["images"], test["labels"]
    scores = model.predict(x, verbose=0)["probabilities"]
    top = np.argsort(-scores, -1)[:, :2]
    right = np.array([set(t) == set(lab) for t, lab in zip(top.tolist(), labels.tolist())])
    # Make the first examples successes: their labels are the model's two longest capsules.
    labels = labels.copy()
    labels[:3] = top[:3]
    right[:3] = True
    chosen = np.concatenate([np.flatnonzero(right)[:2], np.flatnonzero(~right)[:2]])
    figure = multimnist_successes_and_failures(model, x, labels, count=2)
    axes = figure.axes
    assert len(axes) == 8  # two rows of 2 successes and 2 failures
    inputs = [axes[i].get_title() for i in range(4)]
    assert inputs == [f"L:{labels[i, 0]},{labels[i, 1]}" for i in chosen]
    decoded = [axes[4 + i] for i in range(4)]
    assert [ax.get_title() for ax in decoded] == [f"R:{top[i, 0]},{top[i, 1]}" for i in chosen]
    colours = [ax.title.get_color() for ax in decoded]
    assert colours[2:] == ["red", "red"] and "red" not in colours[:2]
    with pytest.raises(ValueError, match="`count`"):
        multimnist_successes_and_failures(model, x, labels, count=0)


def test_couplings_match_procedure_1_on_the_primary_grid(model, digits):
    x, _ = digits
    maps = couplings(model, x[0])
    assert maps.shape == (6, 6, 10)
    np.testing.assert_allclose(maps.sum(-1), 1.0, atol=1e-5)
    primary = keras.Model(model.input, model.get_layer("digit_caps").input)(x[:1, ..., None])
    votes = keras.ops.convert_to_numpy(model.get_layer("digit_caps").votes(primary))
    votes = swap_parents_and_children(votes)
    _, expected = numpy_procedure_1(votes, iterations=3)
    expected = expected[0].reshape(6, 6, 4, 10)
    np.testing.assert_allclose(maps, expected.mean(2), atol=1e-5)
    np.testing.assert_allclose(couplings(model, x[0], reduce="sum"), expected.sum(2), atol=1e-4)


def test_routing_heatmap_panels(model, digits, tmp_path):
    x, _ = digits
    figure = routing_heatmap(model, x[0], path=tmp_path / "routing.png", dpi=50)
    check_png(tmp_path / "routing.png", figure, (2 * 70, 6 * 70))
    drawn = images_of(figure)
    assert len(drawn) == 11  # the input and one panel per class capsule
    maps = couplings(model, x[0])
    for k in range(10):
        np.testing.assert_allclose(drawn[k + 1], maps[..., k], atol=1e-7)
    assert np.ptp(maps) > 0  # routing made the couplings non-uniform
    predicted = int(np.argmax(model.predict(x[:1], verbose=0)["probabilities"]))
    single = images_of(routing_heatmap(model, x[0], classes="predicted"))
    assert len(single) == 2
    np.testing.assert_allclose(single[1], maps[..., predicted], atol=1e-7)


def test_routing_statistics_plot_draws_the_statistics(model, digits, tmp_path):
    from keras_capsules.diagnostics import routing_statistics

    x, y = digits
    x, y = np.concatenate([x, x[::-1]]), np.concatenate([y, y[::-1]])  # each class twice
    figure = routing_statistics_plot(model, x, labels=y, path=tmp_path / "stats.png", dpi=40)
    assert (tmp_path / "stats.png").exists() and len(figure.axes) == 3
    stats = routing_statistics(model, x, labels=y)["digit_caps"]
    entropy, activity, agreement = figure.axes
    counts = [patch.get_height() for patch in entropy.patches]
    assert sum(counts) == len(x) * stats["num_children"]  # every child of every image
    assert entropy.get_title().endswith(f"{stats['entropy'] / stats['max_entropy']:.3f}")
    heights = np.array([patch.get_height() for patch in activity.patches])
    assert len(heights) == stats["num_parents"] == 10
    assert np.mean(heights == 0) == stats["inactive_fraction"]
    lengths = np.linalg.norm(model.predict(x, verbose=0)["poses"], axis=-1)
    np.testing.assert_allclose(heights, np.mean(lengths >= 0.1, axis=0))
    # Two copies of one image send every child to the same parent.
    assert [patch.get_height() for patch in agreement.patches] == [1.0] * 4


def test_invalid_inputs_are_named(model, digits):
    x, _ = digits
    cases = [
        (lambda: reconstruction_grid(model, x[..., :20]), "`x`"),
        (lambda: reconstruction_grid(model, x * 2.0), r"\[0, 255\]"),
        (lambda: reconstruction_grid(model, x, labels=[1, 2]), "labels"),
        (lambda: reconstruction_grid(model, x, labels=[0, 1, 2, 10]), "labels"),
        (lambda: reconstruction_grid(model, x, dpi=0), "dpi"),
        (lambda: reconstruction_grid("model", x), "model"),
        (lambda: perturbation_grid(model, x), "single image"),
        (lambda: perturbation_grid(model, x[0], dims=[16]), "dims"),
        (lambda: perturbation_grid(model, x[0], steps=[]), "steps"),
        (lambda: perturbation_grid(model, x[0], label=10), "label"),
        (lambda: multimnist_reconstructions(model, x, labels=[[1, 2]]), "labels"),
        (lambda: routing_heatmap(model, x[0], classes="best"), "classes"),
        (lambda: routing_heatmap(model, x[0], classes=[11]), "classes"),
        (lambda: routing_heatmap(model, x[0], reduce="max"), "reduce"),
    ]
    for call, name in cases:
        with pytest.raises(ValueError, match=name):
            call()
    with pytest.raises(ValueError, match="decoder"):
        reconstruction_grid(tiny(decoder_units=None), x)

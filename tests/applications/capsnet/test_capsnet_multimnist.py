import keras
import numpy as np
import pytest
from keras import ops

import applications
from keras_capsules.datasets import multimnist
from keras_capsules.losses import MarginLoss
from keras_capsules.losses import ReconstructionLoss

SMALL = dict(conv_filters=16, primary_capsule_types=4, capsule_dim=8, decoder_units=(32,))


@pytest.fixture(scope="module")
def pairs(mnist_data):
    """A fixed MultiMNIST set from 60 test digits: 120 examples as NumPy arrays."""
    _, (x_test, y_test) = mnist_data
    return multimnist.test_set(x_test[:60], y_test[:60], pairs_per_digit=2, seed=1)


def reference_accuracy(labels, scores):
    top_two = np.argsort(-scores, axis=1)[:, :2]
    return np.mean([set(t) == set(lab) for t, lab in zip(top_two.tolist(), labels.tolist())])


def test_paper_model_has_11_36m_parameters():
    model = applications.CapsNetMultiMNIST(compile=False)
    assert model.image_shape == (36, 36, 1)
    assert model.count_params() == 11_361_808  # the paper: 11.36M
    assert model.backbone.get_layer("conv1").count_params() == 20_992
    assert model.backbone.get_layer("primary_caps").count_params() == 5_308_672
    assert model.get_layer("digit_caps").count_params() == 3200 * 10 * 8 * 16
    assert model.decoder.count_params() == 160 * 512 + 512 + 512 * 1024 + 1024 + 1024 * 1296 + 1296


def test_multimnist_accuracy_matches_the_numpy_reference():
    rng = np.random.default_rng(0)
    labels = np.stack([rng.permutation(10)[:2] for _ in range(200)])
    scores = rng.uniform(size=(200, 10)).astype("float32")
    rows = np.arange(200)
    scores[rows[:70], labels[:70, 0]] += 1.0  # both labels on top: correct
    scores[rows[:70], labels[:70, 1]] += 1.0
    scores[rows[70:140], labels[70:140, 0]] += 1.0  # only one of them: mostly wrong
    expected = reference_accuracy(labels, scores)
    assert 0.35 < expected < 0.6
    metric = applications.MultiMNISTAccuracy()
    metric.update_state(labels.astype("int32"), scores)
    np.testing.assert_allclose(float(metric.result()), expected, rtol=1e-6)
    metric.reset_state()
    metric.update_state(multimnist.multi_hot(labels), scores)  # multi-hot targets
    np.testing.assert_allclose(float(metric.result()), expected, rtol=1e-6)
    # Order of the two labels does not matter; a right class with a wrong one is wrong.
    swapped = applications.MultiMNISTAccuracy()
    swapped.update_state(labels[:, ::-1].astype("int32"), scores)
    np.testing.assert_allclose(float(swapped.result()), expected, rtol=1e-6)


def test_loss_reconstructs_each_digit_from_its_own_capsule(pairs):
    model = applications.CapsNetMultiMNIST(**SMALL)
    batch = {k: pairs[k][:8] for k in ("images", "labels", "digits", "multi_hot")}
    # Capsules and decoder weights large enough that each capsule decodes differently.
    rng = np.random.default_rng(1)
    poses = rng.normal(size=(8, 10, 8)).astype("float32")
    probabilities = np.linalg.norm(poses, axis=-1) / (1 + np.linalg.norm(poses, axis=-1))
    y_pred = {"poses": poses, "probabilities": probabilities}
    for weight in model.decoder.weights:
        weight.assign(3.0 * weight)
    total = float(model.compute_loss(batch, None, y_pred))

    labels, digits = batch["labels"], batch["digits"].astype("float32") / 255.0
    rows = np.arange(8)
    reconstruction = 0.0
    decoded_by_label = []
    for d in range(2):
        masked = np.zeros_like(poses)
        masked[rows, labels[:, d]] = poses[rows, labels[:, d]]
        decoded = ops.convert_to_numpy(model.decoder(masked))
        assert np.abs(decoded - ops.convert_to_numpy(model.decoder(poses))).max() > 0.1
        decoded_by_label.append(decoded)
        reconstruction += 0.0005 * np.mean(
            np.sum((digits[:, d, ..., None] - decoded) ** 2, (1, 2, 3))
        )
    margin = float(MarginLoss()(batch["multi_hot"], y_pred["probabilities"]))
    np.testing.assert_allclose(total, margin + reconstruction, rtol=1e-5)

    # Targets that are exactly what each digit's own capsule decodes to cost nothing;
    # crossed, they do.
    own = np.stack(decoded_by_label, axis=1) * 255.0
    own_cost = float(model.compute_loss(dict(batch, digits=own), None, y_pred)) - margin
    crossed = float(model.compute_loss(dict(batch, digits=own[:, ::-1]), None, y_pred)) - margin
    assert abs(own_cost) < 1e-5 and crossed > 1e-3, (own_cost, crossed)
    # The same targets as `y`, with the images as `x`, give the same loss.
    as_y = float(
        model.compute_loss(batch["images"], {"labels": labels, "digits": batch["digits"]}, y_pred)
    )
    np.testing.assert_allclose(as_y, total, rtol=1e-6)
    # Both capsules at once against the overlay would be another (not the paper's) loss.
    both = ops.convert_to_numpy(model.decoder(poses * batch["multi_hot"][..., None]))
    one_shot = float(ReconstructionLoss()(batch["images"][..., None] / 255.0, both))
    assert abs(margin + one_shot - total) > 1e-3


def test_fit_on_the_streaming_pipeline_lowers_the_loss_and_keras_round_trip(
    mnist_data, pairs, tmp_path
):
    (x_train, y_train), _ = mnist_data
    model = applications.CapsNetMultiMNIST(**SMALL)
    model.compile(optimizer=keras.optimizers.Adam(3e-3))
    train = multimnist.training_pipeline(
        x_train[:100], y_train[:100], batch_size=25, pairs_per_digit=1, seed=0, as_dict=True
    )
    history = model.fit(train, epochs=5, verbose=0).history  # the same 100 pairs each epoch
    assert {"loss", "margin_loss", "reconstruction_loss", "multimnist_accuracy"} <= set(history)
    assert all(np.isfinite(history["loss"]))
    assert history["loss"][-1] < 0.85 * history["loss"][0], history
    assert history["margin_loss"][-1] < history["margin_loss"][0]
    assert history["reconstruction_loss"][-1] < history["reconstruction_loss"][0]

    # .keras round trip of the trained model: no custom objects needed, compiled with its metric.
    assert applications.CapsNetMultiMNIST.from_config(model.get_config()).get_config() == (
        model.get_config()
    )
    path = str(tmp_path / "multimnist.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, applications.CapsNetMultiMNIST)
    assert loaded.get_config() == model.get_config()
    test = {k: pairs[k][:25] for k in ("images", "labels", "digits")}
    np.testing.assert_array_equal(
        loaded.predict(test["images"], verbose=0)["probabilities"],
        model.predict(test["images"], verbose=0)["probabilities"],
    )
    np.testing.assert_array_equal(
        loaded.reconstruct_pair(test["images"]), model.reconstruct_pair(test["images"])
    )
    results = loaded.evaluate(test, batch_size=25, verbose=0, return_dict=True)
    expected = model.evaluate(test, batch_size=25, verbose=0, return_dict=True)
    assert set(results) == {"loss", "margin_loss", "reconstruction_loss", "multimnist_accuracy"}
    for key, value in expected.items():
        np.testing.assert_allclose(results[key], value, rtol=1e-5)


def test_predict_digits_and_reconstruct_pair(pairs):
    model = applications.CapsNetMultiMNIST(**SMALL)
    images, labels = pairs["images"][:6], pairs["labels"][:6]
    outputs = model.predict(images, verbose=0)
    probabilities, poses = outputs["probabilities"], outputs["poses"]
    digits = model.predict_digits(images)
    np.testing.assert_array_equal(digits, np.argsort(-probabilities, axis=1)[:, :2])
    rows = np.arange(6)
    assert np.all(probabilities[rows, digits[:, 0]] >= probabilities[rows, digits[:, 1]])
    as_dict = {"images": images, "labels": labels, "digits": pairs["digits"][:6]}
    np.testing.assert_array_equal(model.predict_digits(as_dict), digits)

    recon = model.reconstruct_pair(images, labels=labels)
    assert recon.shape == (6, 2, 36, 36, 1) and recon.min() >= 0 and recon.max() <= 1
    for d in range(2):
        np.testing.assert_allclose(recon[:, d], model.decode(poses, labels=labels[:, d]), atol=1e-6)
    default = model.reconstruct_pair(images)
    np.testing.assert_allclose(default[:, 0], model.decode(poses, labels=digits[:, 0]), atol=1e-6)
    np.testing.assert_allclose(default[:, 1], model.decode(poses, labels=digits[:, 1]), atol=1e-6)
    with pytest.raises(ValueError, match="labels"):
        model.reconstruct_pair(images, labels=np.zeros((6, 3), int))


def test_targets_without_digits_are_an_error_unless_margin_only(pairs):
    model = applications.CapsNetMultiMNIST(**SMALL)
    images = pairs["images"][:4]
    y_pred = model(images[..., None].astype("float32"))
    with pytest.raises(ValueError, match="digits"):
        model.compute_loss(images, pairs["labels"][:4], y_pred)
    with pytest.raises(ValueError, match="targets"):
        model.compute_loss(images, None, y_pred)
    margin_only = applications.CapsNetMultiMNIST(**dict(SMALL, decoder_units=None))
    y_pred = margin_only(images[..., None].astype("float32"))
    expected = float(MarginLoss()(pairs["multi_hot"][:4], y_pred["probabilities"]))
    for y in (pairs["labels"][:4], pairs["multi_hot"][:4]):
        np.testing.assert_allclose(float(margin_only.compute_loss(images, y, y_pred)), expected)
    metrics = margin_only.compute_metrics(images, pairs["labels"][:4], y_pred)
    reference = reference_accuracy(
        pairs["labels"][:4], ops.convert_to_numpy(y_pred["probabilities"])
    )
    np.testing.assert_allclose(float(metrics["multimnist_accuracy"]), reference)

import math

import keras
import numpy as np
import pytest
from keras import ops

import applications
from keras_capsules.diagnostics import routing_statistics
from keras_capsules.layers import FullyConnectedCapsule
from keras_capsules.layers import RandomCouplingCapsule


def test_statistics_of_a_fixed_coupling_by_hand():
    inputs = keras.Input((3, 2))
    layer = RandomCouplingCapsule(2, 2, name="fixed")
    model = keras.Model(inputs, layer(inputs))
    # Children's couplings over the 2 parents: (0.75, 0.25), (0.5, 0.5), (0.1, 0.9).
    layer.coupling_logits.assign(np.log([[3.0, 1.0, 1.0], [1.0, 1.0, 9.0]]).astype("float32"))
    kernel = np.zeros((3, 2, 4), "float32")
    kernel[:, :, :2] = 5.0  # parent 0 gets long votes; parent 1 none: never active
    layer.kernel.assign(kernel)
    images = np.ones((4, 3, 2), "float32")
    stats = routing_statistics(model, images, labels=[0, 0, 1, 1])["fixed"]

    def entropy(p):
        return -sum(x * math.log(x) for x in p)

    expected = (entropy([0.75, 0.25]) + entropy([0.5, 0.5]) + entropy([0.1, 0.9])) / 3
    assert stats["entropy"] == pytest.approx(expected, rel=1e-5)
    assert stats["max_entropy"] == pytest.approx(math.log(2))
    assert stats["inactive_fraction"] == 0.5
    # The same coupling for every image; the even child has no strongest parent.
    assert stats["same_class_agreement"] == 1.0
    assert (stats["num_children"], stats["num_parents"]) == (3, 2)


class _SignCapsule(FullyConnectedCapsule):
    """Each child goes wholly to parent 0 where its vote is positive, to 1 where negative.

    A zero vote is split evenly between the two.
    """

    def route(self, votes):
        first = ops.cast(votes[:, 0, :, 0] > 0, "float32")  # (batch, children)
        second = ops.cast(votes[:, 0, :, 0] < 0, "float32")
        even = (1.0 - first - second) / 2
        coupling = ops.stack([first + even, second + even], axis=1)  # (batch, parents, children)
        return ops.sum(votes * coupling[..., None], axis=2), coupling


def test_same_class_agreement_and_entropy_of_hard_couplings_by_hand():
    inputs = keras.Input((3, 1))
    layer = _SignCapsule(2, 1, name="signs")
    model = keras.Model(inputs, layer(inputs))
    layer.kernel.assign(np.ones((3, 1, 2), "float32"))  # every vote is the child itself
    signs = np.array(
        [[1, 1, 1], [1, 1, -1], [-1, 1, -1], [-1, 1, -1], [1, -1, 1]], "float32"
    )  # classes 0, 0, 1, 1, 2: class 0 agrees on 2 of 3 children, class 1 on all
    stats = routing_statistics(model, signs[..., None], labels=[0, 0, 1, 1, 2])["signs"]
    assert stats["entropy"] == 0.0  # one-hot couplings
    assert stats["same_class_agreement"] == pytest.approx((2 / 3 + 1) / 2)
    mixed = np.concatenate([signs, [[1, 0, 1]]])  # child 1 of the new image is split evenly
    stats = routing_statistics(model, mixed[..., None], labels=[0, 0, 1, 1, 2, 2])["signs"]
    # Class 2 now has a pair, on children 0 and 2 only: both agree (1 + 1 of 2).
    assert stats["same_class_agreement"] == pytest.approx((2 + 3 + 2) / (3 + 3 + 2))
    alone = routing_statistics(model, signs[..., None], labels=[0, 1, 2, 3, 4])["signs"]
    assert alone["same_class_agreement"] is None  # no class has two images


class _UnnormalizedCapsule(FullyConnectedCapsule):
    """Coupling `(3, -1)` for a positive vote, `(-1, -2)` for another: no distribution."""

    def route(self, votes):
        first = ops.cast(votes[:, 0, :, 0] > 0, "float32")  # (batch, children)
        coupling = ops.stack([4 * first - 1, first - 2], axis=1)  # (batch, parents, children)
        return ops.sum(votes * coupling[..., None], axis=2), coupling


def test_couplings_that_are_no_distribution_are_normalised():
    inputs = keras.Input((2, 1))
    layer = _UnnormalizedCapsule(2, 1, name="raw")
    model = keras.Model(inputs, layer(inputs))
    layer.kernel.assign(np.ones((2, 1, 2), "float32"))
    signs = np.array([[1, -1], [1, -1]], "float32")[..., None]
    stats = routing_statistics(model, signs, labels=[0, 0])["raw"]
    # (3, -1) becomes (1, 0), entropy 0; (-1, -2) nothing, so even: log 2.
    assert stats["entropy"] == pytest.approx(math.log(2) / 2)
    assert (
        stats["same_class_agreement"] == 1.0
    )  # the decided child agrees; the even one not counted


@pytest.mark.parametrize("routing", ["dynamic", "uniform", "em", "self_attention"])
def test_an_application_by_predicted_class(routing):
    backbone = keras.Sequential([keras.Input((16, 16, 1)), keras.layers.Conv2D(8, 3, strides=2)])
    model = applications.BackboneCapsNet(
        backbone, num_classes=3, routing=routing, primary_capsule_types=2, compile=False
    )
    images = np.random.default_rng(0).integers(0, 256, (6, 16, 16, 1)).astype("float32")
    stats = routing_statistics(model, images)["class_caps"]
    assert 0.0 <= stats["entropy"] <= stats["max_entropy"] * (1 + 1e-6)
    assert stats["max_entropy"] == pytest.approx(math.log(3))
    if routing == "uniform":  # one iteration: every child evenly over the classes
        assert stats["entropy"] == pytest.approx(math.log(3), rel=1e-5)
        assert stats["same_class_agreement"] is None  # no child has a strongest parent
    else:
        assert stats["same_class_agreement"] is None or 0 <= stats["same_class_agreement"] <= 1


def test_bad_arguments():
    plain = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    with pytest.raises(ValueError, match="routing layer"):
        routing_statistics(plain, np.zeros((2, 4)))
    model = applications.CapsNetMNIST(conv_filters=8, primary_capsule_types=2, compile=False)
    with pytest.raises(ValueError, match="labels"):
        routing_statistics(model, np.zeros((3, 28, 28, 1)), labels=[0, 1])
    images = np.full((2, 28, 28, 1), 100.0)
    images[1, 3, 3, 0] = np.nan
    with pytest.raises(ValueError, match="finite numbers"):
        routing_statistics(model, images)
    with pytest.raises(ValueError, match="`images` is empty"):
        routing_statistics(model, np.zeros((0, 28, 28, 1)))

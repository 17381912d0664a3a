"""Arguments renamed for one word per concept keep working under their old names, and warn."""

import numpy as np
import pytest

import applications
from keras_capsules import layers
from keras_capsules import routing


def test_layers_take_their_old_argument_names_with_a_warning():
    with pytest.warns(DeprecationWarning, match="`num_capsules` is now called `capsule_types`"):
        primary = layers.PrimaryCapsule(num_capsules=4, capsule_dim=8, kernel_size=3)
    assert primary.get_config()["capsule_types"] == 4 and "num_capsules" not in primary.get_config()
    with pytest.warns(DeprecationWarning) as record:
        digits = layers.CapsuleLayer(num_capsules=10, capsule_dim=16, routings=2)
    assert [str(w.message) for w in record] == [
        "CapsuleLayer: the argument `num_capsules` is now called `capsule_types`.",
        "CapsuleLayer: the argument `routings` is now called `iterations`.",
    ]
    assert (digits.capsule_types, digits.iterations) == (10, 2)
    with pytest.warns(DeprecationWarning, match="`num_classes` is now called `capsule_types`"):
        classes = layers.ClassMatrixCapsule(num_classes=5)
    assert classes.capsule_types == 5
    # A configuration saved under the old names still builds the same layer.
    old = {**digits.get_config(), "num_capsules": 10, "routings": 2}
    del old["capsule_types"], old["iterations"]
    with pytest.warns(DeprecationWarning):
        assert layers.CapsuleLayer.from_config(old).get_config() == digits.get_config()


def test_dynamic_routing_takes_routings_with_a_warning():
    votes = np.random.default_rng(0).normal(size=(2, 6, 3, 4)).astype("float32")
    with pytest.warns(DeprecationWarning, match="`routings` is now called `iterations`"):
        old = routing.dynamic_routing(votes, routings=2)
    np.testing.assert_array_equal(np.asarray(old), np.asarray(routing.dynamic_routing(votes, 2)))
    with pytest.raises(TypeError, match="routing"):
        routing.dynamic_routing(votes, routing=2)


def test_applications_take_their_old_argument_names_with_a_warning():
    sizes = dict(conv_filters=16, capsule_dim=8, decoder_units=None, compile=False)
    with pytest.warns(DeprecationWarning) as record:
        old = applications.CapsNetMNIST(**sizes, primary_capsules=4, routings=2)
    assert len(record) == 2 and "`primary_capsule_types`" in str(record[0].message)
    new = applications.CapsNetMNIST(**sizes, primary_capsule_types=4, iterations=2)
    assert old.get_config() == new.get_config() and old.count_params() == new.count_params()


def test_matrix_capsnet_takes_the_papers_letters_or_descriptive_names():
    letters = applications.MatrixCapsNetNORB(A=64, B=8, C=16, D=16, compile=False)
    named = applications.MatrixCapsNetNORB(
        conv_filters=64,
        primary_capsule_types=8,
        conv_caps1_types=16,
        conv_caps2_types=16,
        compile=False,
    )
    assert letters.get_config() == named.get_config()
    assert letters.count_params() == named.count_params() == 68_754
    positional = applications.MatrixCapsNetNORB(64, 8, 16, 16, compile=False)
    assert positional.get_config() == named.get_config()
    with pytest.raises(ValueError, match="`conv_filters` and `A`"):
        applications.MatrixCapsNetNORB(A=64, conv_filters=16)
    with pytest.raises(ValueError, match="conv_caps1_types.*paper's C"):
        applications.MatrixCapsNetNORB(C=0)
    # A configuration saved with the letters loads.
    old = {**named.get_config(), "A": 64, "B": 8, "C": 16, "D": 16}
    for name in ("conv_filters", "primary_capsule_types", "conv_caps1_types", "conv_caps2_types"):
        del old[name]
    assert applications.MatrixCapsNetNORB.from_config(old).get_config() == named.get_config()

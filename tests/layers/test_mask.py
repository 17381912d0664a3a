import numpy as np
import pytest
from keras import ops

from keras_capsules.layers import Mask
from tests._layer_testing import run_layer_test


def capsules():
    x = np.random.default_rng(0).normal(size=(3, 5, 4)).astype("float32")
    x[0, 2] *= 10  # longest capsules: 2, 4, 0
    x[1, 4] *= 10
    x[2, 0] *= 10
    return x


def kept(masked):
    return [list(np.flatnonzero(np.abs(m).sum(-1))) for m in ops.convert_to_numpy(masked)]


@pytest.mark.parametrize("with_labels", [True, False], ids=["labels", "longest"])
def test_layer_checks(with_labels):
    x = capsules()[:2, :3]
    run_layer_test(
        Mask,
        {},
        [x, np.array([1, 2], "int32")] if with_labels else x,
        expected_output_shape=(2, 3, 4),
    )


def test_longest_capsule_without_labels():
    assert kept(Mask()(capsules())) == [[2], [4], [0]]


@pytest.mark.parametrize(
    "labels",
    [np.array([1, 3, 3]), np.array([[1], [3], [3]]), np.eye(5, dtype="float32")[[1, 3, 3]]],
    ids=["indices", "column", "one-hot"],
)
def test_chosen_capsules(labels):
    x = capsules()
    masked = Mask()(x, labels=labels)
    assert kept(masked) == [[1], [3], [3]]
    np.testing.assert_allclose(ops.convert_to_numpy(masked)[0, 1], x[0, 1])
    assert kept(Mask()([x, labels])) == [[1], [3], [3]]


def test_multi_hot_keeps_several():
    labels = np.zeros((3, 5), "float32")
    labels[:, [0, 2]] = 1
    assert kept(Mask()(capsules(), labels=labels)) == [[0, 2]] * 3


def test_bad_labels_and_shapes():
    with pytest.raises(ValueError, match="labels"):
        Mask()(capsules(), labels=np.zeros((3, 4), "float32"))
    with pytest.raises(ValueError, match="capsules"):
        Mask()(np.zeros((3, 20), "float32"))
    assert Mask().compute_output_shape((3, 5, 4)) == (3, 5, 4)


def test_functional_use_with_labels_as_input():
    import keras

    capsules_in = keras.Input((5, 4))
    labels_in = keras.Input((), dtype="int32")
    model = keras.Model([capsules_in, labels_in], Mask()([capsules_in, labels_in]))
    x = capsules()
    assert kept(model([x, np.array([1, 3, 3])])) == [[1], [3], [3]]

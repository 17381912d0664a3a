import keras
import numpy as np
import pytest

from keras_capsules.metrics import SpreadMargin


def test_the_margin_is_kept_through_resets_and_updates():
    margin = SpreadMargin(0.3)
    assert float(margin.result()) == pytest.approx(0.3)
    margin.assign(0.75)
    margin.update_state(np.ones(3), np.zeros(3))  # changes nothing
    margin.reset_state()  # an epoch's reset keeps it
    assert float(margin.result()) == pytest.approx(0.75)


def test_config_round_trip_keeps_the_current_margin():
    margin = SpreadMargin(0.2, name="margin")
    margin.assign(0.6)
    again = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(margin))
    assert isinstance(again, SpreadMargin) and again.name == "margin"
    assert float(again.result()) == pytest.approx(0.6)


def test_a_models_margin_is_state_not_a_weight():
    inputs = keras.Input((3,))
    model = keras.Model(inputs, keras.layers.Dense(2)(inputs))
    model.spread_margin = SpreadMargin()
    assert model.count_params() == 8
    assert model.spread_margin in model.metrics


@pytest.mark.parametrize("value", [0.0, 1.5, -0.1, "0.5", None])
def test_bad_margins_are_refused(value):
    with pytest.raises(ValueError, match="margin"):
        SpreadMargin(value)
    with pytest.raises(ValueError, match="margin"):
        SpreadMargin().assign(value)

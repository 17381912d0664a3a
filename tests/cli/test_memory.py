"""The estimate of a training step's memory, from a model built without its weights."""

import numpy as np
import pytest

import applications
from keras_capsules.cli import _memory


def test_the_estimate_counts_the_parameters_without_allocating_them():
    def build():
        return applications.CapsNet(conv_filters=8, primary_capsule_types=2, compile=False)

    parameters, needed = _memory.estimate(build, batch_size=10)
    model = build()  # built for real after the estimate: its weights are values
    assert parameters == model.count_params()
    assert needed >= parameters * _memory.BYTES_PER_PARAMETER
    assert np.all(np.isfinite(model.predict(np.zeros((1, 28, 28, 1)), verbose=0)["probabilities"]))

    # A network of a thousand times the memory is estimated in no time, and no less.
    def huge():
        return applications.CapsNet(input_shape=(3000, 3000, 3), compile=False)

    huge_parameters, huge_needed = _memory.estimate(huge, batch_size=10)
    # 91 billion: the class capsules' matrices from 2.2M primary capsules (the decoder's 3M
    # no longer grow with the image).
    assert huge_parameters > 9 * 10**10 and huge_needed > 1000 * needed


def test_a_model_that_fits_passes_and_one_that_does_not_is_one_line(monkeypatch):
    monkeypatch.setattr(_memory, "available_memory", lambda: 2**30)
    monkeypatch.setattr(_memory, "has_accelerator", lambda: False)
    _memory.check_fits(lambda: applications.CapsNet(conv_filters=8, compile=False), 4)
    with pytest.raises(SystemExit, match=r"not fit in memory.*1\.0 GiB are free") as e:
        _memory.check_fits(
            lambda: applications.CapsNet(input_shape=(256, 256, 3), compile=False), 4
        )
    assert "\n" not in str(e.value.code)
    # Where the memory is unknown, or an accelerator's, nothing is refused.
    monkeypatch.setattr(_memory, "has_accelerator", lambda: True)
    _memory.check_fits(lambda: applications.CapsNet(input_shape=(256, 256, 3), compile=False), 4)


def test_the_cost_is_one_line_with_the_cheaper_option(capsys):
    def capsnet():
        return applications.CapsNet(input_shape=(64, 64, 3), num_classes=10, compile=False)

    def cheaper():
        return applications.CapsNet(input_shape=(64, 64, 3), conv_filters=8, compile=False)

    parameters, needed = _memory.estimate(capsnet, 100)
    _memory.check_fits(capsnet, 100, cheaper=("--conv-filters 8", cheaper))
    line = capsys.readouterr().out
    assert line.count("\n") == 1 and f"{parameters:,} parameters" in line
    assert f"{needed / 2**30:,.1f} GiB" in line and "cheaper for images this size: --conv-" in line
    # An option that costs more is not named.
    _memory.check_fits(cheaper, 100, cheaper=("the paper's", capsnet))
    assert "cheaper" not in capsys.readouterr().out

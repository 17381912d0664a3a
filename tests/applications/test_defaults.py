import warnings

import keras
import numpy as np
import pytest

import applications
from applications import _defaults
from keras_capsules import _devices
from keras_capsules._compile import compile_again

SMALL = dict(conv_filters=8, primary_capsule_types=2, decoder_units=None, compile=False)


@pytest.fixture
def cpu(monkeypatch):
    """Set the CPU's flags and whether an accelerator is visible; reset the warn-once state."""

    def set_cpu(flags, accelerator=False):
        monkeypatch.setattr(_devices, "cpu_flags", lambda: frozenset(flags))
        monkeypatch.setattr(_defaults, "has_accelerator", lambda: accelerator)
        monkeypatch.setattr(_defaults, "_warned", [])

    return set_cpu


def test_bfloat16_on_a_cpu_without_it_warns_once_naming_the_way_out(cpu):
    cpu({"avx2", "fma"})
    with pytest.warns(UserWarning, match=r"'mixed_bfloat16'.*emulated.*10x.*Use float32"):
        applications.CapsNetMNIST(**SMALL, dtype="mixed_bfloat16")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        applications.CapsNetMNIST(**SMALL, dtype="mixed_bfloat16")  # once


@pytest.mark.parametrize(
    "flags, accelerator, dtype",
    [
        ({"avx2", "avx512_bf16"}, False, "mixed_bfloat16"),
        ({"avx2", "amx_bf16"}, False, "mixed_bfloat16"),
        ({"avx2"}, True, "mixed_bfloat16"),
        ({"avx2"}, False, "float32"),
        ({"avx2"}, False, "mixed_float16"),
        (set(), False, "mixed_bfloat16"),  # flags unknown (not Linux): no guess
    ],
)
def test_no_warning_where_bfloat16_is_native_or_unused(cpu, flags, accelerator, dtype):
    cpu(flags, accelerator)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        applications.CapsNetMNIST(**SMALL, dtype=dtype)


# Steps per call of the compiled step -----------------------------------------

TINY = dict(
    conv_filters=8, primary_capsule_types=2, capsule_dim=4, decoder_units=(16,), iterations=2
)
not_on_torch = pytest.mark.skipif(
    keras.backend.backend() == "torch", reason="PyTorch runs one step per call"
)


def test_default_compile_runs_one_step_per_call():
    assert applications.CapsNetMNIST(**TINY).steps_per_execution == 1
    assert applications.EfficientCapsNet().steps_per_execution == 1
    assert applications.BaselineCNN().steps_per_execution == 1
    assert applications.MatrixCapsNet(A=8, B=2, C=2, D=2, iterations=1).steps_per_execution == 1


def test_progress_bars_count_every_batch_and_calls_print_no_retracing(capsys, caplog):
    """`predict` on a few images reads 1/1; an epoch of 3 batches 3/3; new sizes stay quiet."""
    model = applications.CapsNetMNIST(**TINY)
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, size=(24, 28, 28, 1), dtype=np.uint8)
    y = rng.integers(0, 10, size=24)
    capsys.readouterr()
    with caplog.at_level("WARNING"):
        model.predict(x[:8])
        predicted = capsys.readouterr().out
        model.fit(x, y, batch_size=8, epochs=1)
        trained = capsys.readouterr().out
        for n in (3, 5, 7, 9, 11, 13):
            model.predict(x[:n], verbose=0)
    assert "1/1" in predicted and "/1" not in predicted.replace("1/1", "")
    assert "3/3" in trained and "32/" not in trained
    assert not [r for r in caplog.records if "retracing" in r.getMessage()]


def _trained_weights(steps_per_execution, x, y):
    keras.utils.set_random_seed(3)
    model = applications.CapsNetMNIST(**TINY)
    compile_again(model, steps_per_execution=steps_per_execution)
    model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    return model, model.get_weights()


@not_on_torch
def test_several_steps_per_call_train_the_same_weights_as_one():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, size=(28, 28, 28, 1), dtype=np.uint8)  # 7 steps: 3 calls of 3
    y = rng.integers(0, 10, size=28)
    one, expected = _trained_weights(1, x, y)
    three, weights = _trained_weights(3, x, y)
    assert int(one.optimizer.iterations) == int(three.optimizer.iterations) == 14
    for got, want in zip(weights, expected):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_compile_again_keeps_the_optimizer_and_its_state():
    model = applications.CapsNetMNIST(**TINY)
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, size=(8, 28, 28, 1), dtype=np.uint8)
    model.fit(x, rng.integers(0, 10, size=8), batch_size=4, verbose=0)
    optimizer, moments = model.optimizer, [v.numpy() for v in model.optimizer.variables]
    compile_again(model, steps_per_execution=1)
    assert model.optimizer is optimizer and model.steps_per_execution == 1
    for got, want in zip(model.optimizer.variables, moments):
        np.testing.assert_array_equal(got.numpy(), want)
    assert model.get_compile_config()["metrics"] == ["accuracy"]


def test_a_saved_compile_with_several_steps_per_call_loads_on_every_backend(tmp_path):
    model = applications.CapsNetMNIST(**TINY)
    config = {**model.get_compile_config(), "steps_per_execution": 32}
    model.compile_from_config(config)  # as load_model does with a file saved elsewhere
    expected = 1 if keras.backend.backend() == "torch" else 32
    assert model.steps_per_execution == expected
    model.predict(np.zeros((2, 28, 28, 1), "uint8"), verbose=0)

import warnings

import pytest

import applications
from applications import _defaults

SMALL = dict(conv_filters=8, primary_capsule_types=2, decoder_units=None, compile=False)


@pytest.fixture
def cpu(monkeypatch):
    """Set the CPU's flags and whether an accelerator is visible; reset the warn-once state."""

    def set_cpu(flags, accelerator=False):
        monkeypatch.setattr(_defaults, "cpu_flags", lambda: frozenset(flags))
        monkeypatch.setattr(_defaults, "_has_accelerator", lambda: accelerator)
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


def test_cpu_flags_reads_this_machine():
    flags = _defaults.cpu_flags()
    assert isinstance(flags, frozenset)
    if flags:
        assert "sse2" in flags or "fp" in flags or "neon" in flags or "asimd" in flags

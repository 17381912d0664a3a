import pytest

from keras_capsules import _devices
from keras_capsules import utils


def test_cpu_flags_reads_this_machine():
    flags = _devices.cpu_flags()
    assert isinstance(flags, frozenset)
    if flags:  # Linux: the x86 or Arm base features are always listed
        assert "sse2" in flags or "fp" in flags or "neon" in flags or "asimd" in flags


@pytest.mark.parametrize(
    "flags, native",
    [
        ({"avx2", "avx512f", "avx512_bf16"}, True),
        ({"avx2", "amx_tile", "amx_bf16"}, True),
        ({"avx2", "avx512f", "avx512_vnni"}, False),  # oneDNN's, but no bfloat16 unit
        (set(), None),  # not readable (outside Linux): unknown, no guess
    ],
)
def test_native_bfloat16_reads_the_flags(monkeypatch, flags, native):
    monkeypatch.setattr(_devices, "cpu_flags", lambda: frozenset(flags))
    assert utils.native_bfloat16() is native


def test_the_allocator_and_the_bfloat16_check_read_the_same_flags():
    from keras_capsules import _allocator

    assert _allocator.cpu_flags is _devices.cpu_flags

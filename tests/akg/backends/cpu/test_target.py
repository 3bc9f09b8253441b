import pytest

from akg.errors import UnknownTargetError
from akg.schedules.cpu_defaults import default_band
from akg.polyhedral.bands import BandInfo
from akg.backends.cpu.target import CpuTarget, host_cpu, vector_unit
from akg.target import get_target


@pytest.mark.parametrize("features, triple, llvm_width, expect", [
    (("avx", "avx2", "fma", "sse2"), "x86_64-pc-linux-gnu", 512, (256, 16)),  # Zen 3: LLVM says 512
    (("+avx2", "+avx512f", "+sse2"), "x86_64-pc-linux-gnu", 512, (512, 32)),
    (("sse2", "sse4.2"), "x86_64-pc-linux-gnu", 128, (128, 16)),
    (("neon",), "aarch64-unknown-linux-gnu", 128, (128, 32)),
    ((), "riscv64-unknown-linux-gnu", 256, (256, 16)),
])
def test_vector_unit_comes_from_the_features(features, triple, llvm_width, expect):
    assert vector_unit(features, triple, llvm_width) == expect


def test_host_vector_width_agrees_with_its_features():
    cpu = host_cpu()
    feats = {f.lstrip("+") for f in cpu.features}
    if "avx512f" in feats:
        assert cpu.vector_bits == 512
    elif "avx" in feats:
        assert cpu.vector_bits == 256
    assert cpu.key == f"cpu-{cpu.mcpu}-{cpu.vector_bits}b-{cpu.cores}c"


def test_accumulator_budget_follows_the_register_file():
    assert CpuTarget(vector_bits=512, vector_registers=32).accumulator_bytes == 16 * 64
    assert CpuTarget(vector_bits=256, vector_registers=16).accumulator_bytes == 12 * 32


def _matmul_band(m, n, k):
    return BandInfo(index=0, extents=(m, n), coincident=(True, True), permutable=True,
                    statements=("S0",), contiguity=(0, 2), inner_contiguity=1, has_inner=True,
                    reduction_inner=True, work=m * n * k)


def test_register_tile_fits_the_targets_registers():
    avx512 = CpuTarget(vector_bits=512, vector_registers=32)
    avx2 = CpuTarget(vector_bits=256, vector_registers=16)
    for cpu, rows in ((avx512, 8), (avx2, 4)):  # AVX2: 6 would fit, 4 divides 1024
        lanes = cpu.vector_lanes("float32")
        band = default_band(_matmul_band(1024, 1024, 1024), lanes, 2, 4, cpu.l2_bytes, cpu.accumulator_bytes)
        assert band.register == (rows, 2 * lanes)
        assert band.register[0] * band.register[1] * 4 <= cpu.accumulator_bytes


def test_unknown_target_is_typed():
    with pytest.raises(UnknownTargetError, match="known: cpu"):
        get_target("tpu9")

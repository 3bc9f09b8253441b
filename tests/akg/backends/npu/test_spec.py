import dataclasses
import json

import pytest

from akg.backends.npu.spec import KIB, MIB, NPU_SPECS, PATH_PIPES, NpuSpec, Roofline, get_spec, register_spec
from akg.errors import MissingRuleError


def test_default_spec_holds_the_numbers_of_npu_md():
    s = NpuSpec()
    assert (s.name, s.cores, s.clock_hz) == ("ascend910-like", 32, 1.0e9)
    assert (s.l1_bytes, s.l0a_bytes, s.l0b_bytes, s.l0c_bytes) == (MIB, 64 * KIB, 64 * KIB, 256 * KIB)
    assert (s.ub_bytes, s.ub_usable_bytes, s.capacity("UB")) == (256 * KIB, 248 * KIB, 248 * KIB)
    assert s.gm_bytes_per_cycle == 1200.0  # 1.2 TB/s at 1 GHz
    assert s.fractal_macs == 4096 and s.lanes(2) == 128 and s.lanes(4) == 64 and s.block_elements(2) == 16
    rates = {"GM->L1": 64, "GM->UB": 64, "GM->L0A": 64, "GM->L0B": 64, "L1->L0A": 512, "L1->L0B": 256,
             "L1->UB": 128, "L0C->UB": 256, "UB->GM": 64}
    assert {p: s.rate(p) for p in PATH_PIPES} == rates
    assert (s.dma_latency, s.vector_issue, s.cube_issue, s.scalar_cycles) == (20, 10, 10, 1)
    assert (s.l2_bytes, s.l2_rate) == (32 * MIB, 4 * s.gm_bytes_per_cycle)  # 32 MiB, 4.8 TB/s


def test_alignment_capacity_and_double_buffer_budget():
    s = NpuSpec()
    assert s.alignment("UB", 2) == 32 and s.alignment("L1", 4) == 32
    assert s.alignment("L0A", 2) == 512 and s.alignment("L0C", 4) == 1024 and s.alignment("GM", 2) == 2
    assert s.buffer_budget("UB") == 248 * KIB and s.buffer_budget("UB", double_buffer=True) == 124 * KIB
    assert s.buffer_budget("L1", double_buffer=True) == 512 * KIB
    assert s.capacity("GM") == 0


def test_key_is_stable_and_changes_with_any_number():
    s = NpuSpec()
    assert s.key() == NpuSpec().key() and s.key().startswith("ascend910-like-")
    assert dataclasses.replace(s, dma_latency=21).key() != s.key()
    assert dataclasses.replace(s, l2_bytes=16 * MIB).key() != s.key() != dataclasses.replace(s, l2_rate=2400.0).key()
    assert json.loads(s.to_json())["l2_bytes"] == 32 * MIB
    assert dataclasses.replace(s, paths=s.paths[:-1] + (("UB->GM", 32.0),)).key() != s.key()
    assert NpuSpec.from_json(s.to_json()) == s
    assert json.loads(s.to_json())["cores"] == 32
    assert hash(s) == hash(NpuSpec())


def test_presets_are_named_specs():
    assert get_spec() == get_spec("ascend910-like") == NpuSpec()
    small = get_spec("ascend310-like")
    assert small.cores == 2 and small.gm_bytes_per_cycle == 48.0
    assert "ascend310-like" in NPU_SPECS
    with pytest.raises(MissingRuleError, match="ascend310-like"):
        get_spec("ascend999")
    with pytest.raises(ValueError, match="twice"):
        register_spec(NpuSpec())


def test_spec_rejects_unknown_paths_and_bad_rates():
    with pytest.raises(ValueError, match="unknown DMA path 'UB->L0A'"):
        NpuSpec(paths=(("UB->L0A", 64.0),))
    with pytest.raises(ValueError, match="positive rate"):
        NpuSpec(paths=(("GM->UB", 0.0),))
    with pytest.raises(ValueError, match="L2"):
        NpuSpec(l2_rate=0.0)


def test_roofline_gives_cube_vector_and_gm_limits():
    s = NpuSpec()
    r = s.roofline(cube_flops=2 * 1024 ** 3, vector_bytes=256 * 64, gm_bytes=6 * MIB)
    assert r.cube == 2 * 1024 ** 3 / (2 * 4096 * 32) == 8192
    assert r.vector == 64 / 32
    assert r.gm == pytest.approx(6 * MIB / 1200)
    assert (r.bound, r.limit) == (8192, "cube")
    assert r.fraction(16384) == 0.5 and r.fraction(0) == 0.0
    one = s.roofline(gm_bytes=128 * 1000, cores=1)  # one core: its own GM paths, 64 in + 64 out
    assert one.gm == 1000 and one.limit == "gm"
    assert Roofline(1, 5, 3).limit == "vector"
    # bytes served by the L2 are bounded by the cores' paths (32 x 128) and the L2 rate, not HBM
    hits = s.roofline(gm_bytes=1200 * 1000, path_bytes=4096 * 3000)
    assert hits.gm == 3000 and s.roofline(gm_bytes=1200 * 1000, path_bytes=1200 * 1000).gm == 1000

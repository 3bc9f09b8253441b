"""The `npu` target: registration, memory levels from the spec, key, cost unit."""

import akg
from akg.target import get_backend, get_target


def test_npu_target_registered():
    t = get_target("npu")
    assert t.kind == "npu" and t.cost_unit == "cycles"
    assert t.key.startswith("npu-sim-ascend910-like-") and t.spec.key() in t.key
    names = [m.name for m in t.memory]
    assert names == ["GM", "L1", "L0A", "L0B", "L0C", "UB"]
    assert t.level("UB").bytes == t.spec.ub_usable_bytes
    assert t.cores == 32
    other = get_target("npu:ascend310-like")
    assert other.key != t.key and other.cores == 2
    assert get_backend("npu-sim").artifact_kind == "npu-sim"


def test_default_config_fits_and_double_buffers():
    from akg.graph import GraphBuilder

    b = GraphBuilder("add")
    b.output(b.add(b.input("x", (1024, 1024), "float16"), b.input("y", (1024, 1024), "float16")))
    k = akg.build(b.build(), target="npu")
    text = str(k.config)
    assert "promote(UB, 2)" in text and "map(0, cores, [32])" in text

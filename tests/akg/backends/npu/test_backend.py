"""The NPU backend end to end: kernels built for `npu`, run in the simulator and checked
against the reference; double buffering overlaps MTE2 and V; races are absent; a tiling past
the UB is rejected before simulation; export/load and the listing."""

import numpy as np
import pytest

import akg
from akg.errors import CompileError, ScheduleError
from akg.graph import GraphBuilder
from akg.schedules.space import Config, Step

from conftest_npu import check_npu


def graph(build, name="k"):
    b = GraphBuilder(name)
    build(b)
    return b.build()


def add16(n=1024):
    return graph(lambda b: b.output(b.add(b.input("x", (n, 1024), "float16"), b.input("y", (n, 1024), "float16"))))


@pytest.mark.parametrize("make", [
    lambda: add16(),
    lambda: graph(lambda b: b.output(b.cast(b.input("x", (512, 512), "float16"), to="float32"))),
    lambda: graph(lambda b: b.output(b.op("relu", b.input("x", (7, 33))))),
    lambda: graph(lambda b: b.output(b.op("exp", b.input("x", (256, 256))))),
    lambda: graph(lambda b: b.output(b.op("softmax", b.input("x", (64, 512), "float16")))),
    lambda: graph(lambda b: b.output(b.op("layer_norm", b.input("x", (256, 1024), "float16"),
                                          b.input("g", (1024,), "float16"), b.input("bb", (1024,), "float16")))),
    lambda: graph(lambda b: b.output(b.op("sum", b.input("x", (64, 300)), axes=[1]))),
    lambda: graph(lambda b: b.output(b.op("sum", b.input("x", (4, 5, 6)), axes=[0, 2], keepdims=True))),
], ids=["add", "cast", "relu", "exp", "softmax", "layer_norm", "reduce_sum", "reduce_sum_axes"])
def test_kernels_match_reference_race_free(make):
    k = check_npu(make())
    report = k.target.backend().report(k.executable, races=True)  # raises NpuRaceError on a missing sync
    assert report.label == "npu-sim" and report.cycles > 0


def test_double_buffering_overlaps_dma_and_vector():
    from akg.backends.npu.sim import simulate

    k = akg.build(add16(), target="npu")
    exe = k.executable
    rep = simulate(exe.program, exe.spec, functional=False, races=False, trace=True).report
    assert rep.overlap("MTE2", "V") > 0
    busy = sum(rep.pipe_busy.values())
    assert rep.cycles * rep.blocks < busy
    assert rep.fraction > 0.8  # within 20% of the GM bound
    single = Config(k.config.fusion, tuple(s if s.op != "promote" else Step("promote", None, "UB", 1)
                                           for s in k.config.steps))
    k1 = akg.build(add16(), target="npu", config=single)
    assert simulate(k1.executable.program, exe.spec, functional=False, races=False).report.cycles > rep.cycles


def test_tile_past_the_ub_is_rejected_before_simulation():
    g = add16()
    config = Config("smart", (Step("tile", 0, "UB", (128, 1024)), Step("map", 0, "cores", (8,)),
                              Step("promote", None, "UB", 2)))
    with pytest.raises(ScheduleError, match="UB needs"):
        akg.build(g, target="npu", config=config)


def test_export_load_and_listing():
    from akg.target import get_backend

    k = akg.build(add16(64), target="npu")
    backend = k.target.backend()
    art = backend.export(k.executable)
    assert art.kind == "npu-sim"
    exe = get_backend("npu-sim").load(art)
    text = backend.source(exe)
    assert "npu-sim" in text and "dma.MTE2" in text and "v.add" in text and "wait_flag" in text
    x = np.ones((64, 1024), np.float16)
    out = np.zeros_like(x)
    backend.entry(exe)(x, x, out)
    assert (out == 2).all()
    assert backend.measure(exe, [], number=1, repeat=2)[0] > 0


def test_unmappable_kernels_raise_typed_errors():
    g = graph(lambda b: b.output(b.op("sin", b.input("t", (32, 48)))))
    with pytest.raises(CompileError, match="not supported yet"):
        akg.build(g, target="npu")
    g = graph(lambda b: b.output(b.cast(b.input("x", (4, 5)), to="int8")))
    with pytest.raises(CompileError, match="not supported yet|NPU"):
        akg.build(g, target="npu")


def test_unsupported_features_are_unsupported_errors():
    """A feature the NPU does not take (an op without an instruction, a dtype outside the
    NPU's, data-dependent indexing, zero-size tensors) is an UnsupportedError (exit 4) naming
    the kernel; it stays a CompileError for callers that catch those."""
    from akg.backends.npu.errors import NpuMappingError
    from akg.errors import UnsupportedError

    cases = [
        (graph(lambda b: b.output(b.op("sin", b.input("t", (32, 48))))), "'tirx.sin' has no NPU vector instruction"),
        (graph(lambda b: b.output(b.cast(b.input("x", (4, 5)), to="int8"))), "is int8; the NPU computes in"),
        (graph(lambda b: b.output(b.op("gather", b.input("x", (8, 16)), b.input("i", (5,), "int32"), axis=0))),
         r"index i\[c0\] reads a tensor \(data-dependent indexing is not supported yet\)"),
    ]
    for g, message in cases:
        with pytest.raises(UnsupportedError, match=message) as info:
            akg.build(g, target="npu")
        assert isinstance(info.value, NpuMappingError) and isinstance(info.value, CompileError)
        assert info.value.exit_code == 4


def test_zero_size_tensors_are_refused_naming_the_kernel():
    """/tmp/fuzz/legal/concat.mir and /tmp/fuzz/wr/zeroreduce.mir: an input of shape (3, 0) was an
    NpuProgramError about a buffer (`shape (3, 0) must be non-empty and positive`, no kernel)."""
    from akg.errors import UnsupportedError

    def concat(b):
        x, y, z = b.input("x", (3, 1)), b.input("y", (3, 0)), b.input("z", (3, 17))
        b.output(b.concat(x, y, z, axis=1))

    for build, kernel, tensor in [(concat, "k", "y"),
                                  (lambda b: b.output(b.op("sum", b.input("x", (3, 0)), axes=[1])), "k", "x")]:
        with pytest.raises(UnsupportedError, match=rf"^{kernel}[^:]*: tensor '{tensor}' has shape \(3, 0\): zero-size "
                                                   rf"tensors are not supported on the NPU$"):
            akg.build(graph(build), target="npu")


def test_rows_fold_into_strided_repeats():
    """Per-row statements of a tile of many short rows: one instruction per repeat-wide chunk
    of the row with repeat = rows (operands at their row strides, per-row values broadcast
    per repeat), not one per row."""
    g = graph(lambda b: b.output(b.op("softmax", b.input("x", (64, 128), "float16"))))
    k = check_npu(g)
    k.target.backend().report(k.executable, races=True)
    text = k.target.backend().source(k.executable)
    import re

    # per-row values broadcast per repeat (at their row stride: 1 in an unpadded (rows, 1) tile)
    assert "bcast(" in text and re.search(r",0,\d+\) repeat=", text)

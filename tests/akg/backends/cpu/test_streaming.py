"""Streaming (non-temporal) stores for outputs (issue 15, item 2): the LLVM IR rewrite, the
`stream` knob of the CPU recipe, and kernels built with it."""

from dataclasses import replace

import numpy as np
import pytest
from akg.backends.cpu import backend as cpu_backend
from akg.backends.cpu.streaming import Rewrite, stream_outputs
from akg.backends.cpu.target import generic_cpu, host_cpu
from akg.graph import GraphBuilder
from akg.graph.compute.lower import lower_graph
from akg.graph.interpreter import random_inputs
from akg.schedules.cpu import STREAM_CACHES, switches_of
from akg.schedules.space import Config, Step

from akg.compiler import Pipeline
from akg.errors import LoweringError, ScheduleError
from akg.target import STREAM
from akg.verify import Reference, compare

# Two functions: @f stores a vector into "out" (never loaded), a vector into "acc" (also
# loaded), a scalar into "out" and an unaligned vector into "out"; @g only loads. "out" is
# reached through a child type (an index range) as TVM makes for constant offsets.
_IR = """\
define internal i32 @f(ptr %out, ptr %acc) {
entry:
  %v = load <16 x float>, ptr %acc, align 64, !tbaa !13
  store <16 x float> %v, ptr %out, align 64, !tbaa !11
  store <16 x float> %v, ptr %acc, align 64, !tbaa !13
  store float 1.0, ptr %out, align 4, !tbaa !11
  store <16 x float> %v, ptr %out, align 4, !tbaa !15
  br i1 true, label %a, label %b
a:
  ret i32 0
b:
  ret i32 1
}

define internal i32 @g(ptr %x) {
  %w = load <16 x float>, ptr %x, align 64, !tbaa !17
  ret i32 0
}

!7 = !{!"tvm-tbaa"}
!10 = !{!"0xaaa", !7, i64 0}
!11 = !{!10, !10, i64 0}
!12 = !{!"0xbbb", !7, i64 0}
!13 = !{!12, !12, i64 0}
!14 = !{!"0xaaa.0-16", !10, i64 0}
!15 = !{!14, !14, i64 0}
!16 = !{!"0xccc", !7, i64 0}
!17 = !{!16, !16, i64 0}
"""
_NAMES = {"0xaaa": "out", "0xbbb": "acc", "0xccc": "x"}


def test_only_aligned_vector_stores_into_outputs_never_loaded_become_streaming():
    rewrite = stream_outputs(_IR, _NAMES)
    assert rewrite.stores == 1 and rewrite.buffers == ("out",)
    lines = rewrite.text.split("\n")
    marked = [line for line in lines if "!nontemporal" in line]
    assert marked == ["  store <16 x float> %v, ptr %out, align 64, !tbaa !11, !nontemporal !18"]
    assert "!18 = !{i32 1}" in lines and "declare void @llvm.x86.sse.sfence()" in lines
    # every return of @f is fenced, @g's is not
    f_body = rewrite.text.split("define internal i32 @g")[0]
    g_body = rewrite.text.split("define internal i32 @g")[1]
    assert f_body.count("call void @llvm.x86.sse.sfence()\n  ret") == 2
    assert "sfence" not in g_body.split("}")[0]


def test_ir_without_streamable_stores_is_left_as_it_is():
    assert stream_outputs(_IR, {"0xbbb": "acc", "0xccc": "x"}).text == _IR  # acc is loaded
    assert stream_outputs(_IR, {}).stores == 0


def _layer_norm(rows=256, cols=512):
    b = GraphBuilder("ln")
    b.output(b.layer_norm(b.input("x", (rows, cols)), b.input("g", (cols,)), b.input("bt", (cols,)), epsilon=1e-5))
    return b.build()


x86 = pytest.mark.skipif(not host_cpu().has(STREAM), reason="streaming stores are built for x86 hosts")


@x86
def test_a_kernel_with_the_stream_step_writes_its_output_with_streaming_stores():
    graph = _layer_norm()
    pipeline = Pipeline(lower_graph(graph), host_cpu())
    default = pipeline.default_config()
    assert not default.has("stream")  # 0.5 MB of data: the caches keep it
    config = Config(default.fusion, default.steps + (Step("stream"),))
    kernel = pipeline.build(config)
    asm = kernel.source("asm")
    assert "vmovntps" in asm and "sfence" in asm
    assert "vmovntps" not in pipeline.build(default).source("asm")
    inputs = random_inputs(graph, 0)
    assert compare(graph, kernel(**inputs), Reference.of(graph, inputs)) == []
    backend = kernel.target.backend()  # the recompiled module exports and loads like any other
    loaded = backend.load(backend.export(kernel.executable))
    ins, outs = kernel.device_arguments(**inputs)
    backend.entry(loaded)(*ins, *outs)
    np.testing.assert_array_equal(outs[0].numpy(), kernel(**inputs)[0])


@x86
def test_ir_that_does_not_compile_after_the_rewrite_is_a_lowering_error(monkeypatch):
    monkeypatch.setattr(cpu_backend, "stream_outputs", lambda ir, names: Rewrite("not LLVM IR", 1, ("t0",)))
    pipeline = Pipeline(lower_graph(_layer_norm()), host_cpu())
    default = pipeline.default_config()
    with pytest.raises(LoweringError, match="LLVM compilation failed"):
        pipeline.build(Config(default.fusion, default.steps + (Step("stream"),)))


@x86
def test_data_past_the_last_level_cache_streams_by_default():
    graph = _layer_norm()  # 0.5 MB in and out
    data = 2 * 256 * 512 * 4 + 2 * 512 * 4
    for l3, streams in ((int(data / STREAM_CACHES), True), (int(data / STREAM_CACHES) + 4096, False)):
        target = replace(host_cpu(), l2_bytes=1024, l3_bytes=l3)
        pipeline = Pipeline(lower_graph(graph), target)
        assert pipeline.recipe.data_bytes == data
        assert pipeline.default_config().has("stream") is streams
        space = pipeline.space()
        assert space.switches["stream"] == (False, True)
        assert switches_of(pipeline.default_config())["stream"] is streams
        # the tuner measures the other choice right after the default
        flipped = pipeline.alternative_configs()[0]
        assert flipped.has("stream") is not streams
        assert flipped.without("stream") == pipeline.default_config().without("stream")


@x86
def test_kernels_with_transcendentals_stream_only_when_tuned_so():
    b = GraphBuilder("sm")
    b.output(b.softmax(b.input("x", (256, 512))))
    pipeline = Pipeline(lower_graph(b.build()), replace(host_cpu(), l2_bytes=1024, l3_bytes=4096))
    assert pipeline.recipe.transcendental and not pipeline.default_config().has("stream")
    assert pipeline.alternative_configs()[0].has("stream")


def test_the_switch_is_in_the_space_only_past_the_caches_and_only_on_x86():
    graph = _layer_norm()
    cached = Pipeline(lower_graph(graph), replace(host_cpu(), l2_bytes=1 << 30))
    assert "stream" not in cached.space().switches
    if host_cpu().has(STREAM):  # past the L2s, well inside the L3: searched, not a close call
        inside = Pipeline(lower_graph(graph), replace(host_cpu(), l2_bytes=1024, l3_bytes=1 << 30))
        assert "stream" in inside.space().switches and not inside.default_config().has("stream")
        assert not any(c.has("stream") for c in inside.alternative_configs())
    generic = Pipeline(lower_graph(graph), replace(generic_cpu(), l2_bytes=1024, l3_bytes=1024))
    assert "stream" not in generic.space().switches and not generic.default_config().has("stream")
    config = generic.default_config()
    with pytest.raises(ScheduleError, match="stream"):
        generic.recipe.validate(Config(config.fusion, config.steps + (Step("stream"),)), generic.bands)
    assert Config.from_json(Config("smart", (Step("stream"),)).to_json()).has("stream")

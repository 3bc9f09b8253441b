"""CPU knobs for memory-bound multi-pass reductions (issue 15, item 2): software prefetch
along the row loop of a multi-pass band, wide column strips for reductions over rows."""

import random
from dataclasses import replace

import numpy as np
import pytest
from akg.graph import GraphBuilder
from akg.graph.compute.lower import lower_graph
from akg.graph.interpreter import random_inputs
from akg.schedules.cpu import PREFETCH_DISTANCES, bands_of, cpu_config, switches_of
from akg.schedules.space import Config

import akg
from akg.compiler import Pipeline
from akg.target import get_target
from akg.verify import Reference, compare
from tests.polyhedral.test_tree import _mad_norm as _mad


def _layer_norm(rows=256, cols=512):
    b = GraphBuilder("ln")
    b.output(b.layer_norm(b.input("x", (rows, cols)), b.input("g", (cols,)), b.input("bt", (cols,)), epsilon=1e-5))
    return b.build()


def _mad_norm(rows=256, cols=512):
    # three passes over each row, two of them only reading it (a layer norm's statistics take
    # one read: akg.graph.moments)
    return _mad(rows, cols)


def _softmax(rows=256, cols=512):
    b = GraphBuilder("sm")
    b.output(b.softmax(b.input("x", (rows, cols))))
    return b.build()


def _matches(graph, kernel):
    inputs = random_inputs(graph, 0)
    assert compare(graph, kernel(**inputs), Reference.of(graph, inputs)) == []


def _with_prefetch(config, distance):
    bands = bands_of(config)
    return cpu_config(config.fusion, (replace(bands[0], prefetch=distance), *bands[1:]), **switches_of(config))


def test_the_space_of_a_multi_pass_band_holds_prefetch_distances():
    pipeline = Pipeline(lower_graph(_mad_norm()), get_target("cpu"))
    space = pipeline.space()
    assert space.bands[0].prefetches == PREFETCH_DISTANCES
    rng = random.Random(0)
    seen = {bands_of(space.sample(rng))[0].prefetch for _ in range(64)}
    assert seen == set(PREFETCH_DISTANCES)
    config = _with_prefetch(pipeline.default_config(), 4)
    assert space.is_legal(config)
    assert Config.from_json(config.to_json()) == config and bands_of(config)[0].prefetch == 4
    assert bands_of(pipeline.default_config())[0].prefetch == 1  # the next row (block) by default


@pytest.mark.parametrize("kind", ["rms_norm", "layer_norm"])
def test_two_pass_bands_prefetch_only_when_tuned_so(kind):
    # an rms_norm: sum of squares, then the output; a layer norm: its two shifted sums in one
    # loop (the shift, one vector's mean, is no pass), then the output. The hardware's
    # prefetchers keep up with two passes (see cpu_defaults), so the default asks for none, and
    # the knob stays
    b = GraphBuilder("rms")
    x = b.input("x", (256, 512))
    b.output(b.mul(x, b.rsqrt(b.mean(b.mul(x, x), axes=[1], keepdims=True))))
    graph = b.build() if kind == "rms_norm" else _layer_norm()
    pipeline = Pipeline(lower_graph(graph), get_target("cpu"))
    assert pipeline.bands[0].passes == 2
    assert bands_of(pipeline.default_config())[0].prefetch == 0
    assert pipeline.space().bands[0].prefetches == PREFETCH_DISTANCES


def test_single_pass_bands_have_no_prefetch_knob():
    b = GraphBuilder("add")
    b.output(b.add(b.input("x", (256, 512)), b.input("y", (256, 512))))
    space = Pipeline(lower_graph(b.build()), get_target("cpu")).space()
    assert all(bs.prefetches == (0,) for bs in space.bands)


def test_prefetch_rows_ahead_and_still_match_the_reference():
    for graph in (_mad_norm(), _softmax()):
        default = akg.build(graph)
        assert "llvm.prefetch" in default.tir()
        assert "llvm.prefetch" not in akg.build(graph, config=_with_prefetch(default.config, 0)).tir()
        kernel = akg.build(graph, config=_with_prefetch(default.config, 2))
        assert "llvm.prefetch" in kernel.tir()
        assert "prefetcht0" in kernel.source("asm")
        _matches(graph, kernel)


def test_prefetches_are_spread_over_the_pass_that_computes_most():
    # a softmax row: max, exponentials (most arithmetic), sum, output; the next row's cache
    # lines are prefetched one (or a few) per iteration of the exponentials' loop over vectors,
    # which is explicit (a loop over vectors around a vector loop), not left to LLVM
    tir = akg.build(_softmax()).tir()
    lines = tir.splitlines()
    at = next(i for i, line in enumerate(lines) if "llvm.prefetch" in line)
    loop = next(line for line in reversed(lines[:at]) if line.lstrip().startswith("for ") and "pf" not in line)
    body = "\n".join(lines[at:at + 12])
    assert "range(" in loop and "T.vectorized(" in body and "llvm.arithmetic.fence" in body  # exp's rounding
    assert sum("llvm.prefetch" in line for line in lines) == 1


def test_column_reductions_read_long_runs_of_each_row():
    b = GraphBuilder("colsum")
    b.output(b.sum(b.input("x", (2048, 1024)), axes=[0]))
    graph = b.build()
    kernel = akg.build(graph)
    band = bands_of(kernel.config)[0]
    assert band.sink and band.register[0] * 4 >= 1024  # 1 KB of each row per reduction step
    x = np.random.default_rng(0).standard_normal((2048, 1024)).astype(np.float32)
    np.testing.assert_allclose(kernel(x)[0], x.astype(np.float64).sum(0), rtol=1e-4, atol=1e-3)

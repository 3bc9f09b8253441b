"""Column sums fused into the row band that reads the same rows (polyhedral/row_partials.py,
graph/compute/lower.split_column_reductions, the CPU mapping's whole-block parallel chunks)."""

from dataclasses import replace

import numpy as np

import akg
from akg.compiler import Pipeline
from akg.graph import GraphBuilder
from akg.graph.compute.lower import lower_graph, split_column_reductions
from akg.graph.interpreter import random_inputs
from akg.schedules.cpu import bands_of, cpu_config, switches_of
from akg.target import get_target
from akg.verify import Reference, compare


def _layer_norm_backward(rows=512, cols=256):
    b = GraphBuilder("lnb")
    dy, x = b.input("dy", (rows, cols)), b.input("x", (rows, cols))
    mean, rstd, g = b.input("mean", (rows, 1)), b.input("rstd", (rows, 1)), b.input("g", (cols,))
    xhat = b.mul(b.sub(x, mean), rstd)
    dyg = b.mul(dy, g)
    m1 = b.mean(dyg, axes=[1], keepdims=True)
    m2 = b.mean(b.mul(dyg, xhat), axes=[1], keepdims=True)
    dx = b.mul(rstd, b.sub(b.sub(dyg, m1), b.mul(xhat, m2)))
    b.output(dx, b.sum(b.mul(dy, xhat), axes=[0]), b.sum(dy, axes=[0]))
    return b.build()


def _bias_gradient(rows=1024, cols=128):
    """An elementwise op beside the column sum of its input (a dense layer's bias gradient)."""
    b = GraphBuilder("bias_grad")
    dy = b.input("dy", (rows, cols))
    b.output(b.mul(dy, b.input("mask", (rows, cols))), b.sum(dy, axes=[0]))
    return b.build()


def _matches(graph, kernel):
    inputs = random_inputs(graph, 0)
    assert compare(graph, kernel(**inputs), Reference.of(graph, inputs)) == []


def _partials(program):
    return [op for op in program.ops() if op.name.endswith(".partial")]


def test_column_sums_beside_a_row_loop_are_split_into_row_blocks():
    program = split_column_reductions(lower_graph(_layer_norm_backward()), 8)
    assert sorted(tuple(op.output.shape) for op in _partials(program)) == [(8, 256), (8, 256)]
    # a column sum with no row loop beside it is left alone
    b = GraphBuilder("colsum")
    b.output(b.sum(b.input("x", (512, 256)), axes=[0]))
    assert not _partials(split_column_reductions(lower_graph(b.build()), 8))
    # and one over rows that the row loop writes (isl fuses those itself, column-major)
    b = GraphBuilder("square_and_sum")
    x = b.input("x", (512, 256))
    y = b.mul(x, x)
    b.output(y, b.sum(y, axes=[0]))
    assert not _partials(split_column_reductions(lower_graph(b.build()), 8))
    # so is one whose row loop comes after it (a batch norm's output needs the whole mean)
    b = GraphBuilder("center")
    x = b.input("x", (512, 256))
    b.output(b.sub(x, b.mean(x, axes=[0], keepdims=True)))
    assert not _partials(split_column_reductions(lower_graph(b.build()), 8))


def test_the_row_band_computes_the_partial_sums():
    graph = _layer_norm_backward()
    pipeline = Pipeline(lower_graph(graph), get_target("cpu"))
    first = pipeline.bands[0]
    partial = {s.name for s in pipeline.model.statements if s.op.name.endswith(".partial")}
    assert partial and partial <= set(first.statements)  # in the band with the row passes
    assert first.blocks == 512 // (get_target("cpu").cores * 4) and first.extents == (512,)
    assert all(not (partial & set(b.statements)) for b in pipeline.bands[1:])
    kernel = akg.build(graph)
    text = str(kernel.func)
    assert text.count("T.parallel(") == 1  # the final sums over the blocks are small and serial
    _matches(graph, kernel)


def test_partial_sums_stay_local_for_a_whole_block():
    lines = str(akg.build(_layer_norm_backward()).func).splitlines()
    chunk = next(i for i, line in enumerate(lines) if "T.parallel(" in line)
    indent = len(lines[chunk]) - len(lines[chunk].lstrip())
    stores = [line for line in lines if "=" in line and "_partial[" in line.split("=")[0]]
    loads = [line for line in lines if "=" in line and "_partial_local[" in line.split("=")[0]
             and "_partial[" in line.split("=", 1)[1]]
    # copied out once per parallel chunk, after its rows (in a copy loop right below the chunk
    # loop), never copied in: each chunk starts its block's sums from zero
    assert len(stores) == 2 and all(len(s) - len(s.lstrip()) == indent + 8 for s in stores)
    assert loads == []


def test_a_bias_gradient_is_fused_with_its_elementwise_neighbour():
    graph = _bias_gradient()
    pipeline = Pipeline(lower_graph(graph), get_target("cpu"))
    assert pipeline.bands[0].blocks > 0 and len(pipeline.bands[0].statements) >= 3
    _matches(graph, akg.build(graph))


def test_row_tiles_that_split_a_block_run_serially_and_still_match():
    graph = _layer_norm_backward()
    kernel = akg.build(graph)
    bands = bands_of(kernel.config)
    blocks = Pipeline(lower_graph(graph), get_target("cpu")).bands[0].blocks
    for tile in (0, blocks // 2, 512):  # untiled, half a block, the whole loop
        config = cpu_config(kernel.config.fusion, (replace(bands[0], tile=(tile,), register=(0,)), *bands[1:]),
                            **switches_of(kernel.config))
        k = akg.build(graph, config=config)
        assert "T.parallel(" not in str(k.func)
        _matches(graph, k)
    config = cpu_config(kernel.config.fusion, (replace(bands[0], tile=(2 * blocks,)), *bands[1:]),
                        **switches_of(kernel.config))
    k = akg.build(graph, config=config)
    assert "T.parallel(" in str(k.func)
    _matches(graph, k)


def test_fused_column_sums_keep_float32_accuracy():
    rows, cols = 4096, 256
    graph = _bias_gradient(rows, cols)
    rng = np.random.default_rng(1)
    dy = (rng.standard_normal((rows, cols)) * 10.0 ** rng.uniform(-3, 3, (rows, 1))).astype(np.float32)
    mask = np.ones((rows, cols), np.float32)
    out = akg.build(graph)(dy=dy, mask=mask)[1]
    exact = dy.astype(np.float64).sum(0)
    scale = np.abs(dy).astype(np.float64).sum(0)
    assert np.max(np.abs(out - exact) / scale) < 1e-4


def test_one_line_streams_are_prefetched_once_per_row():
    # the next row's mean and rstd are one cache line each: prefetched once at the top of the
    # row, not on every iteration of the pass that spreads the row's own prefetches (the
    # default of this two-pass band prefetches nothing: asked for here)
    graph = _layer_norm_backward()
    default = akg.build(graph).config
    bands = bands_of(default)
    assert bands[0].prefetch == 0
    config = cpu_config(default.fusion, (replace(bands[0], prefetch=1), *bands[1:]), **switches_of(default))
    lines = str(akg.build(graph, config=config).func).splitlines()
    depth = {name: [len(line) - len(line.lstrip()) for line in lines
                    if "llvm.prefetch" in line and f"address_of({name}[" in line] for name in ("mean", "dy")}
    assert len(depth["mean"]) == 1 and len(depth["dy"]) == 1 and depth["mean"][0] < depth["dy"][0]

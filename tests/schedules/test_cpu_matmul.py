"""The CPU mapping of small matmuls (issue 15, item 4): the register tile keeps several rows
of vector accumulators under the reduction even where the parallel chunks of rows are
smaller than the tile it wanted, so each FMA has independent work beside it."""

import dataclasses

import numpy as np
import pytest

import akg
from akg.graph import GraphBuilder, random_inputs
from akg.graph.fuse import partition
from akg.schedules.cpu import bands_of, cpu_config, switches_of
from akg.target import get_target
from akg.verify import Reference, compare


def _dense(m, k, n, seed=0):
    rng = np.random.default_rng(seed)
    b = GraphBuilder("dense")
    x = b.input("x", (m, k))
    w = b.const(rng.standard_normal((k, n)).astype(np.float32) * 0.1, name="w")
    bias = b.const(rng.standard_normal(n).astype(np.float32), name="bias")
    b.output(b.relu(b.add(b.matmul(x, w), bias)))
    return b.build()


@pytest.mark.parametrize("m, k, n", [(32, 784, 256), (32, 128, 128), (8, 64, 64), (4, 400, 120)])
def test_small_matmuls_keep_rows_of_accumulators(m, k, n):
    graph = _dense(m, k, n)
    target = get_target("cpu")
    (kernel,) = partition(graph, target=target).kernels
    built = akg.build(kernel.subgraph, target)
    band = bands_of(built.config)[-1]
    assert band.sink
    rows = band.register[0] or band.tile[0] or m
    assert rows >= min(m, 4), band  # not one row of vectors waiting on each FMA
    inputs = random_inputs(graph, 1)
    assert compare(graph, [built(**inputs)[0]], Reference.of(graph, inputs)) == []


def _default_band(m, k, n, l2_bytes=None):
    graph = _dense(m, k, n)
    target = get_target("cpu")
    if l2_bytes is not None:  # the host with another L2 (the rules below depend on it)
        target = dataclasses.replace(target, l2_bytes=l2_bytes)
    (kernel,) = partition(graph, target=target).kernels
    built = akg.build(kernel.subgraph, target)
    return graph, built, bands_of(built.config)[-1]


def test_a_large_weight_under_few_rows_is_read_in_blocks():
    # an encoder's dense layer (128 x 768 x 768: 2.4 MB of weight, more than half of L2): one
    # strip of columns per cache tile over all 128 rows, the reduction in blocks whose weight
    # slice fills half of L1, the next block prefetched; where the rows' 384 KB of input fit in
    # a quarter of L2 (a 2 MiB L2: each strip of columns reads them all again)
    graph, built, band = _default_band(128, 768, 768, l2_bytes=2 << 20)
    assert band.block and band.prefetch and band.tile[0] == 0 and band.tile[-1] == band.register[-1]
    assert "llvm.prefetch" in built.tir()
    inputs = random_inputs(graph, 1)
    assert compare(graph, [built(**inputs)[0]], Reference.of(graph, inputs)) == []


@pytest.mark.parametrize("m, k, n", [(128, 3072, 768), (1024, 768, 768), (128, 256, 256)])
def test_matmuls_that_keep_unblocked_reductions(m, k, n):
    # rows filling L2 (a 3072-deep input, re-read per strip), many rows (each weight tile
    # serves them from L2), a weight that fits L2: the reduction is not blocked (on the 2 MiB L2
    # of the test above as on the host's)
    for l2 in (None, 2 << 20):
        _, _, band = _default_band(m, k, n, l2)
        assert not band.block


def test_a_matrix_vector_product_streams_its_weight_on_every_core():
    # a classifier on one image (1 x 512 x 1000: 512 K multiply-adds, each reading its own
    # weight element) runs its columns in parallel where a matmul of as many multiply-adds
    # over several rows (64 x 64 x 128, each weight element serving 64 rows) stays on one core
    from akg.polyhedral.bands import BandInfo
    from akg.schedules.cpu_band import PARALLEL_MIN_REDUCTION_POINTS
    from akg.schedules.cpu_defaults import parallel_threshold

    def band(extents):
        return BandInfo(0, extents, (True,) * len(extents), True, ("S",), (1,) * len(extents), 0, True, True,
                        work=512 * 1000)

    assert parallel_threshold(band((1000,))) < 512 * 1000 <= PARALLEL_MIN_REDUCTION_POINTS
    assert parallel_threshold(band((64, 128))) == PARALLEL_MIN_REDUCTION_POINTS
    graph, built, _ = _default_band(1, 512, 1000)
    if get_target("cpu").cores > 1:
        assert "T.parallel" in built.tir()
    inputs = random_inputs(graph, 1)
    assert compare(graph, [built(**inputs)[0]], Reference.of(graph, inputs)) == []


def test_a_context_product_with_merged_heads_vectorizes_along_one_head():
    """The context product written back with its heads merged into the hidden dim (16 h + d)
    takes a vector strip no wider than one head's d: a strip across two heads gathers every
    operand (MindIR transformer_layer: 10.0 -> 0.56 us)."""
    b = GraphBuilder("ctx4")
    ctx = b.batch_matmul(b.input("p", (2, 4, 16, 16)), b.input("v", (2, 4, 16, 16)))
    b.output(b.reshape(b.transpose(ctx, perm=[0, 2, 1, 3]), shape=[32, 64]))
    graph = b.build()
    target = get_target("cpu")
    (kernel,) = partition(graph, target=target).kernels
    built = akg.build(kernel.subgraph, target)
    band = bands_of(built.config)[-1]
    # one head (16) on 8 and 16 lanes; two vectors where they are narrower than a head
    assert band.sink and band.register[-1] == min(16, 2 * target.vector_lanes("float32")), band
    assert "15 - " not in built.tir()  # no loop runs backwards (a band isl added over -d)
    inputs = random_inputs(graph, 1)
    assert compare(graph, [built(**inputs)[0]], Reference.of(graph, inputs)) == []


@pytest.mark.parametrize("block", [16, 24])
def test_a_matmul_reduction_runs_in_blocks(block):
    # the band of one point that keeps a matmul's initialisation under the sunk band is no
    # loop of the reduction: the block loop runs over K's blocks (ceil(96 / block)), the
    # initialisation in the first, the bias and relu in the last, and the result stays exact
    graph = _dense(64, 96, 48)
    target = get_target("cpu")
    (kernel,) = partition(graph, target=target).kernels
    default = akg.build(kernel.subgraph, target)
    bands = list(bands_of(default.config))
    bands[-1] = dataclasses.replace(bands[-1], sink=True, block=block)
    blocked = akg.build(kernel.subgraph, target, cpu_config(default.config.fusion, tuple(bands),
                                                            **switches_of(default.config)))
    assert f"T.grid({-(-96 // block)}" in blocked.tir() or f"range({-(-96 // block)})" in blocked.tir()
    inputs = random_inputs(graph, 1)
    assert compare(graph, [blocked(**inputs)[0]], Reference.of(graph, inputs)) == []


def test_a_classifier_on_pooled_features_vectorises_its_reduction():
    # ResNet's head: the global pool's [N, C, 1, 1] reshaped to [N, C] times a weight stored
    # [classes, C]: fewer classes than a vector has lanes (10 on AVX-512); the reduction over C
    # reads both operands contiguously and is the vector loop (0.95 -> 0.08 us on Zen 4)
    target = get_target("cpu")
    lanes = target.vector_lanes("float32")
    classes = min(lanes // 2 + 2, lanes - 1)
    rng = np.random.default_rng(0)
    b = GraphBuilder("head")
    feats = b.reshape(b.input("x", (2, 128, 1, 1)), shape=[2, 128])
    w = b.const(rng.standard_normal((classes, 128)).astype(np.float32), name="w")
    b.output(b.add(b.matmul(feats, w, transpose_b=True), b.const(rng.standard_normal(classes).astype(np.float32))))
    graph = b.build()
    (kernel,) = partition(graph, target=target).kernels
    built = akg.build(kernel.subgraph, target)
    (band,) = bands_of(built.config)
    assert not band.sink
    assert f"T.vectorized({lanes})" in built.tir()
    inputs = random_inputs(graph, 1)
    assert compare(graph, [built(**inputs)[0]], Reference.of(graph, inputs)) == []

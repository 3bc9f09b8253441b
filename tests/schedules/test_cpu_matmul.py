"""The CPU mapping of small matmuls (issue 15, item 4): the register tile keeps several rows
of vector accumulators under the reduction even where the parallel chunks of rows are
smaller than the tile it wanted, so each FMA has independent work beside it."""

import numpy as np
import pytest

import akg
from akg.graph import GraphBuilder, random_inputs
from akg.graph.fuse import partition
from akg.schedules.cpu import bands_of
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

"""Inlining of producers read in phases, and the fusion strategy of a kernel's default config
(graph/compute/lower.py: `inline`, `default_fusion`)."""

import numpy as np

from akg.graph import GraphBuilder
from akg.graph.compute.expr import compute, placeholder
from akg.graph.compute.lower import Program, default_fusion, inline, lower_graph
from akg.graph.ops.winograd import weight_transform


def _phases(producer_loads: int):
    """y[r, x] = z[r, x % 2, x // 2] (a row interleaved from two phases) over a producer z that
    reads `producer_loads` elements of the input."""
    a = placeholder((4, 9), "float32", "a")

    def zbody(r, p, t):
        value = a[r, t + p]
        for k in range(1, producer_loads):
            value = value + a[r, t + p + k - k]  # the same element again: a second load
        return value

    z = compute((4, 2, 8), zbody, "z")
    y = compute((4, 16), lambda r, x: z[r, x % 2, x // 2], "y")
    return Program("p", [a], [y])


def _stages(program):
    return [op.name for op in program.ops()]


def test_a_producer_read_in_phases_is_kept_when_it_reads_more_than_one_element():
    program = inline(_phases(2))
    assert _stages(program) == ["z", "y"]
    assert default_fusion(program) == "none"


def test_a_copy_read_in_phases_is_still_inlined():
    program = inline(_phases(1))
    assert _stages(program) == ["y"]
    assert default_fusion(program) == "smart"


def test_winograds_output_tiles_are_a_stage_of_their_own():
    b = GraphBuilder("out")
    m = b.input("m", (4, 4, 8, 14, 16))
    b.output(b.relu(b.op("winograd_output", m, batch=1, out_hw=[28, 28], cols=16)))
    program = lower_graph(b.build())
    assert [op.name.split(".")[-1] for op in program.ops()][:1] == ["tiles"]
    assert default_fusion(program) == "none"


def test_kernels_without_phases_keep_smart_fusion():
    rng = np.random.default_rng(0)
    b = GraphBuilder("conv")
    x = b.input("x", (1, 8, 10, 10))
    b.output(b.relu(b.conv2d(x, b.const(rng.standard_normal((8, 8, 3, 3)).astype(np.float32)), padding=[1, 1])))
    assert default_fusion(lower_graph(b.build())) == "smart"
    b = GraphBuilder("product")
    v = b.input("v", (4, 4, 8, 14, 16))
    b.output(b.op("winograd_product", b.const(weight_transform(rng.standard_normal((8, 8, 3, 3)).astype(np.float32))), v))
    assert default_fusion(lower_graph(b.build())) == "smart"

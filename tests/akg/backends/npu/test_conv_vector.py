"""fp32 convolutions and poolings on the vector path (the cube takes fp16 only): a window's
column offset `x*s + rx` is no aligned vector start, so the backend unfolds the windowed input
in UB (`backend.Window`: one aligned row per window offset, the GM -> UB DMA making the shifted,
de-strided copies). Each kernel against the NumPy reference, with the race detector on."""

import numpy as np
import pytest

import akg
from akg.graph import GraphBuilder

from conftest_npu import check_npu


def conv(x, w, padding=(0, 0), strides=(1, 1), dilation=(1, 1), bias=False, relu=False, groups=1):
    b = GraphBuilder("conv32")
    y = b.conv2d(b.input("x", x, "float32"), b.input("w", w, "float32"), padding=list(padding),
                 strides=list(strides), dilation=list(dilation), groups=groups)
    if bias:
        y = b.add(y, b.input("bias", (1, w[0], 1, 1), "float32"))
    if relu:
        y = b.relu(y)
    b.output(y)
    return b.build()


def check(g):
    kernel = akg.build(g, target="npu")
    check_npu(g, kernel)  # fp32: the reference's float32 tolerance
    backend = kernel.target.backend()
    text = backend.source(kernel.executable)
    assert "mmad" not in text  # fp32 stays off the cube (no fp16 computation of fp32 data)
    report = backend.report(kernel.executable, races=True)  # NpuRaceError on a missing sync
    assert report.cycles > 0
    return kernel, report


@pytest.mark.parametrize("make", [
    lambda: conv((2, 1, 12, 12), (3, 1, 5, 5)),
    lambda: conv((1, 3, 11, 11), (4, 3, 5, 5), strides=(2, 2)),
    lambda: conv((2, 4, 8, 8), (5, 4, 3, 3), padding=(1, 1)),
    lambda: conv((1, 4, 9, 9), (4, 4, 3, 3), padding=(1, 1), strides=(2, 2)),
    lambda: conv((1, 2, 10, 10), (3, 2, 3, 3), padding=(2, 1, 0, 1), dilation=(2, 2)),
    lambda: conv((1, 3, 9, 13), (4, 3, 5, 3), padding=(2, 1), bias=True, relu=True),
    lambda: conv((2, 4, 9, 9), (8, 1, 3, 3), padding=(1, 1), groups=4),
    lambda: conv((1, 3, 8, 8), (4, 3, 1, 1), strides=(2, 2)),
], ids=["5x5", "5x5_stride2", "3x3_pad", "3x3_pad_stride2", "dilation_asymmetric_pad", "bias_relu", "grouped",
        "1x1_stride2"])
def test_fp32_conv_with_unaligned_window_offsets_matches_numpy(make):
    check(make())


def test_fp32_conv_reads_each_window_offset_from_its_own_aligned_row():
    """The windowed input is unfolded in UB: its GM -> UB DMA reads overlapping, shifted
    columns, and every vector instruction over the output columns starts aligned (the
    simulator's alignment check would refuse one that does not)."""
    kernel, _report = check(conv((2, 1, 12, 12), (3, 1, 5, 5)))
    from akg.backends.npu.isa import Dma, Loop, Scope

    def dmas(body):
        for x in body:
            if isinstance(x, Loop):
                yield from dmas(x.body)
            elif isinstance(x, Dma):
                yield x

    program = kernel.executable.program
    reads = [d for d in dmas(program.body) if d.src.scope is Scope.GM and d.src.buffer.name == "x"]
    # one loop of DMAs per window column offset: the GM start moves by one element per offset,
    # the UB start by whole rows (aligned)
    assert reads and any(c == 1 for d in reads for _v, c in d.src.offset.terms)
    assert all(all((c * 4) % 32 == 0 for _v, c in d.dst.offset.terms) for d in reads)


@pytest.mark.parametrize("kernel_size,strides,padding", [((2, 2), (2, 2), (0, 0)), ((3, 3), (2, 2), (1, 1)),
                                                          ((3, 3), (1, 1), (0, 0))],
                         ids=["2x2_s2", "3x3_s2_pad", "3x3_s1"])
def test_fp32_max_pool_windows_match_numpy(kernel_size, strides, padding):
    b = GraphBuilder("pool32")
    b.output(b.max_pool2d(b.input("x", (2, 3, 12, 12), "float32"), kernel=list(kernel_size), strides=list(strides),
                          padding=list(padding), ceil_mode=False))
    g = b.build()
    kernel = akg.build(g, target="npu")
    check_npu(g, kernel)
    kernel.target.backend().report(kernel.executable, races=True)


def test_fp32_pool_then_flatten_writes_its_merged_dims_through_the_dma():
    """A 2x2 / stride-2 max pool flattened in the same kernel (LeNet-5's pool + flatten): the
    scheduler merges the pool's (c, y, x) loops into the flat one (`c // 25`, `c // 5 % 5`,
    `c % 5`, and forms like `(24 c + 24) // 25` that are affine on the loops' ranges only),
    which is split at each divisor; the flat output's rows of 5 are no whole blocks,
    so it is laid out [c][y][x] in UB with aligned rows, the UB -> GM DMA writing them back
    flat."""
    b = GraphBuilder("pool_flat")
    p = b.max_pool2d(b.input("x", (2, 16, 10, 10), "float32"), kernel=[2, 2], strides=[2, 2], padding=[0, 0],
                     ceil_mode=False)
    b.output(b.reshape(p, shape=[2, 400]))
    g = b.build()
    kernel = akg.build(g, target="npu")
    check_npu(g, kernel)
    kernel.target.backend().report(kernel.executable, races=True)

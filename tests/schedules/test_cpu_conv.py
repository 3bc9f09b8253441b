"""The CPU mapping of small convolutions (issue 15, item 4): a conv whose output rows are
narrower than a vector is vectorised over its output channels, read along a channels-last
weight (`akg.graph.layout`); every small, strided, 1x1 and depthwise shape of the benchmark's
CNNs still matches the reference, with the layout and mapping the model pipeline chooses."""

import math
import re
from dataclasses import replace

import numpy as np
import pytest

import akg
from akg.api import compile_model
from akg.graph import GraphBuilder, random_inputs
from akg.graph.fuse import partition
from akg.schedules.cpu import bands_of, cpu_config, switches_of
from akg.schedules.cpu_defaults import _even_chunks, channel_vector_band
from akg.backends.cpu import CpuTarget
from akg.target import get_target
from akg.verify import Reference, compare

# The machine several mapping decisions below were made for (AVX-512: 16 lanes, 32 registers;
# the Zen 4 VM's 32 KiB L1 and 1 MiB L2). Tests that pin such a decision check it on this
# target on every host (an AVX2 host decides otherwise: 8 lanes make other rows whole
# vectors); LLVM's generic CPU runs its kernels anywhere, and the models are still checked
# on the host's own target.
AVX512 = CpuTarget(vector_bits=512, vector_registers=32, cores=2, l1_bytes=32 * 1024, l2_bytes=1024 * 1024)


def _conv_bn_relu(batch, channels, out_channels, image, k, stride, groups=1, residual=False, seed=0):
    """conv2d + an inference batch norm's scale and shift + relu (+ a residual input), as the
    benchmark's ResNet and MobileNet blocks fuse them into one kernel."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder("conv_bn")
    x = b.input("x", (batch, channels, image, image))
    w = b.const(rng.standard_normal((out_channels, channels // groups, k, k)).astype(np.float32), name="w")
    y = b.conv2d(x, w, strides=[stride, stride], padding=[k // 2, k // 2], groups=groups)
    y = b.batch_norm(y, *(b.const(rng.uniform(0.5, 1.5, out_channels).astype(np.float32)) for _ in range(2)),
                     b.const(rng.standard_normal(out_channels).astype(np.float32) * 0.1),
                     b.const(rng.uniform(0.5, 1.5, out_channels).astype(np.float32)))
    if residual:
        y = b.add(y, b.input("skip", y.shape))
    b.output(b.relu(y))
    return b.build()


SHAPES = {  # batch, channels, out channels, image, kernel, stride, groups
    "resnet-stem-7x7-s2": (2, 3, 16, 32, 7, 2, 1),
    "3x3-8x8-16ch": (2, 16, 16, 8, 3, 1, 1),
    "3x3-s2-to-4x4": (2, 16, 32, 8, 3, 2, 1),
    "1x1-s2-downsample": (2, 16, 32, 8, 1, 2, 1),
    "3x3-4x4-32ch": (2, 32, 32, 4, 3, 1, 1),
    "3x3-2x2-64ch": (2, 64, 64, 2, 3, 1, 1),
    "3x3-1x1-128ch": (2, 128, 128, 1, 3, 1, 1),
    "3x3-odd-channels": (1, 24, 40, 5, 3, 1, 1),
    "1x1-few-channels": (2, 8, 24, 6, 1, 1, 1),
    "one-channel-padded": (8, 1, 8, 28, 3, 1, 1),
    "depthwise-3x3": (1, 48, 48, 14, 3, 1, 48),
    "depthwise-3x3-s2": (1, 32, 32, 9, 3, 2, 32),
    "grouped": (1, 32, 32, 6, 3, 1, 4),
}


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_small_conv_kernels_match_the_reference(shape):
    graph = _conv_bn_relu(*shape, residual=shape[-1] == 1 and shape[5] == 1 and shape[1] == shape[2])
    model = compile_model(graph)
    assert len(model.calls) == 1  # conv, batch norm, relu (and the residual) in one kernel
    inputs = random_inputs(graph, 1)
    assert compare(graph, model(**inputs), Reference.of(graph, inputs)) == []


def _kernel_config(graph, target=None):
    """The direct conv's kernel (Winograd, `akg.graph.winograd`, would take some of these 3x3
    convs: tests/graph/test_winograd.py) and its build with the default config (for the
    host's CPU unless `target` is given)."""
    target = target or get_target("cpu")
    (kernel,) = partition(graph, target=target, winograd=False).kernels
    return kernel, akg.build(kernel.subgraph, target)


def test_narrow_conv_is_vectorised_over_output_channels():
    lanes = get_target("cpu").vector_lanes("float32")
    if lanes < 8:
        pytest.skip("the channel-vector mapping of vector units of 8 lanes or more")
    graph = _conv_bn_relu(2, 32, 2 * lanes, 4, 3, 1)  # 4 x 4 output rows, two vectors of channels
    kernel, built = _kernel_config(graph)
    conv_band = bands_of(built.config)[-1]
    assert conv_band.sink and conv_band.register[-1] == 0
    # per image and output row, a register tile of the row's 4 positions x all channels
    assert conv_band.tile == (1, 1, 0, 0) and conv_band.register[2] == 4
    tir = built.tir()
    assert "_ihwo" in tir  # the weight stored channels-last (batch norm's scale folded in: w_scaled_ihwo)
    # the accumulators keep the channels last, so each vector of them is contiguous
    assert f"_local = T.alloc_buffer((1, 1, 4, {2 * lanes})" in tir
    inputs = random_inputs(graph, 0)
    assert compare(graph, compile_model(graph)(**inputs), Reference.of(graph, inputs)) == []


def _vectorised_over_channels(graph, target=None) -> bool:
    """Whether the conv's band is the channel-vector mapping: the channels innermost, with
    vector accumulators sunk below the reduction (`channel_vector_band`)."""
    kernel, built = _kernel_config(graph, target)
    conv_band = bands_of(built.config)[-1]
    return conv_band.order[-1] != len(conv_band.order) - 1 and conv_band.sink


def test_rows_narrower_than_a_vector_are_tiled_one_output_row_at_a_time():
    # a 16-channel conv's 8-wide rows get no register tile: its accumulators are one output
    # row of all channels at a time (512 bytes), not the whole image's
    lanes = get_target("cpu").vector_lanes("float32")
    if lanes <= 8:
        pytest.skip("8-wide rows are a whole vector here")
    graph = _conv_bn_relu(2, 16, 16, 8, 3, 1)
    kernel, built = _kernel_config(graph)
    conv_band = bands_of(built.config)[-1]
    assert conv_band.sink and not any(conv_band.register)
    assert conv_band.tile[-2] == 1 and conv_band.tile[-1] == 0
    assert "_local = T.alloc_buffer((1, 16, 1, 8)" in built.tir()
    inputs = random_inputs(graph, 0)
    assert compare(graph, compile_model(graph)(**inputs), Reference.of(graph, inputs)) == []


def test_one_vector_of_channels_takes_rows_that_have_no_vector_shape():
    """One vector of output channels: rows 10 wide (LeNet-5's second conv) have no vector
    shape, so the channels are the vector loop; rows 8 wide keep the row (a vector of 8)."""
    lanes = AVX512.vector_lanes("float32")
    ten = _conv_bn_relu(2, 6, lanes, 10, 5, 1)
    assert _vectorised_over_channels(ten, AVX512)
    inputs = random_inputs(ten, 0)
    assert compare(ten, compile_model(ten)(**inputs), Reference.of(ten, inputs)) == []
    assert not _vectorised_over_channels(_conv_bn_relu(2, lanes, lanes, 8, 3, 1), AVX512)


def test_wide_conv_keeps_the_output_width_innermost():
    graph = _conv_bn_relu(1, 16, 32, 32, 3, 1)
    kernel, built = _kernel_config(graph, AVX512)  # (AVX2: 32 channels are four vectors, see below)
    assert not any(v.name.endswith(".ihwo") for v in kernel.subgraph.graph.constants)
    conv_band = bands_of(built.config)[-1]
    assert conv_band.tile != (1, 1, 1, 0)


def test_a_large_weight_is_read_in_blocks_of_input_channels():
    # ResNet-18's last 3x3 convs: 512 channels x 4608 reduction points (9.4 MB of weights) over
    # rows of 7. In a model the weight comes from memory: one strip of 32 channels per cache
    # tile over the whole 7 x 7 image, its partial sums (6 KB) held while the 512 input channels
    # go by in blocks of 16 (16 x 9 x 32 floats: half of a 48 KiB L1), the next block prefetched
    band = channel_vector_band([1, 2, 0], [7, 7, 512], 16, 4, 1024, depth=4608, l2_bytes=2 << 20, outer=512,
                               l1_bytes=48 << 10)
    assert (band.tile, band.register, band.block, band.prefetch) == ((0, 0, 32), (1, 7, 32), 16, 1)
    assert band.sink and not band.pack
    # 14 x 14 positions x 32 channels of partial sums: 25 KB, still one cache tile
    band = channel_vector_band([1, 2, 0], [14, 14, 256], 16, 4, 1024, depth=2304, l2_bytes=2 << 20, outer=256,
                               l1_bytes=48 << 10)
    assert band.tile == (0, 0, 32) and band.block == 16
    # the reduction's outer loop unknown: slices of 64 channels (1.2 MB, half of a 2 MiB L2)
    # packed and outermost, so the weight streams once per call, not once per row
    band = channel_vector_band([1, 2, 0], [7, 7, 512], 16, 4, 1024, depth=4608, l2_bytes=2 << 20)
    assert band.tile == (1, 0, 64) and band.register == (0, 7, 32) and band.pack and not band.block
    # a weight that fits (3x3 x 32 channels in, 64 out) keeps the whole channel loop
    band = channel_vector_band([1, 2, 0], [7, 7, 64], 16, 4, 1024, depth=288, l2_bytes=2 << 20, outer=32,
                               l1_bytes=48 << 10)
    assert band.tile == (1, 0, 0) and not band.pack and not band.block


def test_a_strip_whose_weight_slice_exceeds_l1_takes_two_rows_of_fewer_columns():
    # ResNet-18's 3x3 convs at 56 px, 64 -> 64 channels: two vectors of channels read a 73 KB
    # weight slice per register tile from L2; over 2 image rows x 4 columns (16 accumulators)
    # each weight vector serves as many FMAs from an input footprint that stays in L1
    band = channel_vector_band([1, 2, 0], [56, 56, 64], 16, 4, 1024, depth=576, l2_bytes=2 << 20, outer=64,
                               l1_bytes=48 << 10)
    assert band.register == (2, 4, 32) and band.tile == (2, 4, 0) and not band.block
    # rows that are no multiple of 4 (14 px): one vector of channels over 2 x 7 positions
    band = channel_vector_band([1, 2, 0], [14, 14, 64], 16, 4, 1024, depth=576, l2_bytes=2 << 20, outer=64,
                               l1_bytes=48 << 10)
    assert band.register == (2, 7, 16) and band.tile == (2, 7, 0)
    # a slice that fits L1 (3 x 3 x 32 x 32 floats: 36 KB) keeps one row of 8 columns
    band = channel_vector_band([1, 2, 0], [56, 56, 64], 16, 4, 1024, depth=288, l2_bytes=2 << 20, outer=32,
                               l1_bytes=48 << 10)
    assert band.register == (0, 8, 32)


def test_rows_too_few_to_share_among_the_cores_leave_the_cores_the_channels():
    # ResNet-18 224's 1x1/2 conv 256 -> 512 at 7 px: 7 output rows on 2 cores would give one
    # core 4; tiles of two strips of channels (8 of them) with every row share evenly
    band = channel_vector_band([1, 2, 0], [7, 7, 512], 16, 4, 1024, depth=256, l2_bytes=2 << 20, outer=256,
                               l1_bytes=48 << 10, cores=2)
    assert (band.tile, band.register) == ((0, 0, 64), (0, 7, 32))
    # one core, or rows that divide among the cores (14), keep a tile per row
    for cores, rows in ((1, 7), (2, 14)):
        band = channel_vector_band([1, 2, 0], [rows, rows, 512], 16, 4, 1024, depth=256, l2_bytes=2 << 20,
                                   outer=256, l1_bytes=48 << 10, cores=cores)
        assert band.tile[0] == 1 and band.tile[-1] == 0
    graph = _conv_bn_relu(1, 256, 512, 14, 1, 2)  # that mapping on this host's vectors
    kernel, built = _kernel_config(graph)
    band = bands_of(built.config)[-1]
    band = replace(band, tile=(*[0] * (len(band.tile) - 1), 2 * band.register[-1]))
    shared = akg.build(kernel.subgraph, get_target("cpu"), cpu_config(built.config.fusion, (band,)))
    inputs = random_inputs(graph, 0)
    assert compare(graph, shared(**inputs), Reference.of(graph, inputs)) == []


def test_parallel_chunks_of_register_rows_divide_among_the_cores():
    # 28 rows in chunks of one 4-row register tile: 7 chunks, 4 on one core of 2; 2-row tiles
    # in 14 chunks share evenly (under a shallow reduction). Chunks that already divide, or are
    # plenty, stay
    assert _even_chunks(28, 4, 4, 2, shallow=True) == (2, 2)
    assert _even_chunks(28, 4, 4, 2) == (4, 4)  # under a deep reduction the tile stays
    assert _even_chunks(56, 4, 4, 2) == (4, 4)
    assert _even_chunks(28, 4, 4, 1) == (4, 4)
    assert _even_chunks(36, 4, 4, 2) == (4, 4)  # 9 chunks of 4: none divides better
    assert _even_chunks(40, 8, 4, 2) == (4, 4)  # 5 chunks of 8 to 10 of 4, the same tile
    assert _even_chunks(28, 8, 4, 2, shallow=True) == (2, 2)  # 3 and a half chunks: 16 rows on one
    # MobileNetV2's 3x3/2 depthwise conv at 56 px (28 output rows): the default config
    graph = _conv_bn_relu(1, 48, 48, 56, 3, 2, groups=48)
    kernel, built = _kernel_config(graph)
    cores = get_target("cpu").cores
    band = bands_of(built.config)[-1]
    chunks = -(-28 // band.tile[0]) if band.tile[0] else 1
    assert cores == 1 or chunks % cores == 0 or chunks >= 4 * cores
    inputs = random_inputs(graph, 0)
    assert compare(graph, built(**inputs), Reference.of(graph, inputs)) == []


def test_wide_conv_with_many_channels_is_vectorised_over_them():
    # rows of 24 slide a 3x3 window (unaligned vector loads, one output channel per broadcast
    # weight); four vectors of output channels each take every broadcast input instead
    lanes = get_target("cpu").vector_lanes("float32")
    graph = _conv_bn_relu(1, 16, 4 * lanes, 24, 3, 1)
    assert _vectorised_over_channels(graph)
    inputs = random_inputs(graph, 0)
    assert compare(graph, compile_model(graph)(**inputs), Reference.of(graph, inputs)) == []
    # two vectors of channels, or a 1x1 window (no sliding), keep the row as the vector loop
    assert not _vectorised_over_channels(_conv_bn_relu(1, 16, 2 * lanes, 24, 3, 1))
    assert not _vectorised_over_channels(_conv_bn_relu(1, 4 * lanes, 4 * lanes, 24, 1, 1))


@pytest.mark.parametrize("stride", [2, 3])
def test_strided_depthwise_conv_reads_its_padded_input_in_phases(stride):
    # a depthwise conv's vectors run along its output rows; strided, each would gather every
    # stride-th input column, so the padded input is stored in `stride` phases of its columns
    # and each vector loads one phase contiguously
    graph = _conv_bn_relu(1, 32, 32, 32, 3, stride, groups=32)
    kernel, built = _kernel_config(graph, AVX512)
    tir = built.tir()
    assert f"_pad = T.alloc_buffer((1, 32, 34, {stride}, {-(-34 // stride)}))" in tir
    inputs = random_inputs(graph, 0)
    assert compare(graph, compile_model(graph)(**inputs), Reference.of(graph, inputs)) == []


def test_a_blocked_reduction_reads_the_weight_in_place_and_prefetches_the_next_block():
    # 256 output channels over rows of 7, 3x3 x 128 deep: the weight (1.2 MB) exceeds half of a
    # 2 MiB L2; stored [O / strip, C, KH, KW, strip], each block of it is one contiguous run read
    # where it lies (no copy), the partial sums of a strip wait in a local buffer with the
    # channels last, and the loop over blocks prefetches the next one through a flat view
    graph = _conv_bn_relu(1, 128, 256, 7, 3, 1)
    kernel, built = _kernel_config(graph)
    (stored,) = [v for v in kernel.subgraph.graph.constants if v.name.startswith("w")]
    assert stored.name.endswith(".Oihwo") and stored.type.shape[1:4] == (128, 3, 3)
    band = bands_of(built.config)[-1]
    assert band.block and band.prefetch and not band.pack
    tir = built.tir()
    assert "w_Oihwo_local" not in tir and "Oihwo_flat" in tir and "llvm.prefetch" in tir
    lanes = band.register[-1]
    assert f"_local = T.alloc_buffer((1, 7, 7, {lanes})" in tir  # the strip's sums, channels last
    inputs = random_inputs(graph, 0)
    assert compare(graph, compile_model(graph)(**inputs), Reference.of(graph, inputs)) == []


def test_a_blocked_conv_spreads_its_prefetches_over_the_input_channels_of_a_block():
    # the next block's lines are prefetched a few per input channel of this block, inside the
    # loop over the register tiles (misses in flight while the core computes), not in the loops
    # of the kernel window right around the FMAs
    from tvm import tirx

    from akg.polyhedral.tirstmt import loops as tir_loops
    from akg.polyhedral.tirstmt import substatements

    graph = _conv_bn_relu(1, 128, 256, 7, 3, 1)
    kernel, built = _kernel_config(graph)
    band = bands_of(built.config)[-1]
    assert band.block and band.prefetch
    found = []

    def visit(stmt, around):
        if isinstance(stmt, tirx.For):
            around = (*around, stmt)
        if isinstance(stmt, tirx.Evaluate) and "llvm.prefetch" in str(stmt):
            found.append([f for f in around if not f.loop_var.name.startswith("pf")])
        for sub in substatements(stmt):
            visit(sub, around)

    visit(built.func.body, ())
    assert found
    for loops in found:
        channels = loops[-1]
        assert int(channels.extent) == band.block  # the loop over a block's input channels
        assert "T.vectorized" in channels.body.script()  # with the reduction's FMAs below it
        window = [f for f in tir_loops(channels.body)
                  if f.kind == tirx.ForKind.SERIAL and not f.loop_var.name.startswith("pf")]
        assert window and all("llvm.prefetch" not in str(f.body) for f in window)


@pytest.mark.parametrize("block, prefetch", [(16, 1), (24, 0), (7, 2), (64, 1)])
def test_blocked_reductions_match_the_reference(block, prefetch):
    # any block size: dividing the 40 input channels or not (a partial last block), longer
    # than the reduction (not blocked), with or without the prefetch; batch 2, a residual
    graph = _conv_bn_relu(2, 40, 48, 6, 3, 1, residual=False)
    kernel, built = _kernel_config(graph)
    bands = list(bands_of(built.config))
    conv = bands[-1]
    bands[-1] = replace(conv, tile=tuple(0 if k < len(conv.tile) - 1 else conv.register[-1] or 0
                                         for k in range(len(conv.tile))),
                        register=tuple(r or (1 if k < len(conv.register) - 2 else r)
                                       for k, r in enumerate(conv.register)),
                        sink=True, pack=False, block=block, prefetch=prefetch)
    config = cpu_config(built.config.fusion, tuple(bands))
    blocked = akg.build(kernel.subgraph, get_target("cpu"), config)
    inputs = random_inputs(graph, 2)
    assert compare(graph, blocked(**inputs), Reference.of(graph, inputs)) == []
    # the block loop runs over ceil(40 / block) blocks, with the initialisation in the first
    # and the batch norm and relu in the last
    if block < 40:
        assert f"T.grid({-(-40 // block)}" in blocked.tir() or f"range({-(-40 // block)})" in blocked.tir()


def test_channel_strip_stays_within_the_accumulator_budget():
    # 512 output channels over rows of 7: 7 positions x 32 channels of accumulators (within
    # 1 KiB of float32), each weight vector loaded once for the 7 positions
    band = channel_vector_band([0, 2, 3, 1], [1, 7, 7, 512], 16, 4, 1024)
    assert band.register == (0, 0, 7, 32) and band.tile == (1, 1, 0, 0) and band.sink
    # a 1x1 image: all 256 channels of the budget for the one position
    assert channel_vector_band([0, 2, 3, 1], [1, 1, 1, 512], 16, 4, 1024).register == (0, 0, 0, 256)
    # rows longer than the block are tiled by it; 32 channels fit whole
    band = channel_vector_band([0, 2, 1], [2, 12, 32], 16, 4, 1024)
    assert band.register == (0, 6, 0) and band.tile == (1, 6, 0)


def test_a_vector_strip_as_wide_as_the_rows_stays_inside_the_register_tile():
    # 16-wide output rows of a stride-1 7x7 conv are exactly one strip on AVX-512: the register
    # tile of output channels x rows keeps the row loop as its vector loop instead of running scalar
    lanes = get_target("cpu").vector_lanes("float32")
    if lanes < 8:
        pytest.skip("a decision for vector units of 8 lanes or more")
    graph = _conv_bn_relu(2, 3, 16, lanes, 7, 1)
    kernel, built = _kernel_config(graph)
    conv_band = bands_of(built.config)[-1]
    assert conv_band.register[-1] == lanes and any(conv_band.register[:-1])
    lines = built.tir().splitlines()
    (update,) = [i for i, line in enumerate(lines) if "_local[" in line and "_pad[" in line]
    assert f"T.vectorized({lanes})" in lines[update - 1]  # the accumulators' update is one vector
    inputs = random_inputs(graph, 0)
    assert compare(graph, compile_model(graph)(**inputs), Reference.of(graph, inputs)) == []


@pytest.mark.parametrize("k", [3, 1])
def test_strided_conv_is_vectorised_over_output_channels(k):
    # a stride-2 conv's output row reads its input every other element: a vector along it is a
    # gather, so whole vectors of output channels are the vector loop, along a channels-last
    # weight, even where the rows are a vector wide or more (ResNet's downsampling convs)
    lanes = get_target("cpu").vector_lanes("float32")
    graph = _conv_bn_relu(1, 4 * lanes, 2 * lanes, 4 * lanes, k, 2)
    kernel, _ = _kernel_config(graph)
    assert any(v.name.endswith(".ihwo") for v in kernel.subgraph.graph.constants)
    assert _vectorised_over_channels(graph)
    inputs = random_inputs(graph, 0)
    assert compare(graph, compile_model(graph)(**inputs), Reference.of(graph, inputs)) == []


def test_a_shallow_conv_over_rows_of_a_quarter_vector_is_vectorised_over_channels():
    # a 1x1/2 downsampling conv at 2 px (ResNet-18 width 16 at 32 px, 32 -> 64 channels): its
    # reduction (32 channels) is too shallow for the rule of deep ones, but a vector loop along
    # 2-wide rows is one eighth of a vector, read with a stride: its channels instead (2.66 ->
    # 0.46 us on Zen 4)
    graph = _conv_bn_relu(2, 32, 64, 4, 1, 2)
    _, built = _kernel_config(graph, AVX512)
    conv_band = bands_of(built.config)[-1]
    assert conv_band.sink and conv_band.register[-1] == 32  # two vectors of the 64 channels
    inputs = random_inputs(graph, 0)
    assert compare(graph, compile_model(graph)(**inputs), Reference.of(graph, inputs)) == []


@pytest.mark.parametrize("shape", [(1, 3, 64, 64, 7), (2, 3, 16, 32, 7), (1, 4, 32, 48, 3), (1, 3, 16, 40, 5)])
def test_a_strided_conv_over_image_channels_runs_along_its_output_rows(shape):
    # a stem (3 or 4 input channels, stride 2): its weight stays OIHW, its padded input is
    # split into phases of its columns, and whole vectors of each output row accumulate over
    # two output rows at a time (the rows step over two input rows each), so its epilogue
    # stores vectors of NCHW rows; rows that end in a partial vector (40 px -> 20) stay right
    batch, channels, out_channels, image, k = shape
    lanes = get_target("cpu").vector_lanes("float32")
    graph = _conv_bn_relu(batch, channels, out_channels, image, k, 2)
    kernel, built = _kernel_config(graph)
    assert not any(v.name.endswith((".ihwo", ".Oihwo")) for v in kernel.subgraph.graph.constants)
    conv_band = bands_of(built.config)[-1]
    assert conv_band.order[-1] == len(conv_band.order) - 1 and conv_band.sink  # the row innermost
    tir = built.tir()
    # the padded copy (or, under a shallow reduction, each tile's part of it: `recompute`)
    (pad,) = [line for line in tir.splitlines() if re.search(r"_pad(_local)? = T.alloc_buffer", line)]
    assert pad.count(",") >= 4  # [N, C, H', 2 phases, W' / 2]
    if conv_band.register[-1] == lanes and lanes >= 16 and channels * k * k > 49:
        # one vector, under a deep reduction: over 2 rows x 8 channels
        n = len(conv_band.order)  # the loop over rows (member n - 2), third or second innermost
        assert conv_band.register[-3:-1] == ((2, 8) if conv_band.order[-3] == n - 2 else (8, 2))
    inputs = random_inputs(graph, 0)
    assert compare(graph, built(**inputs), Reference.of(graph, inputs)) == []
    assert compare(graph, compile_model(graph)(**inputs), Reference.of(graph, inputs)) == []


def test_a_stem_with_rows_narrower_than_a_vector_keeps_its_channel_vectors():
    lanes = get_target("cpu").vector_lanes("float32")
    graph = _conv_bn_relu(2, 3, 2 * lanes, lanes, 7, 2)  # output rows of half a vector
    kernel, _ = _kernel_config(graph)
    assert any(v.name.endswith(".ihwo") for v in kernel.subgraph.graph.constants)
    assert _vectorised_over_channels(graph)


def _parallel_walks_rows(tir: str) -> bool:
    """Does every parallel loop of the kernel walk the rows (H, third index) of what the loop
    writes (the padded copy, the output)?"""
    import re

    lines = tir.splitlines()
    found = False
    for i, line in enumerate(lines):
        m = re.search(r"for (\w+) in T\.parallel", line)
        if not m:
            continue
        var, depth = m.group(1), len(line) - len(line.lstrip())
        body = []
        for later in lines[i + 1:]:
            if len(later) - len(later.lstrip()) <= depth:
                break
            body.append(later)
        stores = [re.match(r"\s*\w+\[([^\]]*)\] = ", b) for b in body]
        stores = [st.group(1).split(", ") for st in stores if st and "_local" not in st.group(0)]
        if not stores or not all(len(ix) >= 4 and re.search(rf"\b{var}\b", ix[2]) for ix in stores):
            return False
        found = True
    return found


def test_a_single_image_is_split_between_the_cores_by_rows():
    # a 1x1 conv of one 56 px image (144 -> 24 channels, MobileNetV2's projection) split by its
    # few output channels read its whole input once per chunk, and half of that input sat in
    # the other core's cache (its producer split it by rows): the rows go outermost instead
    from akg.schedules.cpu_defaults import image_rows_member
    from akg.polyhedral.bands import BandInfo

    info = BandInfo(index=0, extents=(24, 56, 56), coincident=(True,) * 3, permutable=True, statements=("S",),
                    contiguity=(0, 0, 1), inner_contiguity=0, has_inner=True, reduction_inner=True,
                    work=24 * 56 * 56 * 144, image_axes=(1, 2, 3))
    assert image_rows_member(info, [0, 1, 2], cores=2) == 1
    assert image_rows_member(info, [0, 1, 2], cores=1) is None  # one core: nothing to split
    small = BandInfo(**{**info.__dict__, "work": 24 * 8 * 8 * 144, "extents": (24, 8, 8)})
    assert image_rows_member(small, [0, 1, 2], cores=2) is None  # runs on one core anyway
    batch = BandInfo(**{**info.__dict__, "extents": (2, 24, 56, 56), "coincident": (True,) * 4,
                        "contiguity": (0, 0, 0, 1), "image_axes": (0, 1, 2, 3)})
    assert image_rows_member(batch, [0, 1, 2, 3], cores=2) is None  # split by images already
    cores = get_target("cpu").cores
    for shape in [(1, 144, 24, 56, 1, 1), (1, 144, 144, 56, 3, 1, 144)]:  # projection, depthwise
        graph = _conv_bn_relu(*shape)
        kernel, built = _kernel_config(graph)
        assert _parallel_walks_rows(built.tir()) == (cores > 1)
        inputs = random_inputs(graph, 0)
        assert compare(graph, compile_model(graph)(**inputs), Reference.of(graph, inputs)) == []


POOLS = {  # op, attrs, image
    "max-3x3-s2-pad1": ("max_pool2d", {"kernel": [3, 3], "strides": [2, 2], "padding": [1, 1, 1, 1]}, 24),
    "max-3x3-s2-ceil": ("max_pool2d", {"kernel": [3, 3], "strides": [2, 2], "padding": [1, 1, 1, 1],
                                       "ceil_mode": True}, 20),
    "max-2x2-s3-pad1-odd": ("max_pool2d", {"kernel": [2, 2], "strides": [3, 3], "padding": [1, 1, 1, 1]}, 19),
    "avg-3x3-s2-pad1": ("avg_pool2d", {"kernel": [3, 3], "strides": [2, 2], "padding": [1, 1, 1, 1]}, 24),
    "avg-3x3-s2-exclude-pad": ("avg_pool2d", {"kernel": [3, 3], "strides": [2, 2], "padding": [1, 1, 1, 1],
                                              "count_include_pad": False, "ceil_mode": True}, 21),
}


@pytest.mark.parametrize("op, attrs, image", POOLS.values(), ids=POOLS.keys())
def test_strided_padded_pools_match_the_reference(op, attrs, image):
    b = GraphBuilder("pool")
    x = b.input("x", (1, 16, image, image))
    b.output(getattr(b, op)(x, **attrs))
    graph = b.build()
    inputs = random_inputs(graph, 0)
    assert compare(graph, compile_model(graph)(**inputs), Reference.of(graph, inputs)) == []


def test_an_unpadded_strided_pool_makes_no_copy():
    b = GraphBuilder("pool")
    b.output(b.max_pool2d(b.input("x", (4, 6, 28, 28)), kernel=[2, 2], strides=[2, 2]))
    graph = b.build()
    _, built = _kernel_config(graph)
    assert "_pad" not in built.tir()
    inputs = random_inputs(graph, 0)
    assert compare(graph, compile_model(graph)(**inputs), Reference.of(graph, inputs)) == []


@pytest.mark.parametrize("image", [24, 32, 20])
def test_depthwise_rows_take_whole_vectors_over_two_rows_and_two_channels(image):
    # a depthwise conv's rows of 24 (1.5 vectors of AVX-512) run as whole vectors, the last
    # one partial, in register tiles of 2 rows x 2 channels (each channel reads an input of
    # its own: more channels add no reuse); rows of 32 and 20 keep whole vectors too
    lanes = get_target("cpu").vector_lanes("float32")
    if lanes < 16:
        pytest.skip("the rule is about half vectors of 16-lane (AVX-512) targets")
    graph = _conv_bn_relu(1, 16, 16, image, 3, 1, groups=16)
    kernel, built = _kernel_config(graph)
    band = bands_of(built.config)[-1]
    assert band.register[-1] in (lanes, image), band
    if image == 24:
        assert band.register[-3] == 2 and band.register[-2] == 2, band
    inputs = random_inputs(graph, 0)
    assert compare(graph, compile_model(graph)(**inputs), Reference.of(graph, inputs)) == []


@pytest.mark.parametrize("image, half", [(24, True), (32, False)])
def test_pointwise_rows_of_half_vectors_take_half_vectors(image, half):
    # a 1x1 conv over few channels with rows of 24 runs as 3 half vectors (no partial vector
    # per row); rows of 32 keep whole vectors
    lanes = get_target("cpu").vector_lanes("float32")
    if lanes < 16:
        pytest.skip("half vectors are chosen on 16-lane (AVX-512) targets")
    graph = _conv_bn_relu(1, 16, 64, image, 1, 1)
    kernel, built = _kernel_config(graph)
    band = bands_of(built.config)[-1]
    assert (band.register[-1] == lanes // 2) == half, band
    if half:  # the parallel chunks of rows hold whole register tiles of rows (no partial tile)
        assert band.tile[0] % band.register[0] == 0, band
    inputs = random_inputs(graph, 0)
    assert compare(graph, compile_model(graph)(**inputs), Reference.of(graph, inputs)) == []
    # the alternative the tuner measures next: whole vectors over the same rows and channels
    alternatives = akg.compiler.pipeline_for(kernel.subgraph.graph, get_target("cpu")).alternative_configs()
    assert len(alternatives) == int(half)
    if half:
        whole = bands_of(alternatives[0])[-1]
        assert whole.register == (*band.register[:-1], lanes) and whole.order == band.order, whole
        k = akg.build(kernel.subgraph, get_target("cpu"), alternatives[0])
        assert compare(graph, k(**inputs), Reference.of(graph, inputs)) == []


def test_strided_padded_max_pools_read_their_input_in_phases():
    # a 3x3/2 pool (ResNet-18's max-pool): its padded input is computed per cache tile in two
    # phases of its columns, so each tap of a vector of outputs loads one phase contiguously;
    # the box is computed in the order of the input it reads (phase innermost), not gathered
    lanes = get_target("cpu").vector_lanes("float32")
    b = GraphBuilder("pool")
    b.output(b.max_pool2d(b.input("x", (1, 16, 40, 40)), kernel=[3, 3], strides=[2, 2], padding=[1, 1]))
    graph = b.build()
    kernel, built = _kernel_config(graph)
    band = bands_of(built.config)[-1]
    assert band.sink and band.recompute and band.register[-1] == lanes, band
    tir = built.tir()
    (alloc,) = [line for line in tir.splitlines() if "_pad_local = T.alloc_buffer" in line]
    assert ", 2, 21)" in alloc  # [.., rows, phase, 42 padded columns / 2]
    assert re.search(r"for t0_pad_e3 in T.unroll\(2\)", tir)  # the phase, innermost
    inputs = random_inputs(graph, 0)
    assert compare(graph, built(**inputs), Reference.of(graph, inputs)) == []


def test_a_strided_conv_keeps_its_two_vector_strip():
    # 3x3/2, 64 -> 128 channels: the weight slice of a two-vector strip exceeds L1, but a
    # second row of a strided conv doubles the input it gathers from: the strip stays
    graph = _conv_bn_relu(1, 64, 128, 16, 3, 2)
    kernel, built = _kernel_config(graph, AVX512)
    band = bands_of(built.config)[-1]
    assert band.register[-1] == 2 * AVX512.vector_lanes("float32") and not band.block, band


def _recompute(config, on: bool):
    """`config` with the recompute step of every band on or off."""
    return cpu_config(config.fusion, tuple(replace(b, recompute=on) for b in bands_of(config)),
                      **{k: v for k, v in switches_of(config).items()})


@pytest.mark.parametrize("shape", [
    (1, 16, 16, 24, 3, 1, 16),  # rows of 1.5 vectors (half vectors), 4-channel cache tiles
    (2, 20, 20, 17, 3, 1, 20),  # batch 2, odd rows, partial row tiles
    (1, 12, 12, 30, 5, 1, 12),  # 5x5 window, pad 2
    (1, 24, 24, 40, 3, 2, 24),  # strided: the padded input in phases of its columns, per tile
    (1, 8, 8, 27, 3, 3, 8),  # stride 3
])
def test_a_depthwise_conv_computes_its_padded_input_tile_by_tile(shape):
    # the padded input is never stored whole: each cache tile (a few channels x a few output
    # rows) computes the padded rows it reads, halo included, into a local buffer, whose
    # rows are whole vectors; on or off, the kernel matches the reference
    graph = _conv_bn_relu(*shape)
    kernel, built = _kernel_config(graph)
    inputs = random_inputs(graph, 3)
    ref = Reference.of(graph, inputs)
    for on in (True, False):
        k = akg.build(kernel.subgraph, get_target("cpu"), _recompute(built.config, on))
        tir = k.tir()
        assert ("_pad = T.alloc_buffer" not in tir and "_pad_local = T.alloc_buffer" in tir) == on, tir
        assert compare(graph, k(**inputs), ref) == []


def test_the_default_recomputes_the_padded_input_of_depthwise_convs_only():
    lanes = get_target("cpu").vector_lanes("float32")
    dw = bands_of(_kernel_config(_conv_bn_relu(1, 16, 16, 3 * lanes // 2, 3, 1, groups=16))[1].config)[-1]
    assert dw.recompute and dw.tile[-2] == dw.register[-2]  # a cache tile of one register tile's channels
    dense = bands_of(_kernel_config(_conv_bn_relu(1, 16, 32, 16, 3, 1))[1].config)[-1]
    assert not dense.recompute  # every output channel reads every input channel: no halo to share


def test_a_recompute_box_over_its_budget_keeps_the_padded_copy():
    # cache tiles of half the rows of a 200 x 200 image over all 64 channels: a 5 MB box; the
    # kernel is lowered again with the producer's own loop nest, and stays correct
    graph = _conv_bn_relu(1, 64, 64, 200, 3, 1, groups=64)
    kernel, built = _kernel_config(graph)
    *rest, conv = bands_of(built.config)
    conv = replace(conv, tile=(100,) + (0,) * (len(conv.tile) - 1), recompute=True)
    k = akg.build(kernel.subgraph, get_target("cpu"), cpu_config(built.config.fusion, (*rest, conv)))
    assert "_pad = T.alloc_buffer" in k.tir() and "_pad_local" not in k.tir()
    inputs = random_inputs(graph, 0)
    assert compare(graph, k(**inputs), Reference.of(graph, inputs)) == []


def test_a_padded_max_pool_computes_its_padding_per_tile():
    # ResNet-18's 3x3/2 max-pool (here over 16 channels of 40 px): the -inf padding is
    # computed per cache tile, not stored whole
    b = GraphBuilder("pool")
    b.output(b.max_pool2d(b.input("x", (1, 16, 40, 40)), kernel=[3, 3], strides=[2, 2], padding=[1, 1]))
    graph = b.build()
    kernel, built = _kernel_config(graph)
    assert bands_of(built.config)[-1].recompute
    assert "_pad = T.alloc_buffer" not in built.tir() and "_pad_local" in built.tir()
    inputs = random_inputs(graph, 0)
    assert compare(graph, built(**inputs), Reference.of(graph, inputs)) == []


@pytest.mark.parametrize("image, rows", [(32, True), (28, True), (14, False)])
def test_a_channel_vector_epilogue_stores_along_rows(image, rows):
    # a 3x3 conv vectorised over its output channels, with a residual: its epilogue (batch
    # norm, residual add, relu) runs one channel at a time over a row of the register tile
    # (4 columns), so the NCHW output is stored (and the residual read) a row vector at a time
    # instead of a scattered element per channel; rows of 7 (no power of two) keep the
    # channel vectors
    graph = _conv_bn_relu(1, 64, 64, image, 3, 1, residual=True)
    kernel, built = _kernel_config(graph, AVX512)
    band = bands_of(built.config)[-1]
    assert band.sink and band.order[-1] != len(band.order) - 1, band  # channels are the vector loop
    lanes = band.register[-1]  # the output channels of the register tile
    lines = built.tir().splitlines()
    (store,) = [i for i, line in enumerate(lines) if "skip[" in line]
    loops = "".join(lines[store - 3:store])
    if rows:  # the channels outermost, serial; the row's outputs one vector
        assert f"range({lanes})" in loops and f"T.vectorized({band.register[-2]})" in loops, loops
    else:
        assert f"T.vectorized({lanes})" in loops, loops
    inputs = random_inputs(graph, 0)
    assert compare(graph, built(**inputs), Reference.of(graph, inputs)) == []


@pytest.mark.parametrize("channels, k, image, rows", [(144, 1, 28, 2), (256, 1, 28, 2), (32, 3, 16, 4), (16, 3, 28, 4)])
def test_rows_of_input_over_half_of_l1_take_two_register_rows(channels, k, image, rows):
    # one vector along the output row: a register tile of 4 rows x 4 channels, or 2 rows x 8
    # channels where four rows of the input over its channels (a 1x1 conv's 144 or 256 at 28
    # px: 63 and 112 KB) fill over half of L1, so every strip of channels finds them there
    target = get_target("cpu")
    lanes = target.vector_lanes("float32")
    if lanes != 16 or image % lanes == 0 and image != lanes:
        pytest.skip("the rows are one vector of AVX-512 here")
    if rows == 2 and 4 * channels * image * 4 <= target.l1_bytes // 2:
        pytest.skip("this L1 holds four rows of the input")
    graph = _conv_bn_relu(1, channels, 32, image, k, 1)
    _, built = _kernel_config(graph)
    band = bands_of(built.config)[-1]
    assert band.register[-1] == lanes
    n = len(band.order)
    assert band.register[-3:-1] == ((rows, 16 // rows) if band.order[-3] == n - 2 else (16 // rows, rows))
    inputs = random_inputs(graph, 0)
    assert compare(graph, built(**inputs), Reference.of(graph, inputs)) == []


def test_small_convs_have_a_parallel_alternative_for_the_tuner():
    # ResNet-18 width 16's 3x3 convs (~295K multiply-adds, 16 channels at 8 px, batch 2) run on
    # one core by default (below `parallel_threshold`); the tuner's first batch also measures
    # them on every core, whose gain depends on the host's launch cost
    target = get_target("cpu")
    if target.cores < 2:
        pytest.skip("one core: nothing runs in parallel")
    graph = _conv_bn_relu(2, 16, 16, 8, 3, 1)
    kernel, built = _kernel_config(graph)
    assert "T.parallel" not in built.tir()
    alternatives = akg.compiler.pipeline_for(kernel.subgraph.graph, target).alternative_configs()
    (parallel,) = [c for c in alternatives if any(s.op == "map" and s.band is not None for s in c.steps)]
    bands = bands_of(parallel)
    assert bands[-1].parallel and bands[-1] == replace(bands_of(built.config)[-1], parallel=True)
    assert cpu_config(parallel.fusion, bands) == parallel  # the knob round-trips through its step
    k = akg.build(kernel.subgraph, target, parallel)
    assert "T.parallel" in k.tir()
    inputs = random_inputs(graph, 0)
    assert compare(graph, k(**inputs), Reference.of(graph, inputs)) == []
    # a conv far below the threshold, and one above it (parallel already), get no such alternative
    for small in (_conv_bn_relu(1, 8, 8, 4, 3, 1), _conv_bn_relu(2, 64, 64, 14, 3, 1)):
        (kernel, _) = _kernel_config(small)
        alternatives = akg.compiler.pipeline_for(kernel.subgraph.graph, target).alternative_configs()
        assert not any(s.op == "map" and s.band is not None for c in alternatives for s in c.steps)


@pytest.mark.parametrize("batch, channels, out_channels, image, k", [(4, 1, 6, 28, 5), (2, 3, 8, 32, 3)])
def test_shallow_window_convs_have_alternatives_with_fewer_accumulators(batch, channels, out_channels, image, k):
    # a conv whose reduction is its window (LeNet-5's 1 -> 6 channels, 5x5) over output rows as
    # vectors: the tuner's first batch also measures register tiles with fewer accumulators
    # (`FEWER_ACCUMULATORS`), each computing the same result; a 1x1 conv has none of them
    target = get_target("cpu")
    graph = _conv_bn_relu(batch, channels, out_channels, image, k, 1)
    kernel, built = _kernel_config(graph)
    band = bands_of(built.config)[-1]
    if not (band.sink and len(band.order) >= 3 and (band.register[-2] > 1 or band.register[-3] > 1)):
        pytest.skip(f"this target's default has no register tile over rows and channels here: {band}")
    alternatives = akg.compiler.pipeline_for(kernel.subgraph.graph, target).alternative_configs()
    fewer = [bands_of(c)[-1] for c in alternatives]
    accumulators = lambda b: math.prod(max(1, r) for r in b.register[-3:-1])  # noqa: E731
    fewer = [b for b in fewer if b.register[-1] == band.register[-1] and b.order == band.order
             and accumulators(b) < accumulators(band)]
    assert fewer, alternatives
    assert all(b.register[-2] <= band.register[-2] and b.register[-3] <= band.register[-3] for b in fewer)
    inputs = random_inputs(graph, 0)
    reference = Reference.of(graph, inputs)
    for config in alternatives:
        assert compare(graph, akg.build(kernel.subgraph, target, config)(**inputs), reference) == []
    pointwise = _conv_bn_relu(1, 24, 144, 28, 1, 1)
    kernel, built = _kernel_config(pointwise)
    for config in akg.compiler.pipeline_for(kernel.subgraph.graph, target).alternative_configs():
        assert bands_of(config)[-1].register[-3:-1] in (bands_of(built.config)[-1].register[-3:-1],), config


def test_a_shallow_window_conv_takes_half_the_accumulators_of_the_heuristic_by_default():
    # LeNet-5's first conv (1 -> 6 channels, 5x5, unpadded, 4 images): the heuristic's 4 x 4
    # vectors of accumulators ran 16-23 us on Zen 4, 4 x 2 15 us (`DEFAULT_FEWER`); the
    # heuristic's tile stays an alternative for the tuner
    from akg.compiler import pipeline_for
    from akg.schedules.cpu_defaults import default_bands

    rng = np.random.default_rng(0)
    b = GraphBuilder("lenet_c1")
    w = b.const(rng.standard_normal((6, 1, 5, 5)).astype(np.float32), name="w")
    b.output(b.relu(b.conv2d(b.input("x", (4, 1, 32, 32)), w, strides=[1, 1], padding=[0, 0])))
    graph = b.build()
    (kernel,) = partition(graph, target=AVX512, winograd=False).kernels
    pipeline = pipeline_for(kernel.subgraph, AVX512)
    heuristic = default_bands(pipeline.bands, AVX512)[-1]
    default = bands_of(pipeline.default_config())[-1]
    assert heuristic.register[-2] > 1 and default.register[-2] == heuristic.register[-2] // 2
    assert default.register[-1] == heuristic.register[-1] and default.register[-3] == heuristic.register[-3]
    assert heuristic in [bands_of(c)[-1] for c in pipeline.alternative_configs()]
    inputs = random_inputs(graph, 0)
    assert compare(graph, compile_model(graph)(**inputs), Reference.of(graph, inputs)) == []


def test_a_channel_strip_divides_the_channels():
    # AVX2's 12 accumulators over a row block of 4 positions make a 3-vector strip (24
    # channels); over 32 channels that left a partial strip (60.5 us against 9.1 us with 16)
    band = channel_vector_band([0, 2, 3, 1], [2, 4, 4, 32], lanes=8, itemsize=4, register_bytes=12 * 32)
    assert band.register[-1] == 16
    band = channel_vector_band([0, 2, 3, 1], [2, 4, 4, 48], lanes=8, itemsize=4, register_bytes=12 * 32)
    assert band.register[-1] == 24  # a strip that divides them stays

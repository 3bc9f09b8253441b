"""The CPU recipe's heuristic: the default `BandConfig` of every outer band, from what the
polyhedral analysis says about the band (`BandInfo`: extents, contiguity, reductions, windows)
and the target's vectors, cores and caches. `default_bands` is what `akg compile` builds with
when nothing is tuned, and the tuner's first candidates."""

from __future__ import annotations

import math

import numpy as np

from akg.polyhedral.bands import BandInfo
from akg.schedules.cpu_band import (CHUNKS_PER_CORE, COLUMN_RUN_BYTES, PARALLEL_MIN_POINTS,
                                    PARALLEL_MIN_REDUCTION_POINTS, REDUCTION_BLOCKS, REGISTER_BYTES, BandConfig,
                                    vector_strip)


def _largest_fitting(extent: int, want: int, multiple: int = 1) -> int:
    """A tile size near `want` for a loop of `extent`: a divisor of extent if one is close,
    else `want` itself (partial tiles are handled); at most extent."""
    if extent <= want:
        return extent
    for size in range(want, max(multiple, want // 2) - 1, -1):
        if extent % size == 0 and size % multiple == 0:
            return size
    return want


def default_band(info: BandInfo, lanes: int, cores: int, itemsize: int, l2_bytes: int = 1 << 20,
                 register_bytes: int = REGISTER_BYTES, l1_bytes: int = 32 << 10,
                 half_vectors: bool = True) -> BandConfig:
    """Heuristic mapping of one band.

    The loop with the most unit-stride accesses goes innermost (vectorised, a register tile
    of two vectors). Under a reduction (matmul, conv) the register tile also spans a few rows
    and sinks below the reduction loop, so the accumulators stay in registers across it.
    Cache tiles give the parallel outer loop a few chunks per core; under a deep reduction the
    vector-side tile narrows so that its operand panel (reduction depth x tile) fits in half
    of L2. `register_bytes` is the target's accumulator budget (the target's `accumulator_bytes`).
    `half_vectors`: False leaves out the half vectors of `half_vector_window` (an alternative
    the tuner measures, `CpuRecipe.alternative_configs`).
    """
    n = info.members
    order = list(range(n))
    depth = info.work // max(1, math.prod(info.extents))  # reduction points per output point
    if info.permutable and n > 1:
        best = max(range(n), key=lambda m: (info.contiguity[m], info.coincident[m], m))
        row = info.extents[best]
        # a row whose width is no power of two has no vector shape at all (LLVM splits it into
        # a vector part and scalar tails): there one vector of channels already wins
        channels = 2 * lanes if row & (row - 1) == 0 else lanes
        wide = [m for m in range(n) if info.coincident[m] and info.contiguity[m] > 0
                and info.extents[m] >= channels]
        if strided_row(info, best):
            # a row that reads its input with a stride (a stride-2 conv's output width) gathers
            # every vector: whole vectors of output channels are read along a channels-last
            # weight instead (akg.graph.layout). ResNet-18's 7x7/2 stem at 224 px: 4.27 -> 0.84
            # ms, its 3x3/2 and 1x1/2 downsampling convs at 56 px 4.7x and 4.6x faster; at 32 px
            # and width 16 the stem 48 -> 19 us (2 Xeon cores, scripts/bench/small_convs.py)
            wide = [m for m in range(n) if info.coincident[m] and info.contiguity[m] > 0
                    and info.extents[m] % lanes == 0 and m != best]
        rich = [m for m in wide if channel_rich(info, m, lanes)]
        if info.reduction_inner and (depth >= 4 * lanes or 4 * info.extents[best] <= lanes) and (
                (info.extents[best] < lanes or strided_row(info, best)) and wide or rich):
            # under a deep reduction, a loop narrower than a vector (a small conv's output
            # width) yields to a contiguous loop two vectors wide or more (its output channels):
            # a strided conv's 4-wide rows as the vector loop took 51 us, its channels 5 us (16 ->
            # 32 channels, 8x8 -> 4x4). One vector of channels is a single accumulator chain that
            # waits on each FMA (16 channels at 8x8 ran ~1.8x slower), and a shallow reduction (a
            # 1x1 conv of 16 channels) does not pay for each point's own accumulators (~2x slower).
            # Rows 10 wide (LeNet-5's second conv, 6 -> 16 channels, 5x5) ran scalar: its 16
            # channels as the vector loop took 2.65x less time. A wide row read through a
            # sliding window (a stride-1 conv's output width) yields to four vectors of channels
            # or more (`channel_rich`): ResNet-18's 3x3 convs at 56 px (64 channels) and 28 px
            # (128) ran 1.30x and 1.24x faster, 64 channels at 64 px 2.05x (2 Xeon cores, loaded)
            # A shallow reduction too where the row is a quarter vector or less (4 wide on
            # AVX-512, 2 on AVX2): a 1x1/2 conv of 32 -> 64 channels at 2 px 2.66 -> 0.46 us, of
            # 16 -> 32 at 4 px 0.8 -> 0.5 us (ResNet-18 width 16 at 32 px, 2 Zen 4 cores, alone).
            best = max(rich or wide, key=lambda m: (info.contiguity[m], m))
        order.remove(best)
        order.append(best)
        rows = image_rows_member(info, order, cores)
        if rows is not None:
            order.remove(rows)
            order.insert(0, rows)
    ext = [info.extents[m] for m in order]
    coin = [info.coincident[m] for m in order]
    if info.reduction_inner and all(coin) and vectorises_across_rows(info, order, lanes):
        # the channels' vectors accumulate across the whole reduction, whichever loop of it
        # reads most contiguously (the input rows are broadcast, not vector-loaded)
        return channel_vector_band(order, ext, lanes, itemsize, register_bytes, depth, l2_bytes,
                                   info.reduction_outer, l1_bytes, strided=any(info.strided), cores=cores)
    sink = info.reduction_inner and all(coin) and info.contiguity[order[-1]] >= max(info.inner_contiguity, 1)
    # a strided window over rows with nothing else to vectorise (a max-pool of stride 2): the
    # window's taps (contiguous along the input row) would be the vector loop, a few lanes
    # wide; half vectors of outputs gather their taps instead, the window sunk below them
    # (ResNet-18's 3x3/2 max-pool at 112 px, inputs from memory: 769 -> 465 us alone)
    strided_window = (info.reduction_inner and all(coin) and not sink and strided_row(info, order[-1])
                      and depth <= 49 and lanes >= 16 and info.contiguity[order[-1]] > 0)
    sink = sink or strided_window

    register = [0] * n
    innermost_contiguous = info.contiguity[order[-1]] > 0 or not info.has_inner
    if coin[-1] and ext[-1] >= lanes and innermost_contiguous:
        register[-1] = lanes // 2 if strided_window else vector_strip(ext[-1], lanes)
        run = info.runs[order[-1]] if info.runs else 0
        if lanes <= run < register[-1] and run % lanes == 0:
            # a loop merged from two (16 * head + d: an attention's context product written
            # with its heads back in the hidden dim) is contiguous only along d: a strip across
            # two heads gathers every operand (4 heads of 16: 10.0 -> 0.56 us)
            register[-1] = run
    if sink and n == 1 and info.inner_contiguity == 0 and register[-1]:
        # a reduction over rows of each column (a bias or layer-norm gamma gradient): each
        # step of the reduction reads a run of the row; a run of 1 KB (the accumulators stay
        # in L1, not registers) streams the rows where a two-vector strip jumps 4 KB per
        # 128 B read (layer-norm backward 4096 x 1024: 12.6 -> 7.5 ms on a busy host)
        run = min(ext[-1] // max(1, cores), COLUMN_RUN_BYTES // itemsize)
        register[-1] = _largest_fitting(ext[-1], max(register[-1], run), register[-1])
    half = False  # the register tile is half vectors wide (`half_vector_window`)
    if sink and n > 1 and coin[-2]:
        budget = register_bytes // max(1, (register[-1] or ext[-1]) * itemsize)  # accumulator rows
        if n > 2 and coin[-3] and register[-1] == lanes and budget >= 8:
            # one vector wide (a conv's output row): 4 x (budget / 4) rows over the two loops
            # above it (4 x 4 with AVX-512, 4 x 2 with AVX2's 12 accumulators once the rows
            # divide the loop), so each loaded vector and each broadcast feed several FMAs;
            # 2 x (budget / 2) where taller tiles read too much input (`_register_rows`)
            rows = _register_rows(info, order, depth, budget, ext[-1] * itemsize, l1_bytes)
            register[-3] = _largest_fitting(ext[-3], min(ext[-3], rows[0]))
            register[-2] = _largest_fitting(ext[-2], min(ext[-2], rows[1]))
            if half_vector_window(info, order, ext, lanes, depth):
                register[-3] = _largest_fitting(ext[-3], min(ext[-3], 2))
                if info.producers:
                    # rows not a whole number of vectors, a window over a padded input that
                    # the band recomputes tile by tile (a depthwise conv's): whole vectors
                    # (the last of each row partial) over 2 rows x 2 channels. Each channel
                    # reads an input of its own, so more channels add accumulators but no
                    # reuse, only a larger padded tile (MobileNetV2's 3x3 depthwise convs at
                    # 56 px in the model, 2 Xeon cores: 111.6 / 113.9 -> 103.0 / 106.7 us
                    # against 2 x 4 half vectors; alone 82 -> 71 us warm, 115 -> 99 us cold;
                    # a 5x5 one 202 -> 162 us)
                    register[-2] = _largest_fitting(ext[-2], min(ext[-2], 2))
                elif half_vectors:
                    # rows not a whole number of vectors but of half vectors, under a shallow
                    # reduction (a 1x1 conv over few channels): half vectors over 2 rows x
                    # the channels, so no row ends in a partial vector and fewer loads
                    # straddle two cache lines (MobileNetV2's 1x1 expansions 24 -> 144
                    # channels at 56 px, 2 Xeon cores: 124 -> 108 us, 203 -> 127 us with
                    # inputs from memory, against 4 x 4 whole vectors). Without
                    # `half_vectors`: whole vectors over as many rows and channels
                    half = True
                    register[-1] = lanes // 2
        else:
            register[-2] = _largest_fitting(ext[-2], max(1, min(ext[-2], budget, 8)))

    tile = [0] * n
    if sink:  # cache tile of the register-blocked band: a panel of a few register tiles
        if n > 1:
            tile[-2] = _largest_fitting(ext[-2], max(register[-2] or 1, 1) * 16) if ext[-2] > 64 else 0
        step = max(register[-1] or 1, 1)
        fits = (l2_bytes // 2) // (max(1, depth) * itemsize) // step * step
        want = max(2 * step, min(step * 4, fits))  # a tile of one register tile would lose it
        tile[-1] = _largest_fitting(ext[-1], want, step) if ext[-1] > 256 or want < ext[-1] // 2 else 0
    # rows of vector accumulators under a reduction: kept whole by the parallel chunks below,
    # and kept (as many as the cache tile has) where the register tile would not fit in it
    row_tiles = sink and n > 1 and (register[-1] >= lanes or half)
    # parallel chunks: split the outermost loop so each core gets a few pieces
    if coin[0] and ext[0] > 1 and tile[0] == 0 and not (n == 1 and register[0]):
        chunk = max(1, math.ceil(ext[0] / (cores * CHUNKS_PER_CORE)))
        rows = register[0] if row_tiles else 0
        chunk = max(chunk, rows)  # a chunk holds whole register tiles of rows (below)
        if chunk < ext[0]:
            tile[0] = _largest_fitting(ext[0], chunk, rows or 1)
            if rows > 1:
                register[0], tile[0] = _even_chunks(ext[0], tile[0], rows, cores, shallow=depth <= 49)
    # several passes over each row (a layer norm's mean, variance and output) run one row at a
    # time: with the next row prefetched over a pass that only reads (`polyhedral.prefetch`),
    # blocks of rows filling half of L1 (the default until then: 0.47 -> 0.40 ms on the Xeon,
    # with the prefetches over the output pass) were slower on Zen 4, 4096 x 1024: 0.40-0.55
    # ms against 0.34-0.44 (every variant of three runs, alternating rounds), and the
    # transformers' 768-wide layer norms 10-23% (ab_trees; docs/performance.md, 2026-12-07).
    # The tuner still has row blocks.
    whole_strip = register[-1] != 0 and register[-1] == (tile[-1] or ext[-1])
    for pos in range(n):
        t = tile[pos] or ext[pos]
        if register[pos] >= t:
            # rows of accumulators under a reduction stay, as many as the cache tile has: a
            # 32-row matmul in parallel chunks of 4 rows lost its 8-row register tile and ran
            # one row of 2 vectors, each FMA waiting on the last (the examples' mlp, 784 deep)
            register[pos] = t if row_tiles and pos < n - 1 and t > 1 else 0
    if whole_strip and any(register[:-1]):
        # a vector strip as wide as its loop (a conv's 16-wide output rows) stays the register
        # tile's innermost loop under the rows tiled above it; left out, the loop went outside
        # the register tile and the tile ran scalar (ResNet-18 width 16's 7x7 stem: 84 -> 29 us)
        register[-1] = tile[-1] or ext[-1]
    if sink and n > 2 and not any(register) and coin[-2] and ext[-2] > 1 and tile[-2] == 0:
        # rows narrower than a vector, under a reduction, with no register tile (a 16-channel
        # conv's 8-wide output rows): the whole cache tile's accumulators sat in L1 and every
        # multiply-add loaded and stored one. One output row at a time, all its channels, when
        # those fit the accumulator budget: LLVM keeps them in registers across the reduction
        # (ResNet-18 width 16's 3x3 convs at 8x8: 9.4 -> 6.1 us, its 1x1 downsampling convs
        # 1.7 -> 1.4 and 2.4 -> 2.1 us; 1 thread of a Xeon, each kernel alone)
        block = math.prod((tile[i] or ext[i]) for i in range(n) if i != n - 2) * itemsize
        if block <= register_bytes:
            tile[-2] = 1
    # matmul-like bands: pack the operand panel that the other tiles reuse
    pack = sink and n == 2 and tile[-1] != 0
    if (pack and register[-1] and depth * ext[-1] * itemsize > l2_bytes // 2
            and ext[0] * register[-1] * itemsize <= BLOCK_SUMS_BYTES and ext[0] * depth * itemsize <= l2_bytes // 4):
        # a weight larger than half of L2 under a few rows (an encoder's dense layers at a
        # sequence of 128): the reduction in blocks, as for convs (`_blocked_reduction`); with
        # many rows each weight tile serves enough of them from L2 already. BERT-base's FFN
        # (128 x 768 x 3072 + gelu), weights from memory: 2.23 -> 1.88 ms (2 Xeon cores). Every
        # strip of columns reads all the rows' blocks again: not where those rows fill L2 (the
        # FFN's 3072 -> 768 projection: 2.13 -> 2.49 ms in the model, its 1.5 MB input re-read
        # 24 times in slices of 64 columns)
        blocked = _blocked_reduction(order, ext, register, register[-1], itemsize, depth, info.reduction_outer,
                                     l1_bytes)
        if blocked is not None:
            return blocked
    # three passes or more over each row (a softmax, a layer norm): the next row (block)
    # streams in while this one computes, its prefetches spread over the pass that computes
    # most (`polyhedral.prefetch.spread`); a 4096 x 1024 softmax went from 66% to 87% of the
    # stream floor's bandwidth, a layer norm from 95% to 98%, on an AVX-512 Xeon. Not for two
    # (an rms_norm's sum of squares and output; a layer-norm backward's fused statistics and
    # output): there the hardware's prefetchers keep up and the prefetches only take load
    # slots; unchanged within noise on the Xeon, 5-24% slower on Zen 4 in every run of three
    # stops (4096 x 1024: rms_norm 0.268-0.298 ms without, 0.298-0.369 with)
    prefetch = 1 if n == 1 and info.passes > 2 and not sink else 0
    recompute = False
    if info.producers and sink and n > 2 and depth <= 49 and register[-2] and tile[-2] != register[-2] \
            and _register_tiled(register, [*tile[:-2], register[-2], tile[-1]], ext):
        # a window over a padded input under a shallow reduction (a depthwise conv, a pool): the
        # cache tile takes the register tile's channels (and still holds several register
        # tiles: one alone would lose its local accumulators), and computes the rows of the
        # padded input it reads (its rows and the window's halo, ~6 KB) into a local buffer
        # instead of a padded copy of the whole input going through memory before the conv
        # (MobileNetV2's 3x3 depthwise conv at 56 px, 144 channels: 171 -> 78 us alone;
        # ResNet-18's 3x3/2 max-pool, with its input in phases: 384 -> 80 us)
        tile[-2], recompute = register[-2], True
    return BandConfig(tuple(order), tuple(tile), tuple(register), sink, pack, prefetch, recompute=recompute)


def _even_chunks(extent: int, chunk: int, rows: int, cores: int, shallow: bool = False) -> tuple[int, int]:
    """Register rows and parallel chunk of a loop of `extent` whose chunks (of `chunk` rows,
    whole register tiles of `rows`) are too few to share evenly among the cores (7 on 2: one
    core runs 4): the largest chunk that divides the loop into a multiple of `cores` pieces;
    under a `shallow` reduction (a depthwise conv's window: bound by memory, not FMAs) with the
    register tile halved if it must be. MobileNetV2's 3x3/2 depthwise conv at 56 px (28 output
    rows, 4-row tiles): 54 -> 50 us alone, 85 -> 74 us with inputs from memory, its 1x1 conv
    144 -> 32 at 28 px 47 -> 37 us in the model (2 Xeon cores). Not under a deep one: a 3x3
    conv 16 -> 32 at 28 px ran 38 -> 43 us on 2 x 4 accumulators instead of 4 x 4."""
    pieces = -(-extent // chunk)
    if not _uneven(pieces, cores) and (extent % chunk == 0 or pieces >= 4 * cores):
        return rows, chunk
    for r in (rows, rows // 2) if shallow else (rows,):
        for size in range(chunk - chunk % r, r - 1, -r):
            if extent % size == 0 and extent // size % cores == 0:
                return r, size
    return rows, chunk


def _uneven(pieces: int, cores: int) -> bool:
    """Too few parallel pieces to share evenly among the cores (7 on 2: one core runs 4);
    four per core or more are even enough."""
    return cores > 1 and pieces % cores != 0 and pieces < 4 * cores


def _register_tiled(register, tile, ext) -> bool:
    """Does some member's register tile leave several in its cache tile (0: the whole loop)?"""
    return any(0 < r < (t or e) for r, t, e in zip(register, tile, ext))


def half_vector_window(info: BandInfo, order, ext, lanes: int, depth: int) -> bool:
    """Is the band's vector loop (innermost in `order`) an output row of a conv (its input read
    along the row, `BandInfo.windowed`) under a shallow reduction (`depth` <= 49 points per
    output: a depthwise conv's window, a 1x1 conv over few channels), and a whole number of
    half vectors but not of vectors?"""
    row = order[-1]
    return (bool(info.windowed) and info.windowed[row] > 0 and depth <= 49
            and lanes >= 16 and ext[-1] % lanes != 0 and ext[-1] % (lanes // 2) == 0)


def _register_rows(info: BandInfo, order: list[int], depth: int, budget: int, row_bytes: int,
                   l1_bytes: int) -> list[int]:
    """Register tile sizes over the loops at -3 and -2 of `order` (output rows and channels)
    of a band one vector wide along its output row, with `budget` vector accumulators: 4 x
    (budget / 4), or 2 rows x (budget / 2) channels
    - where the rows step over input rows (a strided conv's, `BandInfo.row_steps`) under a
      deep reduction: 4 rows would read 4 x stride + KH - stride input rows per register tile
      (ResNet-18's 7x7/2 stem along its rows, 3 -> 64 channels at 224 px: 828 -> 746 us as 2
      rows x 8 channels; 3 -> 32 channels, 3x3/2 at 64 px: 20.3 -> 18.7 us);
    - where four input rows (`row_bytes` each) over the reduction's outer loop (a 1x1 conv's
      input channels) fill over half of L1: every strip of channels reads the register tile's
      input rows again, which then stay in L1, in half as many passes (MobileNetV2's 1x1 conv
      144 -> 32 channels at 28 px: 44.6 -> 33.2 us, 256 -> 32: 83.7 -> 69.1 us; 32 -> 32
      channels, 3x3 at 16 px, stays 4 x 4: 21.9 us, 26.0 as 2 x 8). 2 Xeon cores, AVX-512."""
    rows = [4, budget // 4]
    strided = [pos for pos in (0, 1) if info.row_steps and info.row_steps[order[pos - 3]] > 1]
    image = [pos for pos in (0, 1) if info.image_axes and info.image_axes[order[pos - 3]] == 2]
    if strided and depth > 49:
        rows[strided[0]], rows[1 - strided[0]] = 2, budget // 2
    elif image and info.reduction_outer * 4 * row_bytes > l1_bytes // 2:
        rows[image[0]], rows[1 - image[0]] = 2, budget // 2
    return rows


def parallel_threshold(info: BandInfo) -> int:
    """Statement instances a band needs before its outer loop runs in parallel: more under a
    reduction (each instance a multiply-add), except where the band is one loop over a
    reduction's outputs (a matrix-vector product: a classifier's dense layer on one image; a
    row reduction), whose every instance reads an element once, the weight from memory in a
    model, so that two cores stream it faster: ResNet-18's 512 -> 1000 classifier (2 MB of
    weights) 110 -> 73 us in the model, the shared MindIR transformer layer 0.85x, BERT-base's
    layer norms over 128 x 768 within noise (2 Xeon cores)."""
    if info.reduction_inner and info.members > 1:
        return PARALLEL_MIN_REDUCTION_POINTS
    return PARALLEL_MIN_POINTS


def image_rows_member(info: BandInfo, order: list[int], cores: int) -> int | None:
    """The member to run outermost, split across the cores, in a band that writes images (NCHW)
    and would split them by channels: the one walking their rows, when it has rows enough for
    every core, so that the kernels of a CNN split their images between the cores the same
    way. A conv reads every channel of its input rows, so a producer split by channels (a pad,
    a depthwise or 1x1 conv over channel chunks) left half of each consumer's input in the
    other core's cache, and a 1x1 conv split by its few output channels read its whole input
    once per chunk (MobileNetV2's 144 -> 24 projection: 160 us alone, 300-330 us right after
    the depthwise conv that wrote its input; 2 Xeon cores). A band split by images (a batch of
    two or more) is consistent already, and one that runs on a single core keeps its order.
    None where nothing is to move."""
    if cores < 2 or info.work < parallel_threshold(info) or not info.image_axes or info.image_axes[order[0]] != 1:
        return None
    rows = [m for m in order[1:-1] if info.image_axes[m] == 2 and info.coincident[m] and info.extents[m] >= 4 * cores]
    return rows[0] if rows else None


def vectorises_across_rows(info: BandInfo, order: list[int], lanes: int) -> bool:
    """Whether the loop chosen innermost is a vector wide but is not the band's row: the last
    member (the written tensor's last index, a conv's output width) is narrower than a vector
    or reads its input with a stride, yet streams data with unit stride, and another member
    streams more (a conv's output channels along a channels-last weight)."""
    n = info.members
    row = n - 1
    return (n > 1 and order[-1] != row
            and (info.extents[row] < lanes or strided_row(info, row) or channel_rich(info, order[-1], lanes))
            and lanes <= info.extents[order[-1]] and info.contiguity[row] > 0)


def channel_rich(info: BandInfo, member: int, lanes: int) -> bool:
    """Is `member` four vectors of contiguous data or more (a conv's output channels along a
    blocked weight, `akg.graph.layout`) beside a row that reads through a sliding window (a
    conv's output width, `BandInfo.windowed`)? Such a row's vectors are unaligned loads, each
    feeding one output channel per broadcast weight; the channels' vectors are aligned and each
    broadcast input feeds all of them."""
    row = info.members - 1
    return (member != row and bool(info.windowed) and info.windowed[row] > 0 and info.coincident[member]
            and info.contiguity[member] > 0 and info.extents[member] >= 4 * lanes
            and info.extents[member] % lanes == 0)


def strided_row(info: BandInfo, member: int) -> bool:
    """Does the member read some input with a constant stride of 2 or more along its last
    index (a strided conv's output width)?"""
    return bool(info.strided) and info.strided[member] > 0


ROW_BLOCK = 8  # output positions per register tile of a channel-vector band


def channel_strip(width: int, lanes: int, itemsize: int, register_bytes: int) -> int:
    """Output channels per register tile of a channel-vector band (`channel_vector_band`) whose
    output rows are `width` wide: the vectors of channels that the accumulator budget holds
    beside a block of up to ROW_BLOCK positions of the row (before any later narrowing: a
    blocked reduction, two rows of a stride-1 conv)."""
    budget = max(lanes, register_bytes // itemsize // lanes * lanes)  # channels of accumulators
    return max(lanes, budget // _largest_fitting(width, ROW_BLOCK) // lanes * lanes)


def channel_vector_band(order: list[int], ext: list[int], lanes: int, itemsize: int,
                        register_bytes: int, depth: int = 0, l2_bytes: int = 1 << 20, outer: int = 0,
                        l1_bytes: int = 32 << 10, strided: bool = False, cores: int = 1) -> BandConfig:
    """The mapping of a reduction band whose last member (the written tensor's row, a conv's
    output width) is narrower than a vector, so the band's most contiguous other loop went
    innermost instead (a conv's output channels, read along a channels-last weight; see
    `akg.graph.layout`). That loop does not walk the output's last index, so accumulators over
    any further loop would sit strided in the local buffer and each vector load or store of
    them would be a gather: each point of the other loops is its own tile (size-1 cache tiles),
    under which a strip of the channel loop, as wide as the accumulator budget allows, sinks
    below the reduction as vector accumulators. ResNet-18 width 16's 3x3 convs at 4x4, 2x2 and
    1x1 (32-128 channels, batch 2, + bn + relu): 101 -> 8, 70 -> 7 and 100 -> 7 us on 2 Zen cores
    (scripts/bench/small_convs.py, with the channels-last weights)."""
    n = len(order)
    row = order.index(n - 1)  # the output row's loop
    pack = False
    rows = _largest_fitting(ext[row], ROW_BLOCK)
    strip = channel_strip(ext[row], lanes, itemsize, register_bytes)
    if ext[-1] > strip:
        # a strip that divides the channels (whole vectors, down to half the budget's): AVX2's
        # 3 vectors over 32 channels left a partial strip of one vector that LLVM ran badly
        # (ResNet-18 width 16's 3x3 convs at 4 px, 32 channels, 2 Zen 3 cores: 4 x 24
        # channels 60.5 us, 4 x 16 9.1 us)
        strip = _largest_fitting(ext[-1], strip, lanes)
    tile = [1] * (n - 1) + [0]
    tile[row] = rows if rows < ext[row] else 0
    register = [0] * n
    register[row] = rows if rows > 1 else 0
    register[-1] = strip if ext[-1] > strip else 0
    # a weight larger than half of L2 (`depth` reduction points per output point, e.g. C x KH x
    # KW) comes from memory in a model, where every other kernel's data has gone through the
    # caches since: the reduction runs in blocks of its outer loop (`outer`: input channels),
    # every output position of a strip of channels advancing one block at a time, so a block of
    # the weight (half of L1) serves all of them from L1 while the next one is prefetched.
    # ResNet-18's 3x3 convs at 7 px (512 channels) and 14 px (256), weights from memory:
    # 1.14 -> 0.80 and 0.79 -> 0.71 ms (packed slices of channels before; 2 Xeon cores)
    if depth and register[-1] and depth * ext[-1] * itemsize > l2_bytes // 2 and math.prod(ext[:-1]) > 1:
        blocked = _blocked_reduction(order, ext, register, strip, itemsize, depth, outer, l1_bytes)
        if blocked is not None:
            return blocked
        fits = (l2_bytes // 2) // (depth * itemsize) // strip * strip
        channels = _largest_fitting(ext[-1], max(2 * strip, fits), strip)
        if 2 * strip <= channels < ext[-1]:
            tile[-1], pack = channels, True
    elif (depth and register[-1] == 2 * lanes and depth * register[-1] * itemsize > l1_bytes and row > 0
          and ext[row - 1] >= 2 and register[row] * 2 * lanes * itemsize <= register_bytes and not strided):
        # the weight slice of a two-vector strip deeper than L1 (3 x 3 x 64 x 32 floats: 73 KB)
        # streams from L2 for every register tile: two image rows of half as many columns
        # (2 x 4 positions x 2 vectors of channels) read each weight vector for as many FMAs
        # from a footprint of input rows that stays in L1 (ResNet-18's 3x3 convs at 56 px, 64
        # channels, and at 28 px, 128: 687 and 813 us alone with one row of 8 or 7 columns;
        # 665 and 735 us as one vector of channels over 2 x 8 or 7 positions; in the model,
        # 2 Xeon cores: 4% and 13% faster again as 2 x 4 x 2 vectors). Rows not a multiple of
        # 4 keep one vector over two rows. Not for a strided conv, whose second row doubles
        # the input it gathers from (ResNet-18's 3x3/2 conv 64 -> 128 at 56 px: 415 -> 457 us)
        tile[row - 1] = register[row - 1] = 2
        if ext[row] % 4 == 0:
            tile[row] = register[row] = 4
        else:
            register[-1] = lanes
    split = 2 * strip
    points = math.prod(e for k, e in enumerate(ext[:-1]) if k != row)  # a parallel tile each
    if (_uneven(points, cores) and not pack and tile[row] == 0
            and all(t <= 1 for t in tile[:-1]) and register[-1] == strip
            and ext[-1] % split == 0 and ext[-1] // split % cores == 0):
        # too few output rows to share evenly among the cores (7 on 2: one core runs 4): the
        # cores share the output channels instead, in tiles of two strips with every row, and
        # each reads only its part of the weight. ResNet-18 224's 1x1/2 conv 256 -> 512 at
        # 7 px: 61 -> 48 us alone (2 Xeon cores)
        tile = [0] * (n - 1) + [split]
    return BandConfig(tuple(order), tuple(tile), tuple(register), True, pack)


BLOCK_SUMS_BYTES = 32 << 10  # a blocked reduction's partial sums per cache tile (the promotion budget)


def _blocked_reduction(order, ext, register, strip: int, itemsize: int, depth: int, outer: int,
                       l1_bytes: int) -> BandConfig | None:
    """The blocked-reduction mapping of a band whose weight comes from memory (a channel-vector
    conv band, see `channel_vector_band`, or a matmul under few rows): one strip of channels
    (columns) per cache tile with as many output positions (rows) as its partial sums allow,
    inner loops whole first, the register tiles as before, blocks of the reduction's outer
    loop whose weight slice fills half of L1, the next block prefetched. None where the
    reduction's outer loop is unknown or too short for two blocks."""
    if outer < 2:
        return None
    per_step = max(1, depth // outer) * strip * itemsize  # weight bytes per iteration of the outer loop
    block = max((b for b in (1, 2, 4, *REDUCTION_BLOCKS) if b * per_step <= l1_bytes // 2), default=1)
    if 2 * block > outer:
        return None
    n = len(order)
    tile, reg = [0] * n, list(register)
    tile[-1] = strip if strip < ext[-1] else 0
    positions = max(1, BLOCK_SUMS_BYTES // (strip * itemsize))
    for pos in reversed(range(n - 1)):  # the row first, then the loops around it
        take = _largest_fitting(ext[pos], max(1, min(ext[pos], positions)))
        tile[pos] = take if take < ext[pos] else 0
        positions //= take
        if not reg[pos] and take > 1:
            reg[pos] = 1  # one point of an outer loop per register tile
    return BandConfig(tuple(order), tuple(tile), tuple(reg), True, False, 1, block)


def default_bands(infos: list[BandInfo], target, dtype: str = "float32",
                  half_vectors: bool = True) -> tuple[BandConfig, ...]:
    itemsize = np.dtype(dtype).itemsize
    lanes = target.vector_lanes(dtype)
    l2 = getattr(target, "l2_bytes", 1 << 20)
    acc = getattr(target, "accumulator_bytes", REGISTER_BYTES)
    l1 = getattr(target, "l1_bytes", 32 << 10)
    return tuple(default_band(i, lanes, target.cores, itemsize, l2, acc, l1, half_vectors) for i in infos)

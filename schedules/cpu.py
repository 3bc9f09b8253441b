"""CPU mapping recipe: the steps of a CPU Config per outer band (loop order, a cache tile,
a register tile, whether the register loops sink below the band's reductions, packing of the
reused operand panel) and kernel-wide (parallel outer loops, vector and unrolled inner loops,
promotion, fast-math expansions); the heuristic that picks them; the knob space the tuner
searches; and how the steps are applied to the schedule tree, primitive by primitive."""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass, replace
from typing import Iterator

import numpy as np

from akg.errors import ScheduleError
from akg.polyhedral import tree
from akg.polyhedral.tree import (MARK_PACK, MARK_PARALLEL, MARK_PREFETCH, MARK_PROMOTE, MARK_RECOMPUTE, VECTOR_LAST,
                                 BandInfo)
from akg.schedules.recipe import Recipe
from akg.schedules.space import (LEGACY_SWITCHES, Config, Space, Step, check_steps, divisors_and_powers,
                                 legacy_config)

REGISTER_BYTES = 1024  # accumulators of a register tile by default: 16 AVX-512 registers
# Below this many statement instances under a band a thread launch costs more than it saves:
# a launch, its wake-ups and the join take ~1.5-2 us on a 2-core Xeon VM (more when the other
# core is busy), so a kernel that runs under ~6 us on one core loses in parallel. An instance
# of a band with a reduction below (one multiply-add of a conv or matmul, vectorised) is a few
# times cheaper than one of a band without (an output element): ResNet-18 width 16 at 32 px
# lost 1.4-1.9 us on each of its 3x3 convs of ~300K multiply-adds and ~1.5 us on every smaller
# kernel run in parallel (2 Xeon cores, each kernel alone, 1 thread against 2)
PARALLEL_MIN_POINTS = 1 << 16
PARALLEL_MIN_REDUCTION_POINTS = 1 << 19
CHUNKS_PER_CORE = 4  # parallel chunks of an outer loop per core, by default
CACHE_LEVEL, REGISTER_LEVEL, PROMOTE_LEVEL = "L2", "registers", "L1"
COLUMN_RUN_BYTES = 1024  # contiguous bytes of a row a column reduction reads per step
PREFETCH_DISTANCES = (0, 1, 2, 4, 8)  # iterations of a multi-pass band's row loop prefetched ahead
REDUCTION_BLOCKS = (8, 16, 32, 64)  # iterations of a reduction's outer loop per block, for the tuner


def vector_strip(extent: int, lanes: int) -> int:
    """Width of the vector strip a CPU register tile computes along a loop of `extent`: two
    vectors when they divide the loop, else one (a partial last tile runs as a remainder).
    The CPU mapping tiles by it and constant weights are stored in panels of it, so that each
    vector load of the strip is one contiguous slice (`akg.graph.layout`)."""
    if extent % (2 * lanes) == 0:
        return 2 * lanes
    return lanes if extent >= lanes else extent


@dataclass(frozen=True)
class BandConfig:
    """The CPU steps of one outer band as knobs: member order (a permutation, innermost last),
    cache-level and register-level tile sizes per member (0 = untiled), and whether the
    register loops sink below the band's inner loops (reductions)."""

    order: tuple[int, ...]
    tile: tuple[int, ...]
    register: tuple[int, ...]
    sink: bool = False
    pack: bool = False  # copy operands reused across the other tiles into a blocked local buffer
    # software prefetch, in iterations of the loop over rows (or row blocks) of a band whose
    # rows several passes read (a layer norm, softmax), or over the blocks of a blocked
    # reduction: 0 leaves it to the hardware prefetcher
    prefetch: int = 0
    # a blocked reduction: iterations of the reduction's outer loop (a conv's input channels)
    # per block, inside the cache tile and outside its register tiles, so that a block of the
    # operands (a slice of the weight) serves every register tile of the cache tile while it is
    # in L1, and the partial sums of the cache tile wait in a local buffer; 0: not blocked
    block: int = 0
    # the band's producers (`BandInfo.producers`: a conv's or pool's padded input) run no loop
    # nest of their own: each cache tile computes the part of their tensors it reads into a
    # local buffer (`tree.MARK_RECOMPUTE`); needs a cache tile, else ignored
    recompute: bool = False

    def __post_init__(self):
        for name in ("order", "tile", "register"):
            object.__setattr__(self, name, tuple(int(v) for v in getattr(self, name)))
        object.__setattr__(self, "prefetch", int(self.prefetch))
        object.__setattr__(self, "block", int(self.block))
        object.__setattr__(self, "recompute", bool(self.recompute))


def cpu_config(fusion: str = "smart", bands=None, **switches) -> Config:
    """The Config of CPU knobs: per-band `BandConfig`s (None: the heuristic's) and the switches
    vectorize, unroll, parallel, promote, fast_math (each on unless given False)."""
    config = legacy_config(fusion, bands, **switches)
    extra = tuple(Step(op, k, None, value) for k, b in enumerate(bands or ()) if isinstance(b, BandConfig)
                  for op, value in (("prefetch", b.prefetch), ("block", b.block)) if value)
    extra += tuple(Step("recompute", k) for k, b in enumerate(bands or ()) if isinstance(b, BandConfig) and b.recompute)
    return Config(fusion, config.steps + extra) if extra else config


def switches_of(config: Config) -> dict[str, bool]:
    """The CPU switches a config's kernel-level steps turn on."""
    return {"vectorize": config.has("vectorize"), "unroll": config.has("unroll"),
            "parallel": config.has("map", "cores"), "promote": config.has("promote"),
            "fast_math": config.has("fast_math")}


def _band_of(config: Config, k: int, members: int) -> BandConfig:
    order, tile, register, sink, pack = tuple(range(members)), (0,) * members, (0,) * members, False, False
    prefetch = block = 0
    recompute = False
    for s in config.band_steps(k):
        if s.op == "order":
            order = s.arg
        elif s.op == "tile" and s.level == CACHE_LEVEL:
            tile = s.arg
        elif s.op == "tile" and s.level == REGISTER_LEVEL:
            register = s.arg
        elif s.op == "tile":
            raise ScheduleError(f"band {k}: the CPU tiles for '{CACHE_LEVEL}' and '{REGISTER_LEVEL}', not '{s.level}'")
        elif s.op == "sink":
            sink = True
        elif s.op == "pack":
            pack = True
        elif s.op == "prefetch":
            prefetch = s.arg
            if not isinstance(prefetch, int) or prefetch < 0:
                raise ScheduleError(f"band {k}: prefetch distance {prefetch!r} is not a count of iterations")
        elif s.op == "block":
            block = s.arg
            if not isinstance(block, int) or block < 0:
                raise ScheduleError(f"band {k}: reduction block {block!r} is not a count of iterations")
        elif s.op == "recompute":
            recompute = True
        else:
            raise ScheduleError(f"band {k}: step '{s}' does not apply to a band on the CPU")
    return BandConfig(order, tile, register, sink, pack, prefetch, block, recompute)


def bands_of(config: Config) -> tuple[BandConfig, ...] | None:
    """The band knobs a config gives, each band's member count read off its own steps (None
    when it leaves every band to the heuristic)."""
    given = config.bands_given()
    if not given:
        return None
    members = {k: len(s.arg) for s in config.steps for k in [s.band] if k is not None and isinstance(s.arg, tuple)}
    return tuple(_band_of(config, k, members.get(k, 0)) for k in range(max(given) + 1))


def given_bands(config: Config, n_members: list[int]) -> tuple[BandConfig, ...] | None:
    """The band knobs a config gives (None when it leaves every band to the heuristic)."""
    if not config.bands_given():
        return None
    return tuple(_band_of(config, k, n) for k, n in enumerate(n_members))


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
        if info.reduction_inner and depth >= 4 * lanes and (
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
    if info.passes > 1 and info.row_writers <= 1 and not sink and coin[-1] and register[-1] == 0 \
            and not info.blocks:
        # several passes over each row that reduce it to scalars before a last one writes it
        # (a layer norm's mean, variance, output): a block of rows filling half of L1 runs
        # each pass before the next. Each pass stays a loop of its own, which LLVM would
        # otherwise fully unroll and merge, keeping a whole row live in spilled registers
        # (layer norm 4096 x 1024: 0.47 -> 0.40 ms). Not where passes write rows of
        # temporaries (a softmax's exponentials: 0.63 -> 0.72 ms), nor in a band that carries
        # partial column sums from row to row (their rows stay in L1 beside the row's: a
        # layer-norm backward ran 2.90 -> 2.44 ms one row at a time, on a loaded Xeon)
        row_bytes = max(1, info.work // max(1, math.prod(info.extents)) // info.passes * itemsize)
        rows = (l1_bytes // 2) // row_bytes
        if rows >= 2:
            register[-1] = _largest_fitting(tile[-1] or ext[-1], rows)
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
    # several passes over each row (a softmax, a layer norm): the next row (block) streams in
    # while this one computes, its prefetches spread over the pass that computes most
    # (`polyhedral.prefetch.spread`); a 4096 x 1024 softmax went from 66% to 87% of the stream
    # floor's bandwidth, a layer norm from 95% to 98%, on an AVX-512 Xeon
    prefetch = 1 if n == 1 and info.passes > 1 and not sink else 0
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


def band_knobs(config: Config, infos: list[BandInfo], target, dtype: str = "float32") -> tuple[BandConfig, ...]:
    """Every band's knobs under `config`: its own steps, else the heuristic's."""
    given = config.bands_given()
    defaults = default_bands(infos, target, dtype) if len(given) < len(infos) else ()
    return tuple(_band_of(config, k, info.members) if k in given else defaults[k] for k, info in enumerate(infos))


def validate_bands(bands: tuple[BandConfig, ...], infos: list[BandInfo]) -> None:
    """ScheduleError for band knobs that do not fit the schedule: an order that is not a
    permutation or reorders a non-permutable band, a tile larger than its loop, a register
    tile that does not fit inside its cache tile."""
    for k, (bc, info) in enumerate(zip(bands, infos)):
        n = info.members
        if sorted(bc.order) != list(range(n)):
            raise ScheduleError(f"band {k}: order {list(bc.order)} is not a permutation of {n} loops")
        if not info.permutable and tuple(bc.order) != tuple(range(n)):
            raise ScheduleError(f"band {k}: its loops are not permutable, order {list(bc.order)} is illegal")
        if len(bc.tile) != n or len(bc.register) != n:
            raise ScheduleError(f"band {k}: needs {n} tile and register sizes")
        for pos, m in enumerate(bc.order):
            extent, t, r = info.extents[m], bc.tile[pos], bc.register[pos]
            if t < 0 or t > extent:
                raise ScheduleError(f"band {k}: tile {t} of loop {m} is larger than its extent {extent}")
            if r < 0 or r > (t or extent):
                raise ScheduleError(f"band {k}: register tile {r} of loop {m} exceeds its tile {t or extent}")
        if (any(0 < t < info.extents[m] for t, m in zip(bc.tile, bc.order)) and not info.permutable
                and n > 1):
            raise ScheduleError(f"band {k}: a band whose loops are not permutable cannot be tiled")


# --- the knob space ----------------------------------------------------------------------------


@dataclass(frozen=True)
class BandSpace:
    info: BandInfo
    orders: tuple[tuple[int, ...], ...]
    tiles: tuple[tuple[int, ...], ...]  # per member (in original member order)

    def sample(self, rng: random.Random) -> BandConfig:
        order = rng.choice(self.orders)
        tile = tuple(rng.choice(self.tiles[m]) for m in order)
        register = []
        for pos, m in enumerate(order):
            bound = tile[pos] or self.info.extents[m]
            choices = [r for r in self.tiles[m] if r == 0 or r < bound]
            register.append(rng.choice(choices))
        prefetch = rng.choice(self.prefetches) if len(self.prefetches) > 1 else 0
        block = rng.choice(self.blocks) if rng.random() < 0.5 else 0
        return BandConfig(order, tile, tuple(register), rng.random() < 0.5, rng.random() < 0.5, prefetch, block,
                          rng.choice(self.recomputes))

    @property
    def recomputes(self) -> tuple[bool, ...]:
        return (False, True) if self.info.producers else (False,)

    @property
    def prefetches(self) -> tuple[int, ...]:
        return PREFETCH_DISTANCES if self.info.passes > 1 or len(self.blocks) > 1 else (0,)

    @property
    def blocks(self) -> tuple[int, ...]:
        """Reduction block sizes (`BandConfig.block`): 0 (none), or a power of two that leaves
        the reduction's outer loop two blocks or more."""
        outer = self.info.reduction_outer if self.info.reduction_inner else 0
        return (0, *(b for b in REDUCTION_BLOCKS if 2 * b <= outer))

    def size(self) -> int:
        n = len(self.orders) * 4 * len(self.prefetches) * len(self.blocks) * len(self.recomputes)
        for m in range(self.info.members):
            n *= len(self.tiles[m]) ** 2
        return n

    def configs(self) -> Iterator[BandConfig]:
        for order in self.orders:
            for tile in itertools.product(*(self.tiles[m] for m in order)):
                for reg in itertools.product(*(self.tiles[m] for m in order)):
                    if all(r == 0 or r < (t or self.info.extents[m]) for r, t, m in zip(reg, tile, order)):
                        for sink in (False, True):
                            for pack in (False, True):
                                for prefetch in self.prefetches:
                                    for block, recompute in itertools.product(self.blocks, self.recomputes):
                                        yield BandConfig(order, tile, reg, sink, pack, prefetch, block, recompute)


def band_space(info: BandInfo) -> BandSpace:
    members = tuple(range(info.members))
    orders = tuple(itertools.permutations(members)) if info.permutable else (members,)
    return BandSpace(info, orders, tuple(divisors_and_powers(e) for e in info.extents))


def _all_switches() -> dict:
    return {name: (True, False) for name in LEGACY_SWITCHES}


@dataclass(frozen=True)
class CpuSpace(Space):
    """All legal CPU configs of one subgraph for one fusion strategy: per band an order, tile
    sizes at both levels, sink and pack; the five switches."""

    bands: tuple[BandSpace, ...] = ()
    target: object = None

    def __post_init__(self):
        if not self.switches:
            object.__setattr__(self, "switches", _all_switches())

    def _config(self, bands, switches: dict) -> Config:
        return cpu_config(self.fusion, bands, **switches)

    def size(self) -> int:
        n = 1
        for b in self.bands:
            n *= b.size()
        return n * 2 ** len(self.switches)

    def sample(self, rng: random.Random) -> Config:
        bands = tuple(b.sample(rng) for b in self.bands)
        return self._config(bands, {k: rng.choice(v) for k, v in self.switches.items()})

    def __iter__(self) -> Iterator[Config]:
        per_band = [list(b.configs()) for b in self.bands]
        for combo in itertools.product(*per_band):
            for flags in itertools.product(*self.switches.values()):
                yield self._config(tuple(combo), dict(zip(self.switches, flags)))

    def validate(self, config: Config) -> None:
        infos = [b.info for b in self.bands]
        if self.target is not None:
            check_steps(config, self.target, len(infos))
        elif config.bands_given() and max(config.bands_given()) >= len(infos):
            raise ScheduleError(f"config maps {max(config.bands_given()) + 1} bands, the schedule has {len(infos)}")
        given = given_bands(config, [i.members for i in infos])
        if given is not None:
            validate_bands(given, infos)

    def mutate(self, config: Config, rng: random.Random) -> Config:
        """A neighbour: one tile size moved to an adjacent candidate, an order, sink, pack or
        recompute changed, or one switch flipped."""
        switches = switches_of(config)
        bands = list(given_bands(config, [b.info.members for b in self.bands]) or ())
        if not bands or rng.random() < 0.15:
            name = rng.choice(list(self.switches))
            switches[name] = not switches[name]
            return self._config(tuple(bands) or None, switches)
        k = rng.randrange(len(bands))
        bc, bs = bands[k], self.bands[k]
        roll = rng.random()
        if roll < 0.1 and len(bs.orders) > 1:
            order = rng.choice(bs.orders)
            bands[k] = BandConfig(order, tuple(bc.tile[bc.order.index(m)] for m in order),
                                  tuple(bc.register[bc.order.index(m)] for m in order), bc.sink, bc.pack,
                                  bc.prefetch, bc.block, bc.recompute)
        elif roll < 0.15 and bs.info.producers:
            bands[k] = replace(bc, recompute=not bc.recompute)
        elif roll < 0.2:
            bands[k] = replace(bc, sink=not bc.sink)
        elif roll < 0.27:
            bands[k] = replace(bc, pack=not bc.pack)
        elif roll < 0.34 and len(bs.prefetches) > 1:
            i = bs.prefetches.index(bc.prefetch) if bc.prefetch in bs.prefetches else 0
            bands[k] = replace(bc, prefetch=bs.prefetches[max(0, min(len(bs.prefetches) - 1, i + rng.choice((-1, 1))))])
        elif roll < 0.41 and len(bs.blocks) > 1:
            i = bs.blocks.index(bc.block) if bc.block in bs.blocks else 0
            bands[k] = replace(bc, block=bs.blocks[max(0, min(len(bs.blocks) - 1, i + rng.choice((-1, 1))))])
        else:
            pos = rng.randrange(len(bc.order))
            m = bc.order[pos]
            which = "tile" if rng.random() < 0.5 else "register"
            choices = bs.tiles[m]
            current = getattr(bc, which)[pos]
            i = choices.index(current) if current in choices else 0
            new = choices[max(0, min(len(choices) - 1, i + rng.choice((-2, -1, 1, 2))))]
            values = list(getattr(bc, which))
            values[pos] = new
            bands[k] = replace(bc, **{which: tuple(values)})
        return self._config(tuple(bands), switches)

    def crossover(self, a: Config, b: Config, rng: random.Random) -> Config:
        """Each band mapping and each switch taken from one parent or the other."""
        members = [s.info.members for s in self.bands]
        ba, bb = given_bands(a, members), given_bands(b, members)
        bands = tuple(rng.choice((x, y)) for x, y in zip(ba or (), bb or ()))
        sa, sb = switches_of(a), switches_of(b)
        switches = {name: rng.choice((sa, sb))[name] for name in self.switches}
        return self._config(bands or ba, switches)


# --- the recipe --------------------------------------------------------------------------------


@dataclass(frozen=True)
class BandPlan:
    """How one outer band is mapped. Sizes are per member after `order` is applied;
    0 means "not tiled" at that level."""

    order: tuple[int, ...]
    tile: tuple[int, ...]
    register: tuple[int, ...]
    sink: bool
    parallel: bool
    pack: bool = False
    prefetch: int = 0
    block: int = 0
    recompute: tuple[str, ...] = ()  # producers computed cache tile by cache tile


class CpuRecipe(Recipe):
    """The CPU's mapping: cache and register tiles, micro-kernels with sunk register loops,
    packed operand panels, parallel outer loops and vector inner loops."""

    def prepare(self, program, dtype: str):
        from akg.graph.compute.lower import split_column_reductions, split_reductions

        # column sums beside a row loop: one partial per default parallel chunk of the rows
        # (`polyhedral.row_partials` moves them into the row band)
        program = split_column_reductions(program, self.target.cores * CHUNKS_PER_CORE)
        return split_reductions(program, self.target.vector_lanes(dtype))

    def default_config(self, bands, dtype, fusion="smart") -> Config:
        return cpu_config(fusion, default_bands(bands, self.target, dtype))

    def alternative_configs(self, bands, dtype, fusion="smart") -> list[Config]:
        """Whole vectors where the default takes half vectors (`half_vector_window`): which
        wins depends on the channels and the width of the rows (MobileNetV2's 1x1 expansion
        24 -> 144 channels at 56 px: 105.6 -> 96.5 us alone as whole vectors, 145 -> 121 us
        in the model; 40 -> 240 channels at 40 px: 142.8 -> 152.0 us)."""
        default = default_bands(bands, self.target, dtype)
        whole = default_bands(bands, self.target, dtype, half_vectors=False)
        return [cpu_config(fusion, whole)] if whole != default else []

    def space(self, bands, fusion="smart") -> CpuSpace:
        return CpuSpace(fusion, bands=tuple(band_space(i) for i in bands), target=self.target)

    def validate(self, config, bands) -> None:
        check_steps(config, self.target, len(bands))
        given = given_bands(config, [i.members for i in bands])
        if given is not None:
            validate_bands(given, bands)

    def apply(self, config, model, schedule, bands, dtype):
        self.validate(config, bands)
        if tree.n_outer_bands(schedule) != len(bands):
            raise ScheduleError(f"the schedule has {tree.n_outer_bands(schedule)} outer bands, "
                                f"the config maps {len(bands)}")
        switches = switches_of(config)
        plans = []
        for info, bc in zip(bands, band_knobs(config, bands, self.target, dtype)):
            parallel = switches["parallel"] and info.work >= parallel_threshold(info) and self.target.cores > 1
            if info.blocks and not (bc.order[0] == 0 and 0 < bc.tile[0] < info.extents[0]
                                    and bc.tile[0] % info.blocks == 0):
                parallel = False  # a chunk (a row, untiled) would split a block of partial sums
            plans.append(BandPlan(bc.order, bc.tile, bc.register, bc.sink, parallel, bc.pack, bc.prefetch, bc.block,
                                  info.producers if bc.recompute else ()))
        vectorize, unroll = switches["vectorize"], switches["unroll"]
        schedule = tree.map_outer_bands(model, schedule,
                                        lambda node, k: _apply_band(node, k, plans[k], vectorize, unroll, model))
        if vectorize:
            schedule = tree.vectorize_inner_bands(model, schedule)
            schedule = tree.strip_inner_vectors(model, schedule, self.target.vector_lanes(dtype))
        return schedule

    def knob_features(self, config, bands) -> list[float]:
        tiles = [0.0] * 3
        regs = [0.0] * 3
        sink = 0.0
        given = given_bands(config, [i.members for i in bands]) if bands else None
        if given:
            bc, info = given[0], bands[0]
            for pos, m in enumerate(bc.order[-3:]):
                extent = info.extents[m]
                t = bc.tile[len(bc.order) - len(bc.order[-3:]) + pos] or extent
                r = bc.register[len(bc.order) - len(bc.order[-3:]) + pos] or t
                tiles[pos] = _log2(t) - _log2(extent)
                regs[pos] = _log2(r) - _log2(extent)
            sink = float(bc.sink)
        sw = switches_of(config)
        return [*tiles, *regs, sink, float(sw["fast_math"]), float(sw["promote"]), float(sw["vectorize"]),
                float(sw["unroll"]), float(sw["parallel"]), float(config.fusion == "max"),
                float(config.fusion == "smart"), float(config.fusion == "none")]


def _log2(x: float) -> float:
    return math.log2(x) if x > 0 else 0.0


def _apply_band(node, index: int, bp: BandPlan, vectorize: bool, unroll: bool, model=None):
    """Tile (cache level), tile again (register level), sink the register loops below inner
    bands, and mark. Returns some node of the updated tree."""
    n = tree.band_members(node)
    if tuple(bp.order) != tuple(range(n)):
        node = tree.permute_band(node, bp.order)
    coincident = tree.band_coincident(node)
    extents = tree.band_extents(node)
    tile = tuple(t if 0 < t < e else e for t, e in zip(bp.tile, extents))
    reg_tiled = any(0 < r < t for r, t in zip(bp.register, tile))
    # members without a register tile keep their whole point loop outside the register tile;
    # one whose register tile is its whole cache tile keeps that loop inside it
    register = tuple(r if 0 < r <= t else (1 if reg_tiled else t) for r, t in zip(bp.register, tile))
    tiled = tile != extents
    parallel = bp.parallel and coincident[0]
    # accumulators of a vector loop that is not the written row (a conv vectorised over its
    # output channels) are kept with that loop's dim last, so their vectors are contiguous
    vector_last = f".{VECTOR_LAST}" if bp.sink and bp.order[-1] != n - 1 else ""
    if bp.block and bp.sink and reg_tiled and all(coincident) and not tree.is_innermost(node):
        return _blocked_band(node, index, bp, tile, register, vectorize, unroll, vector_last, model)
    pack = bp.pack and tiled and n > 1 and tile[-1] != extents[-1] and all(coincident)
    if tiled and pack:
        # the last member's tile loop goes outermost, and operands that depend only on it
        # (a matmul's B panel) are packed once per iteration and reused by the other tiles
        node = tree.tile_band(node, tile)
        node = tree.permute_band(node, (n - 1, *range(n - 1)))
        node = tree.split_band(node, 1)
        if bp.parallel:
            node = tree.mark(node, MARK_PARALLEL)
        lanes = register[-1] if reg_tiled else 0
        node = tree.mark(tree.child(node), f"{MARK_PACK}.{index}.{lanes}")
        node = tree.mark(tree.child(node), f"{MARK_PROMOTE}.{index}.0")
    elif tiled:
        node = tree.tile_band(node, tile)
        if parallel:
            node = tree.mark(node, MARK_PARALLEL)
        node = tree.mark(tree.child(node), f"{MARK_PROMOTE}.{index}.0{'' if reg_tiled else vector_last}")
        for producer in bp.recompute:
            node = tree.mark(node, f"{MARK_RECOMPUTE}.{producer}")
    elif parallel:
        node = tree.mark(node, MARK_PARALLEL)
    multi_pass = bp.prefetch > 0 and n == 1 and not bp.sink and tree.passes_below(node) > 1
    if reg_tiled:
        node = tree.tile_band(node, register)
        if multi_pass:  # the loop over row blocks prefetches the blocks ahead of it
            node = tree.mark(node, f"{MARK_PREFETCH}.{bp.prefetch}")
        node = tree.mark(tree.child(node), f"{MARK_PROMOTE}.{index}.1{vector_last}")
    elif multi_pass:  # the loop over rows prefetches the rows ahead of it
        node = tree.mark(node, f"{MARK_PREFETCH}.{bp.prefetch}")
    # node: the innermost point band of this outer band
    innermost = tree.is_innermost(node)
    if tiled and not reg_tiled and not innermost and not bp.sink:
        # promote per iteration of the point loops too (one row of a softmax tile)
        node = tree.parent(tree.mark(tree.child(node), f"{MARK_PROMOTE}.{index}.1"), 2)
    if not tiled and not reg_tiled:
        if not innermost:  # promote per iteration of the whole band (e.g. one row)
            node = tree.parent(tree.mark(tree.child(node), f"{MARK_PROMOTE}.{index}.0"), 2)
        marks = tree.register_marks(coincident, vectorize, False, innermost)
        return tree.insert_marks_on_members(node, marks)
    if reg_tiled and not bp.sink and all(coincident) and tree.passes_below(node) > 1:
        # register rows above several passes (a layer norm's mean, variance and output):
        # each pass runs over the rows of the register tile before the next one starts
        return tree.distribute(node, coincident)
    if bp.sink and all(coincident) and not innermost:
        marks = tree.register_marks(coincident, vectorize, unroll and reg_tiled, True)
        return tree.sink_below_inner(node, coincident, marks, model)
    # register loops above other loops (a reduction not sunk under) are not unrolled: that
    # would copy the whole inner nest once per register-tile point, and LLVM takes minutes
    marks = tree.register_marks(coincident, vectorize, unroll and reg_tiled and innermost, innermost)
    return tree.insert_marks_on_members(node, marks)


def _blocked_band(node, index: int, bp: BandPlan, tile, register, vectorize: bool, unroll: bool, vector_last: str,
                  model=None):
    """A band whose reduction runs in blocks (`BandConfig.block`): cache tile loops (parallel),
    the partial sums of a cache tile held in a local buffer (channels last where the vector
    loop walks them), the loop over the reduction's blocks (prefetching the next block's
    operands, spread over the register tiles), the register tiles, and under them the block's
    reduction with the register loops sunk below it. Packing is not needed: a block of the
    operands is read once per cache tile, from memory, while the previous block computes."""
    coincident = tree.band_coincident(node)
    node = tree.tile_band(node, tile)
    if bp.parallel and coincident[0]:
        node = tree.mark(node, MARK_PARALLEL)
    node = tree.mark(tree.child(node), f"{MARK_PROMOTE}.{index}.0{vector_last}")
    node, blocked = tree.block_reduction(node, bp.block)
    if blocked and bp.prefetch:
        node = tree.child(tree.mark(tree.parent(node), f"{MARK_PREFETCH}.{bp.prefetch}.{tree.PREFETCH_NEST}"))
    node = tree.tile_band(node, register)
    node = tree.mark(tree.child(node), f"{MARK_PROMOTE}.{index}.1{vector_last}")
    marks = tree.register_marks(coincident, vectorize, unroll, True)
    return tree.sink_below_inner(node, coincident, marks, model)

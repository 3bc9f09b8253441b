"""CPU mapping: turns a Config (or, without one, a heuristic) into the tiling plan of each
outer band — cache tiles, register tiles, loop order, sinking of register loops below
reductions, parallel outer loop, vector innermost loop."""

from __future__ import annotations

import math

import numpy as np

from akg.target import vector_strip
from akg.polyhedral.tree import BandInfo, BandPlan, TreePlan
from akg.schedules.space import BandConfig, Config, validate_bands

REGISTER_BYTES = 1024  # accumulators of a register tile by default: 16 AVX-512 registers
PARALLEL_MIN_POINTS = 1 << 14  # below this many iterations a thread launch costs more


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
                 register_bytes: int = REGISTER_BYTES, l1_bytes: int = 32 << 10) -> BandConfig:
    """Heuristic mapping of one band.

    The loop with the most unit-stride accesses goes innermost (vectorised, a register tile
    of two vectors). Under a reduction (matmul, conv) the register tile also spans a few rows
    and sinks below the reduction loop, so the accumulators stay in registers across it.
    Cache tiles give the parallel outer loop a few chunks per core; under a deep reduction the
    vector-side tile narrows so that its operand panel (reduction depth x tile) fits in half
    of L2. `register_bytes` is the target's accumulator budget (`CpuTarget.accumulator_bytes`).
    """
    n = info.members
    order = list(range(n))
    if info.permutable and n > 1:
        best = max(range(n), key=lambda m: (info.contiguity[m], info.coincident[m], m))
        order.remove(best)
        order.append(best)
    ext = [info.extents[m] for m in order]
    coin = [info.coincident[m] for m in order]
    sink = info.reduction_inner and all(coin) and info.contiguity[order[-1]] >= max(info.inner_contiguity, 1)

    register = [0] * n
    innermost_contiguous = info.contiguity[order[-1]] > 0 or not info.has_inner
    if coin[-1] and ext[-1] >= lanes and innermost_contiguous:
        register[-1] = vector_strip(ext[-1], lanes)
    if sink and n > 1 and coin[-2]:
        budget = register_bytes // max(1, (register[-1] or ext[-1]) * itemsize)  # accumulator rows
        if n > 2 and coin[-3] and register[-1] == lanes and budget >= 8:
            # one vector wide (a conv's output row): 4 x (budget / 4) rows over the two loops
            # above it (4 x 4 with AVX-512, 4 x 2 with AVX2's 12 accumulators once the rows
            # divide the loop), so each loaded vector and each broadcast feed several FMAs
            register[-3] = _largest_fitting(ext[-3], min(ext[-3], 4))
            register[-2] = _largest_fitting(ext[-2], min(ext[-2], budget // 4))
        else:
            register[-2] = _largest_fitting(ext[-2], max(1, min(ext[-2], budget, 8)))

    tile = [0] * n
    if sink:  # cache tile of the register-blocked band: a panel of a few register tiles
        if n > 1:
            tile[-2] = _largest_fitting(ext[-2], max(register[-2] or 1, 1) * 16) if ext[-2] > 64 else 0
        step = max(register[-1] or 1, 1)
        depth = max(1, info.work // max(1, math.prod(info.extents)))  # reduction points per point
        fits = (l2_bytes // 2) // (depth * itemsize) // step * step
        want = max(2 * step, min(step * 4, fits))  # a tile of one register tile would lose it
        tile[-1] = _largest_fitting(ext[-1], want, step) if ext[-1] > 256 or want < ext[-1] // 2 else 0
    # parallel chunks: split the outermost loop so each core gets a few pieces
    if coin[0] and ext[0] > 1 and tile[0] == 0 and not (n == 1 and register[0]):
        chunk = max(1, math.ceil(ext[0] / (cores * 4)))
        if chunk < ext[0]:
            tile[0] = _largest_fitting(ext[0], chunk)
    if info.passes > 1 and info.row_writers <= 1 and not sink and coin[-1] and register[-1] == 0:
        # several passes over each row that reduce it to scalars before a last one writes it
        # (a layer norm's mean, variance, output): a block of rows filling half of L1 runs
        # each pass before the next. Each pass stays a loop of its own, which LLVM would
        # otherwise fully unroll and merge, keeping a whole row live in spilled registers
        # (layer norm 4096 x 1024: 0.47 -> 0.40 ms). Not where passes write rows of
        # temporaries (a softmax's exponentials: 0.63 -> 0.72 ms)
        row_bytes = max(1, info.work // max(1, math.prod(info.extents)) // info.passes * itemsize)
        rows = (l1_bytes // 2) // row_bytes
        if rows >= 2:
            register[-1] = _largest_fitting(tile[-1] or ext[-1], rows)
    for pos in range(n):
        t = tile[pos] or ext[pos]
        if register[pos] >= t:
            register[pos] = 0
    # matmul-like bands: pack the operand panel that the other tiles reuse
    pack = sink and n == 2 and tile[-1] != 0
    return BandConfig(tuple(order), tuple(tile), tuple(register), sink, pack)


def default_config(infos: list[BandInfo], target, dtype: str = "float32", fusion: str = "smart") -> Config:
    itemsize = np.dtype(dtype).itemsize
    lanes = target.vector_lanes(dtype)
    l2 = getattr(target, "l2_bytes", 1 << 20)
    acc = getattr(target, "accumulator_bytes", REGISTER_BYTES)
    l1 = getattr(target, "l1_bytes", 32 << 10)
    return Config(fusion=fusion, bands=tuple(default_band(i, lanes, target.cores, itemsize, l2, acc, l1) for i in infos))


def to_plan(config: Config, infos: list[BandInfo], target, dtype: str = "float32") -> TreePlan:
    """The tree plan of a config (validated against the schedule's bands)."""
    validate_bands(config, infos)
    bands = config.bands if config.bands is not None else default_config(infos, target, dtype).bands
    plans = []
    for info, bc in zip(infos, bands):
        plans.append(BandPlan(order=bc.order, tile=bc.tile, register=bc.register, sink=bc.sink,
                              parallel=config.parallel and info.work >= PARALLEL_MIN_POINTS and target.cores > 1,
                              pack=bc.pack))
    return TreePlan(tuple(plans), vectorize=config.vectorize, unroll=config.unroll)

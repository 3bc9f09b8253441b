"""The NPU recipe's steps of one outer band (`NpuBand`: its UB tile, the blocks over the AI
cores, a cube band's K step, grid and L1 chunk) read from and written to a Config's steps, and
the band member whose tile loop goes over the cores. The recipe (`akg.schedules.npu`) validates
and applies them; `akg.schedules.npu_defaults`, `npu_cube` and `npu_conv` size them."""

from __future__ import annotations

import math
from dataclasses import dataclass

from akg.errors import ScheduleError
from akg.polyhedral.bands import BandInfo
from akg.schedules.space import Config, Step

LEVEL = "UB"
CUBE_LEVEL = "L0A"  # tile(band, "L0A", [kt]): the reduction tile of a contraction on the cube
CHUNK_LEVEL = "L1"  # tile(band, "L1", [ct]): a convolution's input channels per L1 chunk


def divisors(n: int) -> list[int]:
    """The divisors of n, ascending."""
    return [d for d in range(1, n + 1) if n % d == 0]


@dataclass(frozen=True)
class NpuBand:
    """One band's NPU steps: tile sizes per member (each divides its loop; the whole loop when
    untiled) and the blocks its first tile loop is split over. A band with a contraction on
    the cube also has `kt` (the reduction tile: one L0A/L0B step) and `grid`: blocks per
    member (the (m, n) tiles split over the AI cores)."""

    tile: tuple[int, ...]
    blocks: int = 1
    kt: int = 0
    grid: tuple[int, ...] = ()
    chunk: int = 0  # a convolution's channels per L1 chunk (`tile(band, "L1", [ct])`); 0: not a convolution


def band_plans(config: Config, bands: list[BandInfo]) -> list[NpuBand]:
    """Each band's steps in `config` as an `NpuBand` (a band without steps: its whole loops, one
    block)."""
    plans = []
    for k, info in enumerate(bands):
        tile, blocks, kt, grid, chunk = tuple(info.extents), 1, 0, (), 0
        for s in config.band_steps(k):
            if s.op == "tile" and s.level == LEVEL:
                if len(s.arg) != info.members:
                    raise ScheduleError(f"band {k}: tile {list(s.arg)} has {len(s.arg)} sizes, the band "
                                        f"{info.members} loops")
                tile = tuple(t if t else e for t, e in zip(s.arg, info.extents))
            elif s.op == "tile" and s.level == CUBE_LEVEL:
                kt = int(s.arg[0]) if isinstance(s.arg, tuple) else int(s.arg)
            elif s.op == "tile" and s.level == CHUNK_LEVEL:
                chunk = int(s.arg[0]) if isinstance(s.arg, tuple) else int(s.arg)
            elif s.op == "map" and s.level == "cores":
                if isinstance(s.arg, tuple) and len(s.arg) > 1 or kt:
                    grid = tuple(int(b) for b in (s.arg if isinstance(s.arg, tuple) else (s.arg,)))
                blocks = int(s.arg[0]) if isinstance(s.arg, tuple) and s.arg else int(s.arg or 1)
            else:
                raise ScheduleError(f"band {k}: the NPU takes tile(UB), tile(L0A) and map(cores) steps, not '{s}'")
        if kt and not grid:
            grid = (blocks,) + (1,) * (info.members - 1)
        plans.append(NpuBand(tile, math.prod(grid) if kt else blocks, kt, grid if kt else (), chunk if kt else 0))
    return plans


def block_member(info: BandInfo, tile: tuple[int, ...], cores: int) -> int:
    """The band member whose tile loop is split over the AI cores: the first, unless it has
    fewer tiles than the cores and the band is permutable with another coincident member that
    has more (a softmax over (16, 16, 512, 512) tiled (1, 8, 1): 64 row tiles, not 16 images);
    its tile loop then goes first (the point loops keep their order)."""
    counts = [e // t for e, t in zip(info.extents, tile)]
    if not info.coincident or counts[0] >= cores or not info.permutable or info.members < 2:
        return 0
    candidates = [d for d in range(info.members) if info.coincident[d]]
    if not candidates:
        return 0
    best = max(candidates, key=lambda d: (min(counts[d], cores), -d))
    return best if counts[best] > counts[0] or not info.coincident[0] else 0


def buffers_of(config: Config) -> int:
    """The buffers per UB tensor of `config` (`promote(None, "UB", buffers)`; 1 without one)."""
    for s in config.kernel_steps():
        if s.op == "promote":
            return int(s.arg or 1)
    return 1


def band_steps(plans: list[NpuBand], buffers: int) -> tuple[Step, ...]:
    """The Config steps of `plans` and `buffers` (what `band_plans` and `buffers_of` read)."""
    steps = []
    for k, p in enumerate(plans):
        steps.append(Step("tile", k, LEVEL, p.tile))
        if p.kt:
            steps.append(Step("tile", k, CUBE_LEVEL, (p.kt,)))
            if p.chunk:
                steps.append(Step("tile", k, CHUNK_LEVEL, (p.chunk,)))
            steps.append(Step("map", k, "cores", tuple(p.grid)))
        else:
            steps.append(Step("map", k, "cores", (p.blocks,)))
    steps.append(Step("promote", None, LEVEL, buffers))
    return tuple(steps)

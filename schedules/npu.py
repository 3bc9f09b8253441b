"""NPU mapping recipe: each outer band is tiled so that one tile's working set fits the
Unified Buffer (halved under double buffering), the point band of the tile is marked
(`npu.tile.<band>`: the region whose tensors the backend keeps in UB, with DMAs in and out
around it, and whose loop nests become vector instructions), and the first tile loop is split
over the AI cores (a parallel loop the backend turns into blocks). Double buffering is a
kernel-level knob (`promote(UB, 2)`: two ping-pong buffers per tensor, so the DMAs of one
tile overlap the vector work of the other).

Steps of an NPU config: `tile(band, "UB", sizes)` (0 = the whole loop), `map(band, "cores",
[blocks])` (blocks the first tile loop is split into; 1 = one core), `promote(None, "UB",
buffers)` (1 or 2)."""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from akg.errors import ScheduleError
from akg.polyhedral import tree
from akg.polyhedral.tree import MARK_PARALLEL, BandInfo
from akg.schedules.recipe import Recipe
from akg.schedules.space import Config, Space, Step, check_steps

MARK_TILE = "npu.tile"
MARK_PAR = "npu.par"  # above a point loop that carries no dependence (the backend may distribute it)
LEVEL = "UB"
UB_FILL = 0.5  # fraction of the (per-buffer) UB budget the estimate may fill: temporaries
MAX_BLOCKS = 4096


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@dataclass(frozen=True)
class NpuBand:
    """One band's NPU steps: tile sizes per member (each divides its loop; the whole loop when
    untiled) and the blocks its first tile loop is split over."""

    tile: tuple[int, ...]
    blocks: int = 1


def band_plans(config: Config, bands: list[BandInfo]) -> list[NpuBand]:
    plans = []
    for k, info in enumerate(bands):
        tile, blocks = tuple(info.extents), 1
        for s in config.band_steps(k):
            if s.op == "tile" and s.level == LEVEL:
                if len(s.arg) != info.members:
                    raise ScheduleError(f"band {k}: tile {list(s.arg)} has {len(s.arg)} sizes, the band "
                                        f"{info.members} loops")
                tile = tuple(t if t else e for t, e in zip(s.arg, info.extents))
            elif s.op == "map" and s.level == "cores":
                blocks = int(s.arg[0]) if isinstance(s.arg, tuple) and s.arg else int(s.arg or 1)
            else:
                raise ScheduleError(f"band {k}: the NPU takes tile(UB) and map(cores) steps, not '{s}'")
        plans.append(NpuBand(tile, blocks))
    return plans


def buffers_of(config: Config) -> int:
    for s in config.kernel_steps():
        if s.op == "promote":
            return int(s.arg or 1)
    return 1


def _steps(plans: list[NpuBand], buffers: int) -> tuple[Step, ...]:
    steps = []
    for k, p in enumerate(plans):
        steps.append(Step("tile", k, LEVEL, p.tile))
        steps.append(Step("map", k, "cores", (p.blocks,)))
    steps.append(Step("promote", None, LEVEL, buffers))
    return tuple(steps)


class NpuRecipe(Recipe):
    """Tiles fitted to the UB, the first tile loop over the AI cores, double buffering."""

    def __init__(self, target):
        super().__init__(target)
        self.bytes_per_point: list[float] = []
        self._program = None

    @property
    def spec(self):
        return self.target.spec

    def prepare(self, program, dtype: str):
        self._program = program
        return program

    # --- sizing ------------------------------------------------------------------------------

    def _point_bytes(self, info: BandInfo) -> float:
        """Estimated UB bytes per point of the band: each tensor of the kernel spread over the
        band's points (a tensor smaller than the band, e.g. a bias, counted whole)."""
        points = math.prod(info.extents)
        total, whole = 0.0, 0.0
        program = self._program
        tensors = [] if program is None else [*program.placeholders, *(op.output for op in program.ops())]
        for t in tensors:
            n = int(np.prod(t.shape, dtype=np.int64)) * max(np.dtype(t.dtype).itemsize, 2)
            if n >= points:
                total += n / points
            else:
                whole += n
        return 2 * total + 1, whole  # x2: temporaries of the vector expressions

    def _budget(self, buffers: int) -> float:
        return self.spec.ub_usable_bytes * UB_FILL / buffers

    def fit_tile(self, info: BandInfo, buffers: int) -> tuple[int, ...]:
        """The largest tile (outer members first shrunk, inner ones kept whole as long as
        possible) whose estimated footprint fits the UB budget."""
        per_point, whole = self._point_bytes(info)
        budget = max(self._budget(buffers) - whole, 1024)
        tile = list(info.extents)
        for d in range(info.members):
            if math.prod(tile) * per_point <= budget:
                break
            if not info.permutable and info.members > 1:
                break
            rest = math.prod(tile) // tile[d]
            fits = [t for t in divisors(info.extents[d]) if t * rest * per_point <= budget]
            tile[d] = max(fits) if fits else 1
        return tuple(tile)

    def default_blocks(self, info: BandInfo, tile: tuple[int, ...], n_bands: int) -> int:
        if n_bands > 1 or not info.coincident or not info.coincident[0]:
            return 1
        count = info.extents[0] // tile[0]
        fits = [b for b in divisors(count) if b <= self.spec.cores]
        return max(fits) if fits else 1

    def default_config(self, bands, dtype, fusion="smart") -> Config:
        buffers = 2
        plans = []
        for info in bands:
            tile = self.fit_tile(info, buffers)
            plans.append(NpuBand(tile, self.default_blocks(info, tile, len(bands))))
        return Config(fusion, _steps(plans, buffers))

    def space(self, bands, fusion="smart") -> "NpuSpace":
        per_band = []
        for info in bands:
            tiles = []
            for d, e in enumerate(info.extents):
                ds = divisors(e)
                if len(ds) > 8:  # a few sizes around each power of two
                    ds = sorted({min(ds, key=lambda v: abs(math.log2(v) - p)) for p in range(0, 20)})
                tiles.append(tuple(ds) if info.permutable or info.members == 1 else (e,))
            per_band.append(tuple(tiles))
        return NpuSpace(fusion, infos=tuple(bands), tiles=tuple(per_band), target=self.target)

    # --- validation and application -------------------------------------------------------------

    def validate(self, config, bands) -> None:
        check_steps(config, self.target, len(bands))
        if buffers_of(config) not in (1, 2):
            raise ScheduleError(f"promote(UB) takes 1 or 2 buffers, not {buffers_of(config)}")
        plans = band_plans(config, bands)
        for k, (info, p) in enumerate(zip(bands, plans)):
            for t, e in zip(p.tile, info.extents):
                if t < 1 or e % t:
                    raise ScheduleError(f"band {k}: tile {list(p.tile)} does not divide the loops {list(info.extents)}")
            if p.tile != info.extents and not info.permutable and info.members > 1:
                raise ScheduleError(f"band {k}: its loops are not permutable and cannot be tiled")
            count = info.extents[0] // p.tile[0]
            if p.blocks < 1 or count % p.blocks or p.blocks > MAX_BLOCKS:
                raise ScheduleError(f"band {k}: {p.blocks} blocks do not divide its {count} tiles")
            if p.blocks > 1 and (len(bands) > 1 or not info.coincident[0]):
                raise ScheduleError(f"band {k}: only the parallel outer loop of a single-band kernel is "
                                    f"split over cores")

    def promote(self, config) -> bool:
        return False  # the backend keeps every tile's tensors in UB itself

    def apply(self, config, model, schedule, bands, dtype):
        self.validate(config, bands)
        plans = band_plans(config, bands)
        buffers = buffers_of(config)

        def mark_points(point):
            marks = [MARK_PAR if c else None for c in tree.band_coincident(point)]
            return tree.insert_marks_on_members(point, marks)

        def apply_band(node, k):
            p = plans[k]
            extents = tree.band_extents(node)
            if tuple(p.tile) == tuple(extents) and p.blocks == 1:
                return mark_points(tree.mark(node, f"{MARK_TILE}.{k}.{buffers}"))
            node = tree.tile_band(node, tuple(p.tile))
            point = mark_points(tree.mark(tree.child(node), f"{MARK_TILE}.{k}.{buffers}"))
            node = tree.parent(point, 2)  # the tile band
            if p.blocks > 1:
                counts = tree.band_extents(node)
                node = tree.tile_band(node, (counts[0] // p.blocks, *counts[1:]))
                node = tree.mark(node, MARK_PARALLEL)
            return node

        return tree.map_outer_bands(model, schedule, apply_band)

    def knob_features(self, config, bands) -> list[float]:
        plans = band_plans(config, bands) if bands else []
        if not plans:
            return [0.0] * 4
        p, info = plans[0], bands[0]
        return [math.log2(math.prod(p.tile)), math.log2(math.prod(info.extents) / math.prod(p.tile)),
                math.log2(p.blocks), float(buffers_of(config))]


@dataclass(frozen=True)
class NpuSpace(Space):
    """Tile sizes per band member (divisors), blocks (divisors of the first tile loop up to
    the cores), single or double buffering."""

    infos: tuple[BandInfo, ...] = ()
    tiles: tuple[tuple[tuple[int, ...], ...], ...] = ()
    target: object = None

    def _blocks(self, k: int, tile: tuple[int, ...]) -> list[int]:
        info = self.infos[k]
        if len(self.infos) > 1 or not info.coincident[0]:
            return [1]
        cores = self.target.spec.cores if self.target is not None else 32
        return [b for b in divisors(info.extents[0] // tile[0]) if b <= cores] or [1]

    def _config(self, plans, buffers) -> Config:
        return Config(self.fusion, _steps(list(plans), buffers))

    def size(self) -> int:
        n = 2
        for per in self.tiles:
            for t in per:
                n *= len(t)
        return n

    def _sample_band(self, k: int, rng: random.Random) -> NpuBand:
        tile = tuple(rng.choice(t) for t in self.tiles[k])
        return NpuBand(tile, rng.choice(self._blocks(k, tile)))

    def sample(self, rng: random.Random) -> Config:
        return self._config([self._sample_band(k, rng) for k in range(len(self.infos))], rng.choice((1, 2)))

    def __iter__(self) -> Iterator[Config]:
        per_band = []
        for k, tiles in enumerate(self.tiles):
            per_band.append([NpuBand(t, b) for t in itertools.product(*tiles) for b in self._blocks(k, t)])
        for combo in itertools.product(*per_band):
            for buffers in (2, 1):
                yield self._config(combo, buffers)

    def validate(self, config: Config) -> None:
        NpuRecipe(self.target).validate(config, list(self.infos))

    def mutate(self, config: Config, rng: random.Random) -> Config:
        plans = band_plans(config, list(self.infos))
        buffers = buffers_of(config)
        if not plans or rng.random() < 0.2:
            return self._config(plans, 3 - buffers)
        k = rng.randrange(len(plans))
        tile = list(plans[k].tile)
        d = rng.randrange(len(tile))
        choices = list(self.tiles[k][d])
        i = choices.index(tile[d]) if tile[d] in choices else 0
        tile[d] = choices[max(0, min(len(choices) - 1, i + rng.choice((-1, 1))))]
        blocks = self._blocks(k, tuple(tile))
        b = plans[k].blocks if plans[k].blocks in blocks else max(blocks)
        if rng.random() < 0.3:
            b = rng.choice(blocks)
        plans[k] = NpuBand(tuple(tile), b)
        return self._config(plans, buffers)

    def crossover(self, a: Config, b: Config, rng: random.Random) -> Config:
        pa, pb = band_plans(a, list(self.infos)), band_plans(b, list(self.infos))
        plans = [rng.choice((x, y)) for x, y in zip(pa, pb)]
        return self._config(plans, buffers_of(rng.choice((a, b))))

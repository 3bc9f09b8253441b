"""NPU mapping recipe: each outer band is tiled so that one tile's working set fits the
Unified Buffer (halved under double buffering), the point band of the tile is marked
(`npu.tile.<band>`: the region whose tensors the backend keeps in UB, with DMAs in and out
around it, and whose loop nests become vector instructions), and the first tile loop is split
over the AI cores (a parallel loop the backend turns into blocks). Double buffering is a
kernel-level knob (`promote(UB, 2)`: two ping-pong buffers per tensor, so the DMAs of one
tile overlap the vector work of the other).

Steps of an NPU config: `tile(band, "UB", sizes)` (0 = the whole loop), `map(band, "cores",
[blocks])` (blocks the first tile loop is split into; 1 = one core), `promote(None, "UB",
buffers)` (1 or 2).

This module holds the recipe and the knob space the tuner searches (`NpuSpace`). A band's
steps are an `NpuBand` (`akg.schedules.npu_band`); default tiles are sized in
`akg.schedules.npu_defaults` (vector bands), `npu_cube` (contractions on the cube) and
`npu_conv` (convolutions)."""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass, field
from typing import Iterator

from akg.errors import ScheduleError
from akg.polyhedral import tree
from akg.polyhedral.bands import BandInfo
from akg.polyhedral.tree import MARK_PARALLEL
from akg.schedules.recipe import Recipe
from akg.schedules.npu_band import NpuBand, band_plans, band_steps, block_member, buffers_of, divisors
from akg.schedules.npu_conv import (ConvShape, cast_of, conv_chunks, conv_fits, conv_k_steps, conv_roles,
                                    conv_shape, conv_tiles, fit_conv, fold_padding, member_tiles, on_cube, role_tiles)
from akg.schedules.npu_cube import contraction, cube_estimate, cube_fits, sixteens
from akg.schedules.npu_defaults import default_blocks, fit_tile
from akg.schedules.space import Config, Space, check_steps

MARK_TILE = "npu.tile"
MARK_GRID = "npu.grid"  # above each member of a contraction band's block loops: the program's grid axes
MARK_PAR = "npu.par"  # above a point loop that carries no dependence (the backend may distribute it)
MAX_BLOCKS = 4096


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
        self._program = fold_padding(program)
        return self._program

    # --- sizing ------------------------------------------------------------------------------

    def fit_tile(self, info: BandInfo, buffers: int) -> tuple[int, ...]:
        """The default UB tile of a vector band (`npu_defaults.fit_tile`)."""
        return fit_tile(self._program, self.spec, info, buffers)

    def default_blocks(self, info: BandInfo, tile: tuple[int, ...], n_bands: int) -> int:
        """The blocks of a vector band's tile loop by default (`npu_defaults.default_blocks`)."""
        return default_blocks(self.spec, info, tile, n_bands)

    def conv(self, info: BandInfo) -> tuple[ConvShape, tuple[str, ...]] | None:
        """(the window contraction, the role of each member) of a band that goes to the cube:
        fp16, channels and filters in whole fractals, the accumulator's only other reader its
        cast to the fp16 output (the cube's epilogue); None otherwise."""
        if self._program is None or not 2 <= info.members <= 4:
            return None
        ops = self._program.ops()
        picked = [ops[int(n[1:])] for n in info.statements
                  if n.startswith("S") and n[1:].isdigit() and int(n[1:]) < len(ops)]
        for op in picked:
            shape = conv_shape(op)
            if not on_cube(shape):
                continue
            others = [o for o in picked if o is not op]
            if len(others) != 1 or not cast_of(others[0], op):
                return None
            roles = conv_roles(shape, info.extents)
            return (shape, roles) if roles is not None else None
        return None

    def fit_conv(self, info: BandInfo, buffers: int) -> NpuBand:
        """The convolution's cube tile with the best estimated time (`npu_conv.fit_conv`), every
        tile its own block."""
        shape, roles = self.conv(info)
        found = fit_conv(self.spec, shape, buffers)
        if found is None:
            raise ScheduleError(f"band {info.index}: no convolution tile fits the buffers")
        (bt, ft, yt), ct, kt = found
        tile = member_tiles(roles, bt, ft, yt, shape)
        grid = tuple(e // t for e, t in zip(info.extents, tile))
        return NpuBand(tile, math.prod(grid), kt, grid, ct)

    def cube(self, info: BandInfo):
        """(roles, K) of a band whose contraction goes to the cube: fp16 operands, m, n and K
        in whole fractals; None otherwise (the vector path, or a typed error there)."""
        found = contraction(self._program, info)
        if found is None:
            return None
        roles, K, da, db = found
        if da != "float16" or db != "float16":
            return None  # fp32 on the cube loses precision: the backend decides (vector or a typed error)
        dims = [e for r, e in zip(roles, info.extents) if r != "b"] + [K]
        if any(d % self.spec.fractal for d in dims):
            return None  # partial fractals: refused by the backend with a typed error
        return roles, K

    def fit_cube(self, info: BandInfo, buffers: int) -> NpuBand:
        """The cube tile: mt, nt as large as the buffers allow while the (m, n) tiles still
        fill the cores (batch members tiled by 1, one block each), kt the largest K step that
        fits L0A/L0B (halved under double buffering)."""
        roles, K = self.cube(info)
        spec = self.spec
        M = info.extents[roles.index("m")]
        N = info.extents[roles.index("n")]
        batch = math.prod(e for r, e in zip(roles, info.extents) if r == "b")
        ub = self.cube_ub_bytes(info)
        best = None
        for mt in sixteens(M, 512):
            for nt in sixteens(N, 512):
                for kt in sixteens(K, 512):
                    if cube_fits(spec, mt, nt, kt, buffers, ub):
                        cost = cube_estimate(spec, batch * (M // mt) * (N // nt), mt, nt, K, kt, buffers)
                        if best is None or cost < best[0]:
                            best = (cost, mt, nt, kt)
        if best is None:
            raise ScheduleError(f"band {info.index}: no cube tile fits the buffers")
        _c, mt, nt, kt = best
        tile = tuple(1 if r == "b" else mt if r == "m" else nt for r in roles)
        grid = tuple(e // t for e, t in zip(info.extents, tile))
        return NpuBand(tile, math.prod(grid), kt, grid)

    def cube_ub_bytes(self, info: BandInfo) -> int | None:
        """UB bytes per output element of a contraction band: 4 when its only other statement
        is the accumulator's cast to fp16 (the accumulator leaves L0C as fp16, the output tile
        beside it); None (the default, with temporaries) otherwise."""
        if self._program is None:
            return None
        ops = self._program.ops()
        picked = [ops[int(n[1:])] for n in info.statements
                  if n.startswith("S") and n[1:].isdigit() and int(n[1:]) < len(ops)]
        sums = [op for op in picked if op.reduce is not None]
        others = [op for op in picked if op.reduce is None]
        return 4 if len(sums) == 1 and len(others) == 1 and cast_of(others[0], sums[0]) else None

    def default_config(self, bands, dtype, fusion="smart") -> Config:
        buffers = 2
        plans = []
        for info in bands:
            if self.conv(info) is not None:
                plans.append(self.fit_conv(info, buffers))
                continue
            if self.cube(info) is not None:
                plans.append(self.fit_cube(info, buffers))
                continue
            tile = self.fit_tile(info, buffers)
            plans.append(NpuBand(tile, self.default_blocks(info, tile, len(bands))))
        return Config(fusion, band_steps(plans, buffers))

    def space(self, bands, fusion="smart") -> "NpuSpace":
        per_band = []
        cubes = []
        for info in bands:
            conv = self.conv(info)
            cube = self.cube(info)
            cubes.append(cube is not None or conv is not None)
            if conv is not None:
                shape, roles = conv
                images, filters, rows = conv_tiles(shape)
                chunks = conv_chunks(shape)
                steps = sorted({k for c in chunks for k in conv_k_steps(shape, c)})
                by_role = {"b": tuple(images), "f": tuple(filters), "y": tuple(rows), "x": (shape.out[1],)}
                per_band.append((*(by_role[r] for r in roles), tuple(chunks), tuple(steps)))
                continue
            if cube is not None:
                roles, K = cube
                tiles = [(1,) if r == "b" else tuple(sixteens(e, 512)) for r, e in zip(roles, info.extents)]
                tiles.append(tuple(sixteens(K, 512)))  # the K step
                per_band.append(tuple(tiles))
                continue
            tiles = []
            for d, e in enumerate(info.extents):
                ds = divisors(e)
                if len(ds) > 8:  # a few sizes around each power of two
                    ds = sorted({min(ds, key=lambda v: abs(math.log2(v) - p)) for p in range(0, 20)})
                tiles.append(tuple(ds) if info.permutable or info.members == 1 else (e,))
            per_band.append(tuple(tiles))
        return NpuSpace(fusion, infos=tuple(bands), tiles=tuple(per_band), target=self.target, program=self._program,
                        cubes=tuple(cubes))

    # --- validation and application -------------------------------------------------------------

    def validate(self, config, bands) -> None:
        check_steps(config, self.target, len(bands))
        if buffers_of(config) not in (1, 2):
            raise ScheduleError(f"promote(UB) takes 1 or 2 buffers, not {buffers_of(config)}")
        plans = band_plans(config, bands)
        for k, (info, p) in enumerate(zip(bands, plans)):
            if p.chunk:
                self._validate_conv(k, info, p, buffers_of(config))
                continue
            if p.kt:
                self._validate_cube(k, info, p, buffers_of(config))
                continue
            for t, e in zip(p.tile, info.extents):
                if t < 1 or e % t:
                    raise ScheduleError(f"band {k}: tile {list(p.tile)} does not divide the loops {list(info.extents)}")
            if p.tile != info.extents and not info.permutable and info.members > 1:
                raise ScheduleError(f"band {k}: its loops are not permutable and cannot be tiled")
            d = block_member(info, p.tile, self.spec.cores)
            count = info.extents[d] // p.tile[d]
            if p.blocks < 1 or count % p.blocks or p.blocks > MAX_BLOCKS:
                raise ScheduleError(f"band {k}: {p.blocks} blocks do not divide its {count} tiles")
            if p.blocks > 1 and (len(bands) > 1 or not info.coincident[d]):
                raise ScheduleError(f"band {k}: only the parallel outer loop of a single-band kernel is "
                                    f"split over cores")

    def _validate_conv(self, k: int, info: BandInfo, p: NpuBand, buffers: int) -> None:
        conv = self.conv(info)
        if conv is None:
            raise ScheduleError(f"band {k}: a convolution tile (tile L1) on a band without an fp16 window "
                                f"contraction in whole channel and filter fractals")
        shape, roles = conv
        images, filters, rows = conv_tiles(shape)
        bt, ft, yt, xt = role_tiles(roles, p.tile)
        if bt not in images or ft not in filters or yt not in rows or xt != shape.out[1]:
            raise ScheduleError(f"band {k}: convolution tile {list(p.tile)} of {list(info.extents)}: images "
                                f"{images}, filters {filters} (multiples of 16), output rows {rows} (whole images "
                                f"when the window reaches the padding rows), whole output rows")
        if p.chunk not in conv_chunks(shape) or p.kt not in conv_k_steps(shape, p.chunk):
            raise ScheduleError(f"band {k}: L1 chunk of {p.chunk} channels / K step {p.kt}: the chunk must be a "
                                f"multiple of 16 dividing {shape.channels}, the step a multiple of 16 dividing "
                                f"chunk x {shape.taps} taps")
        if not conv_fits(self.spec, shape, (bt, ft, yt), p.chunk, p.kt, buffers):
            raise ScheduleError(f"band {k}: convolution tile {list(p.tile)} (chunk {p.chunk}, K step {p.kt}) does "
                                f"not fit L1/L0A/L0B/L0C/UB with {buffers} buffer(s)")
        counts = [e // t for e, t in zip(info.extents, p.tile)]
        if len(p.grid) != info.members or any(g < 1 or c % g for g, c in zip(p.grid, counts)):
            raise ScheduleError(f"band {k}: grid {list(p.grid)} does not divide the tile counts {counts}")
        if math.prod(p.grid) > MAX_BLOCKS:
            raise ScheduleError(f"band {k}: {math.prod(p.grid)} blocks (> {MAX_BLOCKS})")

    def _validate_cube(self, k: int, info: BandInfo, p: NpuBand, buffers: int) -> None:
        cube = self.cube(info)
        if cube is None:
            raise ScheduleError(f"band {k}: a cube tile (tile L0A) on a band without an fp16 contraction in "
                                f"whole fractals")
        roles, K = cube
        f = self.spec.fractal
        for r, t, e in zip(roles, p.tile, info.extents):
            if t < 1 or e % t or (r == "b" and t != 1) or (r != "b" and t % f):
                raise ScheduleError(f"band {k}: cube tile {list(p.tile)} of {list(info.extents)} (roles "
                                    f"{''.join(roles)}): m/n tiles must be multiples of {f} dividing their "
                                    f"loops, batch tiles 1")
        if p.kt < f or p.kt % f or K % p.kt:
            raise ScheduleError(f"band {k}: K step {p.kt} must be a multiple of {f} dividing K = {K}")
        mt, nt = p.tile[roles.index("m")], p.tile[roles.index("n")]
        if not cube_fits(self.spec, mt, nt, p.kt, buffers, self.cube_ub_bytes(info)):
            raise ScheduleError(f"band {k}: cube tile {mt}x{nt}x{p.kt} does not fit L0A/L0B/L1/L0C/UB "
                                f"with {buffers} buffer(s)")
        counts = [e // t for e, t in zip(info.extents, p.tile)]
        if len(p.grid) != info.members or any(g < 1 or c % g for g, c in zip(p.grid, counts)):
            raise ScheduleError(f"band {k}: grid {list(p.grid)} does not divide the tile counts {counts}")
        if math.prod(p.grid) > MAX_BLOCKS:
            raise ScheduleError(f"band {k}: {math.prod(p.grid)} blocks (> {MAX_BLOCKS})")

    def promote(self, config) -> bool:
        return False  # the backend keeps every tile's tensors in UB itself

    def apply(self, config, model, schedule, bands, dtype):
        self.validate(config, bands)
        plans = band_plans(config, bands)
        buffers = buffers_of(config)

        def mark_points(point):
            marks = [MARK_PAR if c else None for c in tree.band_coincident(point)]
            return tree.insert_marks_on_members(point, marks)

        def apply_cube(node, k):
            p = plans[k]
            node = tree.tile_band(node, tuple(p.tile))
            chunk = f".c{p.chunk}" if p.chunk else ""
            point = mark_points(tree.mark(tree.child(node), f"{MARK_TILE}.{k}.{buffers}.k{p.kt}{chunk}"))
            node = tree.parent(point, 2)  # the tile band
            counts = tree.band_extents(node)
            node = tree.tile_band(node, tuple(c // g for c, g in zip(counts, p.grid)))
            order = self.grid_order(bands[k], p)
            if order != tuple(range(len(order))):
                node = tree.permute_band(node, order)
            return tree.insert_marks_on_members(node, [MARK_GRID] * len(p.grid))

        def apply_band(node, k):
            p = plans[k]
            if p.kt:
                return apply_cube(node, k)
            extents = tree.band_extents(node)
            if tuple(p.tile) == tuple(extents) and p.blocks == 1:
                return mark_points(tree.mark(node, f"{MARK_TILE}.{k}.{buffers}"))
            node = tree.tile_band(node, tuple(p.tile))
            point = mark_points(tree.mark(tree.child(node), f"{MARK_TILE}.{k}.{buffers}"))
            node = tree.parent(point, 2)  # the tile band
            if p.blocks > 1:
                d = block_member(bands[k], p.tile, self.spec.cores)
                if d:
                    node = tree.permute_band(node, (d, *(e for e in range(len(p.tile)) if e != d)))
                counts = tree.band_extents(node)
                node = tree.tile_band(node, (counts[0] // p.blocks, *counts[1:]))
                node = tree.mark(node, MARK_PARALLEL)
            return node

        return tree.map_outer_bands(model, schedule, apply_band)

    def grid_order(self, info: BandInfo, p: NpuBand) -> tuple[int, ...]:
        """The order of a cube band's block axes (outermost first) whose first wave of blocks
        reads the fewest distinct operand bytes: blocks of one wave run at once, so those that
        read the same A (or filter) tile, or the same B (or input) tile, share it through the L2
        (a 2 x 32 grid of a 512 x 4608 x 4608 matmul run n-major: each wave reads all of B;
        m-major, two cores read each B tile)."""
        operands = self._grid_operands(info, p)
        if not operands:
            return tuple(range(info.members))
        cores = self.spec.cores

        def first_wave_bytes(order):
            dims = [p.grid[d] for d in order]
            seen = [set() for _ in operands]
            for block in range(min(cores, math.prod(dims))):
                coord, rest = {}, block
                for d, g in zip(reversed(order), reversed(dims)):
                    rest, coord[d] = divmod(rest, g)
                for (members, _b), s in zip(operands, seen):
                    s.add(tuple(coord[m] for m in members))
            return sum(len(s) * b for (_m, b), s in zip(operands, seen))

        identity = tuple(range(info.members))
        return min(itertools.permutations(identity), key=lambda o: (first_wave_bytes(o), o != identity))

    def _grid_operands(self, info: BandInfo, p: NpuBand) -> list[tuple[tuple[int, ...], float]]:
        """(the members an operand tile depends on, its bytes) for each operand of a cube band."""
        conv = self.conv(info)
        if conv is not None:
            shape, roles = conv
            bt, ft, yt, _xt = role_tiles(roles, p.tile)
            idx = {r: d for d, r in enumerate(roles)}
            weights = ((idx["f"],), ft * shape.k * 2.0)
            fmap = (tuple(idx[r] for r in ("b", "y") if r in idx),
                    bt * shape.channels * shape.rows_in(yt) * shape.size[1] * 2.0)
            return [weights, fmap]
        cube = self.cube(info)
        if cube is None:
            return []
        roles, K = cube
        batch = tuple(d for d, r in enumerate(roles) if r == "b")
        m, n = roles.index("m"), roles.index("n")
        return [((*batch, m), p.tile[m] * K * 2.0), ((*batch, n), p.tile[n] * K * 2.0)]

    def knob_features(self, config, bands) -> list[float]:
        plans = band_plans(config, bands) if bands else []
        if not plans:
            return [0.0] * 5
        p, info = plans[0], bands[0]
        return [math.log2(math.prod(p.tile)), math.log2(math.prod(info.extents) / math.prod(p.tile)),
                math.log2(p.blocks), float(buffers_of(config)), math.log2(p.kt or 1)]


@dataclass(frozen=True)
class NpuSpace(Space):
    """Tile sizes per band member (divisors), blocks (divisors of the first tile loop up to
    the cores), single or double buffering."""

    infos: tuple[BandInfo, ...] = ()
    tiles: tuple[tuple[tuple[int, ...], ...], ...] = ()
    target: object = None
    program: object = field(default=None, compare=False, repr=False)  # the recipe's program (contractions)
    cubes: tuple[bool, ...] = ()  # per band: a contraction on the cube (tiles: members, then the K step)

    def _cube(self, k: int) -> bool:
        return bool(self.cubes) and self.cubes[k]

    def _cube_band(self, k: int, sizes) -> NpuBand:
        """A cube band from (member tiles..., kt), or a convolution's from (member tiles...,
        ct, kt): every tile its own block."""
        info = self.infos[k]
        conv = len(sizes) == info.members + 2
        tile, kt = tuple(sizes[:info.members]), int(sizes[-1])
        grid = tuple(e // t for e, t in zip(info.extents, tile))
        return NpuBand(tile, math.prod(grid), kt, grid, int(sizes[-2]) if conv else 0)

    def _blocks(self, k: int, tile: tuple[int, ...]) -> list[int]:
        info = self.infos[k]
        cores = self.target.spec.cores if self.target is not None else 32
        d = block_member(info, tile, cores)
        if len(self.infos) > 1 or not info.coincident[d]:
            return [1]
        return [b for b in divisors(info.extents[d] // tile[d]) if b <= cores] or [1]

    def _config(self, plans, buffers) -> Config:
        return Config(self.fusion, band_steps(list(plans), buffers))

    def size(self) -> int:
        n = 2
        for per in self.tiles:
            for t in per:
                n *= len(t)
        return n

    def _sample_band(self, k: int, rng: random.Random) -> NpuBand:
        if self._cube(k):
            return self._cube_band(k, [rng.choice(t) for t in self.tiles[k]])
        tile = tuple(rng.choice(t) for t in self.tiles[k])
        return NpuBand(tile, rng.choice(self._blocks(k, tile)))

    def sample(self, rng: random.Random) -> Config:
        return self._config([self._sample_band(k, rng) for k in range(len(self.infos))], rng.choice((1, 2)))

    def __iter__(self) -> Iterator[Config]:
        per_band = []
        for k, tiles in enumerate(self.tiles):
            if self._cube(k):
                per_band.append([self._cube_band(k, t) for t in itertools.product(*tiles)])
                continue
            per_band.append([NpuBand(t, b) for t in itertools.product(*tiles) for b in self._blocks(k, t)])
        for combo in itertools.product(*per_band):
            for buffers in (2, 1):
                yield self._config(combo, buffers)

    def validate(self, config: Config) -> None:
        recipe = NpuRecipe(self.target)
        recipe._program = self.program
        recipe.validate(config, list(self.infos))

    def mutate(self, config: Config, rng: random.Random) -> Config:
        plans = band_plans(config, list(self.infos))
        buffers = buffers_of(config)
        if not plans or rng.random() < 0.2:
            return self._config(plans, 3 - buffers)
        k = rng.randrange(len(plans))
        if self._cube(k):
            sizes = [*plans[k].tile, *([plans[k].chunk] if plans[k].chunk else []), plans[k].kt]
            d = rng.randrange(len(sizes))
            choices = list(self.tiles[k][d])
            i = choices.index(sizes[d]) if sizes[d] in choices else 0
            sizes[d] = choices[max(0, min(len(choices) - 1, i + rng.choice((-1, 1))))]
            plans[k] = self._cube_band(k, sizes)
            return self._config(plans, buffers)
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

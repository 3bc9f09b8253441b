"""CPU mapping recipe: the steps of a CPU Config per outer band (loop order, a cache tile,
a register tile, whether the register loops sink below the band's reductions, packing of the
reused operand panel) and kernel-wide (parallel outer loops, vector and unrolled inner loops,
promotion, fast-math expansions); the knob space the tuner searches; and how the steps are
applied to the schedule tree, primitive by primitive. The knobs of a band are a `BandConfig`
(`akg.schedules.cpu_band`); the heuristic that picks them is `akg.schedules.cpu_defaults`."""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass, replace
from typing import Iterator

import numpy as np

from akg.errors import ScheduleError
from akg.polyhedral import tree
from akg.polyhedral.bands import BandInfo
from akg.polyhedral.tree import MARK_PACK, MARK_PARALLEL, MARK_PREFETCH, MARK_PROMOTE, MARK_RECOMPUTE, VECTOR_LAST
from akg.schedules.cpu_band import (CACHE_LEVEL, CHUNKS_PER_CORE, PREFETCH_DISTANCES, REDUCTION_BLOCKS,
                                    REGISTER_LEVEL, BandConfig)
from akg.schedules.cpu_defaults import PARALLEL_MIN_REDUCTION_POINTS, default_bands, parallel_threshold
from akg.schedules.recipe import Recipe
from akg.schedules.space import (LEGACY_SWITCHES, Config, Space, Step, check_steps, divisors_and_powers,
                                 legacy_config)
from akg.target import STREAM

SMALL_PARALLEL = 4  # alternative configs run bands with work down to threshold / this in parallel
# streaming stores by default where a kernel's data is this many last-level caches or more, and
# the other choice measured first by the tuner from this many (Zen 4, 32 MiB L3: at 32 MiB a
# layer norm and an rms norm were 0-25% slower with them, at 48 MiB a layer-norm backward
# 0-40% faster, at 64 MiB every kernel without exponentials 20-50% faster)
STREAM_CACHES, STREAM_CLOSE = 1.25, 0.5


def cpu_config(fusion: str = "smart", bands=None, stream: bool = False, **switches) -> Config:
    """The Config of CPU knobs: per-band `BandConfig`s (None: the heuristic's) and the switches
    vectorize, unroll, parallel, promote, fast_math (each on unless given False) and stream
    (streaming stores for the outputs; off unless given True)."""
    config = legacy_config(fusion, bands, **switches)
    extra = (Step("stream"),) if stream else ()
    extra += tuple(Step(op, k, None, value) for k, b in enumerate(bands or ()) if isinstance(b, BandConfig)
                  for op, value in (("prefetch", b.prefetch), ("block", b.block)) if value)
    extra += tuple(Step("recompute", k) for k, b in enumerate(bands or ()) if isinstance(b, BandConfig) and b.recompute)
    extra += tuple(Step("map", k, "cores") for k, b in enumerate(bands or ()) if isinstance(b, BandConfig) and b.parallel)
    return Config(fusion, config.steps + extra) if extra else config


def switches_of(config: Config) -> dict[str, bool]:
    """The CPU switches a config's kernel-level steps turn on."""
    return {"vectorize": config.has("vectorize"), "unroll": config.has("unroll"),
            "parallel": config.has("map", "cores"), "promote": config.has("promote"),
            "fast_math": config.has("fast_math"), "stream": config.has("stream")}


def _band_of(config: Config, k: int, members: int) -> BandConfig:
    order, tile, register, sink, pack = tuple(range(members)), (0,) * members, (0,) * members, False, False
    prefetch = block = 0
    recompute = parallel = False
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
        elif s.op == "map" and s.level == "cores":
            parallel = True
        else:
            raise ScheduleError(f"band {k}: step '{s}' does not apply to a band on the CPU")
    return BandConfig(order, tile, register, sink, pack, prefetch, block, recompute, parallel)


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


def band_knobs(config: Config, infos: list[BandInfo], target, dtype: str = "float32") -> tuple[BandConfig, ...]:
    """Every band's knobs under `config`: its own steps, else the heuristic's."""
    given = config.bands_given()
    defaults = default_knobs(infos, target, dtype) if len(given) < len(infos) else ()
    return tuple(_band_of(config, k, info.members) if k in given else defaults[k] for k, info in enumerate(infos))


def default_knobs(infos: list[BandInfo], target, dtype: str = "float32",
                  half_vectors: bool = True) -> tuple[BandConfig, ...]:
    """The default config's band knobs: the heuristic's (`default_bands`), with the register
    tiles of shallow window convs at DEFAULT_FEWER, except where the band computes its padded
    input tile by tile (a depthwise conv's tile was chosen with the padded tile it reads)."""
    return _default_fewer(default_bands(infos, target, dtype, half_vectors=half_vectors), infos)


def _default_fewer(heuristic: tuple[BandConfig, ...], infos: list[BandInfo]) -> tuple[BandConfig, ...]:
    return tuple(b if b.recompute else _fewer_accumulators(b, i, DEFAULT_FEWER) for b, i in zip(heuristic, infos))


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


def _all_switches(stream: bool = False) -> dict:
    switches = {name: (True, False) for name in LEGACY_SWITCHES}
    return {**switches, "stream": (False, True)} if stream else switches


@dataclass(frozen=True)
class CpuSpace(Space):
    """All legal CPU configs of one subgraph for one fusion strategy: per band an order, tile
    sizes at both levels, sink and pack; the five switches, and stream where the kernel's
    data outgrows the caches (`streams`)."""

    bands: tuple[BandSpace, ...] = ()
    target: object = None
    streams: bool = False

    def __post_init__(self):
        if not self.switches:
            object.__setattr__(self, "switches", _all_switches(self.streams))

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


def _near_reduction_threshold(info: BandInfo) -> bool:
    """A band over a reduction whose work is below `parallel_threshold` by at most
    SMALL_PARALLEL times."""
    threshold = parallel_threshold(info)
    return threshold == PARALLEL_MIN_REDUCTION_POINTS and threshold // SMALL_PARALLEL <= info.work < threshold


# Register tiles with fewer accumulators for a conv whose reduction is its window alone, or
# little more (<= 49 points per output: LeNet-5's 1 -> 6 channel 5x5 conv), with output rows as
# the vector loop and a tile over two loops above it (rows x images or channels): which tile
# wins turns on how LLVM legalises the row's partial last vector and keeps the window's
# overlapping loads, so it changes from shape to shape (2 Zen 4 cores, each conv alone: 1 -> 6
# channels, 5x5, 28 px, batch 4: 4 x 4 accumulators 22.8 us, 4 x 1 12.2, 4 x 2 16.9; at 32 px
# 4 x 2 vectors 21.6, 2 x 2 vectors 12.7; 3 -> 8 channels, 3x3, 32 px: 8 x 2 vectors 16.8,
# 2 x 2 vectors 10.8; 3 -> 8 channels at 20 px and 2 -> 8 at 30 px (5x5) keep their
# default). Each choice: (position from the end, new size; 0 halves it).
FEWER_ACCUMULATORS = ((2, 1), (2, 0), (3, 0))
# The default takes the second, half the accumulators along the loop above the vector loop,
# where the band does not compute its padded input tile by tile (`default_knobs`). Against
# the heuristic's full tile, 2 Zen 4 cores, each conv alone, two runs, us: 1 -> 6 channels 5x5
# at 28 px, batch 4 (LeNet-5's first conv): 22.8 / 16.1 -> 15.4 / 14.7 (4 x 1 vectors: 10.7 /
# 11.9); at 32 px 21.8 / 15.2 -> 11.6 / 10.5; 3 -> 8 channels 3x3 at 32 px, batch 2: 13.8 /
# 13.7 -> 8.6 / 8.5; at 20 px 4.8 / 4.5 -> 4.9 / 4.7. The other choices lost somewhere (4 x 1
# vectors: 13.9 and 5.5 for the last two); the tuner measures them and the heuristic's tile.
# A depthwise conv's tile (recomputed padded input) kept: MobileNetV2's at 56 px ran 1.11x
# slower halved.
DEFAULT_FEWER = 1


def _fewer_accumulators(bc: BandConfig, info: BandInfo, choice: int) -> BandConfig:
    """`bc` with the register tile of FEWER_ACCUMULATORS[choice], where the band is such a
    conv's (sunk, vector loop read through a window, a shallow reduction with taps below its
    outer loop: not a 1x1 conv's channels alone); else `bc`."""
    n = len(bc.order)
    row = bc.order[-1]
    depth = info.work // max(1, math.prod(info.extents))
    if not (bc.sink and n >= 3 and bc.register[-1] and info.windowed and info.windowed[row] > 0
            and info.reduction_loops >= 2 and depth <= 49 and (bc.register[-2] > 1 or bc.register[-3] > 1)):
        return bc
    pos, size = FEWER_ACCUMULATORS[choice]
    register = list(bc.register)
    register[-pos] = size or register[-pos] // 2
    if register[-pos] < 1 or register[-pos] == bc.register[-pos]:
        return bc
    tile = bc.tile[-pos] or info.extents[bc.order[-pos]]
    if tile % register[-pos]:
        return bc
    return replace(bc, register=tuple(register))


class CpuRecipe(Recipe):
    """The CPU's mapping: cache and register tiles, micro-kernels with sunk register loops,
    packed operand panels, parallel outer loops and vector inner loops."""

    fuses_sibling_reductions = True  # astgen's vector reductions take several updates
    data_bytes = 0  # what the prepared program reads and writes (its arguments), in bytes
    transcendental = False  # the program computes exponentials, erf, tanh and the like

    def prepare(self, program, dtype: str):
        from akg.graph.compute.lower import split_column_reductions, split_reductions, transcendental

        self.data_bytes = sum(math.prod(t.shape) * np.dtype(t.dtype).itemsize
                              for t in (*program.placeholders, *program.outputs))
        self.transcendental = any(transcendental(op) for op in program.ops())
        # column sums beside a row loop: one partial per default parallel chunk of the rows
        # (`polyhedral.row_partials` moves them into the row band)
        program = split_column_reductions(program, self.target.cores * CHUNKS_PER_CORE)
        return split_reductions(program, self.target.vector_lanes(dtype))

    @property
    def streams(self) -> bool:
        """Is streaming stores a choice here: an x86 target and data past its caches (more
        than its L2s hold)?"""
        t = self.target
        return t.has(STREAM) and self.data_bytes > t.l2_bytes * max(1, t.cores)

    def stream_default(self) -> bool:
        """Streaming stores by default: data at least STREAM_CACHES times the last-level
        cache (an output that size is evicted before anything reads it again), in a kernel
        with no transcendental functions. Those tend to make a kernel compute-bound, where
        streaming stores only cost (a 96 MiB bias + gelu on Zen 4: 2.54-2.84 ms with plain
        stores, 2.71-3.11 with streaming ones), though not always (a 64 MiB softmax, its
        exponentials in a pass before the one that stores: 1.70 -> 1.37 ms with them): the
        tuner measures them there first (`alternative_configs`)."""
        t = self.target
        return (self.streams and not self.transcendental and t.l3_bytes > 0
                and self.data_bytes >= STREAM_CACHES * t.l3_bytes)

    def default_config(self, bands, dtype, fusion="smart") -> Config:
        return cpu_config(fusion, default_knobs(bands, self.target, dtype), stream=self.stream_default())

    def alternative_configs(self, bands, dtype, fusion="smart") -> list[Config]:
        """Whole vectors where the default takes half vectors (`half_vector_window`): which
        wins depends on the channels and the width of the rows (MobileNetV2's 1x1 expansion
        24 -> 144 channels at 56 px: 105.6 -> 96.5 us alone as whole vectors, 145 -> 121 us
        in the model; 40 -> 240 channels at 40 px: 142.8 -> 152.0 us). And the bands over a
        reduction (a conv's, a matmul's) whose work is below `parallel_threshold` by at most
        SMALL_PARALLEL times run in parallel (`BandConfig.parallel`): whether that wins depends
        on the host's launch cost; that applies to the default and to each alternative. And a
        conv whose reduction is little more than its window takes register tiles with fewer
        accumulators (`FEWER_ACCUMULATORS`). And where streaming stores are a choice, the
        default with them the other way where the data is STREAM_CLOSE last-level caches or
        more (`stream_default`: whether the cache keeps an output until it is read again
        depends on the host's other tenants near one cache of data: at 32 MiB a layer norm and
        a softmax gained from them on Zen 4 in one run, an rms norm lost). Alternatives the
        target rejects are left out. Where the default takes fewer accumulators than the
        heuristic (`DEFAULT_FEWER`), the heuristic's own tile is an alternative too."""
        heuristic = default_bands(bands, self.target, dtype)
        default = _default_fewer(heuristic, bands)
        whole = default_knobs(bands, self.target, dtype, half_vectors=False)
        candidates = [whole] if whole != default else []
        for fewer in (heuristic, *(tuple(_fewer_accumulators(b, i, choice) for b, i in zip(heuristic, bands))
                                   for choice in range(len(FEWER_ACCUMULATORS)))):
            if fewer != default and fewer not in candidates:
                candidates.append(fewer)
        small = [self.target.cores > 1 and _near_reduction_threshold(i) for i in bands]
        if any(small):
            # in parallel: the default, and each alternative above that changes a small band
            parallel = [tuple(replace(b, parallel=True) if s else b for b, s in zip(c, small))
                        for c in (default, *candidates)]
            candidates += [c for c, base in zip(parallel, (default, *candidates)) if c != base]
        stream = self.stream_default()
        close = self.streams and self.data_bytes >= STREAM_CLOSE * self.target.l3_bytes
        out = [cpu_config(fusion, default, stream=not stream)] if close else []
        for c in candidates:
            config = cpu_config(fusion, c, stream=stream)
            try:
                self.validate(config, bands)
            except ScheduleError:
                continue
            out.append(config)
        return out

    def space(self, bands, fusion="smart") -> CpuSpace:
        return CpuSpace(fusion, bands=tuple(band_space(i) for i in bands), target=self.target, streams=self.streams)

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
            parallel = switches["parallel"] and (info.work >= parallel_threshold(info) or bc.parallel) \
                and self.target.cores > 1
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
                float(sw["unroll"]), float(sw["parallel"]) + float(bool(given) and any(b.parallel for b in given)),
                float(config.fusion == "max"),
                float(config.fusion == "smart"), float(config.fusion == "none"), float(sw["stream"])]


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

"""The knobs of a target mapping: `Config` (a frozen, JSON-serialisable value) and the
`Space` of legal configs derived from a subgraph's schedule."""

from __future__ import annotations

import itertools
import json
import random
from dataclasses import asdict, dataclass, field, replace
from typing import Iterator

from akg.errors import ScheduleError
from akg.polyhedral.schedule import FUSION_STRATEGIES
from akg.polyhedral.tree import BandInfo


@dataclass(frozen=True)
class BandConfig:
    """Mapping of one outer band: member order (a permutation, innermost last), cache-level
    tile sizes and register-level tile sizes per member (0 = untiled), and whether the
    register loops sink below the band's inner loops (reductions)."""

    order: tuple[int, ...]
    tile: tuple[int, ...]
    register: tuple[int, ...]
    sink: bool = False
    pack: bool = False  # copy operands reused across the other tiles into a blocked local buffer

    def __post_init__(self):
        for name in ("order", "tile", "register"):
            object.__setattr__(self, name, tuple(int(v) for v in getattr(self, name)))


@dataclass(frozen=True)
class Config:
    """Every knob of one subgraph's mapping on one target. `bands=None` means the target's
    heuristic for every band; the other fields are global switches."""

    fusion: str = "smart"
    bands: tuple[BandConfig, ...] | None = None
    vectorize: bool = True
    unroll: bool = True
    parallel: bool = True
    promote: bool = True
    fast_math: bool = True  # vectorisable exp/erf/tanh/sigmoid instead of libm calls

    def __post_init__(self):
        if self.bands is not None:
            object.__setattr__(self, "bands", tuple(
                b if isinstance(b, BandConfig) else BandConfig(**b) for b in self.bands))

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | dict) -> "Config":
        data = json.loads(text) if isinstance(text, str) else dict(text)
        try:
            return cls(**data)
        except TypeError as e:
            raise ScheduleError(f"not a config: {e}") from None


def _divisors_and_powers(extent: int, limit: int | None = None) -> tuple[int, ...]:
    """Candidate tile sizes for a loop of `extent`: its divisors and the powers of two below
    it (0 means untiled)."""
    limit = extent if limit is None else min(limit, extent)
    sizes = {d for d in range(1, limit + 1) if extent % d == 0 and d <= 1024}
    sizes |= {1 << k for k in range(0, 11) if (1 << k) < limit}
    return (0, *sorted(s for s in sizes if s < extent))


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
        return BandConfig(order, tile, tuple(register), rng.random() < 0.5, rng.random() < 0.5)

    def size(self) -> int:
        n = len(self.orders) * 4
        for m in range(self.info.members):
            n *= len(self.tiles[m]) ** 2
        return n


@dataclass(frozen=True)
class Space:
    """All legal configs of one subgraph for one fusion strategy."""

    fusion: str
    bands: tuple[BandSpace, ...]
    switches: dict = field(default_factory=lambda: {
        "vectorize": (True, False), "unroll": (True, False), "parallel": (True, False), "promote": (True, False),
        "fast_math": (True, False)})

    def size(self) -> int:
        n = 1
        for b in self.bands:
            n *= b.size()
        return n * 2 ** len(self.switches)

    def sample(self, rng: random.Random) -> Config:
        return Config(fusion=self.fusion, bands=tuple(b.sample(rng) for b in self.bands),
                      **{k: rng.choice(v) for k, v in self.switches.items()})

    def __iter__(self) -> Iterator[Config]:
        """Every config (lazily; the space is usually far too large to exhaust)."""
        per_band = [list(_band_configs(b)) for b in self.bands]
        for combo in itertools.product(*per_band):
            for flags in itertools.product(*self.switches.values()):
                yield Config(self.fusion, tuple(combo), **dict(zip(self.switches, flags)))

    def validate(self, config: Config) -> None:
        validate_bands(config, [b.info for b in self.bands])

    def is_legal(self, config: Config) -> bool:
        try:
            self.validate(config)
            return True
        except ScheduleError:
            return False

    def mutate(self, config: Config, rng: random.Random) -> Config:
        """A neighbour: one tile size moved to an adjacent candidate, an order or sink
        changed, or one switch flipped."""
        bands = list(config.bands or ())
        if not bands or rng.random() < 0.15:
            name = rng.choice(list(self.switches))
            return replace(config, **{name: not getattr(config, name)})
        k = rng.randrange(len(bands))
        bc, bs = bands[k], self.bands[k]
        roll = rng.random()
        if roll < 0.1 and len(bs.orders) > 1:
            order = rng.choice(bs.orders)
            bands[k] = BandConfig(order, tuple(bc.tile[bc.order.index(m)] for m in order),
                                  tuple(bc.register[bc.order.index(m)] for m in order), bc.sink)
        elif roll < 0.2:
            bands[k] = replace(bc, sink=not bc.sink)
        elif roll < 0.27:
            bands[k] = replace(bc, pack=not bc.pack)
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
        return replace(config, bands=tuple(bands))

    def crossover(self, a: Config, b: Config, rng: random.Random) -> Config:
        """Each band mapping and each switch taken from one parent or the other."""
        bands = tuple(rng.choice((x, y)) for x, y in zip(a.bands or (), b.bands or ()))
        switches = {name: getattr(rng.choice((a, b)), name) for name in self.switches}
        return Config(self.fusion, bands or a.bands, **switches)


def _band_configs(b: BandSpace) -> Iterator[BandConfig]:
    for order in b.orders:
        for tile in itertools.product(*(b.tiles[m] for m in order)):
            for reg in itertools.product(*(b.tiles[m] for m in order)):
                if all(r == 0 or r < (t or b.info.extents[m]) for r, t, m in zip(reg, tile, order)):
                    for sink in (False, True):
                        for pack in (False, True):
                            yield BandConfig(order, tile, reg, sink, pack)


def band_space(info: BandInfo) -> BandSpace:
    members = tuple(range(info.members))
    orders = tuple(itertools.permutations(members)) if info.permutable else (members,)
    return BandSpace(info, orders, tuple(_divisors_and_powers(e) for e in info.extents))


def make_space(fusion: str, infos: list[BandInfo]) -> Space:
    return Space(fusion, tuple(band_space(i) for i in infos))


def validate_bands(config: Config, infos: list[BandInfo]) -> None:
    """ScheduleError for a config that does not fit the schedule: wrong band or member count,
    an order that is not a permutation or reorders a non-permutable band, a tile larger than
    its loop, a register tile that does not fit inside its cache tile."""
    if config.fusion not in FUSION_STRATEGIES:
        raise ScheduleError(f"unknown fusion strategy '{config.fusion}' (known: {', '.join(FUSION_STRATEGIES)})")
    if config.bands is None:
        return
    if len(config.bands) != len(infos):
        raise ScheduleError(f"config maps {len(config.bands)} bands, the schedule has {len(infos)}")
    for k, (bc, info) in enumerate(zip(config.bands, infos)):
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

"""The knobs of a target mapping: `Config`, a frozen, JSON-serialisable sequence of schedule
`Step`s (tile, order, map to a level, promote to a memory level, vectorize, unroll, ...),
and the `Space` interface of the legal configs a target's recipe derives from a schedule.

A step applies to one outer band (`band`) or to the whole kernel (`band=None`). A config's
steps are complete for the kernel-level switches (a switch step left out is off) and partial
for bands: a band with no step of its own takes the recipe's default mapping. `steps=None`
takes the recipe's default for everything."""

from __future__ import annotations

import abc
import json
import random
from dataclasses import dataclass, field
from typing import Any, Iterator

from akg.errors import ScheduleError
from akg.polyhedral.schedule import FUSION_STRATEGIES
from akg.target import FAST_MATH, PACK, PARALLEL, STREAM, THREADS, UNROLL, VECTOR

# step kind -> (rank in a config's canonical order, capability it needs (None: any target))
STEP_KINDS: dict[str, tuple[int, str | None]] = {
    "order": (0, None),  # arg: a permutation of the band's members (innermost last)
    "tile": (1, None),  # level: the memory level the tile is sized for; arg: sizes (0: untiled)
    "sink": (2, None),  # the band's innermost tile loops move below its inner (reduction) loops
    "pack": (3, PACK),  # operands reused across the other tiles copied into a blocked layout
    "map": (4, None),  # level: "cores" (parallel outer loops), "blocks" / "threads"
    "reduce": (4, THREADS),  # level "threads"; arg: threads of a block the band's reductions spread over
    "vectorize": (5, VECTOR),
    "unroll": (6, UNROLL),
    "promote": (7, None),  # level: where reused tiles are kept (local buffers)
    "fast_math": (8, FAST_MATH),  # vectorisable exp/erf/tanh/sigmoid instead of libm calls
    "prefetch": (9, None),  # arg: how many iterations of the band's outer loop ahead to prefetch
    "block": (10, None),  # arg: iterations of the reduction's outer loop per block; every tile of
    #                      the band's cache tile advances one block at a time (a blocked reduction)
    "recompute": (11, None),  # the band computes the tensors of its producers (a padded input)
    #                          cache tile by cache tile, in local buffers (`BandInfo.producers`)
    "stream": (12, STREAM),  # outputs the kernel never reads back written with streaming
    #                         (non-temporal) stores: no read of their lines, no eviction of inputs
}
MAP_CAPABILITIES = {"cores": PARALLEL, "blocks": THREADS, "threads": THREADS}


def _hashable(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    return value


@dataclass(frozen=True)
class Step:
    """One schedule step (tinygrad's `Opt`): what to do, to which outer band (None: the whole
    kernel), at which memory or compute level, with which argument (sizes, a permutation)."""

    op: str
    band: int | None = None
    level: str | None = None
    arg: Any = None

    def __post_init__(self):
        if self.op not in STEP_KINDS:
            raise ScheduleError(f"unknown schedule step '{self.op}' (known: {', '.join(STEP_KINDS)})")
        object.__setattr__(self, "arg", _hashable(self.arg))
        if isinstance(self.arg, tuple):
            object.__setattr__(self, "arg", tuple(int(v) if isinstance(v, (int, float)) and not isinstance(v, bool)
                                                  else v for v in self.arg))

    def sort_key(self) -> tuple:
        return (self.band is None, self.band or 0, STEP_KINDS[self.op][0], self.level or "")

    def to_list(self) -> list:
        return [self.op, self.band, self.level, list(self.arg) if isinstance(self.arg, tuple) else self.arg]

    def __str__(self) -> str:
        parts = [str(p) for p in (self.band, self.level) if p is not None]
        if self.arg is not None:
            parts.append(str(list(self.arg)) if isinstance(self.arg, tuple) else str(self.arg))
        return f"{self.op}({', '.join(parts)})"


@dataclass(frozen=True)
class Config:
    """Every knob of one subgraph's mapping on one target, as schedule steps (canonically
    ordered: per band, then the kernel-level steps)."""

    fusion: str = "smart"
    steps: tuple[Step, ...] | None = None

    def __post_init__(self):
        if self.steps is not None:
            steps = tuple(s if isinstance(s, Step) else Step(*s) for s in self.steps)
            if len(set(steps)) != len(steps):
                raise ScheduleError("a config lists the same step twice")
            object.__setattr__(self, "steps", tuple(sorted(steps, key=Step.sort_key)))

    # --- queries ---------------------------------------------------------------------------

    def has(self, op: str, level: str | None = None) -> bool:
        """Is the kernel-level step `op` (at `level`, if given) on?"""
        return self.steps is not None and any(
            s.op == op and s.band is None and (level is None or s.level == level) for s in self.steps)

    def band_steps(self, band: int) -> tuple[Step, ...]:
        return tuple(s for s in self.steps or () if s.band == band)

    def bands_given(self) -> set[int]:
        return {s.band for s in self.steps or () if s.band is not None}

    def kernel_steps(self) -> tuple[Step, ...]:
        return tuple(s for s in self.steps or () if s.band is None)

    def without(self, op: str) -> "Config":
        """This config less its kernel-level `op` steps."""
        return Config(self.fusion, tuple(s for s in self.steps or () if not (s.op == op and s.band is None)))

    def __str__(self) -> str:
        steps = "default" if self.steps is None else ", ".join(map(str, self.steps))
        return f"{self.fusion}: {steps}"

    # --- JSON --------------------------------------------------------------------------------

    def to_json(self) -> str:
        steps = None if self.steps is None else [s.to_list() for s in self.steps]
        return json.dumps({"fusion": self.fusion, "steps": steps}, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | dict) -> "Config":
        """A config from its JSON, or from the form recorded before configs were steps
        (`bands` + switches), which the database may still hold."""
        try:
            data = json.loads(text) if isinstance(text, str) else dict(text)
        except (TypeError, ValueError) as e:
            raise ScheduleError(f"not a config: {e}") from None
        if not isinstance(data, dict):
            raise ScheduleError("not a config: a JSON object is needed")
        if set(data) <= {"fusion", "steps"}:
            try:
                steps = data.get("steps")
                return cls(data.get("fusion", "smart"), None if steps is None else tuple(Step(*s) for s in steps))
            except (TypeError, ValueError) as e:
                raise ScheduleError(f"not a config: {e}") from None
        return legacy_config(**data)


# --- the form before steps ---------------------------------------------------------------------

LEGACY_SWITCHES = ("vectorize", "unroll", "parallel", "promote", "fast_math")


def legacy_config(fusion: str = "smart", bands=None, vectorize: bool = True, unroll: bool = True,
                  parallel: bool = True, promote: bool = True, fast_math: bool = True, **unknown) -> Config:
    """A config recorded before configs were steps: per band an order, cache tile, register
    tile, sink and pack; switches for the kernel. Those were CPU configs, read here as the
    steps that the CPU recipe applies the same way."""
    if unknown:
        raise ScheduleError(f"not a config: unexpected field(s) {', '.join(sorted(unknown))}")
    steps = []
    for k, b in enumerate(bands or ()):
        b = b if isinstance(b, dict) else vars(b)
        try:
            steps += [Step("order", k, None, b["order"]), Step("tile", k, "L2", b["tile"]),
                      Step("tile", k, "registers", b["register"])]
        except KeyError as e:
            raise ScheduleError(f"not a config: band {k} lacks {e}") from None
        steps += [Step("sink", k)] * bool(b.get("sink")) + [Step("pack", k)] * bool(b.get("pack"))
    steps += [Step("map", None, "cores")] * bool(parallel) + [Step("vectorize")] * bool(vectorize)
    steps += [Step("unroll")] * bool(unroll) + [Step("promote", None, "L1")] * bool(promote)
    steps += [Step("fast_math")] * bool(fast_math)
    return Config(fusion, tuple(steps))


# --- checks every target shares ----------------------------------------------------------------


def check_steps(config: Config, target, n_bands: int) -> None:
    """ScheduleError for a step this target cannot take (naming the capability or memory level
    it lacks), a band index the schedule does not have, or an unknown fusion strategy."""
    if config.fusion not in FUSION_STRATEGIES:
        raise ScheduleError(f"unknown fusion strategy '{config.fusion}' (known: {', '.join(FUSION_STRATEGIES)})")
    given = config.bands_given()
    if given and max(given) >= n_bands:
        raise ScheduleError(f"config maps {max(given) + 1} bands, the schedule has {n_bands}")
    for step in config.steps or ():
        needed = STEP_KINDS[step.op][1]
        if step.op == "map":
            needed = MAP_CAPABILITIES.get(step.level or "")
            if needed is None:
                raise ScheduleError(f"step '{step}': unknown compute level '{step.level}' "
                                    f"(known: {', '.join(MAP_CAPABILITIES)})")
        if needed is not None:
            target.require(needed, str(step))
        if step.op in ("tile", "promote") and step.level is not None:
            target.level(step.level)


# --- the space interface -----------------------------------------------------------------------


@dataclass(frozen=True)
class Space(abc.ABC):
    """All legal configs of one subgraph for one fusion strategy on one target: what the
    tuner's search samples, mutates and crosses over."""

    fusion: str
    switches: dict = field(default_factory=dict)

    @abc.abstractmethod
    def size(self) -> int: ...

    @abc.abstractmethod
    def sample(self, rng: random.Random) -> Config: ...

    @abc.abstractmethod
    def __iter__(self) -> Iterator[Config]:
        """Every config (lazily; the space is usually far too large to exhaust)."""

    @abc.abstractmethod
    def validate(self, config: Config) -> None:
        """ScheduleError if `config` is not in this space."""

    def is_legal(self, config: Config) -> bool:
        try:
            self.validate(config)
            return True
        except ScheduleError:
            return False

    @abc.abstractmethod
    def mutate(self, config: Config, rng: random.Random) -> Config:
        """A neighbour of `config`."""

    @abc.abstractmethod
    def crossover(self, a: Config, b: Config, rng: random.Random) -> Config: ...


def divisors_and_powers(extent: int, limit: int | None = None) -> tuple[int, ...]:
    """Candidate tile sizes for a loop of `extent`: its divisors and the powers of two below
    it (0 means untiled)."""
    limit = extent if limit is None else min(limit, extent)
    sizes = {d for d in range(1, limit + 1) if extent % d == 0 and d <= 1024}
    sizes |= {1 << k for k in range(0, 11) if (1 << k) < limit}
    return (0, *sorted(s for s in sizes if s < extent))

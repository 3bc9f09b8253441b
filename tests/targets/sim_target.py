"""A target defined only in the tests: the proof that a new target is an addition to akg.

`testsim` has its own data (one core, no vectors, a small local memory), its own mapping
recipe and knob space (one cache tile of each band's outermost loop, promotion into it,
unrolled short innermost loops), and a backend that runs a kernel by interpreting its TIR
with NumPy (`tir_interp.py`) instead of compiling it. Nothing in akg names it: it registers
itself in `akg.target.TARGETS` / `BACKENDS` when this module is imported.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Iterator

import tvm

from akg.errors import LoweringError, ScheduleError
from akg.polyhedral import tree
from akg.polyhedral.bands import BandInfo
from akg.polyhedral.tree import MARK_PROMOTE, MARK_UNROLL
from akg.schedules.recipe import Recipe
from akg.schedules.space import Config, Space, Step, check_steps, divisors_and_powers
from akg.target import (UNROLL, Artifact, Backend, HostArrays, MemoryLevel, Target, register_backend,
                        register_target)

from tir_interp import compile_func

KIND = "testsim"
LOCAL = "local"
MAX_UNROLL = 8


# --- the target ------------------------------------------------------------------------------


@dataclass(frozen=True)
class SimTarget(Target):
    kind: str = KIND
    cores: int = 1
    vector_bits: int = 0
    memory: tuple = (MemoryLevel("global", 0, 8, "device"), MemoryLevel(LOCAL, 64 * 1024, 8, "core"))
    capabilities: frozenset = frozenset({UNROLL})

    def recipe(self):
        return SimRecipe(self)

    def backend(self):
        from akg.target import get_backend

        return get_backend(SimBackend.artifact_kind)


# --- the recipe and its knob space ---------------------------------------------------------------


def _tile_of(config: Config, band: int) -> int:
    for s in config.band_steps(band):
        if s.op == "tile" and s.level == LOCAL and len(s.arg) >= 1:
            return s.arg[0]
        raise ScheduleError(f"band {band}: testsim takes only a '{LOCAL}' tile of the outer loop, not '{s}'")
    return 0


def _steps(tiles: tuple[int, ...], unroll: bool, promote: bool, members: list[int]) -> tuple[Step, ...]:
    steps = [Step("tile", k, LOCAL, (t,) + (0,) * (m - 1)) for k, (t, m) in enumerate(zip(tiles, members)) if t]
    return tuple(steps + [Step("unroll")] * unroll + [Step("promote", None, LOCAL)] * promote)


@dataclass(frozen=True)
class SimSpace(Space):
    infos: tuple[BandInfo, ...] = ()
    tiles: tuple[tuple[int, ...], ...] = ()
    target: object = None

    def __post_init__(self):
        if not self.switches:
            object.__setattr__(self, "switches", {"unroll": (True, False), "promote": (True, False)})

    def _config(self, tiles, unroll, promote) -> Config:
        return Config(self.fusion, _steps(tuple(tiles), unroll, promote, [i.members for i in self.infos]))

    def size(self) -> int:
        n = 4
        for t in self.tiles:
            n *= len(t)
        return n

    def sample(self, rng: random.Random) -> Config:
        return self._config([rng.choice(t) for t in self.tiles], rng.random() < 0.5, rng.random() < 0.5)

    def __iter__(self) -> Iterator[Config]:
        import itertools

        for tiles in itertools.product(*self.tiles):
            for unroll in (True, False):
                for promote in (True, False):
                    yield self._config(tiles, unroll, promote)

    def validate(self, config: Config) -> None:
        SimRecipe(self.target).validate(config, list(self.infos))

    def mutate(self, config: Config, rng: random.Random) -> Config:
        tiles = [_tile_of(config, k) for k in range(len(self.infos))]
        unroll, promote = config.has("unroll"), config.has("promote")
        if not tiles or rng.random() < 0.3:
            if rng.random() < 0.5:
                unroll = not unroll
            else:
                promote = not promote
        else:
            k = rng.randrange(len(tiles))
            tiles[k] = rng.choice(self.tiles[k])
        return self._config(tiles, unroll, promote)

    def crossover(self, a: Config, b: Config, rng: random.Random) -> Config:
        tiles = [_tile_of(rng.choice((a, b)), k) for k in range(len(self.infos))]
        return self._config(tiles, rng.choice((a, b)).has("unroll"), rng.choice((a, b)).has("promote"))


class SimRecipe(Recipe):
    """Tile each band's outermost loop for the local memory, promote into the tile, unroll
    short innermost loops; nothing else."""

    def default_config(self, bands, dtype, fusion="smart") -> Config:
        tiles = []
        for info in bands:
            rows = info.extents[0]
            tiles.append(8 if info.permutable and rows > 16 else 0)
        return Config(fusion, _steps(tuple(tiles), True, True, [i.members for i in bands]))

    def space(self, bands, fusion="smart") -> SimSpace:
        tiles = tuple(divisors_and_powers(i.extents[0], 64) if i.permutable else (0,) for i in bands)
        return SimSpace(fusion, infos=tuple(bands), tiles=tiles, target=self.target)

    def validate(self, config, bands) -> None:
        check_steps(config, self.target, len(bands))
        for k, info in enumerate(bands):
            t = _tile_of(config, k)
            if t < 0 or t > info.extents[0]:
                raise ScheduleError(f"band {k}: tile {t} is larger than its loop ({info.extents[0]})")
            if t and not info.permutable and info.members > 1:
                raise ScheduleError(f"band {k}: its loops are not permutable and cannot be tiled")

    def apply(self, config, model, schedule, bands, dtype):
        self.validate(config, bands)
        unroll = config.has("unroll")

        def apply_band(node, k):
            extents = tree.band_extents(node)
            t = _tile_of(config, k)
            if 0 < t < extents[0]:
                node = tree.tile_band(node, (t,) + tuple(extents[1:]))
                node = tree.mark(tree.child(node), f"{MARK_PROMOTE}.{k}.0")
            innermost = tree.is_innermost(node)
            short = innermost and tree.band_extents(node)[-1] <= MAX_UNROLL
            marks = [None] * tree.band_members(node)
            if unroll and short:
                marks[-1] = MARK_UNROLL
            return tree.insert_marks_on_members(node, marks)

        return tree.map_outer_bands(model, schedule, apply_band)

    def knob_features(self, config, bands) -> list[float]:
        return [float(_tile_of(config, 0)) if bands else 0.0, float(config.has("unroll")),
                float(config.has("promote"))]


# --- the backend: TIR interpreted with NumPy -------------------------------------------------------


@dataclass
class SimExecutable:
    func: object  # the PrimFunc
    run: object = field(default=None, repr=False)  # the compiled interpreter

    def __call__(self, *arrays) -> None:
        self.run(list(arrays))


class SimBackend(HostArrays, Backend):
    artifact_kind = "testsim-tir"

    def compile(self, func, target, *, reciprocal: bool = True):
        try:
            return SimExecutable(func, compile_func(func))
        except NotImplementedError as e:
            raise LoweringError(f"testsim cannot interpret this kernel: {e}") from e

    def export(self, executable) -> Artifact:
        return Artifact(self.artifact_kind, tvm.ir.save_json(tvm.IRModule({"main": executable.func})).encode())

    def load(self, artifact: Artifact):
        func = tvm.ir.load_json(artifact.data.decode())["main"]
        return self.compile(func, None)

    def source(self, executable, kind: str = "tir") -> str:
        return executable.func.script()

    def entry(self, executable):
        return executable

    def measure(self, executable, tensors, *, number: int, repeat: int) -> list[float]:
        out = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            for _ in range(number):
                executable(*tensors)
            out.append((time.perf_counter() - t0) / number)
        return out


register_target(KIND, SimTarget, replace=True)
register_backend(SimBackend(), replace=True)

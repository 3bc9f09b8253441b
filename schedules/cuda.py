"""CUDA mapping recipe: each outer band of the isl schedule tree, permuted, is tiled into
per-block tiles whose loops become block indices and whose point loops become thread
indices, each thread computing `work` points cyclically (thread, thread + threads, ...) so
that neighbouring threads touch neighbouring elements. Loops a band does not map, and the
bands below it (a reduction), run serially in each thread. The knobs, as schedule steps per
band: `order` (which member is innermost, hence threadIdx.x), `map(threads)` (threads per
member, 0: not mapped; the innermost mapped member is x, then y, z) and `tile(registers)`
(points per thread along each mapped member); kernel-wide `unroll` (the per-thread loops).

The mapped loops are marked `blockIdx.<axis>.<blocks>` and `threadIdx.<axis>.<threads>` in
the tree; astgen keeps these marks in the TIR (`LoweringHooks.keep_marks`) and the CUDA
backend turns the marked loops into thread bindings (`akg/backends/cuda/bind.py`). A band
whose parallel points cannot fill the GPU and whose points reduce many terms (a few long
rows, a full reduction) has its reductions spread over the threads of a block instead
(`reduce(threads)`: per-thread partials and a shared-memory tree with barriers,
`cuda_reduce.py`); reductions with few outputs over very many terms are first split into
partials (`prepare`, `cuda_split.py`). A matmul-like band's reduction reads its operands from
tiles in shared memory (`promote(shared)`, `cuda_shared.py`) into accumulators in each
thread's registers, several outputs per thread (`tile(registers)`, `cuda_registers.py`);
other shared-memory and register promotion is not done yet."""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
import random
from dataclasses import dataclass
from typing import Iterator

from akg.errors import ScheduleError
from akg.polyhedral import tree
from akg.polyhedral.bands import BandInfo
from akg.polyhedral.tree import MARK_UNROLL
from akg.schedules.recipe import Recipe
from akg.schedules.space import Config, Space, Step, check_steps

log = logging.getLogger(__name__)

MARK_BLOCK, MARK_THREAD = "blockIdx", "threadIdx"
BARRIER = "barrier"  # __syncthreads() after the subtree below (a reduction tree's passes)
WARP_BARRIER = "barrier.warp"  # after a pass of warp shuffles (nothing to emit: they synchronise)
MAPPED_MARKS = (MARK_BLOCK + ".", MARK_THREAD + ".", BARRIER)
AXES = "xyz"
THREAD_LEVEL = "threads"  # map(threads): threads per member
WORK_LEVEL = "registers"  # tile(registers): points per thread per member
SHARED_LEVEL = "shared"  # promote(shared, (tile_k, pad)): a reduction's operand tiles in shared memory
WARP_LEVEL = "warps"  # reduce(warps): a reduction tree whose last 32 values are combined by shuffles
DEFAULT_THREADS = 256
MAX_UNROLL = 8
WORK_CHOICES = (1, 2, 4, 8)


@dataclass(frozen=True)
class BandMapping:
    """How one outer band is mapped: the member `order` (innermost last), then per position
    (after the order) the threads along it (0: not mapped, a serial loop in each thread)
    and the points each thread computes along it (1: one)."""

    order: tuple[int, ...]
    threads: tuple[int, ...]
    work: tuple[int, ...]
    reduce: int = 0  # threads of a block over which the band's reductions spread (0: none)
    shuffle: bool = False  # ... the last 32 values of each tree combined by warp shuffles
    shared: tuple[int, ...] = ()  # (tile_k, pad): the reduction's operands in shared tiles (cuda_shared.py)

    def __post_init__(self):
        for name in ("order", "threads", "work", "shared"):
            object.__setattr__(self, name, tuple(int(v) for v in getattr(self, name)))
        object.__setattr__(self, "reduce", int(self.reduce))
        object.__setattr__(self, "shuffle", bool(self.shuffle))

    @property
    def mapped(self) -> list[int]:
        """Mapped positions, innermost first: their axes are x, y, z in this order."""
        return [p for p in reversed(range(len(self.threads))) if self.threads[p]]

    def axis(self, position: int) -> str:
        return AXES[self.mapped.index(position)]

    def steps(self, band: int) -> tuple[Step, ...]:
        if self.reduce:
            return (Step("reduce", band, WARP_LEVEL if self.shuffle else THREAD_LEVEL, self.reduce),)
        steps = [Step("order", band, None, self.order), Step("map", band, THREAD_LEVEL, self.threads)]
        if any(w > 1 for w in self.work):
            steps.append(Step("tile", band, WORK_LEVEL, self.work))
        if self.shared:
            steps.append(Step("promote", band, SHARED_LEVEL, self.shared))
        return tuple(steps)

    def grid(self, info: BandInfo) -> tuple[int, ...]:
        """Blocks along each mapped member, innermost (x) first."""
        ext = [info.extents[m] for m in self.order]
        return tuple(math.ceil(ext[p] / (self.threads[p] * max(1, self.work[p]))) for p in self.mapped)

    def block(self) -> tuple[int, ...]:
        if self.reduce:
            return (self.reduce,)
        return tuple(self.threads[p] for p in self.mapped)


def race_role(name: str) -> tuple[str, int] | None:
    """What a mark of this recipe means to the race checker (`akg.polyhedral.races`, its
    `roles`): `blockIdx.<axis>.<n>` is block coordinate x=0, y=1, z=2 of the single-member
    band below, `threadIdx.<axis>.<n>` thread coordinate, `barrier` a `__syncthreads()`
    after the subtree below; other marks mean nothing to it."""
    from akg.polyhedral.races import MARK_BARRIER, MARK_BLOCKS, MARK_THREADS

    if name in (BARRIER, WARP_BARRIER):  # a warp's shuffles synchronise the lanes they exchange between
        return MARK_BARRIER, 2
    head, _, rest = name.partition(".")
    axis = rest.partition(".")[0]
    if head in (MARK_BLOCK, MARK_THREAD) and axis in AXES:
        return (MARK_BLOCKS if head == MARK_BLOCK else MARK_THREADS), AXES.index(axis)
    return None


def _mapping_of(config: Config, k: int, info: BandInfo) -> BandMapping:
    n = info.members
    order, threads, work, shared = tuple(range(n)), (0,) * n, (1,) * n, ()
    for s in config.band_steps(k):
        if s.op == "order":
            order = s.arg
        elif s.op == "map" and s.level == THREAD_LEVEL:
            threads = s.arg
        elif s.op == "tile" and s.level == WORK_LEVEL:
            work = tuple(max(1, w) for w in s.arg)
        elif s.op == "promote" and s.level == SHARED_LEVEL and isinstance(s.arg, tuple) and len(s.arg) == 2:
            shared = s.arg
        elif s.op == "reduce" and s.level in (THREAD_LEVEL, WARP_LEVEL) and isinstance(s.arg, int):
            return BandMapping(order, (0,) * n, (1,) * n, s.arg, s.level == WARP_LEVEL)
        else:
            raise ScheduleError(f"band {k}: step '{s}' does not apply to a band on CUDA "
                                f"(order, map({THREAD_LEVEL}), tile({WORK_LEVEL}), "
                                f"reduce({THREAD_LEVEL} | {WARP_LEVEL}), promote({SHARED_LEVEL}, (tile_k, pad)))")
    if not isinstance(order, tuple) or not isinstance(threads, tuple) or not isinstance(work, tuple):
        raise ScheduleError(f"band {k}: order, threads and work are per-member lists")
    return BandMapping(order, threads, work, shared=shared)


def mappable(info: BandInfo) -> list[int]:
    """Members that may be mapped: coincident ones of a permutable band (the first alone of
    a band whose members cannot be reordered)."""
    if info.members > 1 and not info.permutable:
        return [0] if info.coincident[0] else []
    return [m for m in range(info.members) if info.coincident[m]]


def reduce_threads_for(info: BandInfo, spec, reducers: tuple[str, ...]) -> int:
    """Threads per block over which the band's reductions spread (0: none): when the band's
    parallel loops cannot fill the GPU (fewer points than its SMs hold warps) and each point
    reduces many terms; a power of two, a warp to 256, about a quarter of the terms."""
    from akg.schedules.cuda_reduce import TREE_REDUCERS

    if not reducers or any(r not in TREE_REDUCERS for r in reducers):
        return 0
    parallel = math.prod(info.extents[m] for m in mappable(info))
    slots = spec.sms * (spec.max_threads_per_sm // spec.warp_size)
    terms = info.work // max(1, parallel)
    if parallel >= slots or terms < 2 * spec.warp_size:
        return 0
    n = 1 << max(0, (terms // 4).bit_length() - 1)
    return max(spec.warp_size, min(DEFAULT_THREADS, n, spec.max_threads_per_block))


def default_mapping(info: BandInfo, spec, reducers: tuple[str, ...] = ()) -> BandMapping:
    """The heuristic (a band whose reductions should spread over the threads of a block, see
    `reduce_threads_for`, gets `reduce`; otherwise): the coincident member streaming most
    contiguous data innermost (x, so
    that a warp reads consecutive elements), the next coincident members as y and z; 256
    threads per block as far as the loops allow, x first (a member left without threads is
    still mapped to blocks, one block per point: a conv's channels when its rows fill the
    threads); one point per thread unless a grid dimension would exceed the GPU's limit."""
    n = info.members
    lanes = reduce_threads_for(info, spec, reducers)
    if lanes:
        return BandMapping(tuple(range(n)), (0,) * n, (1,) * n, lanes)
    candidates = mappable(info)
    order = list(range(n))
    if info.permutable and n > 1 and candidates:
        best = max(candidates, key=lambda m: (info.contiguity[m], m))
        order.remove(best)
        order.append(best)
    ext = [info.extents[m] for m in order]
    threads, work = [0] * n, [1] * n
    mapped = [p for p in reversed(range(n)) if order[p] in candidates][:3]
    budget = min(DEFAULT_THREADS, spec.max_threads_per_block)
    for i, p in enumerate(mapped):
        t = max(1, min(ext[p], budget, spec.max_block_dims[i]))
        threads[p] = t
        budget = max(1, budget // t)
        limit = spec.max_grid_dims[i]
        if math.ceil(ext[p] / t) > limit:
            work[p] = math.ceil(ext[p] / (t * limit))
    return BandMapping(tuple(order), tuple(threads), tuple(work))


def validate_mapping(k: int, m: BandMapping, info: BandInfo, spec) -> None:
    n = info.members
    if m.reduce:
        t = m.reduce
        if t < 2 or t & (t - 1) or t > spec.max_threads_per_block:
            raise ScheduleError(f"band {k}: reduce over {t} threads: a power of two from 2 to "
                                f"{spec.max_threads_per_block}")
        if m.shuffle and t < spec.warp_size:
            raise ScheduleError(f"band {k}: warp shuffles need a warp of threads at least ({spec.warp_size}), not {t}")
        return
    if m.shared:
        tile_k, pad = (m.shared + (0, 0))[:2]
        if len(m.shared) != 2 or tile_k < 1 or pad < 0:
            raise ScheduleError(f"band {k}: promote(shared) takes (tile_k >= 1, pad >= 0), not {list(m.shared)}")
        if any(not t for t in m.threads):
            raise ScheduleError(f"band {k}: shared tiles need every loop of the band mapped")
    if sorted(m.order) != list(range(n)):
        raise ScheduleError(f"band {k}: order {list(m.order)} is not a permutation of {n} loops")
    if not info.permutable and n > 1 and m.order != tuple(range(n)):
        raise ScheduleError(f"band {k}: its loops are not permutable, order {list(m.order)} is illegal")
    if len(m.threads) != n or len(m.work) != n:
        raise ScheduleError(f"band {k}: needs {n} thread counts and {n} points per thread")
    allowed = mappable(info)
    mapped = m.mapped
    if len(mapped) > 3:
        raise ScheduleError(f"band {k}: {len(mapped)} mapped loops, a GPU has 3 thread axes")
    for p in range(n):
        t, w, e = m.threads[p], m.work[p], info.extents[m.order[p]]
        if t < 0 or w < 1:
            raise ScheduleError(f"band {k}: negative thread count or points per thread")
        if t and m.order[p] not in allowed:
            raise ScheduleError(f"band {k}: loop {m.order[p]} carries a dependence (or cannot be moved) "
                                f"and cannot be mapped to threads")
        if t > e:
            raise ScheduleError(f"band {k}: {t} threads along loop {m.order[p]} of extent {e}")
        if w > 1 and (not t or t * w > e):
            raise ScheduleError(f"band {k}: {w} points per thread along loop {m.order[p]} "
                                f"({'not mapped' if not t else f'{t} threads, extent {e}'})")
    for i, (t, g) in enumerate(zip(m.block(), m.grid(info))):
        if t > spec.max_block_dims[i]:
            raise ScheduleError(f"band {k}: {t} threads along {AXES[i]}, the GPU allows {spec.max_block_dims[i]}")
        if g > spec.max_grid_dims[i]:
            raise ScheduleError(f"band {k}: {g} blocks along {AXES[i]}, the GPU allows {spec.max_grid_dims[i]}")
    total = math.prod(m.block())
    if total > spec.max_threads_per_block:
        raise ScheduleError(f"band {k}: {total} threads per block, the GPU allows {spec.max_threads_per_block}")


# --- the knob space ----------------------------------------------------------------------------


def _thread_choices(extent: int, limit: int) -> list[int]:
    """Thread counts along a loop: powers of two up to the limit and the loop, and the whole
    loop when it fits (the sampler keeps those of at least a warp along x)."""
    out = {1 << k for k in range(0, 11) if (1 << k) <= min(extent, limit)}
    if extent <= limit:
        out.add(extent)
    return sorted(out)


REDUCE_CHOICES = (32, 64, 128, 256, 512, 1024)
SHARED_K_CHOICES = (8, 16, 32)  # promote(shared): the k-tile
SHARED_DEFAULT = True  # matmul-like bands get shared tiles by default (`CudaRecipe.shared_default`)
REGISTER_DEFAULTS = (8, 4, 2)  # ... and w_y x w_x of these (or 1) outputs per thread, in registers
REGISTER_BUDGET = 16384  # the space's tiled configs: threads x outputs per thread per block at most


@dataclass(frozen=True)
class CudaBandSpace:
    info: BandInfo
    spec: object
    reducers: tuple[str, ...] = ()  # of the reductions below the band

    def orders(self) -> list[tuple[int, ...]]:
        n = self.info.members
        if not self.info.permutable or n == 1:
            return [tuple(range(n))]
        return list(itertools.permutations(range(n)))

    def sample(self, rng: random.Random) -> BandMapping:
        info, spec = self.info, self.spec
        n = info.members
        from akg.schedules.cuda_reduce import TREE_REDUCERS

        if self.reducers and all(r in TREE_REDUCERS for r in self.reducers) and rng.random() < 0.3:
            lanes = [t for t in REDUCE_CHOICES if t <= spec.max_threads_per_block]
            return BandMapping(tuple(range(n)), (0,) * n, (1,) * n, rng.choice(lanes), rng.random() < 0.5)
        order = rng.choice(self.orders())
        allowed = mappable(info)
        positions = [p for p in reversed(range(n)) if order[p] in allowed]
        if not positions:
            return BandMapping(order, (0,) * n, (1,) * n)
        # shared tiles of a single reduction's operands: every member mapped (several outputs per thread in registers)
        tiles = (len(self.reducers) == 1 and self.reducers[0] in TREE_REDUCERS and len(positions) == n <= 3
                 and rng.random() < 0.3)
        dims = n if tiles else rng.randint(1, min(3, len(positions)))
        threads, work = [0] * n, [1] * n
        budget = spec.max_threads_per_block
        for i, p in enumerate(positions[:dims]):
            e = info.extents[order[p]]
            choices = [t for t in _thread_choices(e, min(budget, spec.max_block_dims[i]))
                       if i > 0 or t >= min(e, spec.warp_size)]
            t = rng.choice(choices or [1])
            threads[p] = t
            budget = max(1, budget // t)
            ws = [w for w in WORK_CHOICES if t * w <= e]
            work[p] = rng.choice(ws or [1])
            if math.ceil(e / (t * work[p])) > spec.max_grid_dims[i]:
                work[p] = math.ceil(e / (t * spec.max_grid_dims[i]))
        shared = ()
        if tiles:  # register tiles beside them: a block's accumulators within a budget
            while math.prod(threads) * math.prod(work) > REGISTER_BUDGET:
                work[work.index(max(work))] //= 2
            shared = (rng.choice(SHARED_K_CHOICES), rng.choice((0, 1)))
        return BandMapping(order, tuple(threads), tuple(work), shared=shared)

    def size(self) -> int:
        limit = self.spec.max_threads_per_block
        per_dim = [len(_thread_choices(e, limit)) * len(WORK_CHOICES) for e in self.info.extents]
        tiles = 2 * len(SHARED_K_CHOICES) if len(self.reducers) == 1 else 1
        trees = 2 * len(REDUCE_CHOICES) if self.reducers else 0
        return len(self.orders()) * max(1, math.prod(per_dim)) * tiles + trees


@dataclass(frozen=True)
class CudaSpace(Space):
    """All CUDA configs of one subgraph for one fusion strategy: per band a member order,
    threads and points per thread along the mapped members; unroll."""

    bands: tuple[CudaBandSpace, ...] = ()
    target: object = None
    defaults: tuple = ()  # the recipe's default mapping per band (empty: `default_mapping`'s)

    def _default(self, k: int) -> BandMapping:
        b = self.bands[k]
        return self.defaults[k] if self.defaults else default_mapping(b.info, b.spec, b.reducers)

    def __post_init__(self):
        if not self.switches:
            object.__setattr__(self, "switches", {"unroll": (True, False)})

    def _config(self, mappings, unroll: bool) -> Config:
        steps = [s for k, m in enumerate(mappings) for s in m.steps(k)]
        return Config(self.fusion, tuple(steps) + ((Step("unroll"),) if unroll else ()))

    def _mappings(self, config: Config) -> list[BandMapping]:
        return [_mapping_of(config, k, b.info) if k in config.bands_given() else
                self._default(k) for k, b in enumerate(self.bands)]

    def _legal(self, k: int, m: BandMapping) -> BandMapping:
        b = self.bands[k]
        try:
            validate_mapping(k, m, b.info, b.spec)
            return m
        except ScheduleError:
            return self._default(k)

    def size(self) -> int:
        return 2 * math.prod(b.size() for b in self.bands)

    def sample(self, rng: random.Random) -> Config:
        return self._config([self._legal(k, b.sample(rng)) for k, b in enumerate(self.bands)], rng.random() < 0.5)

    def __iter__(self) -> Iterator[Config]:
        rng = random.Random(0)
        seen = set()
        yield self._config([self._default(k) for k in range(len(self.bands))], True)
        for _ in range(100 * max(1, len(self.bands))):
            config = self.sample(rng)
            if config not in seen:
                seen.add(config)
                yield config

    def validate(self, config: Config) -> None:
        CudaRecipe(self.target).validate(config, [b.info for b in self.bands])

    def mutate(self, config: Config, rng: random.Random) -> Config:
        mappings = self._mappings(config)
        unroll = config.has("unroll")
        if not mappings or rng.random() < 0.2:
            unroll = not unroll
        else:
            k = rng.randrange(len(mappings))
            mappings[k] = self._legal(k, self.bands[k].sample(rng))
        return self._config(mappings, unroll)

    def crossover(self, a: Config, b: Config, rng: random.Random) -> Config:
        ma, mb = self._mappings(a), self._mappings(b)
        return self._config([rng.choice(pair) for pair in zip(ma, mb)], rng.choice((a, b)).has("unroll"))


# --- the recipe ----------------------------------------------------------------------------------


class CudaRecipe(Recipe):
    """Outer bands to blocks and threads; everything else serial in each thread, or a band's
    reductions spread over the threads of a block."""

    def __init__(self, target):
        super().__init__(target)
        self._ops = None  # the prepared program's ops (statement S<k> is op k's)
        self._trees: dict = {}  # rewritten models, by the reductions spread and their threads

    @property
    def spec(self):
        return self.target.spec

    def prepare(self, program, dtype: str):
        """Reductions with few outputs over many terms split into partials (`cuda_split`),
        about one per warp slot of the GPU's SMs, so that they spread over threads."""
        from akg.schedules.cuda_split import split_for_threads

        program = split_for_threads(program, self.spec.sms * self.spec.warp_size)
        self._ops = program.ops()
        return program

    def default_for(self, info: BandInfo) -> BandMapping:
        """`default_mapping`, or shared tiles where the band is one sum whose operand tiles
        the threads of a block share (`shared_default`)."""
        return self.shared_default(info) or default_mapping(info, self.spec, self.reducers(info))

    def shared_default(self, info: BandInfo) -> BandMapping | None:
        """Shared tiles (16 x 16 threads, k-tiles of 16, no padding: a warp reads a row of a
        tile or one broadcast element) for a band of 2 or 3 coincident members computing one
        sum over one axis of at least 16 terms, elementwise ops after it, where some operand
        load that varies along the reduction misses a mapped member (each of its elements is
        read by several threads of a block: a matmul's A and B), with register tiles of w_y x
        w_x outputs per thread along y and x (each of `REGISTER_DEFAULTS` or 1): the most
        outputs, the squarest, then the most along x, that leave at least a block per SM
        (else one output per thread). None otherwise."""
        from akg.graph.compute.expr import Const, Load, Var, walk

        ops = self._ops
        n = info.members
        if ops is None or not SHARED_DEFAULT or not 2 <= n <= 3 or mappable(info) != list(range(n)):
            return None
        mine = {}
        for name in info.statements:
            k = name[1:].removesuffix("_init")
            if not (name.startswith("S") and k.isdigit() and int(k) < len(ops)):
                return None
            mine[int(k)] = ops[int(k)]
        reductions = [o for o in mine.values() if o.reduce is not None]
        if len(reductions) != 1:
            return None
        (op,) = reductions
        red = op.reduce
        if red.reducer != "sum" or len(red.axes) != 1 or red.axes[0].extent < 16 or len(op.axes) != n:
            return None
        (r,) = red.axes
        shared = False
        for ld in (x for x in walk(red.source) if isinstance(x, Load)):
            if not any(i is r for i in ld.indices):
                continue
            if not all(i is r or isinstance(i, Const) or (isinstance(i, Var) and any(i is a for a in op.axes))
                       for i in ld.indices):
                return None
            shared |= any(not any(i is a for i in ld.indices) for a in op.axes if a.extent > 1)
        if not shared:
            return None
        plain = default_mapping(info, self.spec, self.reducers(info))
        order = plain.order
        threads, budget = [1] * n, DEFAULT_THREADS
        for p in reversed(range(n)):  # x, then y: 16 each as far as the loops go; z: one
            e = info.extents[order[p]]
            threads[p] = max(1, min(e, 16 if p >= n - 2 else 1, budget))
            budget //= threads[p]
        m = BandMapping(order, tuple(threads), (1,) * n, shared=(16, 0))
        try:
            validate_mapping(info.index, m, info, self.spec)
        except ScheduleError:
            return None
        # register tiles: w_y x w_x outputs per thread (cuda_registers.py), each of 8, 4, 2, 1:
        # the most outputs (the squarest, then the most along x) that still give every SM a
        # block; one output per thread where none does
        pairs = sorted(itertools.product(REGISTER_DEFAULTS + (1,), repeat=2),
                       key=lambda yx: (-yx[0] * yx[1], abs(yx[0].bit_length() - yx[1].bit_length()), -yx[1]))
        for wy, wx in pairs:
            if wy * wx == 1:
                break
            work = tuple((wx if p == n - 1 else wy) if p >= n - 2 and threads[p] > 1 else 1 for p in range(n))
            tiled = dataclasses.replace(m, work=work)
            try:
                validate_mapping(info.index, tiled, info, self.spec)
            except ScheduleError:
                continue
            if math.prod(tiled.grid(info)) >= self.spec.sms:
                return tiled
        return m

    def reducers(self, info: BandInfo) -> tuple[str, ...]:
        """The reducers of the reductions below a band of the prepared program (statements
        `S<k>` and `S<k>_init` are op k's; none known before `prepare`)."""
        ops = self._ops
        if ops is None:
            return ()
        found = {}
        for name in info.statements:
            k = name[1:].removesuffix("_init")
            if name.startswith("S") and k.isdigit() and int(k) < len(ops) and ops[int(k)].reduce is not None:
                found[int(k)] = ops[int(k)].reduce.reducer
        return tuple(found[k] for k in sorted(found))

    def default_config(self, bands, dtype, fusion="smart") -> Config:
        steps = [s for k, info in enumerate(bands)
                 for s in self.default_for(info).steps(k)]
        return Config(fusion, tuple(steps) + (Step("unroll"),))

    def space(self, bands, fusion="smart") -> CudaSpace:
        return CudaSpace(fusion, bands=tuple(CudaBandSpace(i, self.spec, self.reducers(i)) for i in bands),
                         target=self.target, defaults=tuple(self.default_for(i) for i in bands))

    def mappings(self, config: Config, bands: list[BandInfo]) -> list[BandMapping]:
        given = config.bands_given()
        return [_mapping_of(config, k, info) if k in given else self.default_for(info)
                for k, info in enumerate(bands)]

    def validate(self, config, bands) -> None:
        check_steps(config, self.target, len(bands))
        for s in config.kernel_steps():
            if s.op != "unroll":
                raise ScheduleError(f"step '{s}' is not a CUDA kernel step (unroll)")
        for k, (m, info) in enumerate(zip(self.mappings(config, bands), bands)):
            validate_mapping(k, m, info, self.spec)

    def apply(self, config, model, schedule, bands, dtype):
        self.validate(config, bands)
        if tree.n_outer_bands(schedule) != len(bands):
            raise ScheduleError(f"the schedule has {tree.n_outer_bands(schedule)} outer bands, "
                                f"the config maps {len(bands)}")
        mappings = self.mappings(config, bands)
        unroll = config.has("unroll")

        def apply_band(node, k):
            return _apply_band(node, mappings[k], bands[k], unroll)

        trees = {k: m.reduce for k, m in enumerate(mappings) if m.reduce}
        tiled = [k for k, m in enumerate(mappings) if m.shared]
        if tiled:
            from akg.schedules.cuda_registers import map_registers
            from akg.schedules.cuda_shared import check

            if trees or len(tiled) > 1:  # the heuristic's tiles give way; a config's are refused
                mappings = [default_mapping(info, self.spec, self.reducers(info)) if m.shared and
                            m == self.default_for(info) else m for m, info in zip(mappings, bands)]
                tiled = [k for k, m in enumerate(mappings) if m.shared]
            if tiled and (trees or len(tiled) > 1):
                raise ScheduleError("shared tiles in one band of a kernel, without reduction trees (not done yet)")
        if tiled:
            (k,) = tiled
            try:
                done = map_registers(model, schedule, bands, k, mappings[k], *mappings[k].shared, self.spec,
                                     apply_band, cache=self._trees)
            except ScheduleError as e:
                if mappings[k] != self.default_for(bands[k]):
                    raise
                # the heuristic proposed it from the ops' shape: map the band as before
                log.debug("%s: no shared tiles: %s", model.program.name, e)
                plain = default_mapping(bands[k], self.spec, self.reducers(bands[k]))
                mapped = tree.map_outer_bands(model, schedule, lambda node, b: _apply_band(
                    node, plain if b == k else mappings[b], bands[b], unroll))
                check_mapping(model, mapped)
                return mapped
            check(done)
            return done.model, done.schedule
        if not trees:
            mapped = tree.map_outer_bands(model, schedule, apply_band)
            check_mapping(model, mapped)
            return mapped
        from akg.schedules.cuda_reduce import map_trees

        try:
            warps = frozenset(k for k in trees if mappings[k].shuffle)
            done = map_trees(model, schedule, bands, trees, self.spec, apply_band, cache=self._trees, warps=warps)
        except ScheduleError as e:
            defaults = [self.default_for(info) for info in bands]
            if any(mappings[k] != defaults[k] for k in trees):
                raise
            # the heuristic proposed it from the band's shape alone: map the band as before
            log.debug("%s: reductions not spread over threads: %s", model.program.name, e)
            plain = [default_mapping(info, self.spec) if m.reduce else m for m, info in zip(mappings, bands)]
            mapped = tree.map_outer_bands(model, schedule,
                                          lambda node, k: _apply_band(node, plain[k], bands[k], unroll))
            check_mapping(model, mapped)
            return mapped
        check_mapping(done.model, done.schedule, shared=done.shared, private=done.private)
        return done.model, done.schedule

    def promote(self, config: Config) -> bool:
        return False  # the polyhedral promotion pass: unused (shared and register tiles are band rewrites)

    def knob_features(self, config, bands) -> list[float]:
        if not bands:
            return [0.0] * 4
        m = self.mappings(config, bands)[0]
        return [math.log2(max(1, math.prod(m.block()))), math.log2(max(1, math.prod(m.work))),
                float(len(m.mapped) if not m.reduce else -1), float(config.has("unroll"))]


def check_mapping(model, mapped, shared=(), private=()) -> None:
    """RaceError when the race checker finds threads or blocks of the mapped schedule in
    conflict (a second line behind mapping coincident members only); a mapping it cannot
    prove within its quota is kept, with a debug note, since coincidence already makes it
    legal."""
    from akg.errors import UnprovenRaceError
    from akg.polyhedral.races import check_schedule

    try:
        check_schedule(model, mapped, roles=race_role, shared=shared, private=private)
    except UnprovenRaceError as e:
        log.debug("%s: race check not proven, the mapping is kept (coincident members only): %s",
                  model.program.name, e)


def _apply_band(node, m: BandMapping, info: BandInfo, unroll: bool):
    """Tile the band into blocks, mark the tile loops as block indices and the point loops
    as thread indices (mapped members first, the others serial inside), and sink each
    thread's own points below everything under the band. Returns a node of the new tree."""
    if not m.mapped:
        return node
    n = tree.band_members(node)
    if n > 1 and not info.permutable:  # only the first member is mapped: strip-mine it alone
        node = tree.split_band(node, 1)
        m = BandMapping((0,), m.threads[:1], m.work[:1])
        n = 1
    if m.order != tuple(range(n)):
        node = tree.permute_band(node, m.order)
    node = tree.shift_to_origin(node)  # a skewed member starting at -1 would straddle a tile more
    extents = tree.band_extents(node)
    blocks = tuple(t * w if t else e for t, w, e in zip(m.threads, m.work, extents))
    node = tree.tile_band(node, blocks)
    grid = [math.ceil(e / b) for e, b in zip(extents, blocks)]
    marks = [f"{MARK_BLOCK}.{m.axis(p)}.{grid[p]}" if m.threads[p] and grid[p] > 1 else None for p in range(n)]
    node = tree.insert_marks_on_members(node, marks)
    for _ in range(n + sum(1 for x in marks if x)):  # down the chain of tile loops to the point band
        node = tree.child(node)
    cyclic = any(w > 1 for w in m.work)
    if cyclic:  # point p = q * threads + thread: the q loop (a thread's own points) sinks below
        node = tree.child(tree.tile_band(node, tuple(t if t else b for t, b in zip(m.threads, blocks))))
    first = [p for p in range(n) if m.threads[p]] + [p for p in range(n) if not m.threads[p]]
    if first != list(range(n)):
        node = tree.permute_band(node, tuple(first))
    marks = [f"{MARK_THREAD}.{m.axis(p)}.{m.threads[p]}" if m.threads[p] else None for p in first]
    node = tree.insert_marks_on_members(node, marks)
    if cyclic:
        q = tree.parent(node)
        per_thread = [MARK_UNROLL if unroll and 1 < w <= MAX_UNROLL else None for w in m.work]
        node = tree.sink_below_inner(q, [True] * n, per_thread)
    return node

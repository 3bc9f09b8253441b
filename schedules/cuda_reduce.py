"""CUDA reductions across the threads of a block (the `reduce(k, threads, n)` step): each
reduction under outer band k is rewritten into per-thread partials and a tree, and the band
is rebuilt so that one block computes one row with `n` threads.

For out[row] = reduce_k src(row, k) over K terms (several reduction axes are flattened):

    acc[row, t]  = reduce_{q} src(row, k = q * n + t)      per thread, in a register
    s0[row, t]   = acc[row, t]                            the partials into shared memory
    s_j[row, t]  = s_{j-1}[row, t] (+) s_{j-1}[row, t + n / 2^j]     t < n / 2^j
    out[row]     = s_last[row, 0] (+) s_last[row, 1]      thread 0

Every statement of the band keeps the row iterators it had (they become block indices) and
runs in program order inside the row, pass by pass (`polyhedral.lanes`): a pass's lane
iterator (the thread slot t of the new statements, the last iterator of the others, spread
cyclically) is threadIdx.x, and a `barrier` mark closes each pass (`__syncthreads()` on the
GPU; in the emulation each pass is its own serial thread loop). The race checker sees the
barriers in the tree and proves the passes race-free. Tensors of the rewrite carry their
memory in their names (`<op>.rlocal`: one value per thread; `<op>.rshared<j>`: one copy per
block), which the lowering hooks of the CUDA target read."""

from __future__ import annotations

import math
from dataclasses import dataclass

from akg.errors import ScheduleError
from akg.graph.compute.expr import (ComputeOp, Load, call, compute, const, rebuild, reduce, reduce_axis, select,
                                    substitute)
from akg.graph.compute.lower import Program

TREE_REDUCERS = ("sum", "prod", "max", "min")
LOCAL_TAG = ".rlocal"  # per-thread partials
SHARED_TAG = ".rshared"  # + the tree level: one copy per block
WARP_TAG = ".rwarp"  # + the level: registers of warp 0, read across lanes by shuffles
BARRIER = "barrier"  # __syncthreads() after the subtree below
WARP_BARRIER = "barrier.warp"  # the lanes of a warp exchange values (shuffles synchronise them)
WARP = 32
LEVELS = ("threads", "warps")  # reduce(k, <level>, n): a shared-memory tree; its last 32 by shuffles


def combine(reducer: str, a, b):
    if reducer == "sum":
        return a + b
    if reducer == "prod":
        return a * b
    return call(reducer, a, b)


def identity(reducer: str, dtype: str):
    if reducer == "sum":
        return const(0, dtype)
    if reducer == "prod":
        return const(1, dtype)
    lowest = reducer == "max"
    if dtype.startswith("float") or dtype.startswith("bfloat"):
        return const(float("-inf") if lowest else float("inf"), dtype)
    import numpy as np

    info = np.iinfo(dtype)
    return const(int(info.min if lowest else info.max), dtype)


def shared_bytes(lanes: int, dtype: str, warps: bool = False) -> int:
    """Shared memory of one tree: levels of n, n/2, ..., 2 values (down to 32 when the last
    32 are combined by shuffles)."""
    import numpy as np

    values = 2 * lanes - (WARP if warps else 2)
    return values * np.dtype(dtype if dtype != "bfloat16" else "float16").itemsize


@dataclass(frozen=True)
class Spread:
    """The rewritten program and where each of its ops came from: `origin[id(new op)]` is
    the op of the original program it replaces or computes part of; `lane[id(new op)]` the
    axis of a rewrite's op that is the thread slot (None: thread 0 only)."""

    program: Program
    origin: dict
    lane: dict
    aux: frozenset  # ids of the ops the rewrite added (partials, tree levels, final value)


def _warp_level(shape, fn, name: str):
    """A tree level held in the registers of warp 0: computed by its 32 lanes, stored as a
    tensor of 64 so that a lane's read of lane + h (a shuffle down on the GPU) stays inside
    it (the lanes past 32 - h compute values nothing uses)."""
    from akg.graph.compute.expr import Tensor

    t = compute([*shape, WARP], fn, name)
    op = t.op
    op.output = Tensor(name, [*shape, 2 * WARP], t.dtype, op)
    return op.output


def spread_reductions(program: Program, chosen: dict[int, tuple[int, bool]]) -> Spread:
    """`program` with each reduction op whose id is a key of `chosen` spread over that many
    threads, the last 32 values combined by warp shuffles when the flag says so (see the
    module), and the provenance of every op."""
    remap: dict[int, object] = {}
    origin: dict[int, ComputeOp] = {}
    lane: dict[int, int | None] = {}
    aux: set[int] = set()

    def rewrite(e):
        return rebuild(e, lambda n: Load(remap[id(n.tensor)], n.indices)
                       if isinstance(n, Load) and id(n.tensor) in remap else None)

    for op in program.ops():
        red = op.reduce
        if id(op) not in chosen:
            body = rewrite(op.body)
            new = op if body is op.body else ComputeOp(op.name, op.axes, body, op.output.layout)
            if new is not op:
                remap[id(op.output)] = new.output
            origin[id(new)] = op
            continue
        if red is None or red.reducer not in TREE_REDUCERS:
            raise ScheduleError(f"{op.name}: only sum/prod/max/min reductions spread over threads")
        lanes, warps = chosen[id(op)]
        if lanes < 2 or lanes & (lanes - 1):
            raise ScheduleError(f"a reduction over threads needs a power of two of at least 2 threads, not {lanes}")
        if warps and lanes < WARP:
            raise ScheduleError(f"a reduction ending in warp shuffles needs at least {WARP} threads, not {lanes}")
        shape = list(op.output.shape)
        dtype = op.output.dtype
        src = rewrite(red.source)
        extents = [r.extent for r in red.axes]
        total = math.prod(extents)
        steps = -(-total // lanes)

        def partial(*idx, op=op, red=red, src=src, extents=extents, total=total, steps=steps, lanes=lanes, dtype=dtype):
            q = reduce_axis(steps, f"{op.name}.q")
            flat = q * lanes + idx[-1]
            mapping = dict(zip(op.axes, idx[:-1]))
            stride = total
            for axis, extent in zip(red.axes, extents):
                stride //= extent
                mapping[axis] = (flat // stride) % extent if len(extents) > 1 else flat
            term = substitute(src, mapping)
            if total % lanes:
                term = select(call("lt", flat, const(total, flat.dtype)), term, identity(red.reducer, dtype))
            return reduce(red.reducer, term, [q])

        acc = compute([*shape, lanes], partial, f"{op.name}{LOCAL_TAG}")
        level = compute([*shape, lanes], lambda *i, acc=acc: acc[i], f"{op.name}{SHARED_TAG}0")
        made = [acc, level]
        width, j = lanes // 2, 1
        while width >= (WARP if warps else 2):
            level = compute([*shape, width],
                            lambda *i, prev=level, w=width, r=red.reducer:
                            combine(r, prev[i], prev[(*i[:-1], i[-1] + w)]),
                            f"{op.name}{SHARED_TAG}{j}")
            made.append(level)
            width, j = width // 2, j + 1
        if warps:  # the last 32 values: a warp's registers, exchanged by shuffles
            level = _warp_level(shape, lambda *i, prev=level: prev[i], f"{op.name}{WARP_TAG}0")
            made.append(level)
            h, j = WARP // 2, 1
            while h >= 1:
                level = _warp_level(shape, lambda *i, prev=level, h=h, r=red.reducer:
                                    combine(r, prev[i], prev[(*i[:-1], i[-1] + h)]), f"{op.name}{WARP_TAG}{j}")
                made.append(level)
                h, j = h // 2, j + 1
            final = compute(shape, lambda *i, last=level: last[(*i, 0)], op.name)
        else:
            final = compute(shape, lambda *i, last=level, r=red.reducer: combine(r, last[(*i, 0)], last[(*i, 1)]),
                            op.name)
        for t in made:
            origin[id(t.op)] = op
            lane[id(t.op)] = len(shape)
            aux.add(id(t.op))
        origin[id(final.op)] = op
        lane[id(final.op)] = None
        aux.add(id(final.op))
        remap[id(op.output)] = final
    outputs = [remap.get(id(t), t) for t in program.outputs]
    new = Program(program.name, program.inputs, outputs, program.params, program.complex_io)
    return Spread(new, origin, lane, frozenset(aux))


def scratch_memory(name: str) -> str | None:
    """'local', 'shared' or 'warp' for a tensor the rewrite made (by its name), else None."""
    if name.endswith(LOCAL_TAG):
        return "local"
    for tag, memory in ((SHARED_TAG, "shared"), (WARP_TAG, "warp")):
        head, found, level = name.rpartition(tag)
        if found and head and level.isdigit():
            return memory
    return None


# --- the mapping -------------------------------------------------------------------------------


def _pass(statements, stmts, barrier):
    """A pass of lane statements; after a warp level the lanes sync by their shuffles."""
    from akg.polyhedral import lanes as lanes_mod

    warp = any(scratch_memory(stmts[s.name].op.output.name) == "warp" for s in statements)
    return lanes_mod.LanePass(tuple(statements), WARP_BARRIER if warp and barrier else None)


@dataclass
class TreeMapping:
    """What `map_trees` made: the rewritten model, its mapped schedule, and the tensors
    (isl ids) one copy per block (`shared`) or per thread (`private`)."""

    model: object
    schedule: object
    shared: frozenset
    private: frozenset


def map_trees(model, schedule, bands, lanes_per_band: dict[int, int], spec, apply_band,
              cache: dict | None = None, barrier: str | None = BARRIER, warps: frozenset = frozenset()) -> TreeMapping:
    """Spread the reductions of the outer bands in `lanes_per_band` (band -> threads) over
    the threads of a block (see the module), those of the bands in `warps` ending in warp
    shuffles; every other band is mapped by
    `apply_band(node, k)`. ScheduleError where a band cannot be mapped so (an arg-reduction,
    a grid or shared memory beyond the spec). `barrier` is the mark between passes (None
    plants the missing barriers the race checker must find)."""
    from akg.polyhedral import lanes as lanes_mod
    from akg.polyhedral import tree
    from akg.polyhedral.model import build_model

    by_name = {s.name: s for s in model.statements}
    chosen: dict[int, int] = {}
    for k, n in lanes_per_band.items():
        reductions = [by_name[name].op for name in bands[k].statements
                      if name in by_name and by_name[name].op.reduce is not None]
        if not reductions:
            raise ScheduleError(f"band {k}: reduce(threads) needs a reduction below the band")
        total = 0
        for op in {id(o): o for o in reductions}.values():
            chosen[id(op)] = (n, k in warps)
            total += shared_bytes(n, op.output.dtype, k in warps)
        if total > spec.shared_per_block:
            raise ScheduleError(f"band {k}: the reduction trees need {total} bytes of shared memory, "
                                f"the GPU allows {spec.shared_per_block} per block")
    key = tuple(sorted(chosen.items()))
    if cache is not None and key in cache:
        spread, new_model = cache[key]
    else:
        spread = spread_reductions(model.program, chosen)
        new_model = build_model(spread.program, model.ctx)
        if cache is not None:
            cache[key] = (spread, new_model)
    old_of = {}
    for s in model.statements:
        old_of[(id(s.op), s.role)] = s
    targets = {}
    for s in new_model.statements:
        op = spread.origin[id(s.op)]
        if id(s.op) in spread.aux:  # where the row's first update ran (its init may sit apart)
            update = old_of[(id(op), "update")]
            targets[s.name] = (update.name, len(op.axes), len(op.reduce.axes))
        else:
            targets[s.name] = (old_of[(id(op), s.role)].name, len(s.iters), 0)
    pulled = lanes_mod.pull_back(schedule, new_model, targets)
    stmts = {s.name: s for s in new_model.statements}

    def apply(node, k):
        if k not in lanes_per_band:
            return apply_band(node, k)
        n = lanes_per_band[k]
        rows = lanes_mod.row_iterators(node)
        names = []
        node.get_domain().foreach_set(lambda st: names.append(st.get_tuple_name()))
        members = sorted((stmts[x] for x in names), key=lambda st: (st.position, st.role != "init"))
        passes, current, last_key = [], [], None
        for st in members:
            key = id(st.op)
            if id(st.op) in spread.aux and st.op.name.endswith((LOCAL_TAG, SHARED_TAG + "0")):
                key = ("partial", id(spread.origin[id(st.op)]))  # a thread stores its own partial: no barrier

            if id(st.op) in spread.aux:
                lane = spread.lane[id(st.op)]
            elif st.op.reduce is not None:
                raise ScheduleError(f"band {k}: {st.op.name} ({st.op.reduce.reducer}) cannot spread over threads")
            else:  # the last loop beyond the row (a loop of one iteration would leave no lane loop)
                inner = [d for d in range(len(st.iters)) if d not in rows and st.iters[d].extent > 1]
                lane = inner[-1] if inner else None
            if key != last_key and current:
                passes.append(_pass(current, stmts, barrier))
                current = []
            current.append(lanes_mod.LaneStatement(st.name, len(st.iters), lane))
            last_key = key
        passes.append(_pass(current, stmts, barrier))
        ops = [spread.origin[id(st.op)] for st in members if id(st.op) in spread.aux]
        extents = tuple(ops[0].axes[d].extent for d in rows)
        for op in ops:
            if any(a.extent > 1 for d, a in enumerate(op.axes) if d not in rows):
                raise ScheduleError(f"band {k}: {op.name} has outputs along loops that are not the band's "
                                    f"parallel rows; its partials cannot be one per block")
        mapped = [d for d in reversed(range(len(rows))) if extents[d] > 1]
        if len(mapped) > 3:
            raise ScheduleError(f"band {k}: {len(mapped)} rows dimensions, a grid has 3")
        marks: list[str | None] = [None] * max(len(rows), 1)
        for axis, d in enumerate(mapped):
            if extents[d] > spec.max_grid_dims[axis]:
                raise ScheduleError(f"band {k}: {extents[d]} blocks along {'xyz'[axis]}, "
                                    f"the GPU allows {spec.max_grid_dims[axis]}")
            marks[d] = f"blockIdx.{'xyz'[axis]}.{extents[d]}"
        if not mapped:  # one block: still one launch
            marks[-1] = "blockIdx.x.1"
        return lanes_mod.lanes_in_program_order(node, rows, marks, passes, n, f"threadIdx.x.{n}", barrier)

    mapped = tree.map_outer_bands(new_model, pulled, apply)
    warp = set()
    shared, private = set(), set()
    for t, tid in new_model.tensor_ids.items():
        memory = scratch_memory(t.name)
        if memory == "shared":
            shared.add(tid)
        elif memory in ("local", "warp"):
            private.add(tid) if memory == "local" else warp.add(tid)
    return TreeMapping(new_model, mapped, frozenset(shared | warp), frozenset(private))

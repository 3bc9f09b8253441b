"""Memory promotion: at a promotion mark, a tensor whose per-iteration footprint is a small
box and whose elements are reused below the mark is kept in a local buffer (registers or
stack); copies in and out are added only where values flow across the mark, and a tensor
that never leaves its local buffers is never allocated in memory at all.

At a recompute mark (`MARK_RECOMPUTE`), the box of a producer's tensor that the code below
reads is computed into a local buffer by the producer's own expression instead of copied: the
producer runs no loop nest of its own, and its tensor is never allocated.

The analysis runs per occurrence of a mark in the generated AST (isl may emit one mark
several times when it splits the code below it), with the occurrence's own loop nest and
statement instances, so every occurrence is correct on its own.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import islpy as isl
import numpy as np
from tvm import tirx

from akg.errors import LoweringError
from akg.graph.compute.expr import Tensor
from akg.polyhedral.model import PolyModel, Statement
from akg.polyhedral.tree import MARK_PACK, MARK_PROMOTE, MARK_RECOMPUTE, MARK_VECTORIZE, VECTOR_LAST

log = logging.getLogger(__name__)

DEFAULT_BUDGET = 32 * 1024  # bytes per promoted buffer (fits L1 next to the streams)
PACK_BUDGET = 1 << 20  # bytes per packed operand panel (about half an L2)
# bytes per recompute box: its rows are consumed right after they are computed, a window's
# height at a time, so the box may exceed L1 (ResNet's 3x3/2 max-pool over 8 channels x 7
# output rows: 8 x 15 x 113 floats, 54 KB)
RECOMPUTE_BUDGET = 128 * 1024


@dataclass(eq=False)
class Promotion:
    tensor: Tensor
    lower: list[isl.PwAff]  # per tensor dim: first element of the box, over the outer loops
    sizes: tuple[int, ...]
    copy_in: bool
    copy_out: bool
    guard: bool  # the box can reach outside the tensor: copies check bounds
    instances: isl.UnionSet  # statement instances below this mark occurrence
    block: int = 0  # >0: blocked layout [last // block, other dims..., block] (a packed panel)
    perm: tuple[int, ...] = ()  # the box's dims in the local buffer's order (empty: as the tensor's)
    # the iterations of the loops around the mark that touch the tensor, where `lower` is
    # defined: isl may emit those loops over a larger range and guard the statements inside,
    # and a copy outside that set would move a box of garbage to a meaningless place
    where: isl.Set | None = None
    compute: Statement | None = None  # copied in by evaluating this statement (a recompute mark)

    @property
    def layout(self) -> int | tuple[int, ...]:
        """How an index into the box becomes an index into the local buffer (`local_index`)."""
        return self.block or self.perm

    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of the local buffer."""
        return tuple(local_index(list(self.sizes), self.block)) if self.block else \
            tuple(local_index(list(self.sizes), self.perm))


def local_index(index: list, layout: int | tuple[int, ...]) -> list:
    """An index (or the sizes) of a promotion box in its local buffer's layout: a block size
    moves the last dim first as `last // block` and last as `last % block` (a packed panel);
    a permutation reorders the dims (accumulators whose vector loop walks a dim that is not the
    tensor's last); 0 or () leaves it as it is."""
    if isinstance(layout, tuple):
        return [index[d] for d in layout] if layout else index
    if not layout:
        return index
    *lead, last = index
    if isinstance(last, int):
        return [last // layout, *lead, layout]
    return [tirx.floordiv(last, layout), *lead, tirx.floormod(last, layout)]


def maps(umap: isl.UnionMap) -> list[isl.Map]:
    out: list[isl.Map] = []
    umap.foreach_map(out.append)
    return out


def single(umap: isl.UnionMap) -> isl.Map | None:
    found = maps(umap)
    return found[0].coalesce() if len(found) == 1 else None


class RecomputeRefused(LoweringError):
    """A recompute mark whose box cannot be planned (not a box, or over the budget) or whose
    occurrences leave some read of the producer's tensor uncovered: the kernel is lowered
    again with the producer's own loop nest."""


class Promoter:
    """Promotion decisions for one mapped schedule; `at_mark` is called for each mark
    occurrence during AST generation."""

    def __init__(self, model: PolyModel, schedule: isl.Schedule, budget: int = DEFAULT_BUDGET,
                 enabled: bool = True, recompute: frozenset[str] = frozenset()):
        self.model, self.budget, self.enabled = model, budget, enabled
        self.outputs = {id(t) for t in model.program.outputs}
        self.by_id = model.tensor_by_id()
        self.writes, self.reads = model.writes(), model.reads()
        self._flows: dict[str, isl.UnionMap] = {}
        self.inner: dict[str, isl.UnionMap] = {}  # mark name -> schedule of the loops below it
        self.deeper: dict[str, isl.UnionSet] = {}  # mark name -> instances under deeper marks
        self.vector: dict[str, isl.UnionMap] = {}  # VECTOR_LAST mark name -> the vector loops below it
        self.held: dict[str, isl.UnionSet] = {}  # tensor id -> instances an enclosing promotion holds
        # recompute marks: tensor id -> its producer, and the instances its boxes serve so far
        self.recomputed: dict[str, Statement] = {}
        self.covered: dict[str, isl.UnionSet] = {}
        if enabled:  # `recompute`: the statements of the schedule's recompute marks (`recompute_marks`)
            for name in recompute:
                stmt = model.statement(name)
                self.recomputed[model.tensor_ids[stmt.write.tensor]] = stmt
        if enabled:
            for node in _marks(schedule):
                name = node.mark_get_id().get_name()
                self.inner[name] = node.get_subtree_schedule_union_map()
                if name.endswith("." + VECTOR_LAST):
                    self.vector[name] = _vector_loops(node)
                below = isl.UnionSet.empty(node.get_domain().get_space())
                for deeper in _marks_below(node):
                    if deeper.mark_get_id().get_name().startswith(MARK_PROMOTE + "."):
                        below = below.union(deeper.get_domain())
                self.deeper[name] = below
        self.pieces: list[list[Promotion]] = []

    # --- per-tensor relations -------------------------------------------------------------

    def _of(self, umap: isl.UnionMap, tid: str) -> isl.UnionMap:
        out = isl.UnionMap.empty(umap.get_space())
        for m in maps(umap):
            if m.get_tuple_name(isl.dim_type.out) == tid:
                out = out.union(isl.UnionMap.from_map(m))
        return out

    def _flow(self, tid: str) -> isl.UnionMap:
        if tid not in self._flows:
            info = isl.UnionAccessInfo.from_sink(self._of(self.reads, tid))
            info = info.set_must_source(self._of(self.writes, tid))
            info = info.set_schedule_map(self.model.original_schedule())
            self._flows[tid] = info.compute_flow().get_may_dependence()
        return self._flows[tid]

    # --- analysis of one mark occurrence --------------------------------------------------

    def at_mark(self, name: str, outer: isl.UnionMap) -> int | None:
        """Plan the promotions of one mark occurrence whose statement instances map to the
        loops around it by `outer`; returns the occurrence's index, or None if nothing is
        promoted there."""
        if not self.enabled or name not in self.inner:
            return None
        sub = outer.domain()
        if name.startswith(MARK_RECOMPUTE + "."):
            return self._recompute(name, outer, sub)
        chosen = []
        written = {m.get_tuple_name(isl.dim_type.out) for m in maps(self.writes.intersect_domain(sub))}
        if name.startswith(MARK_PACK + "."):
            lanes = int(name.rsplit(".", 1)[1])
            read = {m.get_tuple_name(isl.dim_type.out) for m in maps(self.reads.intersect_domain(sub))}
            for tid in sorted(read - written):
                promo = self._pack(name, tid, outer, sub, lanes)
                if promo is not None:
                    chosen.append(promo)
        else:
            for tid in sorted(written):
                promo = self._promote(name, tid, outer, sub)
                if promo is not None:
                    chosen.append(promo)
        if not chosen:
            return None
        self.pieces.append(chosen)
        return len(self.pieces) - 1

    def _promote(self, name: str, tid: str, outer: isl.UnionMap, sub: isl.UnionSet) -> Promotion | None:
        tensor = self.by_id[tid]
        w_t = self._of(self.writes, tid).intersect_domain(sub)
        r_t = self._of(self.reads, tid).intersect_domain(sub)
        if r_t.is_empty():
            return None  # written only: stores go straight to memory
        acc = w_t.union(r_t)
        if tid in self.held and acc.domain().is_subset(self.held[tid]):
            return None  # an enclosing promotion holds it
        carried = self._carried_below(name, outer, tid, sub)
        if acc.domain().is_subset(self.deeper[name]) and not carried:
            return None  # a deeper mark (closer to the registers) will hold it
        if not self._reused(name, outer, acc):
            return None
        footprint = single(outer.reverse().apply_range(acc))
        box = self._box(footprint)
        if box is None:
            return None
        lower, sizes = box
        nbytes = int(np.prod(sizes, dtype=np.int64)) * np.dtype(tensor.dtype).itemsize
        if nbytes > self.budget:
            log.debug("%s not promoted at %s: %d bytes > %d", tensor.name, name, nbytes, self.budget)
            return None
        flow = self._flow(tid)
        same = outer.apply_range(outer.reverse())
        intra = flow.intersect(same)
        copy_in = not flow.intersect_range(sub).subtract(intra).is_empty()
        copy_out = id(tensor) in self.outputs or not flow.intersect_domain(sub).subtract(intra).is_empty()
        box = _box_map(lower, sizes, footprint.domain(), tid)
        bounds = self._bounds(tensor, tid)
        guard = not box.range().is_subset(bounds)
        if copy_out:
            written = single(outer.reverse().apply_range(w_t))
            if written is None or not written.is_equal(box.intersect_range(bounds)):
                log.debug("%s not promoted at %s: its writes do not fill the box", tensor.name, name)
                return None
        perm = self._vector_last(name, outer, w_t, sizes) if name.endswith("." + VECTOR_LAST) else ()
        if carried:
            self.held[tid] = self.held[tid].union(sub) if tid in self.held else sub
        return Promotion(tensor, lower, tuple(sizes), copy_in, copy_out, guard, sub, perm=perm,
                         where=footprint.domain())

    def _recompute(self, name: str, outer: isl.UnionMap, sub: isl.UnionSet) -> int | None:
        """The piece of a recompute mark's occurrence: the box of the producer's tensor that
        the instances below read, computed in by the producer (RecomputeRefused if it cannot)."""
        stmt = self.model.statement(name[len(MARK_RECOMPUTE) + 1:])
        tid = self.model.tensor_ids.get(stmt.write.tensor)
        if tid not in self.recomputed:
            return None  # recomputing is off: the producer keeps its loop nest
        acc = self._of(self.reads, tid).intersect_domain(sub)
        if acc.is_empty():
            return None
        tensor = stmt.write.tensor
        footprint = single(outer.reverse().apply_range(acc))
        box = self._box(footprint)
        if box is None:
            raise RecomputeRefused(f"{tensor.name}: the reads below {name} are not a box")
        lower, sizes = box
        nbytes = int(np.prod(sizes, dtype=np.int64)) * np.dtype(tensor.dtype).itemsize
        if nbytes > RECOMPUTE_BUDGET:
            raise RecomputeRefused(f"{tensor.name}: {nbytes} bytes read below {name} > {RECOMPUTE_BUDGET}")
        guard = not _box_map(lower, sizes, footprint.domain(), tid).range().is_subset(self._bounds(tensor, tid))
        self.covered[tid] = self.covered[tid].union(acc.domain()) if tid in self.covered else acc.domain()
        self.pieces.append([Promotion(tensor, lower, tuple(sizes), True, False, guard, sub,
                                      where=footprint.domain(), compute=stmt)])
        return len(self.pieces) - 1

    def check_recomputed(self) -> set[int]:
        """Ids of the recomputed tensors, once every read of each is known to be served by a
        recompute box (RecomputeRefused where one is not)."""
        for tid, stmt in self.recomputed.items():
            reads = self._of(self.reads, tid).domain()
            if tid not in self.covered or not reads.is_subset(self.covered[tid]):
                raise RecomputeRefused(f"{stmt.write.tensor.name}: some reads lie outside its recompute marks")
        return {id(stmt.write.tensor) for stmt in self.recomputed.values()}

    def _vector_last(self, name: str, outer: isl.UnionMap, writes: isl.UnionMap, sizes) -> tuple[int, ...]:
        """At a mark flagged VECTOR_LAST (the recipe vectorises a loop that is not the written
        tensor's last index), the layout of a written box in which the dim that the vector loop
        below the mark walks is last: a conv vectorised over output channels [b, f, y, x] keeps
        its accumulators for a block of positions as [b, y, x, f], so each vector of channels
        is contiguous, not a gather with the stride of the block. () where that dim is already
        last, where the vector loop walks several dims or none, or where it cannot tell."""
        if name not in self.vector:
            return ()
        moving = self._vector_dims(name, outer, writes)
        if moving is None or len(moving) != 1:
            return ()
        (d,) = moving
        if int(np.prod(sizes[d + 1:], dtype=np.int64)) <= 1:
            return ()
        return tuple(k for k in range(len(sizes)) if k != d) + (d,)

    def _vector_dims(self, name: str, outer: isl.UnionMap, writes: isl.UnionMap) -> set[int] | None:
        """The dims of the written elements that change from one iteration of the vector loop
        below the mark to the next, all other loops fixed, over every vectorised statement
        writing the tensor; None: unknown (a vector loop not found among the loops)."""
        full = outer.flat_range_product(self.inner[name].intersect_domain(writes.domain()))
        ctx = self.model.ctx
        moving: set[int] = set()
        for write in maps(writes):
            domain = isl.UnionSet.from_set(write.domain())
            vector = single(self.vector[name].intersect_domain(domain))
            if vector is None:
                continue  # this statement runs no vector loop here
            sched = single(full.intersect_domain(domain))
            if sched is None:
                return None
            n, ndim = sched.dim(isl.dim_type.out), write.dim(isl.dim_type.out)
            at = next((k for k in range(n) if _component(sched, k).is_equal(vector)), None)
            if at is None:
                return None
            xs = [f"x{i}" for i in range(n)]
            ys = [f"x{i} + 1" if i == at else x for i, x in enumerate(xs)]
            step = isl.Map(f"{{ [{', '.join(xs)}] -> [{', '.join(ys)}] }}", context=ctx)
            loops_to_element = sched.reverse().apply_range(write)
            deltas = loops_to_element.reverse().apply_range(step.apply_range(loops_to_element)).deltas()
            tid = write.get_tuple_name(isl.dim_type.out)
            names = ", ".join(f"e{i}" for i in range(ndim))
            for d in range(ndim):
                if not deltas.subtract(isl.Set(f"{{ {tid}[{names}] : e{d} = 0 }}", context=ctx)).is_empty():
                    moving.add(d)
        return moving

    def _pack(self, name: str, tid: str, outer: isl.UnionMap, sub: isl.UnionSet, lanes: int) -> Promotion | None:
        """A read-only operand reused below a pack mark, copied in once per iteration of the
        loops around the mark, in a blocked layout when its last dim splits into vectors."""
        tensor = self.by_id[tid]
        acc = self._of(self.reads, tid).intersect_domain(sub)
        if tensor.ndim < 2 or not self._reused(name, outer, acc):
            return None
        footprint = single(outer.reverse().apply_range(acc))
        box = self._box(footprint)
        if box is None:
            return None
        lower, sizes = box
        nbytes = int(np.prod(sizes, dtype=np.int64)) * np.dtype(tensor.dtype).itemsize
        if nbytes > PACK_BUDGET or int(np.prod(sizes)) >= int(np.prod(tensor.shape)):
            return None  # too big, or no smaller than the tensor itself
        block = lanes if lanes > 1 and sizes[-1] % lanes == 0 and sizes[-1] > lanes else 0
        if tuple(sizes[1:]) == tuple(tensor.shape[1:]) and not block:
            return None  # the panel is one contiguous slice already (a weight packed at compile time)
        guard = not _box_map(lower, sizes, footprint.domain(), tid).range().is_subset(self._bounds(tensor, tid))
        return Promotion(tensor, lower, tuple(sizes), True, False, guard, sub, block, where=footprint.domain())

    def _box(self, footprint: isl.Map | None) -> tuple[list[isl.PwAff], list[int]] | None:
        if footprint is None:
            return None
        lower, sizes = [], []
        for d in range(footprint.dim(isl.dim_type.out)):
            lo, hi = footprint.dim_min(d), footprint.dim_max(d)
            span = (hi - lo).max_val()
            if not span.is_int():
                return None
            lower.append(lo)
            sizes.append(int(span.to_python()) + 1)
        return lower, sizes

    def _bounds(self, tensor: Tensor, tid: str) -> isl.Set:
        return isl.Set(f"{{ {tid}[{', '.join(f'e{d}' for d in range(tensor.ndim))}] : "
                       + (" and ".join(f"0 <= e{d} < {n}" for d, n in enumerate(tensor.shape)) or "true")
                       + " }", context=self.model.ctx)

    def _carried_below(self, name: str, outer: isl.UnionMap, tid: str, sub: isl.UnionSet) -> bool:
        """Do values of the tensor flow from one iteration of the first loop below the mark to
        a later one (partial sums carried from row to row)? A deeper mark would then copy them
        in and out on every iteration of that loop; this one holds them across it."""
        inner = self.inner[name]
        flow = self._flow(tid).intersect_domain(sub).intersect_range(sub)
        intra = flow.intersect(outer.apply_range(outer.reverse()))
        for m in maps(intra.apply_domain(inner).apply_range(inner)):
            n = m.dim(isl.dim_type.out)
            if n == 0 or m.dim(isl.dim_type.in_) != n:
                continue
            zero = isl.Set(f"{{ [{', '.join(f'd{k}' for k in range(n))}] : d0 = 0 }}", context=self.model.ctx)
            if not m.deltas().is_subset(zero):
                return True
        return False

    def _reused(self, name: str, outer: isl.UnionMap, accesses: isl.UnionMap) -> bool:
        """Do the loops below the mark touch some element more than once (within one
        iteration of the loops around it)?"""
        inner = self.inner[name].intersect_domain(accesses.domain())
        if inner.is_empty():
            return False
        full = outer.flat_range_product(inner)
        return not full.reverse().apply_range(accesses).is_injective()

    # --- whole-kernel decisions -------------------------------------------------------------

    def local_only(self) -> set[int]:
        """Ids of intermediates that live only in local buffers: never an output, never
        copied, and every statement touching them runs below one of their promotions."""
        covered: dict[int, isl.UnionSet] = {}
        dirty: set[int] = set()
        for piece in self.pieces:
            for p in piece:
                key = id(p.tensor)
                if p.copy_in or p.copy_out:
                    dirty.add(key)
                covered[key] = covered[key].union(p.instances) if key in covered else p.instances
        out = set()
        ids = {id(t): tid for t, tid in self.model.tensor_ids.items()}
        for key, domain in covered.items():
            if key in dirty or key in self.outputs:
                continue
            users = self._of(self.writes.union(self.reads), ids[key]).domain()
            if users.is_subset(domain):
                out.add(key)
        return out


def _is_promote(node: isl.ScheduleNode) -> bool:
    return node.get_type() == isl.schedule_node_type.mark and \
        node.mark_get_id().get_name().startswith((MARK_PROMOTE + ".", MARK_PACK + ".", MARK_RECOMPUTE + "."))


def recompute_marks(schedule: isl.Schedule) -> set[str]:
    """The statements that recompute marks in the schedule name."""
    return {n.mark_get_id().get_name()[len(MARK_RECOMPUTE) + 1:] for n in _marks(schedule)
            if n.mark_get_id().get_name().startswith(MARK_RECOMPUTE + ".")}


def without_statements(schedule: isl.Schedule, names: set[str]) -> isl.Schedule:
    """The schedule with every instance of the statements `names` removed."""
    keep = []
    schedule.get_domain().foreach_set(lambda s: keep.append(s) if s.get_tuple_name() not in names else None)
    domain = isl.UnionSet.empty(schedule.get_domain().get_space())
    for s in keep:
        domain = domain.union(isl.UnionSet.from_set(s))
    return schedule.intersect_domain(domain)


def _marks(schedule: isl.Schedule) -> list[isl.ScheduleNode]:
    return _marks_below(schedule.get_root(), include_self=True)


def _marks_below(top: isl.ScheduleNode, include_self: bool = False) -> list[isl.ScheduleNode]:
    out = []

    def visit(node, is_top):
        if _is_promote(node) and (include_self or not is_top):
            out.append(node)
        for k in range(node.n_children()):
            visit(node.child(k), False)

    visit(top, True)
    return out


def _vector_loops(top: isl.ScheduleNode) -> isl.UnionMap:
    """instance -> [value of its vector loop], for the loops marked MARK_VECTORIZE below `top`
    (each mark sits right above the one-member band of its loop)."""
    out = isl.UnionMap.empty(top.get_domain().get_space().params())

    def visit(node):
        nonlocal out
        if node.get_type() == isl.schedule_node_type.mark and node.mark_get_id().get_name() == MARK_VECTORIZE:
            band = node.child(0)
            if band.get_type() == isl.schedule_node_type.band:
                loop = isl.UnionMap.from_multi_union_pw_aff(band.band_get_partial_schedule())
                out = out.union(loop.intersect_domain(band.get_domain()))
        for k in range(node.n_children()):
            visit(node.child(k))

    visit(top)
    return out


def _component(sched: isl.Map, k: int) -> isl.Map:
    """instance -> [k-th schedule dim] of `sched`."""
    n = sched.dim(isl.dim_type.out)
    return sched.project_out(isl.dim_type.out, k + 1, n - k - 1).project_out(isl.dim_type.out, 0, k)


def _box_map(lower: list[isl.PwAff], sizes: list[int], domain: isl.Set, tid: str) -> isl.Map:
    """{ outer -> T[e] : lower(outer) <= e < lower(outer) + size } over `domain`."""
    ctx = domain.get_ctx()
    if not lower:
        return isl.Map.from_domain_and_range(domain, isl.Set(f"{{ {tid}[] }}", context=ctx))
    rel = None
    for pa in lower:
        m = isl.Map.from_pw_aff(pa.intersect_domain(domain))
        rel = m if rel is None else rel.flat_range_product(m)
    names = [f"l{d}" for d in range(len(lower))]
    outs = [f"e{d}" for d in range(len(lower))]
    cons = " and ".join(f"{lo} <= {e} < {lo} + {s}" for lo, e, s in zip(names, outs, sizes))
    shift = isl.Map(f"{{ [{', '.join(names)}] -> {tid}[{', '.join(outs)}] : {cons} }}", context=ctx)
    return rel.apply_range(shift)

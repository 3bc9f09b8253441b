"""Memory promotion: at a promotion mark, a tensor whose per-iteration footprint is a small
box is kept in a local buffer (register/stack); copies in and out are added only where
values flow across the mark, and a tensor that never leaves its local buffers is never
allocated in memory at all."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import islpy as isl
import numpy as np

from akg.graph.compute.expr import Tensor
from akg.polyhedral.model import PolyModel
from akg.polyhedral.tree import MARK_PROMOTE

log = logging.getLogger(__name__)

DEFAULT_BUDGET = 16 * 1024  # bytes per promoted buffer


@dataclass(eq=False)
class Promotion:
    mark: str
    tensor: Tensor
    lower: list[isl.PwAff]  # per tensor dim: first element of the box, over the prefix schedule
    sizes: tuple[int, ...]
    copy_in: bool
    copy_out: bool
    guard: bool  # the box can reach outside the tensor: copies check bounds
    accesses: isl.UnionMap | None = None  # statement instance -> element, under the mark


@dataclass(eq=False)
class PromotionPlan:
    by_mark: dict[str, list[Promotion]] = field(default_factory=dict)
    local_only: set[Tensor] = field(default_factory=set)  # intermediates never stored globally


def _marks(schedule: isl.Schedule) -> list[isl.ScheduleNode]:
    out = []

    def visit(node):
        if node.get_type() == isl.schedule_node_type.mark and \
                node.mark_get_id().get_name().startswith(MARK_PROMOTE + "."):
            out.append(node)
        for k in range(node.n_children()):
            visit(node.child(k))

    visit(schedule.get_root())
    return out


def _tensor_maps(model: PolyModel, umap: isl.UnionMap, tid: str) -> isl.UnionMap:
    out = isl.UnionMap.empty(umap.get_space())
    for m in _maps(umap):
        if m.get_tuple_name(isl.dim_type.out) == tid:
            out = out.union(isl.UnionMap.from_map(m))
    return out


def _flow(model: PolyModel, writes: isl.UnionMap, reads: isl.UnionMap) -> isl.UnionMap:
    info = isl.UnionAccessInfo.from_sink(reads).set_must_source(writes)
    info = info.set_schedule_map(model.original_schedule())
    return info.compute_flow().get_may_dependence()


def box_lower(footprint: isl.Map) -> list[isl.PwAff]:
    """First element of the box hull, per tensor dim, as a function of the footprint's domain."""
    return [footprint.dim_min(d) for d in range(footprint.dim(isl.dim_type.out))]


def _box(footprint: isl.Map) -> tuple[list[isl.PwAff], list[int]] | None:
    lower, sizes = [], []
    for d in range(footprint.dim(isl.dim_type.out)):
        lo, hi = footprint.dim_min(d), footprint.dim_max(d)
        span = (hi - lo).max_val()
        if not span.is_int():
            return None
        lower.append(lo)
        sizes.append(int(span.to_python()) + 1)
    return lower, sizes


def _box_map(lower: list[isl.PwAff], sizes: list[int], space_domain: isl.Set, tid: str) -> isl.Map:
    """{ prefix -> T[e] : lower(prefix) <= e < lower(prefix) + size } over the prefix domain."""
    ctx = space_domain.get_ctx()
    if not lower:
        return isl.Map.from_domain_and_range(space_domain, isl.Set(f"{{ {tid}[] }}", context=ctx))
    rel = None
    for d, pa in enumerate(lower):
        m = isl.Map.from_pw_aff(pa.intersect_domain(space_domain))
        rel = m if rel is None else rel.flat_range_product(m)
    names = [f"l{d}" for d in range(len(lower))]
    outs = [f"e{d}" for d in range(len(lower))]
    cons = " and ".join(f"{l} <= {e} < {l} + {s}" for l, e, s in zip(names, outs, sizes))
    shift = isl.Map(f"{{ [{', '.join(names)}] -> {tid}[{', '.join(outs)}] : {cons} }}", context=ctx)
    return rel.apply_range(shift)


def _reused(node: isl.ScheduleNode, prefix: isl.UnionMap, accesses: isl.UnionMap) -> bool:
    """Do the loops below the mark touch some element more than once (within one iteration
    of the loops above)? Then a local copy saves memory traffic."""
    inner = node.get_subtree_schedule_union_map().intersect_domain(accesses.domain())
    if inner.is_empty():
        return False
    full = prefix.flat_range_product(inner)
    return not full.reverse().apply_range(accesses).is_injective()


def plan_promotions(model: PolyModel, schedule: isl.Schedule, budget: int = DEFAULT_BUDGET,
                    exclude: frozenset[str] = frozenset()) -> PromotionPlan:
    """Decide, for each promotion mark (innermost first, except those in `exclude`), which
    written tensors to keep local."""
    plan = PromotionPlan()
    marks = sorted((n for n in _marks(schedule) if n.mark_get_id().get_name() not in exclude),
                   key=lambda n: -n.get_tree_depth())
    if not marks:
        return plan
    outputs = {id(t) for t in model.program.outputs}
    writes, reads = model.writes(), model.reads()
    by_id = model.tensor_by_id()
    flows: dict[str, isl.UnionMap] = {}
    promoted_under: dict[str, list[isl.UnionSet]] = {}  # tensor id -> subtree domains
    all_clean: dict[str, bool] = {}
    for node in marks:
        name = node.mark_get_id().get_name()
        sub = node.get_domain()
        prefix = node.get_prefix_schedule_union_map().intersect_domain(sub)
        same = prefix.apply_range(prefix.reverse())
        sub_writes = writes.intersect_domain(sub)
        tids = sorted({m.get_tuple_name(isl.dim_type.out) for m in _maps(sub_writes)})
        for tid in tids:
            tensor = by_id[tid]
            if any(not d.intersect(sub).is_empty() for d in promoted_under.get(tid, [])):
                continue  # already local in a subtree of this one
            w_t = _tensor_maps(model, writes, tid)
            r_t = _tensor_maps(model, reads, tid)
            acc = w_t.union(r_t).intersect_domain(sub)
            if r_t.intersect_domain(sub).is_empty() or not _reused(node, prefix, acc):
                continue  # no element is touched twice below the mark: nothing to keep local
            footprint = _single(prefix.reverse().apply_range(acc))
            if footprint is None:
                continue
            box = _box(footprint)
            if box is None:
                continue
            lower, sizes = box
            nbytes = int(np.prod(sizes, dtype=np.int64)) * np.dtype(tensor.dtype).itemsize
            if nbytes > budget:
                log.debug("%s: %s not promoted at %s (%d bytes > %d)", model.program.name, tensor.name,
                          name, nbytes, budget)
                continue
            if tid not in flows:
                flows[tid] = _flow(model, w_t, r_t)
            flow = flows[tid]
            intra = flow.intersect(same)
            copy_in = not flow.intersect_range(sub).subtract(intra).is_empty()
            copy_out = id(tensor) in outputs or not flow.intersect_domain(sub).subtract(intra).is_empty()
            bounds = isl.Set(f"{{ {tid}[{', '.join(f'e{d}' for d in range(tensor.ndim))}] : "
                             + (" and ".join(f"0 <= e{d} < {n}" for d, n in enumerate(tensor.shape)) or "true")
                             + " }", context=model.ctx)
            prefix_domain = footprint.domain()
            boxed = _box_map(lower, sizes, prefix_domain, tid)
            guard = not boxed.range().is_subset(bounds)
            if copy_out:
                written = _single(prefix.reverse().apply_range(w_t.intersect_domain(sub)))
                if written is None or not written.is_equal(boxed.intersect_range(bounds)):
                    log.debug("%s: %s not promoted at %s (its writes do not fill the box)",
                              model.program.name, tensor.name, name)
                    continue
            plan.by_mark.setdefault(name, []).append(
                Promotion(name, tensor, lower, tuple(sizes), copy_in, copy_out, guard, acc))
            promoted_under.setdefault(tid, []).append(sub)
            all_clean[tid] = all_clean.get(tid, True) and not copy_in and not copy_out
    # an intermediate is local only when every statement touching it runs under one of its
    # promotions, none of which copies to or from memory
    for tid, clean in all_clean.items():
        tensor = by_id[tid]
        if not clean or id(tensor) in outputs:
            continue
        touching = writes.union(reads)
        users = _tensor_maps(model, touching, tid).domain()
        covered = promoted_under[tid][0]
        for d in promoted_under[tid][1:]:
            covered = covered.union(d)
        if users.is_subset(covered):
            plan.local_only.add(tensor)
    return plan


def _maps(umap: isl.UnionMap) -> list[isl.Map]:
    out: list[isl.Map] = []
    umap.foreach_map(out.append)
    return out


def _single(umap: isl.UnionMap) -> isl.Map | None:
    maps = _maps(umap)
    if len(maps) != 1:
        return None
    return maps[0].coalesce()

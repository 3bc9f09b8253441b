"""Scheduling, after isl: sibling reductions that read the same data in one loop.

A layer norm's backward reduces two rows of the same inputs, sum(dy * g) and
sum(dy * g * xhat), into two row statistics that depend on nothing of each other. isl keeps
them apart: a `set` node whose children each run a reduction's initialisation, its loop over
the row and what follows it (the statistic's scaling), since fusion is driven by the flow of
values and two reductions of one input share no value. Each row is then read twice.

Here such a set becomes one sequence: every child's statements before its loop, one loop
over the row running every reduction's update (in the children's order), then every child's
statements after it. The loops must have the same range, each child must be that simple
shape (filters of leaves around one one-member band over a leaf), and the updates must be of
one dtype and share a read tensor (otherwise fusing saves no load). The result is kept only when it respects the
dependences. Lowering turns the fused loop into one vector reduction of several accumulators
(`reduction_loops`)."""

from __future__ import annotations

import islpy as isl

from akg.polyhedral.deps import Dependences
from akg.polyhedral.model import PolyModel

_T = isl.schedule_node_type


def fuse_sibling_reductions(model: PolyModel, schedule: isl.Schedule, deps: Dependences) -> isl.Schedule:
    """The schedule with each set of sibling reductions over the same range fused into one loop
    (see the module doc); unchanged where there is none."""
    from akg.polyhedral.schedule import respects

    skip = 0
    while True:
        found = _fusible(schedule.get_root(), model, skip)
        if found is None:
            return schedule
        fused = _fuse(*found).get_schedule()
        if respects(fused, deps):
            schedule = fused
        else:
            skip += 1  # leave this one as it is


def _fusible(node: isl.ScheduleNode, model: PolyModel, skip: int):
    """(the set node, its parts) of the fusible set nodes below `node` after the first `skip`
    (depth first, parents first), or None."""
    found = []

    def visit(n: isl.ScheduleNode) -> bool:
        if n.get_type() == _T.set and (parts := _shape(n, model)) is not None:
            found.append((n, parts))
            if len(found) > skip:
                return True
        return any(visit(n.child(k)) for k in range(n.n_children()))

    return found[-1] if visit(node) else None


def _shape(node: isl.ScheduleNode, model: PolyModel) -> list[tuple[list, isl.ScheduleNode, list]] | None:
    """Per child of the set `node`: (its filters before the loop, the loop's band, its filters
    after), when every child has that shape, the loops have one member, one range, and their
    updates are reductions of one dtype that share a read tensor; else None."""
    parts, ranges, reads, dtypes = [], [], [], set()
    for k in range(node.n_children()):
        seq = node.child(k).child(0)
        if seq.get_type() != _T.sequence:
            return None
        kids = [seq.child(j) for j in range(seq.n_children())]
        loops = [j for j, f in enumerate(kids) if f.child(0).get_type() == _T.band]
        if len(loops) != 1 or any(f.child(0).get_type() != _T.leaf for j, f in enumerate(kids) if j != loops[0]):
            return None
        band = kids[loops[0]].child(0)
        if band.band_n_member() != 1 or band.child(0).get_type() != _T.leaf:
            return None
        names = []
        band.get_domain().foreach_set(lambda s: names.append(s.get_tuple_name()))
        stmts = [model.statement(n) for n in names]
        if any(s.role != "update" or s.op.reduce is None for s in stmts):
            return None
        dtypes.update(s.op.output.dtype for s in stmts)
        ranges.append(band.band_get_partial_schedule_union_map().intersect_domain(band.get_domain()).range())
        reads.append({a.tensor.name for s in stmts for a in s.reads} - {s.write.tensor.name for s in stmts})
        parts.append(([f.filter_get_filter() for f in kids[:loops[0]]], band,
                      [f.filter_get_filter() for f in kids[loops[0] + 1:]]))
    if len(parts) < 2 or len(dtypes) != 1 or any(not r.is_equal(ranges[0]) for r in ranges[1:]):
        return None
    if not set.intersection(*reads):
        return None
    return parts


def _fuse(node: isl.ScheduleNode, parts) -> isl.ScheduleNode:
    """The set `node` replaced by: the children's filters before their loops, one loop over
    every child's updates, the filters after (`parts`: see `_shape`)."""
    ctx = node.get_ctx()
    before = [f for pre, _, _ in parts for f in pre]
    after = [f for _, _, post in parts for f in post]
    bands = [band for _, band, _ in parts]
    loop_domain = bands[0].get_domain()
    member = bands[0].band_get_partial_schedule()
    for band in bands[1:]:
        loop_domain = loop_domain.union(band.get_domain())
        member = member.union_add(band.band_get_partial_schedule())
    permutable = all(band.band_get_permutable() for band in bands)
    coincident = all(band.band_member_get_coincident(0) for band in bands)
    seq = node.cut().insert_sequence(_list(ctx, [*before, loop_domain, *after]))
    loop = seq.child(len(before)).child(0).insert_partial_schedule(member)
    loop = loop.band_set_permutable(int(permutable)).band_member_set_coincident(0, int(coincident))
    return loop.child(0).insert_sequence(_list(ctx, [band.get_domain() for band in bands]))


def _list(ctx, sets) -> isl.UnionSetList:
    out = isl.UnionSetList.alloc(ctx, len(sets))
    for s in sets:
        out = out.add(s)
    return out

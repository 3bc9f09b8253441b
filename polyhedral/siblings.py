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
(`reduction_loops`).

The same two reductions can also come as steps of one sequence, when a statement after them
uses both: the one-read statistics of a layer norm (`akg.graph.moments`) reduce a row to the
sum of its shifted values and to the sum of their squares, and the variance needs both, so isl
orders them one after the other (the second inside a set with what only it feeds). A sequence
whose subtree is only such steps (leaves, and one band over a leaf each, possibly nested in
sets and sequences) becomes: the steps that those loops do not feed, one loop over their
updates, the steps after; kept, as above, only when the dependences hold (a reduction
that reads another's result, like a softmax's sum of exponentials of the row minus its
maximum, stays where it is)."""

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
        node, parts = found
        fused = (_fuse(node, parts) if node.get_type() == _T.set else _fuse_steps(node, parts, model)).get_schedule()
        if respects(fused, deps):
            schedule = fused
        else:
            skip += 1  # leave this one as it is


def _fusible(node: isl.ScheduleNode, model: PolyModel, skip: int):
    """(the set node, its parts) of the fusible set nodes below `node` after the first `skip`
    (depth first, parents first), or None."""
    found = []

    def visit(n: isl.ScheduleNode) -> bool:
        kind = n.get_type()
        parts = _shape(n, model) if kind == _T.set else _steps(n, model) if kind == _T.sequence else None
        if parts is not None:
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
        stmts = _statements_of(band.get_domain(), model)
        if any(s.role != "update" or s.op.reduce is None for s in stmts):
            return None
        dtypes.update(s.op.output.dtype for s in stmts)
        ranges.append(_range(band))
        reads.append(_reads(stmts))
        parts.append(([f.filter_get_filter() for f in kids[:loops[0]]], band,
                      [f.filter_get_filter() for f in kids[loops[0] + 1:]]))
    if len(parts) < 2 or len(dtypes) != 1 or any(not r.is_equal(ranges[0]) for r in ranges[1:]):
        return None
    if not set.intersection(*reads):
        return None
    return parts


def _range(band: isl.ScheduleNode) -> isl.UnionSet:
    return band.band_get_partial_schedule_union_map().intersect_domain(band.get_domain()).range()


def _reads(stmts) -> set[str]:
    return {a.tensor.name for s in stmts for a in s.reads} - {s.write.tensor.name for s in stmts}


def _flat(node: isl.ScheduleNode) -> list[tuple[isl.UnionSet, isl.ScheduleNode | None]] | None:
    """The steps of the sequence or set `node` in order, through nested sequences and sets:
    (the statements, the band over them or None for a leaf); None when a step is any other
    shape (a band over more than a leaf, a mark, ...)."""
    steps = []
    for k in range(node.n_children()):
        f = node.child(k)
        below = f.child(0)
        kind = below.get_type()
        if kind == _T.leaf:
            steps.append((f.filter_get_filter(), None))
        elif kind == _T.band and below.child(0).get_type() == _T.leaf:
            steps.append((f.filter_get_filter(), below))
        elif kind in (_T.sequence, _T.set):
            inner = _flat(below)
            if inner is None:
                return None
            steps.extend(inner)
        else:
            return None
    return steps


def _steps(node: isl.ScheduleNode, model: PolyModel):
    """For a sequence `node` of flat steps (`_flat`) with two or more reduction loops that share
    a read (one member, one range, one dtype): (the steps, the indices of those loops); else
    None."""
    steps = _flat(node)
    if steps is None:
        return None
    candidates = []
    for i, (_, band) in enumerate(steps):
        if band is None or band.band_n_member() != 1:
            continue
        stmts = _statements_of(band.get_domain(), model)
        if any(s.role != "update" or s.op.reduce is None for s in stmts):
            continue
        dtypes = {s.op.output.dtype for s in stmts}
        if len(dtypes) == 1:
            candidates.append((i, dtypes.pop(), _range(band), _reads(stmts)))
    best: list[int] = []
    for _, dtype, range_, reads in candidates:  # the largest group that fits together
        group = [i for i, d, r, rd in candidates if d == dtype and r.is_equal(range_) and rd & reads]
        if len(group) > len(best):
            best = group
    if len(best) < 2:
        return None
    return steps, best


def _read(step, model: PolyModel) -> set[str]:
    return {a.tensor.name for s in _statements_of(step[0], model) for a in s.reads}


def _written(step, model: PolyModel) -> set[str]:
    return {s.write.tensor.name for s in _statements_of(step[0], model)}


def _statements_of(domain: isl.UnionSet, model: PolyModel) -> list:
    names: list[str] = []
    domain.foreach_set(lambda s: names.append(s.get_tuple_name()))
    return [model.statement(n) for n in names]


def _fuse(node: isl.ScheduleNode, parts) -> isl.ScheduleNode:
    """The set `node` replaced by: the children's filters before their loops, one loop over
    every child's updates, the filters after (`parts`: see `_shape`)."""
    before = [f for pre, _, _ in parts for f in pre]
    after = [f for _, _, post in parts for f in post]
    bands = [band for _, band, _ in parts]
    seq = node.cut().insert_sequence(_list(node.get_ctx(), [*before, _domain(bands), *after]))
    return _fused_loop(seq.child(len(before)).child(0), bands)


def _domain(bands: list[isl.ScheduleNode]) -> isl.UnionSet:
    out = bands[0].get_domain()
    for band in bands[1:]:
        out = out.union(band.get_domain())
    return out


def _fused_loop(leaf: isl.ScheduleNode, bands: list[isl.ScheduleNode]) -> isl.ScheduleNode:
    """At `leaf`, one loop running the updates of every one-member band of `bands` (a
    sequence of them in order under it), permutable and coincident where all of them are."""
    member = bands[0].band_get_partial_schedule()
    for band in bands[1:]:
        member = member.union_add(band.band_get_partial_schedule())
    loop = leaf.insert_partial_schedule(member)
    loop = loop.band_set_permutable(int(all(b.band_get_permutable() for b in bands)))
    loop = loop.band_member_set_coincident(0, int(all(b.band_member_get_coincident(0) for b in bands)))
    return loop.child(0).insert_sequence(_list(leaf.get_ctx(), [band.get_domain() for band in bands]))


def _fuse_steps(node: isl.ScheduleNode, parts, model: PolyModel) -> isl.ScheduleNode:
    """The sequence `node` replaced by the steps that the fused loops do not feed, one loop
    over the fused loops' updates, and the steps after it (`parts`: see `_steps`)."""
    steps, loops = parts
    # the steps between the loops go before the fused loop, unless they read (through other
    # such steps) what a fused loop writes
    later = set().union(*(_written(steps[i], model) for i in loops))
    before, after = [], []
    for i, st in enumerate(steps):
        if i in loops:
            continue
        if i > loops[-1] or (i > loops[0] and _read(st, model) & later):
            after.append(st)
            later |= _written(st, model)
        else:
            before.append(st)
    bands = [steps[i][1] for i in loops]
    order = [*before, (_domain(bands), None), *after]
    seq = node.cut().insert_sequence(_list(node.get_ctx(), [domain for domain, _ in order]))
    for k, (_, band) in enumerate(order):
        if band is not None:
            seq = _copy_band(seq.child(k).child(0), band).parent().parent()
    return _fused_loop(seq.child(len(before)).child(0), bands)


def _copy_band(leaf: isl.ScheduleNode, band: isl.ScheduleNode) -> isl.ScheduleNode:
    """`band` (its schedule, permutability and coincidence) inserted at `leaf`."""
    new = leaf.insert_partial_schedule(band.band_get_partial_schedule())
    new = new.band_set_permutable(int(band.band_get_permutable()))
    for m in range(band.band_n_member()):
        new = new.band_member_set_coincident(m, int(band.band_member_get_coincident(m)))
    return new


def _list(ctx, sets) -> isl.UnionSetList:
    out = isl.UnionSetList.alloc(ctx, len(sets))
    for s in sets:
        out = out.add(s)
    return out

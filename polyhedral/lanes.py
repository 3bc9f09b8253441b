"""Schedule-tree edits for spreading the statements of one outer band over the lanes of a
group of cooperating workers (a target's threads sharing a scratchpad): `pull_back` carries a
schedule over to a rewritten program's statements, and `lanes_in_program_order` replaces an
outer band by a band over its row dimensions whose rows run their statements in
program order, pass by pass, each pass with one member spread over the lanes and a mark
(a barrier) between passes. The target's recipe decides the marks; this module knows only
the tree."""

from __future__ import annotations

from dataclasses import dataclass

import islpy as isl

from akg.errors import ScheduleError
from akg.polyhedral.model import PolyModel
from akg.polyhedral.tree import insert_marks_on_members


@dataclass(frozen=True)
class LaneStatement:
    """A statement of a pass: `iters` iterators, some of which index the row;
    `lane` is the iterator spread over the lanes (its value mod the lane count; None: the
    statement runs in lane 0 only, and must then have no loop beyond the row: isl drops the
    constant lane member, and a loop left right below the lane mark would read as the lanes)."""

    name: str
    iters: int
    lane: int | None


@dataclass(frozen=True)
class LanePass:
    """Statements that run one after another in each lane, between two barriers; `after`,
    when given, is the mark that closes this pass instead of the usual one."""

    statements: tuple[LaneStatement, ...]
    after: str | None = None


def row_iterators(node: isl.ScheduleNode) -> tuple[int, ...]:
    """The iterators (positions, ascending) that coincident members of an outer band equal,
    each the same position in every statement below it: a band over them carries no
    dependence, so the rows they index may run apart, in any order (empty: none)."""
    mupa = node.band_get_partial_schedule()
    rows: list[int] = []
    for d in range(node.band_n_member()):
        if not node.band_member_get_coincident(d):
            continue
        which: set[int | None] = set()

        def check(pa: isl.PwAff) -> None:
            dom = pa.domain()
            for k in range(dom.dim(isl.dim_type.set)):
                ident = isl.PwAff.var_on_domain(isl.LocalSpace.from_space(dom.get_space()), isl.dim_type.set, k)
                if pa.is_equal(ident.intersect_domain(dom)):
                    which.add(k)
                    return
            which.add(None)

        mupa.get_at(d).foreach_pw_aff(check)
        if len(which) == 1 and None not in which and next(iter(which)) not in rows:
            rows.append(next(iter(which)))
    return tuple(sorted(rows))


def pull_back(schedule: isl.Schedule, model: PolyModel, targets: dict[str, tuple[str, int, int]]) -> isl.Schedule:
    """The schedule over `model`'s statements: statement S (of `model`) runs where statement
    `targets[S] = (T, k, z)` of the schedule ran at the instance given by S's first k
    iterators followed by z zeros (a renamed statement: its own iterators; a new one: the
    first instance of the row it belongs to)."""
    ctx = schedule.get_ctx()
    maps = isl.UnionMap.empty(isl.Space.params_alloc(ctx, 0))
    for s in model.statements:
        if s.name not in targets:
            raise ScheduleError(f"statement {s.name} has no place in the schedule it replaces")
        old, k, zeros = targets[s.name]
        names = [f"i{d}" for d in range(len(s.iters))]
        at = ", ".join(names[:k] + ["0"] * zeros)
        m = isl.Map(f"{{ {s.name}[{', '.join(names)}] -> {old}[{at}] }}", context=ctx)
        maps = maps.union(isl.UnionMap.from_map(m.intersect_domain(s.domain)))
    return schedule.pullback_union_pw_multi_aff(isl.UnionPwMultiAff.from_union_map(maps))


def _mupa(ctx, columns: list[dict[str, str]], stmts: dict[str, LaneStatement]) -> isl.MultiUnionPwAff:
    """A band from per-statement column expressions over the iterators i0, i1, ..."""
    parts = []
    for col in columns:
        pieces = []
        for name, expr in col.items():
            names = ", ".join(f"i{d}" for d in range(stmts[name].iters))
            pieces.append(f"{name}[{names}] -> [({expr})]")
        parts.append("{ " + "; ".join(pieces) + " }")
    return isl.MultiUnionPwAff(f"[{', '.join(parts)}]", context=ctx)


def lanes_in_program_order(node: isl.ScheduleNode, rows: tuple[int, ...], row_marks: list[str | None],
                           passes: list[LanePass], lanes: int, lane_mark: str,
                           between: str | None) -> isl.ScheduleNode:
    """Replace the outer band `node` (and all below it) by: a band over the iterators `rows`
    of every statement (one constant member when there are none), with `row_marks` on its
    members; below it the passes in sequence, each under a `between` mark (or the pass's own;
    the last pass none) and with its lane member (lane iterator mod `lanes`, 0 for a
    statement without one) under `lane_mark`; in a pass, the statements in sequence, each
    with a band over its other iterators in order (the lane iterator divided by `lanes` in
    its place). Legal when the row members carry no dependence (`row_iterators`) and the
    passes are in program order. Returns the new row band."""
    ctx = node.get_ctx()
    stmts = {s.name: s for p in passes for s in p.statements}
    node = node.cut()
    node = node.delete() if node.get_type() == isl.schedule_node_type.band else node
    if rows:
        columns = [{n: f"i{d}" for n in stmts} for d in rows]
    else:
        columns = [{n: "0" for n in stmts}]
    band = node.insert_partial_schedule(_mupa(ctx, columns, stmts))
    depth = band.get_tree_depth()
    filters = isl.UnionSetList.alloc(ctx, len(passes))
    for p in passes:
        filters = filters.add(_filter(ctx, p.statements))
    seq = band.child(0).insert_sequence(filters) if len(passes) > 1 else band.child(0)
    for k, p in enumerate(passes):
        leaf = seq.child(k).child(0) if len(passes) > 1 else seq
        after = (p.after or between) if k < len(passes) - 1 else None
        leaf = _pass_tree(ctx, leaf, p, stmts, rows, lanes, lane_mark, after)
        seq = leaf.ancestor(leaf.get_tree_depth() - (depth + 1))
    band = seq.ancestor(seq.get_tree_depth() - depth)
    return insert_marks_on_members(band, row_marks if rows else row_marks[:1])


def _filter(ctx, statements) -> isl.UnionSet:
    out = isl.UnionSet.empty(isl.Space.params_alloc(ctx, 0))
    for s in statements:
        names = ", ".join(f"i{d}" for d in range(s.iters))
        out = out.union(isl.UnionSet(f"{{ {s.name}[{names}] }}", context=ctx))
    return out


def _rest(s: LaneStatement, rows: tuple[int, ...], lanes: int) -> list[str]:
    out = []
    for d in (d for d in range(s.iters) if d not in rows):
        if d == s.lane:
            out.append(f"floor(i{d} / {lanes})")
        else:
            out.append(f"i{d}")
    return out


def _pass_tree(ctx, leaf: isl.ScheduleNode, p: LanePass, stmts, rows: tuple[int, ...], lanes: int, lane_mark: str,
               after: str | None) -> isl.ScheduleNode:
    """Build one pass at `leaf`; returns a node inside it."""
    if len(p.statements) > 1:
        filters = isl.UnionSetList.alloc(ctx, len(p.statements))
        for s in p.statements:
            filters = filters.add(_filter(ctx, [s]))
        top = leaf.insert_sequence(filters)
        for k, s in enumerate(p.statements):
            rest = _rest(s, rows, lanes)
            inner = top.child(k).child(0)
            if rest:
                inner = inner.insert_partial_schedule(_mupa(ctx, [{s.name: e} for e in rest], stmts))
            top = inner.ancestor(inner.get_tree_depth() - top.get_tree_depth())
    else:
        (s,) = p.statements
        rest = _rest(s, rows, lanes)
        top = leaf.insert_partial_schedule(_mupa(ctx, [{s.name: e} for e in rest], stmts)) if rest else leaf
    lane = {s.name: (f"i{s.lane} mod {lanes}" if s.lane is not None else "0") for s in p.statements}
    band = top.insert_partial_schedule(_mupa(ctx, [lane], stmts))
    band = band.insert_mark(isl.Id(lane_mark, context=ctx))
    if after:
        band = band.insert_mark(isl.Id(after, context=ctx))
    return band


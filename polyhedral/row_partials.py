"""Scheduling, after isl: partial reductions over blocks of a tensor's rows (column sums split
by `graph/compute/lower.split_column_reductions`) moved into the band that walks those rows, so
that each row is read once for the row-wise work and the column sums together.

isl leaves such partials in a component of their own (they share no dependence with the row
band, only the rows they read) and schedules them column by column. Here the row band's outer
member also schedules each partial update at the row it reads (block * rows + r) and its
initialisation at the first row of its block; below the band, after the row's own passes, a
loop over the columns updates the partial sums. The band then carries the partials' sums from
row to row: it runs in parallel only in chunks of whole blocks (`BandInfo.blocks`, read by the
mapping). The final sums over the blocks stay where isl put them, after the band.
"""

from __future__ import annotations

import islpy as isl

from akg.polyhedral.deps import Dependences
from akg.polyhedral.model import PolyModel, Statement, linear_coefficients
from akg.polyhedral.bands import affs_by_statement


def _row_of(stmt: Statement) -> tuple[str, int] | None:
    """A partial update over one block of rows: its first iterator is the block, its last the
    row inside the block (a reduction iterator of extent `rows`), and some read indexes rows
    as block * rows + row. Gives (the tensor it reads that way, rows)."""
    if stmt.role != "update" or len(stmt.iters) < 3 or not stmt.iters[-1].reduce:
        return None
    block, row = stmt.iters[0], stmt.iters[-1]
    if sum(1 for v in stmt.iters if v.reduce) != 1:
        return None
    for access in stmt.reads:
        if len(access.indices) < 2 or not access.exact:
            continue
        lead = linear_coefficients(access.indices[0])
        rest = [linear_coefficients(e) for e in access.indices[1:]]
        if lead == {block: row.extent, row: 1} and all(c is not None and block not in c and row not in c
                                                        for c in rest):
            return access.tensor.name, row.extent
    return None


def _walked(stmt: Statement, member: isl.Aff, tensors: set[str]) -> set[str]:
    """Those of `tensors` whose rows (first index) the band member of `stmt` walks."""
    if member is None or not stmt.iters:
        return set()
    coeffs = [int(member.get_coefficient_val(isl.dim_type.in_, i).to_python()) for i in range(len(stmt.iters))]
    if coeffs[0] != 1 or any(coeffs[1:]) or int(member.get_constant_val().to_python()) != 0:
        return set()
    return {a.tensor.name for a in (*stmt.reads, stmt.write)
            if a.tensor.name in tensors and a.indices and a.indices[0] is stmt.iters[0]}


def _union(ctx, sets) -> isl.UnionSet:
    out = isl.UnionSet.empty(isl.Space.params_alloc(ctx, 0))
    for s in sets:
        out = out.union(isl.UnionSet.from_set(s))
    return out


def _statements(filt: isl.UnionSet) -> list[str]:
    names = []
    filt.foreach_set(lambda s: names.append(s.get_tuple_name()))
    return names


def fuse_row_partials(model: PolyModel, schedule: isl.Schedule, deps: Dependences) -> isl.Schedule:
    """The schedule with the row-block partials moved into the band that walks their rows
    (unchanged when there is none, or when the result would break a dependence)."""
    from akg.polyhedral.schedule import respects

    partials = {s.name: r for s in model.statements if (r := _row_of(s)) is not None}
    if not partials:
        return schedule
    tensors = {t for t, _ in partials.values()}
    for band in _outer_bands(schedule.get_root()):
        names = _statements(band.get_domain())
        if any(n in partials or n.removesuffix("_init") in partials for n in names):
            continue
        affs = affs_by_statement(band.band_get_partial_schedule().get_at(0))
        walked = set().union(*(_walked(model.statement(n), affs.get(n), tensors) for n in names))
        chosen = [n for n, (t, _) in partials.items() if t in walked]
        if chosen:
            # the rows alone as the outer band (an elementwise op's [rows, columns] split)
            rows = band.band_split(1).get_schedule() if band.band_n_member() > 1 else schedule
            fused = _fuse(model, rows, names, chosen)
            if fused is not None and respects(fused, deps):
                return fused
    return schedule


def _outer_bands(node: isl.ScheduleNode) -> list[isl.ScheduleNode]:
    """The first band on each path from `node` down (below sets, sequences and filters)."""
    if node.get_type() == isl.schedule_node_type.band:
        return [node]
    return [b for k in range(node.n_children()) for b in _outer_bands(node.child(k))]


def _columns(ctx, domain: isl.UnionSet, entries: list[tuple[Statement, tuple[str, ...]]],
             order: tuple[isl.UnionSet, ...] = ()) -> isl.Schedule:
    """A schedule of `domain` with one band over the columns: per statement, the isl names of
    the iterators that are its columns (all statements have as many); `order`: groups of
    statements run one after the other in each iteration (a row's writes, then the sums that
    read them)."""
    n = len(entries[0][1])
    lst = isl.UnionPwAffList.alloc(ctx, n)
    for d in range(n):
        lst = lst.add(isl.UnionPwAff("{ " + "; ".join(
            f"{s.name}[{', '.join(f'i{k}' for k in range(len(s.iters)))}] -> [({cols[d]})]" for s, cols in entries)
            + " }", context=ctx))
    mupa = isl.MultiUnionPwAff.from_union_pw_aff_list(isl.Space.set_alloc(ctx, 0, n), lst)
    node = isl.Schedule.from_domain(domain).get_root().child(0).insert_partial_schedule(mupa)
    node = node.band_set_permutable(1)
    for d in range(n):
        node = node.band_member_set_coincident(d, 1)
    if order:
        filters = isl.UnionSetList.alloc(ctx, len(order))
        for group in order:
            filters = filters.add(group)
        node = node.child(0).insert_sequence(filters)
    return node.get_schedule()


def _last_pass(model: PolyModel, rows: isl.Schedule, tensors: set[str], n_cols: int) -> list[isl.UnionSet] | None:
    """The statements of the row band's last pass, in the order they run in its body, when it
    is one band over the columns of a row that `tensors` are read or written along
    (`S[i0, i1] -> [(i1)]`): the updates can join it, after them."""
    top = _below_filters(rows.get_root().child(0))
    if top.get_type() == isl.schedule_node_type.band:  # one pass
        band = top
    elif top.get_type() == isl.schedule_node_type.sequence:
        band = _below_filters(top.child(top.n_children() - 1))
    else:
        return None
    if band.get_type() != isl.schedule_node_type.band or band.band_n_member() != n_cols:
        return None
    statements = band.get_domain()
    body = band.child(0)
    if body.get_type() == isl.schedule_node_type.leaf:
        groups = [statements]
    elif body.get_type() == isl.schedule_node_type.sequence and all(
            body.child(k).child(0).get_type() == isl.schedule_node_type.leaf for k in range(body.n_children())):
        groups = [body.child(k).filter_get_filter().intersect(statements) for k in range(body.n_children())]
    else:
        return None
    members = [affs_by_statement(band.band_get_partial_schedule().get_at(d)) for d in range(n_cols)]
    aligned = False  # some statement reads or writes the rows of `tensors` element by element
    for name in _statements(statements):
        stmt = model.statement(name)
        if len(stmt.iters) != n_cols + 1:
            return None
        aligned = aligned or any(a.tensor.name in tensors and list(a.indices) == list(stmt.iters)
                                 for a in (*stmt.reads, stmt.write))
        for d, member in enumerate(members):
            aff = member.get(name)
            if aff is None or [int(aff.get_coefficient_val(isl.dim_type.in_, k).to_python())
                               for k in range(n_cols + 1)] != [int(k == d + 1) for k in range(n_cols + 1)]:
                return None
    return groups if aligned else None


def _below_filters(node: isl.ScheduleNode) -> isl.ScheduleNode:
    """The first node below `node` that is not a filter or a set or sequence of one child."""
    while (node.get_type() == isl.schedule_node_type.filter
           or node.get_type() in (isl.schedule_node_type.set, isl.schedule_node_type.sequence)
           and node.n_children() == 1):
        node = node.child(0)
    return node


def _fuse(model: PolyModel, schedule: isl.Schedule, row_names: list[str], chosen: list[str]) -> isl.Schedule | None:
    ctx = model.ctx
    stmts = [model.statement(n) for n in chosen]
    inits = [model.statement(f"{n}_init") for n in chosen]
    widths = {len(s.iters) - 2 for s in stmts}
    if len(widths) != 1:
        return None
    n_cols = widths.pop()
    row_dom = _union(ctx, [model.statement(n).domain for n in row_names])
    update_dom = _union(ctx, [s.domain for s in stmts])
    init_dom = _union(ctx, [s.domain for s in inits])
    rest_dom = model.domain.subtract(row_dom).subtract(update_dom).subtract(init_dom)
    # the row band's own subtree, without its band
    inner = schedule.intersect_domain(row_dom).get_root().child(0)
    while inner.get_type() != isl.schedule_node_type.band:
        if inner.n_children() != 1:
            return None
        inner = inner.child(0)
    if inner.band_n_member() != 1:
        return None
    row_member = inner.band_get_partial_schedule()
    rows = inner.delete().get_schedule()
    # below the band: the row's passes, the partials' initialisation (first row of a block),
    # and their updates, in the row's last pass when that is a loop over the same columns
    names = [f"i{d}" for d in range(n_cols + 2)]
    updates = [(s, tuple(names[1:n_cols + 1])) for s in stmts]
    init_sched = _columns(ctx, init_dom, [(s, tuple(names[1:n_cols + 1])) for s in inits])
    groups = _last_pass(model, rows, {t for s in stmts for t, _ in [_row_of(s)]}, n_cols)
    if groups is not None:
        last = _union(ctx, [])
        for group in groups:
            last = last.union(group)
        joined = [(model.statement(n), tuple(names[1:n_cols + 1])) for n in _statements(last)]
        tail = init_sched.sequence(_columns(ctx, last.union(update_dom), joined + updates, (*groups, update_dom)))
        rest = row_dom.subtract(last)
        below = tail if rest.is_empty() else rows.intersect_domain(rest).sequence(tail)
    else:
        below = rows.sequence(init_sched.sequence(_columns(ctx, update_dom, updates)))
    pieces = []
    for s, init in zip(stmts, inits):
        block = s.iters[-1].extent
        pieces.append(f"{s.name}[{', '.join(names)}] -> [({block} * i0 + i{n_cols + 1})]")
        pieces.append(f"{init.name}[{', '.join(names[:n_cols + 1])}] -> [({block} * i0)]")
    upa = row_member.get_at(0).union_add(isl.UnionPwAff(f"{{ {'; '.join(pieces)} }}", context=ctx))
    mupa = isl.MultiUnionPwAff.from_union_pw_aff_list(row_member.get_space(),
                                                      isl.UnionPwAffList.alloc(ctx, 1).add(upa))
    top = below.get_root().child(0).insert_partial_schedule(mupa)
    # coincident in chunks of whole blocks only: `BandInfo.blocks` tells the mapping
    fused = top.band_set_permutable(1).band_member_set_coincident(0, 1).get_schedule()
    return fused if rest_dom.is_empty() else fused.sequence(schedule.intersect_domain(rest_dom))

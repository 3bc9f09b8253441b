"""Schedule-tree edits: the steps a target's mapping recipe applies to the bands of a schedule
(permute, tile, split, mark, sink below inner bands, distribute over a sequence, run a reduction
in blocks), and the marks they leave for code generation. The recipe, which decides the edits,
lives with its target (`schedules/<kind>.py`); what it reads of the bands is `polyhedral.bands`;
the isl objects stay here, and a recipe handles tree nodes only through these functions."""

from __future__ import annotations

import islpy as isl

from akg.errors import LoweringError
from akg.polyhedral.bands import (affs_by_statement, count_passes, inner_bands, is_node, last_index_step,
                                  member_bounds, member_contiguity, member_extents, moves_last_index, navigate,
                                  outer_band_paths, reduction_band, statement_names)
from akg.polyhedral.model import PolyModel, linear_coefficients

MARK_PARALLEL = "parallel"
MARK_VECTORIZE = "vectorize"
MARK_UNROLL = "unroll"
MARK_PROMOTE = "promote"  # "promote.<band>.<level>[.vlast]": memory promotion point
VECTOR_LAST = "vlast"  # a promote mark's flag: written boxes laid out with the vector loop's dim last
MARK_PACK = "pack"  # "pack.<band>.<lanes>": read-only operands copied into a blocked local layout
MARK_PREFETCH = "prefetch"  # "prefetch.<distance>[.nest]": the loop below prefetches `distance` iterations ahead
PREFETCH_NEST = "nest"  # a prefetch mark's flag: spread over the loops of the body (a reduction's block)
# "recompute.<statement>": the statement (a padded copy of an input, `BandInfo.producers`) runs
# no loop nest of its own; below the mark, each iteration of the loops around it computes the
# box of the statement's tensor that the code below reads into a local buffer
# (`polyhedral.promote.Promoter`), so the tensor never goes through memory
MARK_RECOMPUTE = "recompute"


# --- primitives ---------------------------------------------------------------------------------


def _band_flags(node: isl.ScheduleNode) -> tuple[list[bool], bool]:
    return ([bool(node.band_member_get_coincident(d)) for d in range(node.band_n_member())],
            bool(node.band_get_permutable()))


def _set_flags(node: isl.ScheduleNode, coincident, permutable: bool) -> isl.ScheduleNode:
    node = node.band_set_permutable(int(permutable))
    for d, c in enumerate(coincident):
        node = node.band_member_set_coincident(d, int(c))
    return node


def permute_band(node: isl.ScheduleNode, order: tuple[int, ...]) -> isl.ScheduleNode:
    """Reorder the members of a permutable band."""
    coincident, permutable = _band_flags(node)
    mupa = node.band_get_partial_schedule()
    upas = [mupa.get_at(d) for d in order]
    space = mupa.get_space()
    lst = isl.UnionPwAffList.alloc(node.get_ctx(), len(upas))
    for upa in upas:
        lst = lst.add(upa)
    new = isl.MultiUnionPwAff.from_union_pw_aff_list(space, lst)
    node = node.delete().insert_partial_schedule(new)
    return _set_flags(node, [coincident[d] for d in order], permutable)


def shift_to_origin(node: isl.ScheduleNode) -> isl.ScheduleNode:
    """Shift each member of a band so that its smallest value over the band's domain is 0 (a
    skewed schedule's member may start below or above it): tiles then start where the loop
    starts, so a band of extent e tiled by b has ceil(e / b) tiles. Legal for any band (a
    constant per member keeps every dependence's direction)."""
    bounds = member_bounds(node)
    lows = [lo for lo, _ in bounds or ()]
    if not any(lows):
        return node
    coincident, permutable = _band_flags(node)
    mupa = node.band_get_partial_schedule()
    shift = mupa
    for d, lo in enumerate(lows):
        domain = mupa.get_union_pw_aff(d).domain()
        shift = shift.set_union_pw_aff(d, isl.UnionPwAff.val_on_domain(domain, isl.Val.int_from_si(node.get_ctx(), -lo)))
    return _set_flags(node.band_shift(shift), coincident, permutable)


def tile_band(node: isl.ScheduleNode, sizes: tuple[int, ...]) -> isl.ScheduleNode:
    """Tile a band; returns the tile band (its child is the point band)."""
    coincident, permutable = _band_flags(node)
    ctx = node.get_ctx()
    mv = isl.MultiVal(f"{{ [{', '.join(str(s) for s in sizes)}] }}", context=ctx)
    node = _set_flags(node.band_tile(mv), coincident, permutable)
    return _set_flags(node.child(0), coincident, permutable).parent()


def insert_marks_on_members(node: isl.ScheduleNode, marks: list[str | None]) -> isl.ScheduleNode:
    """Split a band into one band per member, with mark i above member i (None: no mark).
    Returns the node at the original position."""
    n = node.band_n_member()
    depth0 = node.get_tree_depth()
    for d in range(n):
        if d < n - 1:
            node = node.band_split(1)
        if marks[d]:
            node = node.insert_mark(isl.Id(marks[d], context=node.get_ctx())).child(0)
        if d < n - 1:
            node = node.child(0)
    return node.ancestor(node.get_tree_depth() - depth0)


def _insert_at_leaves(node: isl.ScheduleNode, mupa: isl.MultiUnionPwAff, coincident,
                      marks: list[str | None], reorder=None) -> isl.ScheduleNode:
    """Insert the band (mupa) right above every leaf below `node`; returns the node at the
    same position. `reorder(leaf)`: None, or the member order (and marks) of that leaf's copy."""
    kind = node.get_type()
    if kind == isl.schedule_node_type.leaf:
        band = node.insert_partial_schedule(mupa)
        band = _set_flags(band, coincident, True)
        changed = reorder(band) if reorder is not None else None
        if changed is not None:
            order, leaf_marks = changed
            band = permute_band(band, order)
            return insert_marks_on_members(band, leaf_marks)
        return insert_marks_on_members(band, marks)
    if kind in (isl.schedule_node_type.sequence, isl.schedule_node_type.set):
        for k in range(node.n_children()):
            node = _insert_at_leaves(node.child(k), mupa, coincident, marks, reorder).parent()
        return node
    if node.n_children() == 0:
        return node
    return _insert_at_leaves(node.child(0), mupa, coincident, marks, reorder).parent()


MIN_ROW_VECTOR = 4  # output elements along a row for an epilogue to take it as its vector loop
#                    (a power of two: 7-wide rows made 7-lane vectors, 2-3% slower at 28 px)


def _row_epilogue(model: PolyModel, marks: list[str | None]):
    """For `sink_below_inner`: the copy of a register tile above an epilogue (statements that
    only assign, e.g. a conv's batch norm, residual add and relu) whose vector member does not
    walk the last index of what the epilogue writes while another member does (a conv
    vectorised over output channels, writing NCHW rows): that member becomes the vector loop
    and the old vector member the outermost, serial, so the epilogue stores (and reads its
    residual) along rows instead of scattering each vector of channels."""
    if not marks or marks[-1] != MARK_VECTORIZE:
        return None

    def reorder(band: isl.ScheduleNode):
        names = statement_names(band)
        stmts = [model.statement(n) for n in names]
        if not stmts or any(s.role != "assign" or not s.write.exact for s in stmts):
            return None
        mupa = band.band_get_partial_schedule()
        n = band.band_n_member()
        extents = member_extents(band)
        members = [affs_by_statement(mupa.get_at(d)) for d in range(n)]
        rows = [d for d in range(n - 1)
                if extents[d] >= MIN_ROW_VECTOR and extents[d] & (extents[d] - 1) == 0 and all(
                    m is not None and last_index_step(s, s.write, m) == 1
                    for s in stmts for m in [members[d].get(s.name)])]
        vector_walks_rows = any(members[n - 1].get(s.name) is not None
                                and last_index_step(s, s.write, members[n - 1][s.name]) == 1 for s in stmts)
        if not rows or vector_walks_rows:
            return None
        row = rows[-1]
        order = (n - 1, *(d for d in range(n - 1) if d != row), row)
        leaf_marks = [None, *(marks[d] for d in range(n - 1) if d != row), MARK_VECTORIZE]
        return order, leaf_marks

    return reorder


def _distribute(node: isl.ScheduleNode, coincident) -> isl.ScheduleNode:
    """Move a band whose child is a sequence below the sequence: one copy of the band under
    each of its filters. Legal when the band carries no dependence (all members coincident)."""
    mupa = node.band_get_partial_schedule()
    node = node.delete()  # now the sequence
    for k in range(node.n_children()):
        child = node.child(k).child(0)  # below the filter
        band = _set_flags(child.insert_partial_schedule(mupa), coincident, True)
        node = band.parent().parent()
    return node


def _mark(node: isl.ScheduleNode, name: str) -> isl.ScheduleNode:
    """Insert a mark above node; returns the node below the mark."""
    return node.insert_mark(isl.Id(name, context=node.get_ctx())).child(0)


def register_marks(coincident: list[bool], vectorize: bool, unroll: bool, innermost: bool) -> list[str | None]:
    marks: list[str | None] = [MARK_UNROLL if unroll else None] * len(coincident)
    if innermost and vectorize and coincident and coincident[-1]:
        marks[-1] = MARK_VECTORIZE
    return marks


def map_outer_bands(model: PolyModel, schedule: isl.Schedule, apply_band) -> isl.Schedule:
    """The schedule with every outer band edited by `apply_band(node, index) -> node` (any
    node of the edited tree), later bands first so that the paths of earlier ones stay valid."""
    ctx = model.ctx
    ctx.set_tile_scale_tile_loops(0)
    ctx.set_tile_shift_point_loops(1)
    paths = outer_band_paths(schedule)
    try:
        for index in reversed(range(len(paths))):
            node = navigate(schedule, paths[index])
            schedule = apply_band(node, index).get_schedule()
    except isl.Error as e:
        raise LoweringError(f"{model.program.name}: code generation failed in isl: {e}") from e
    return schedule


def n_outer_bands(schedule: isl.Schedule) -> int:
    return len(outer_band_paths(schedule))


MAX_INNER_VECTOR = 64


def vectorize_inner_bands(model: PolyModel, schedule: isl.Schedule) -> isl.Schedule:
    """A short parallel loop inside the outer band whose accesses are contiguous along it (at
    least as much as along the reduction below it), and that sits above a reduction (split
    max/min reductions: lanes above the long loop), moves below that reduction and becomes
    the vector loop."""
    for _ in range(32):
        for node in all_bands(schedule):
            if _marked(node) or node.band_n_member() != 1 or not node.band_member_get_coincident(0):
                continue
            inner = inner_bands(node.child(0))
            if not inner or all(b.band_member_get_coincident(d) for b in inner for d in range(b.band_n_member())):
                continue
            if member_extents(node)[0] > MAX_INNER_VECTOR:
                continue
            # only a loop that streams at least as much data as the reduction below it: the
            # few rows of a row sum write contiguously but read strided (a gather per vector)
            here = member_contiguity(model, node)[0]
            if here == 0 or here < max((max(member_contiguity(model, b), default=0) for b in inner), default=0):
                continue
            mupa = node.band_get_partial_schedule()
            schedule = _insert_at_leaves(node.delete(), mupa, [True], [MARK_VECTORIZE]).get_schedule()
            break
        else:
            return schedule
    return schedule


def strip_inner_vectors(model: PolyModel, schedule: isl.Schedule, lanes: int) -> isl.Schedule:
    """Every pass over a row inside an outer band (an unmarked one-member coincident band
    with no band below it, spanning at least two vectors: softmax's exponentials, a layer
    norm's output) whose accesses all move contiguously along it or not at all becomes a
    loop over vectors around a vector loop of `lanes`. Explicit vectors rather than LLVM's
    loop vectoriser, which gives up on a loop with a fence (`intrinsics.fast_exp`) or a
    prefetch in it, and leaves a serial loop to spread a band's prefetches over."""
    if lanes < 2:
        return schedule
    for _ in range(64):
        for node in all_bands(schedule):
            if not _row_pass(model, node, lanes):
                continue
            tiled = tile_band(node, (lanes,))
            schedule = _mark(tiled.child(0), MARK_VECTORIZE).get_schedule()
            break
        else:
            return schedule
    return schedule


def _row_pass(model: PolyModel, node: isl.ScheduleNode, lanes: int) -> bool:
    if _marked(node) or node.band_n_member() != 1 or not node.band_member_get_coincident(0):
        return False
    if inner_bands(node.child(0)) or not _has_band_above(node) or member_extents(node)[0] < 2 * lanes:
        return False
    member = affs_by_statement(node.band_get_partial_schedule().get_at(0))
    for name in statement_names(node):
        stmt, aff = model.statement(name), member.get(name)
        if aff is None:
            return False
        for acc in [stmt.write, *stmt.reads]:
            if acc.tensor.ndim and not (moves_last_index(stmt, acc, aff) or _invariant(stmt, acc, aff)):
                return False
    return True


def _invariant(stmt, access, member: isl.Aff) -> bool:
    """Does no index of the access move with the schedule member's iterators?"""
    moving = {stmt.iters[i] for i in range(len(stmt.iters))
              if int(member.get_coefficient_val(isl.dim_type.in_, i).to_python()) != 0}
    per_index = [linear_coefficients(e) for e in access.indices]
    return all(c is not None and not (moving & set(c)) for c in per_index)


def _has_band_above(node: isl.ScheduleNode) -> bool:
    while node.has_parent():
        node = node.parent()
        if is_node(node, isl.schedule_node_type.band):
            return True
    return False


def _marked(node: isl.ScheduleNode) -> bool:
    """Is the band directly under a mark (already mapped)?"""
    return node.has_parent() and node.parent().get_type() == isl.schedule_node_type.mark


def all_bands(schedule: isl.Schedule) -> list[isl.ScheduleNode]:
    """Every band node of the tree, parents before children."""
    out = []

    def visit(n):
        if n.get_type() == isl.schedule_node_type.band:
            out.append(n)
        for k in range(n.n_children()):
            visit(n.child(k))

    visit(schedule.get_root())
    return out


# --- what a recipe asks of a node ---------------------------------------------------------------


def band_members(node: isl.ScheduleNode) -> int:
    return node.band_n_member()


def band_coincident(node: isl.ScheduleNode) -> list[bool]:
    return _band_flags(node)[0]


def band_extents(node: isl.ScheduleNode) -> tuple[int, ...]:
    return member_extents(node)


def child(node: isl.ScheduleNode) -> isl.ScheduleNode:
    return node.child(0)


def parent(node: isl.ScheduleNode, levels: int = 1) -> isl.ScheduleNode:
    for _ in range(levels):
        node = node.parent()
    return node


def is_innermost(node: isl.ScheduleNode) -> bool:
    """Is the band's child a leaf (no loops or sequence below it)?"""
    return node.child(0).get_type() == isl.schedule_node_type.leaf


def passes_below(node: isl.ScheduleNode) -> int:
    """Passes (loop nests in sequence) right below the band (see `BandInfo.passes`)."""
    return count_passes(node.child(0))


def split_band(node: isl.ScheduleNode, first: int) -> isl.ScheduleNode:
    """Split a band after its first `first` members; returns the outer part."""
    return node.band_split(first)


def mark(node: isl.ScheduleNode, name: str) -> isl.ScheduleNode:
    """Insert a mark above node; returns the node below the mark."""
    return _mark(node, name)


def sink_below_inner(node: isl.ScheduleNode, coincident, marks: list[str | None],
                     model: PolyModel | None = None) -> isl.ScheduleNode:
    """Move a band below everything under it: a copy right above every leaf, with `marks` on
    its members (legal when every member is coincident). With `model`, the copy above an
    epilogue that writes along another member than the vector member is vectorised along
    that member instead (`_row_epilogue`)."""
    mupa = node.band_get_partial_schedule()
    reorder = _row_epilogue(model, marks) if model is not None else None
    return _insert_at_leaves(node.delete(), mupa, coincident, marks, reorder)


def distribute(node: isl.ScheduleNode, coincident) -> isl.ScheduleNode:
    """Move a band whose child is a sequence below the sequence (see `_distribute`)."""
    return _distribute(node, coincident)


def block_reduction(node: isl.ScheduleNode, size: int) -> tuple[isl.ScheduleNode, bool]:
    """Insert above `node` (a band over the outputs of one reduction, with the reduction's
    initialisation, the reduction and its epilogue in a sequence below) a loop over blocks of
    `size` iterations of the reduction's outermost loop: every output's partial sums advance
    one block at a time, so the operands of a block (a slice of a conv's weight) serve all the
    outputs below `node` before the next block is read. The initialisation runs in the first
    block, the statements after the reduction in the last. Legal because the updates of each
    output keep their order and the band's members are coincident. Returns `node` (now below
    the new loop) and True, or `node` unchanged and False where the tree below is not one
    reduction in a sequence, or the reduction is no longer than one block."""
    below = node.child(0)
    if not is_node(below, isl.schedule_node_type.sequence) or size < 1:
        return node, False
    reducing = [(k, band) for k in range(below.n_children())
                if (band := reduction_band(inner_bands(below.child(k)))) is not None]
    if len(reducing) != 1:
        return node, False
    ((at, band),) = reducing
    loop = band.band_get_partial_schedule().get_at(0).intersect_domain(band.get_domain())
    image = isl.Set.from_union_set(isl.UnionMap.from_union_pw_aff(loop).range())
    lo, hi = int(image.dim_min_val(0).to_python()), int(image.dim_max_val(0).to_python())
    blocks = -(-(hi - lo + 1) // size)
    if blocks < 2:
        return node, False
    affs = affs_by_statement(loop)
    if any(a is None for a in affs.values()) or set(statement_names(below.child(at).child(0))) != set(affs):
        return node, False  # a piecewise loop, or statements beside the reduction's own
    upa = None

    def add(pa: isl.PwAff) -> None:
        nonlocal upa
        u = isl.UnionPwAff.from_pw_aff(pa)
        upa = u if upa is None else upa.union_add(u)

    for k in range(below.n_children()):
        sets = []
        below.child(k).filter_get_filter().intersect(node.get_domain()).foreach_set(sets.append)
        for s in sets:
            name = s.get_tuple_name()
            if k == at:  # the reduction's own statements (checked above)
                aff = affs[name].add_constant_val(isl.Val(-lo, context=s.get_ctx()))
                add(isl.PwAff.from_aff(aff.scale_down_val(isl.Val(size, context=s.get_ctx())).floor())
                    .intersect_domain(s))
            else:  # before the reduction: in the first block; after it: in the last
                value = 0 if k < at else blocks - 1
                add(isl.PwAff.from_aff(isl.Aff.zero_on_domain(isl.LocalSpace.from_space(s.get_space()))
                                       .add_constant_val(isl.Val(value, context=s.get_ctx())))
                    .intersect_domain(s))
    mupa = isl.MultiUnionPwAff.from_union_pw_aff(upa)
    outer = node.insert_partial_schedule(mupa)
    outer = _set_flags(outer, [False], True)
    return outer.child(0), True

"""Schedule-tree analysis and primitives: what a target's mapping recipe needs to know about
the bands of a schedule (`analyze`), and the edits it applies, step by step (permute, tile,
split, mark, sink below inner bands, distribute over a sequence). The recipe, which decides
the edits, lives with its target (`schedules/<kind>.py`); the isl objects stay here, and a
recipe handles tree nodes only through these functions."""

from __future__ import annotations

import math
from dataclasses import dataclass

import islpy as isl
import numpy as np

from akg.graph.compute.expr import PHASES
from akg.errors import LoweringError
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


@dataclass(frozen=True)
class BandInfo:
    """An outer band (the first band on a path from the root) as a target mapping sees it."""

    index: int
    extents: tuple[int, ...]
    coincident: tuple[bool, ...]
    permutable: bool
    statements: tuple[str, ...]
    contiguity: tuple[int, ...]  # per member: elements streamed with unit stride along it
    inner_contiguity: int  # the best such score of any loop below the band
    has_inner: bool  # bands (loops) below this one, e.g. a reduction
    reduction_inner: bool  # some loop below carries a dependence (a reduction)
    work: int = 0  # statement instances under the band: how much a thread launch is worth
    passes: int = 1  # loop nests in sequence right below the band (a layer norm's mean,
    #                  variance and output: 3), each a pass over the same row
    row_writers: int = 0  # statements below that write more than one element per band point
    #                       (a softmax's exponentials and output: 2; a layer norm's output: 1)
    strided: tuple[int, ...] = ()  # per member: elements read with a constant stride > 1 along
    #                                the last index (a strided conv's input along its output width)
    windowed: tuple[int, ...] = ()  # per member: elements read through a sliding window along the
    #                                 last index, the member plus a reduction iterator (a conv's
    #                                 input along its output width)
    blocks: int = 0  # rows of partial sums the outer member carries from row to row (column
    #                  sums fused into a row band, `polyhedral.row_partials`): it runs in parallel
    #                  only in chunks of whole blocks of this many iterations
    reduction_outer: int = 0  # trips of the outer loop of the reduction below (a conv's input
    #                           channels, a matmul's K), 0 where none
    reduction_loops: int = 0  # loops below that carry the reduction and take more than one trip
    #                           (a 1x1 conv: 1, its input channels; a KxK conv: 3, its taps 2
    #                           over one input channel)
    image_axes: tuple[int, ...] = ()  # per member: the index of the 4-d tensors written below
    #                                   (an NCHW image: 0 N, 1 C, 2 H, 3 W) that it moves alone, by
    #                                   one (-1: none)
    producers: tuple[str, ...] = ()  # statements of earlier bands that this band could compute
    #                                  tile by tile (`recomputable_producers`): a padded input
    row_steps: tuple[int, ...] = ()  # per member: the largest constant step by which it moves an
    #                                  index of a read other than the last (a strided conv's
    #                                  output row moves its input row by the stride)
    runs: tuple[int, ...] = ()  # per member: the steps it makes before a merged loop's outer
    #                             iterator moves (16 for 16 * head + d, an attention's heads
    #                             merged into the hidden dim), the least over its statements;
    #                             0 where it merges no loops

    @property
    def members(self) -> int:
        return len(self.extents)


# --- navigation ---------------------------------------------------------------------------------


def outer_band_paths(schedule: isl.Schedule) -> list[tuple[int, ...]]:
    """Child-index paths from the root to each outer band, in tree order."""
    paths: list[tuple[int, ...]] = []

    def visit(node: isl.ScheduleNode, path: tuple[int, ...]) -> None:
        if node.get_type() == isl.schedule_node_type.band:
            paths.append(path)
            return
        for k in range(node.n_children()):
            visit(node.child(k), path + (k,))

    visit(schedule.get_root(), ())
    return paths


def navigate(schedule: isl.Schedule, path: tuple[int, ...]) -> isl.ScheduleNode:
    node = schedule.get_root()
    for k in path:
        node = node.child(k)
    return node


def _is(node: isl.ScheduleNode, kind) -> bool:
    return node.get_type() == kind


# --- analysis -----------------------------------------------------------------------------------


def _member_bounds(node: isl.ScheduleNode) -> list[tuple[int, int]] | None:
    """(smallest, largest) value of each member of a band over its domain; None for a band
    over no points."""
    umap = node.band_get_partial_schedule_union_map().intersect_domain(node.get_domain())
    if umap.is_empty():
        return None
    image = isl.Set.from_union_set(umap.range())
    return [(int(image.dim_min_val(d).to_python()), int(image.dim_max_val(d).to_python()))
            for d in range(node.band_n_member())]


def _member_extents(node: isl.ScheduleNode) -> tuple[int, ...]:
    bounds = _member_bounds(node)
    if bounds is None:
        return (1,) * node.band_n_member()
    return tuple(hi - lo + 1 for lo, hi in bounds)


def _statement_names(node: isl.ScheduleNode) -> tuple[str, ...]:
    names = []
    node.get_domain().foreach_set(lambda s: names.append(s.get_tuple_name()))
    return tuple(sorted(names))


def _contiguity(model: PolyModel, node: isl.ScheduleNode, strided: bool = False,
                windowed: bool = False) -> tuple[int, ...]:
    """For each band member: the accesses whose last index moves by +-1 with it (and no other
    index moves), each weighted by the size of the tensor it streams through; `strided`: the
    reads whose last index moves by a constant step of 2 or more instead; `windowed`: the reads
    whose last index moves with it and with a reduction iterator (a sliding window)."""
    mupa = node.band_get_partial_schedule()
    counts = [0] * node.band_n_member()
    members = [affs_by_statement(mupa.get_at(d)) for d in range(node.band_n_member())]
    for name in _statement_names(node):
        stmt = model.statement(name)
        affs = [m.get(name) for m in members]
        for acc in stmt.reads if strided or windowed else [stmt.write, *stmt.reads]:
            if not acc.exact or acc.tensor.ndim == 0:
                continue
            for d, aff in enumerate(affs):
                step = _last_index_step(stmt, acc, aff) if aff is not None else 0
                if windowed:
                    hit = step == 1 and _slides(acc)
                else:
                    hit = (step > 1) if strided else (step == 1)
                if hit:
                    counts[d] += int(np.prod(acc.tensor.shape, dtype=np.int64))
    return tuple(counts)


def _row_steps(model: PolyModel, node: isl.ScheduleNode) -> tuple[int, ...]:
    """`BandInfo.row_steps`: per band member, the largest step by which it alone moves an index
    of some read other than the last."""
    mupa = node.band_get_partial_schedule()
    steps = [0] * node.band_n_member()
    members = [affs_by_statement(mupa.get_at(d)) for d in range(node.band_n_member())]
    for name in _statement_names(node):
        stmt = model.statement(name)
        for d, m in enumerate(members):
            var = _unit_iterator(stmt, m.get(name))
            if var is None:
                continue
            for acc in stmt.reads:
                for e in acc.indices[:-1]:  # indices that are no linear form (a phase) say nothing
                    steps[d] = max(steps[d], abs(int((linear_coefficients(e) or {}).get(var, 0))))
    return tuple(steps)


def _runs(model: PolyModel, node: isl.ScheduleNode) -> tuple[int, ...]:
    """`BandInfo.runs`: per band member, the smallest coefficient other than its unit one in
    any statement's affine function (the unit iterator runs that far before the next moves)."""
    mupa = node.band_get_partial_schedule()
    runs = []
    for d in range(node.band_n_member()):
        steps = [c for name, aff in affs_by_statement(mupa.get_at(d)).items()
                 if _unit_iterator(model.statement(name), aff) is not None
                 for c in map(abs, _coefficients(model.statement(name), aff)) if c > 1]
        runs.append(min(steps, default=0))
    return tuple(runs)


def affs_by_statement(upa: isl.UnionPwAff) -> dict[str, isl.Aff]:
    """The affine function of each statement in a band member (None if piecewise)."""
    out = {}
    lst = upa.get_pw_aff_list()
    for k in range(lst.n_pw_aff()):
        pa = lst.get_at(k)
        pieces = pa.get_pieces()
        out[pa.get_tuple_id(isl.dim_type.in_).get_name()] = pieces[0][1] if len(pieces) == 1 else None
    return out


def _moves_last_index(stmt, access, member: isl.Aff) -> bool:
    return _last_index_step(stmt, access, member) == 1


def _last_index_step(stmt, access, member: isl.Aff) -> int:
    """How far a unit step of the schedule member (one statement iterator moving by one) moves
    the last tensor index when it moves no other index (0 otherwise). A member that merges
    loops (64 * head + d after a head-merging reshape) steps its unit-coefficient iterator; the
    others move only once per many steps, so that iterator decides."""
    return _index_step(stmt, access, member, len(access.indices) - 1)


def _unit_iterator(stmt, member: isl.Aff | None):
    """The statement iterator that the schedule member steps by one (its one iterator of unit
    coefficient), or None."""
    if member is None:
        return None
    unit = [i for i, c in enumerate(_coefficients(stmt, member)) if abs(c) == 1]
    return stmt.iters[unit[0]] if len(unit) == 1 else None


def _coefficients(stmt, member: isl.Aff) -> list[int]:
    """The schedule member's coefficient of each of the statement's iterators."""
    return [int(member.get_coefficient_val(isl.dim_type.in_, i).to_python()) for i in range(len(stmt.iters))]


def _index_step(stmt, access, member: isl.Aff, index: int) -> int:
    """`_last_index_step` for the access's index `index`."""
    var = _unit_iterator(stmt, member)
    if var is None:
        return 0
    per_index = [_blocked_coefficients(e, var) for e in access.indices]
    if any(c is None for c in per_index):
        return 0
    if not per_index or any(var in c for k, c in enumerate(per_index) if k != index):
        return 0
    return abs(int(per_index[index].get(var, 0)))


def _slides(access) -> bool:
    """Does the access's last index also move with a reduction iterator (a conv's `z + rx`)?"""
    last = linear_coefficients(access.indices[-1]) if access.indices else None
    return bool(last) and any(v.reduce for v in last)


MIN_BLOCK = 4  # elements of a block that a blocked index (floordiv, floormod) runs through


def _blocked_coefficients(e, var) -> dict | None:
    """`linear_coefficients` of an index, where a blocked layout's pair of indices (a conv
    weight stored as [O / b, ..., b] and read as `o // b`, `o % b`) counts as linear: `o % b`
    moves with o by its unit coefficient, `o // b` only once per block, so not with o."""
    if getattr(e, "op", None) in ("floordiv", "floormod") and getattr(e.args[1], "value", 0) >= MIN_BLOCK:
        inner = linear_coefficients(e.args[0])
        if inner is None or abs(inner.get(var, 0)) != 1:
            return None
        return {var: inner[var]} if e.op == "floormod" else {}
    return linear_coefficients(e)


def analyze(model: PolyModel, schedule: isl.Schedule) -> list[BandInfo]:
    infos = []
    for k, path in enumerate(outer_band_paths(schedule)):
        node = navigate(schedule, path)
        inner = _inner_bands(node.child(0))
        extents = _member_extents(node)
        names = _statement_names(node)
        stmts = [model.statement(n) for n in names]
        infos.append(BandInfo(
            index=k,
            extents=extents,
            coincident=tuple(bool(node.band_member_get_coincident(d)) for d in range(node.band_n_member())),
            permutable=bool(node.band_get_permutable()) or node.band_n_member() == 1,
            statements=names,
            contiguity=_contiguity(model, node),
            strided=_contiguity(model, node, strided=True),
            windowed=_contiguity(model, node, windowed=True),
            inner_contiguity=max((max(_contiguity(model, b), default=0) for b in inner), default=0),
            has_inner=bool(inner),
            reduction_inner=any(not all(b.band_member_get_coincident(d) for d in range(b.band_n_member()))
                                for b in inner),
            work=sum(_points(s) for s in stmts),
            passes=_passes(node.child(0)),
            row_writers=sum(1 for s in stmts if s.role == "assign" and _points(s) > math.prod(extents)),
            blocks=_blocks(model, node),
            image_axes=_image_axes(model, node),
            reduction_outer=_reduction_outer(inner),
            reduction_loops=_reduction_loops(inner),
            producers=recomputable_producers(model, names),
            row_steps=_row_steps(model, node),
            runs=_runs(model, node),
        ))
    return infos


def recomputable_producers(model: PolyModel, names) -> tuple[str, ...]:
    """Statements outside `names` that the statements `names` could compute themselves, piece
    by piece (`MARK_RECOMPUTE`): each writes, by a plain assignment (no reduction), a tensor
    that is not a kernel output, that no other statement writes, and that only `names` read;
    and it reads only tensors complete before it runs (kernel inputs, or tensors written only
    earlier in program order). A padded copy of a conv's or pool's input is one."""
    inside = set(names)
    outputs = {id(t) for t in model.program.outputs}
    writers: dict[int, list] = {}
    readers: dict[int, set[str]] = {}
    for s in model.statements:
        writers.setdefault(id(s.write.tensor), []).append(s)
        for a in s.reads:
            readers.setdefault(id(a.tensor), set()).add(s.name)
    out = []
    for s in model.statements:
        t = id(s.write.tensor)
        if (s.name in inside or s.role != "assign" or t in outputs or len(writers[t]) != 1
                or not readers.get(t) or not readers[t] <= inside):
            continue
        if all(w.position < s.position for a in s.reads for w in writers.get(id(a.tensor), ())):
            out.append(s.name)
    return tuple(out)


def _reduction_band(bands: list[isl.ScheduleNode]) -> isl.ScheduleNode | None:
    """The first of `bands` whose outer member carries a dependence and takes more than one
    trip (a reduction's loop; not the band of one point that a reduction's initialisation
    keeps under a sunk band)."""
    return next((b for b in bands if not b.band_member_get_coincident(0) and _member_extents(b)[0] > 1), None)


def _reduction_outer(inner: list[isl.ScheduleNode]) -> int:
    band = _reduction_band(inner)
    return _member_extents(band)[0] if band is not None else 0


def _reduction_loops(inner: list[isl.ScheduleNode]) -> int:
    """`BandInfo.reduction_loops`: members of the bands below that carry a dependence and take
    more than one trip."""
    return sum(1 for b in inner for d, extent in enumerate(_member_extents(b))
               if extent > 1 and not b.band_member_get_coincident(d))


def _image_axes(model: PolyModel, node: isl.ScheduleNode) -> tuple[int, ...]:
    """For each band member: the index of the 4-d tensors written below (an NCHW image's N, C,
    H or W) that moves by one with it, no other index moving; the largest tensor decides, -1
    where the member moves none. A 5-d tensor written below counts where it is an image whose
    width is split in two (a padded input stored in phases of its columns, `[N, C, H, stride,
    W / stride]`, `Tensor.layout` PHASES; not a Winograd transform's `[4, 4, C, rows, cols]`):
    its N, C and H count, so the loop nest that writes the phases splits them by rows like
    the conv that reads them (ResNet-18's stem at 224 px, its phases split by its 3 channels
    before, one core writing two of them: 757-772 -> 729-759 us warm, 802-808 -> 767-786 us
    cold, alone on 2 Xeon cores)."""
    mupa = node.band_get_partial_schedule()
    members = [affs_by_statement(mupa.get_at(d)) for d in range(node.band_n_member())]
    best = [(0, -1)] * len(members)  # (elements of the tensor, index)
    for name in _statement_names(node):
        stmt = model.statement(name)
        acc = stmt.write
        if acc is None or not acc.exact or acc.tensor.ndim not in (4, 5) \
                or (acc.tensor.ndim == 5 and acc.tensor.layout != PHASES):
            continue
        size = int(np.prod(acc.tensor.shape, dtype=np.int64))
        for d, m in enumerate(members):
            aff = m.get(name)
            for index in range(4 if acc.tensor.ndim == 4 else 3):
                if aff is not None and size > best[d][0] and _index_step(stmt, acc, aff, index) == 1:
                    best[d] = (size, index)
    return tuple(index for _, index in best)


def _blocks(model: PolyModel, node: isl.ScheduleNode) -> int:
    """The iterations of the band's outer member that must stay in one chunk: the extent of
    any reduction iterator that the member walks (0 when it walks none)."""
    if not node.band_member_get_coincident(0):
        return 0
    blocks = 1
    for name, aff in affs_by_statement(node.band_get_partial_schedule().get_at(0)).items():
        stmt = model.statement(name)
        for i, v in enumerate(stmt.iters):
            if v.reduce and aff is not None and int(aff.get_coefficient_val(isl.dim_type.in_, i).to_python()):
                blocks = math.lcm(blocks, v.extent)
    return blocks if blocks > 1 else 0


def _points(stmt) -> int:
    return int(np.prod([v.extent for v in stmt.iters], dtype=np.int64))


def _passes(node: isl.ScheduleNode) -> int:
    """Children of a sequence node that hold loops (1 for anything but a sequence); a
    reduction's initialisation, scheduled by a band of extent 1 or only in some iterations
    (partial sums at the first row of their block, `polyhedral.row_partials`), is not a pass."""
    if node.get_type() != isl.schedule_node_type.sequence:
        return 1

    def inits_only(child: isl.ScheduleNode) -> bool:
        names = []
        child.filter_get_filter().foreach_set(lambda s: names.append(s.get_tuple_name()))
        return all(n.endswith("_init") for n in names)

    return sum(1 for k in range(node.n_children())
               if not inits_only(node.child(k))
               and any(max(_member_extents(b), default=1) > 1 for b in _inner_bands(node.child(k))))


def _inner_bands(node: isl.ScheduleNode) -> list[isl.ScheduleNode]:
    out = []

    def visit(n: isl.ScheduleNode) -> None:
        if _is(n, isl.schedule_node_type.band):
            out.append(n)
        for k in range(n.n_children()):
            visit(n.child(k))

    visit(node)
    return out


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
    bounds = _member_bounds(node)
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
        names = _statement_names(band)
        stmts = [model.statement(n) for n in names]
        if not stmts or any(s.role != "assign" or not s.write.exact for s in stmts):
            return None
        mupa = band.band_get_partial_schedule()
        n = band.band_n_member()
        extents = _member_extents(band)
        members = [affs_by_statement(mupa.get_at(d)) for d in range(n)]
        rows = [d for d in range(n - 1)
                if extents[d] >= MIN_ROW_VECTOR and extents[d] & (extents[d] - 1) == 0 and all(
                    m is not None and _last_index_step(s, s.write, m) == 1
                    for s in stmts for m in [members[d].get(s.name)])]
        vector_walks_rows = any(members[n - 1].get(s.name) is not None
                                and _last_index_step(s, s.write, members[n - 1][s.name]) == 1 for s in stmts)
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
            inner = _inner_bands(node.child(0))
            if not inner or all(b.band_member_get_coincident(d) for b in inner for d in range(b.band_n_member())):
                continue
            if _member_extents(node)[0] > MAX_INNER_VECTOR:
                continue
            # only a loop that streams at least as much data as the reduction below it: the
            # few rows of a row sum write contiguously but read strided (a gather per vector)
            here = _contiguity(model, node)[0]
            if here == 0 or here < max((max(_contiguity(model, b), default=0) for b in inner), default=0):
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
    if _inner_bands(node.child(0)) or not _has_band_above(node) or _member_extents(node)[0] < 2 * lanes:
        return False
    member = affs_by_statement(node.band_get_partial_schedule().get_at(0))
    for name in _statement_names(node):
        stmt, aff = model.statement(name), member.get(name)
        if aff is None:
            return False
        for acc in [stmt.write, *stmt.reads]:
            if acc.tensor.ndim and not (_moves_last_index(stmt, acc, aff) or _invariant(stmt, acc, aff)):
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
        if _is(node, isl.schedule_node_type.band):
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
    return _member_extents(node)


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
    return _passes(node.child(0))


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
    if not _is(below, isl.schedule_node_type.sequence) or size < 1:
        return node, False
    reducing = [(k, band) for k in range(below.n_children())
                if (band := _reduction_band(_inner_bands(below.child(k)))) is not None]
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
    if any(a is None for a in affs.values()) or set(_statement_names(below.child(at).child(0))) != set(affs):
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

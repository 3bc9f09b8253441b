"""Band analysis: what a target's mapping recipe reads of each outer band of a schedule tree
(`analyze`: extents, coincidence, contiguity, the reduction below, the images written, ...), and
the navigation and node queries that the tree edits (`polyhedral.tree`) share with it. The isl
objects stay in the polyhedral layer; recipes read `BandInfo`s, plain data."""

from __future__ import annotations

import math
from dataclasses import dataclass

import islpy as isl
import numpy as np

from akg.graph.compute.expr import PHASES
from akg.polyhedral.model import PolyModel, linear_coefficients


@dataclass(frozen=True)
class BandInfo:
    """An outer band (the first band on a path from the root) as a target mapping sees it."""

    index: int
    extents: tuple[int, ...]
    coincident: tuple[bool, ...]
    permutable: bool
    statements: tuple[str, ...]
    contiguity: tuple[int, ...]  # per member: elements streamed with unit stride along it
    inner_contiguity: int  # the best such score of any loop below the band that gathers no read
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


def is_node(node: isl.ScheduleNode, kind) -> bool:
    return node.get_type() == kind


# --- analysis -----------------------------------------------------------------------------------


def member_bounds(node: isl.ScheduleNode) -> list[tuple[int, int]] | None:
    """(smallest, largest) value of each member of a band over its domain; None for a band
    over no points."""
    umap = node.band_get_partial_schedule_union_map().intersect_domain(node.get_domain())
    if umap.is_empty():
        return None
    image = isl.Set.from_union_set(umap.range())
    return [(int(image.dim_min_val(d).to_python()), int(image.dim_max_val(d).to_python()))
            for d in range(node.band_n_member())]


def member_extents(node: isl.ScheduleNode) -> tuple[int, ...]:
    bounds = member_bounds(node)
    if bounds is None:
        return (1,) * node.band_n_member()
    return tuple(hi - lo + 1 for lo, hi in bounds)


def statement_names(node: isl.ScheduleNode) -> tuple[str, ...]:
    names = []
    node.get_domain().foreach_set(lambda s: names.append(s.get_tuple_name()))
    return tuple(sorted(names))


def member_contiguity(model: PolyModel, node: isl.ScheduleNode, strided: bool = False,
                windowed: bool = False, gather_free: bool = False) -> tuple[int, ...]:
    """For each band member: the accesses whose last index moves by +-1 with it (and no other
    index moves), each weighted by the size of the tensor it streams through; `strided`: the
    reads whose last index moves by a constant step of 2 or more instead; `windowed`: the reads
    whose last index moves with it and with a reduction iterator (a sliding window);
    `gather_free`: 0 for a member that some read moves with other than along its last index
    by +-1 (a vector loop over it would gather that read); there the last index is the last one
    of extent above 1 (`_last_index`: a classifier's input [N, C, 1, 1] is read along C)."""
    mupa = node.band_get_partial_schedule()
    counts = [0] * node.band_n_member()
    gathers = [False] * node.band_n_member()
    members = [affs_by_statement(mupa.get_at(d)) for d in range(node.band_n_member())]
    for name in statement_names(node):
        stmt = model.statement(name)
        affs = [m.get(name) for m in members]
        for acc in stmt.reads if strided or windowed else [stmt.write, *stmt.reads]:
            if not acc.exact or acc.tensor.ndim == 0:
                continue
            for d, aff in enumerate(affs):
                step = 0 if aff is None else (_index_step(stmt, acc, aff, _last_index(acc)) if gather_free
                                              else last_index_step(stmt, acc, aff))
                if windowed:
                    hit = step == 1 and _slides(acc)
                else:
                    hit = (step > 1) if strided else (step == 1)
                if hit:
                    counts[d] += int(np.prod(acc.tensor.shape, dtype=np.int64))
                elif gather_free and acc is not stmt.write and aff is not None and _moves(stmt, acc, aff):
                    gathers[d] = True
    return tuple(0 if g else c for c, g in zip(counts, gathers))


def _moves(stmt, access, member: isl.Aff) -> bool:
    """Does some index of the access move with the member's unit iterator? (An index that is
    no linear form says nothing.)"""
    var = _unit_iterator(stmt, member)
    if var is None:
        return False
    return any(c is not None and c.get(var, 0) != 0 for c in (_blocked_coefficients(e, var) for e in access.indices))


def _row_steps(model: PolyModel, node: isl.ScheduleNode) -> tuple[int, ...]:
    """`BandInfo.row_steps`: per band member, the largest step by which it alone moves an index
    of some read other than the last."""
    mupa = node.band_get_partial_schedule()
    steps = [0] * node.band_n_member()
    members = [affs_by_statement(mupa.get_at(d)) for d in range(node.band_n_member())]
    for name in statement_names(node):
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


def moves_last_index(stmt, access, member: isl.Aff) -> bool:
    return last_index_step(stmt, access, member) == 1


def last_index_step(stmt, access, member: isl.Aff) -> int:
    """How far a unit step of the schedule member (one statement iterator moving by one) moves
    the last tensor index when it moves no other index (0 otherwise). A member that merges
    loops (64 * head + d after a head-merging reshape) steps its unit-coefficient iterator; the
    others move only once per many steps, so that iterator decides."""
    return _index_step(stmt, access, member, len(access.indices) - 1)


def _last_index(access) -> int:
    """The innermost index of the access that can move: dimensions of extent 1 after it (the
    [N, C, 1, 1] left by a global pool) leave the one before them unit-stride."""
    shape, last = access.tensor.shape, len(access.indices) - 1
    if len(shape) != len(access.indices):
        return last
    return max((k for k, d in enumerate(shape) if int(d) != 1), default=last)


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
    """`last_index_step` for the access's index `index`."""
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
        inner = inner_bands(node.child(0))
        extents = member_extents(node)
        names = statement_names(node)
        stmts = [model.statement(n) for n in names]
        infos.append(BandInfo(
            index=k,
            extents=extents,
            coincident=tuple(bool(node.band_member_get_coincident(d)) for d in range(node.band_n_member())),
            permutable=bool(node.band_get_permutable()) or node.band_n_member() == 1,
            statements=names,
            contiguity=member_contiguity(model, node),
            strided=member_contiguity(model, node, strided=True),
            windowed=member_contiguity(model, node, windowed=True),
            inner_contiguity=max((max(member_contiguity(model, b, gather_free=True), default=0) for b in inner),
                                 default=0),
            has_inner=bool(inner),
            reduction_inner=any(not all(b.band_member_get_coincident(d) for d in range(b.band_n_member()))
                                for b in inner),
            work=sum(_points(s) for s in stmts),
            passes=count_passes(node.child(0)),
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
    by piece (`tree.MARK_RECOMPUTE`): each writes, by a plain assignment (no reduction), a tensor
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


def reduction_band(bands: list[isl.ScheduleNode]) -> isl.ScheduleNode | None:
    """The first of `bands` whose outer member carries a dependence and takes more than one
    trip (a reduction's loop; not the band of one point that a reduction's initialisation
    keeps under a sunk band)."""
    return next((b for b in bands if not b.band_member_get_coincident(0) and member_extents(b)[0] > 1), None)


def _reduction_outer(inner: list[isl.ScheduleNode]) -> int:
    band = reduction_band(inner)
    return member_extents(band)[0] if band is not None else 0


def _reduction_loops(inner: list[isl.ScheduleNode]) -> int:
    """`BandInfo.reduction_loops`: members of the bands below that carry a dependence and take
    more than one trip."""
    return sum(1 for b in inner for d, extent in enumerate(member_extents(b))
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
    for name in statement_names(node):
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


# A loop nest under a sequence that runs at most 1/SMALL_PASS of the iterations of the largest
# one is no pass of its own: the few values that one-read statistics average for their shift
# (`akg.graph.moments`: one vector of a 1024-wide row), a softmax's combination of the partial
# maxima of its row.
SMALL_PASS = 8


def count_passes(node: isl.ScheduleNode) -> int:
    """Children of a sequence node that hold loops (1 for anything but a sequence); a
    reduction's initialisation, scheduled by a band of extent 1 or only in some iterations
    (partial sums at the first row of their block, `polyhedral.row_partials`), is not a pass,
    nor a loop nest far smaller than the largest (`SMALL_PASS`)."""
    if node.get_type() != isl.schedule_node_type.sequence:
        return 1

    def inits_only(child: isl.ScheduleNode) -> bool:
        names = []
        child.filter_get_filter().foreach_set(lambda s: names.append(s.get_tuple_name()))
        return all(n.endswith("_init") for n in names)

    def iterations(n: isl.ScheduleNode) -> int:  # along the deepest path of bands below n
        below = max((iterations(n.child(k)) for k in range(n.n_children())), default=1)
        return below * math.prod(member_extents(n)) if is_node(n, isl.schedule_node_type.band) else below

    sizes = [iterations(node.child(k)) for k in range(node.n_children()) if not inits_only(node.child(k))]
    largest = max(sizes, default=1)
    return sum(1 for n in sizes if n > 1 and n * SMALL_PASS > largest)


def inner_bands(node: isl.ScheduleNode) -> list[isl.ScheduleNode]:
    out = []

    def visit(n: isl.ScheduleNode) -> None:
        if is_node(n, isl.schedule_node_type.band):
            out.append(n)
        for k in range(n.n_children()):
            visit(n.child(k))

    visit(node)
    return out

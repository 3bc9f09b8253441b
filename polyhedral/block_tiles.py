"""A band rebuilt over tiles shared by the points of a block (target-neutral isl work for a
mapping that copies a reduction's operand tiles cooperatively into a block's shared memory).

`map_tiled_reduction` pulls a schedule back onto a model whose reduction was tiled along its
reduction axis (copy statements added) and rebuilds the reduction's outer band as: block
members (tile loops of the output axes, `blockIdx.<axis>.<n>` marks), then in sequence the
init, the loop over reduction tiles (the copies of a tile spread over the block's points,
element f on point f mod points, then the tile's terms, a barrier mark after each), and the
epilogue; every point member under a `threadIdx.<axis>.<n>` mark. `flat_tile_accesses`
gives the model's accesses with each tiled buffer seen as one flat box per block (the race
checker's view of a buffer reused by every reduction tile)."""

from __future__ import annotations

import math

import islpy as isl

from akg.errors import ScheduleError
from akg.polyhedral import tree


def pull_back(schedule: isl.Schedule, model, targets: dict[str, tuple[str, list[str]]]) -> isl.Schedule:
    """The schedule over `model`'s statements: statement S runs where `targets[S] = (T, exprs)`
    ran at T[exprs] (over S's iterators i0, i1, ...)."""
    ctx = schedule.get_ctx()
    maps = isl.UnionMap.empty(isl.Space.params_alloc(ctx, 0))
    for s in model.statements:
        old, exprs = targets[s.name]
        names = ", ".join(f"i{d}" for d in range(len(s.iters)))
        m = isl.Map(f"{{ {s.name}[{names}] -> {old}[{', '.join(exprs)}] }}", context=ctx)
        maps = maps.union(isl.UnionMap.from_map(m.intersect_domain(s.domain)))
    return schedule.pullback_union_pw_multi_aff(isl.UnionPwMultiAff.from_union_map(maps))


def _mupa(ctx, column: dict[str, tuple[int, str]]) -> isl.MultiUnionPwAff:
    """One band member: statement -> (iterators, expression over i0, i1, ...)."""
    pieces = [f"{name}[{', '.join(f'i{d}' for d in range(n))}] -> [({expr})]" for name, (n, expr) in column.items()]
    return isl.MultiUnionPwAff(f"[{{ {'; '.join(pieces)} }}]", context=ctx)


def _band(node, ctx, columns: list[dict], marks: list[str | None]):
    from akg.polyhedral.tree import insert_marks_on_members

    mupa = None
    for col in columns:
        m = _mupa(ctx, col)
        mupa = m if mupa is None else mupa.flat_range_product(m)
    band = node.insert_partial_schedule(mupa)
    return insert_marks_on_members(band, marks)


def _filter(ctx, names: list[tuple[str, int]]) -> isl.UnionSet:
    out = isl.UnionSet.empty(isl.Space.params_alloc(ctx, 0))
    for name, n in names:
        out = out.union(isl.UnionSet(f"{{ {name}[{', '.join(f'i{d}' for d in range(n))}] }}", context=ctx))
    return out


def _copy_cols(s, n: int, ax: dict, nt: dict) -> list[dict]:
    """The thread members of a copy, in the update's member order (position p is axis
    ax[p]): element f of the flattened box runs on x = f mod X, y = (f / X) mod Y, z = ..."""
    f = f"i{n + 1}"
    stride = {}
    acc = 1
    for axis in "xyz":
        if axis in nt:
            stride[axis] = acc
            acc *= nt[axis]
    return [{s.name: (len(s.iters), f"floor({f} / {stride[ax[p]]}) mod {nt[ax[p]]}")} for p in range(n)]


def map_tiled_reduction(model, new_model, schedule, targets: dict, k: int, op, tiles: dict, mapping,
                        init, update, copies: list, epilogue: list, apply_band, barrier: str | None):
    """`schedule` (over `model`) pulled back onto `new_model` by `targets` (statement ->
    (old statement, index expressions)), every outer band mapped by `apply_band(node, band)`
    but band `k`, rebuilt as the module says for the tiled reduction `op` (`tiles`: points per
    block along each output axis, by id; `mapping`: the band's member order, threads and
    axes)."""
    n = len(op.axes)
    pulled = pull_back(schedule, new_model, targets)
    ctx = model.ctx
    ax = {p: mapping.axis(p) for p in range(n)}
    nt = {ax[p]: mapping.threads[p] for p in range(n)}
    threads = math.prod(mapping.threads)

    def apply(node, band):
        if band != k:
            return apply_band(node, band)
        names = []
        node.get_domain().foreach_set(lambda st: names.append(st.get_tuple_name()))
        if set(names) != {init.name, update.name, *(c.name for c in copies), *(e.name for e in epilogue)}:
            raise ScheduleError(f"band {k}: shared tiles need the band to hold only {op.name} and its epilogue")
        old_band = isl.UnionMap.from_multi_union_pw_aff(node.band_get_partial_schedule())
        for e in (update, *epilogue):  # the band's loops are the op's output axes, in order
            names_e = ", ".join(f"i{d}" for d in range(len(e.iters)))
            ident = isl.UnionMap(f"{{ {e.name}[{names_e}] -> [{', '.join(f'i{d}' for d in range(n))}] }}",
                                 context=ctx)
            here = old_band.intersect_domain(isl.UnionSet.from_set(e.domain))
            if not here.is_equal(ident.intersect_domain(isl.UnionSet.from_set(e.domain))):
                raise ScheduleError(f"band {k}: {e.op.name} does not run at its own outputs in the band")
        node = node.cut()
        node = node.delete() if node.get_type() == isl.schedule_node_type.band else node
        cols, marks = [], []
        for p in range(n):
            a = mapping.order[p]
            t = tiles[id(op.axes[a])]
            col = {s.name: (len(s.iters), f"floor(i{a} / {t})") for s in (init, update, *epilogue)}
            col.update({c.name: (len(c.iters), f"i{a}") for c in copies})
            cols.append(col)
            g = -(-op.axes[a].extent // t)
            marks.append(f"blockIdx.{ax[p]}.{g}" if g > 1 else None)
        if not any(marks):  # one block: still one launch around it all (the tiles live in it)
            marks[0] = "blockIdx.x.1"
        top = _band(node, ctx, cols, marks)
        depth = top.get_tree_depth()

        def threads_of(s, p):
            a = mapping.order[p]
            return len(s.iters), f"i{a} mod {tiles[id(op.axes[a])]}"

        thread_marks = [f"threadIdx.{ax[p]}.{mapping.threads[p]}" for p in range(n)]
        rest, passed = top, 0
        while passed < n:  # below the block members (one band each, some under marks)
            passed += rest.get_type() == isl.schedule_node_type.band
            rest = rest.child(0)
        lst = isl.UnionSetList.alloc(ctx, 2 + len(epilogue)).add(_filter(ctx, [(init.name, len(init.iters))]))
        lst = lst.add(_filter(ctx, [(s.name, len(s.iters)) for s in (update, *copies)]))
        for e in epilogue:
            lst = lst.add(_filter(ctx, [(e.name, len(e.iters))]))
        seq = rest.insert_sequence(lst)
        for j, s in [(0, init), *((2 + q, e) for q, e in enumerate(epilogue))]:  # each thread its own outputs
            leaf = _band(seq.child(j).child(0), ctx, [{s.name: threads_of(s, p)} for p in range(n)], thread_marks)
            seq = leaf.ancestor(leaf.get_tree_depth() - seq.get_tree_depth())
        kt = seq.child(1).child(0)
        kt = kt.insert_partial_schedule(_mupa(ctx, {s.name: (len(s.iters), f"i{n}") for s in (update, *copies)}))
        parts = [*copies, update]
        lst = isl.UnionSetList.alloc(ctx, len(parts))
        for s in parts:
            lst = lst.add(_filter(ctx, [(s.name, len(s.iters))]))
        inner = kt.child(0).insert_sequence(lst)
        sdepth = inner.get_tree_depth()
        for j, s in enumerate(parts):
            leaf = inner.child(j).child(0)
            if s is update:  # each thread its own outputs, the k-tile's terms in order
                cols = [{s.name: threads_of(s, p)} for p in range(n)]
                below = {s.name: (len(s.iters), f"i{n + 1}")}
            else:  # element f of the flattened box on thread f mod threads (x fastest), cyclically
                cols = _copy_cols(s, n, ax, nt)
                below = {s.name: (len(s.iters), f"floor(i{n + 1} / {threads})")}
            leaf = leaf.insert_partial_schedule(_mupa(ctx, below))
            band_node = _band(leaf, ctx, cols, thread_marks)
            if barrier and (s is update or s is copies[-1]):
                band_node = band_node.insert_mark(isl.Id(barrier, context=ctx))
            inner = band_node.ancestor(band_node.get_tree_depth() - sdepth)
        return inner.ancestor(inner.get_tree_depth() - depth)

    return tree.map_outer_bands(new_model, pulled, apply)


def flat_tile_accesses(model, shared: frozenset):
    """The model's (writes, reads) with each buffer of `shared` (tensor ids) seen through its
    last dim only: one flattened box per block, reused by every reduction tile."""
    ctx = model.ctx
    proj = isl.UnionMap.empty(isl.Space.params_alloc(ctx, 0))
    for t, tid in model.tensor_ids.items():
        if tid in shared:
            lead = ", ".join(f"l{d}" for d in range(len(t.shape) - 1))
            proj = proj.union(isl.UnionMap(f"{{ {tid}[{lead}, f] -> {tid}[f] }}", context=ctx))

    def project(umap: isl.UnionMap) -> isl.UnionMap:
        tiles = umap.intersect_range(proj.domain())
        return umap.subtract(tiles).union(tiles.apply_range(proj))

    return project(model.writes()), project(model.reads())

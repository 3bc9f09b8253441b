"""Target-neutral isl pieces for mappings that copy a reduction's operand tiles cooperatively
into a block's shared memory (`polyhedral/register_tiles.py` builds the band from them).

`pull_back` maps a schedule onto a model whose reduction was tiled along its reduction axis
(copy statements added); `_band`, `_filter`, `_mupa` and `_copy_cols` build the rebuilt band's
members (blocks, the copies of a tile spread over the block's points, element f on point
f mod points). `flat_tile_accesses` gives the model's accesses with each tiled buffer seen as
one flat box per block (the race checker's view of a buffer reused by every reduction tile)."""

from __future__ import annotations

import islpy as isl


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

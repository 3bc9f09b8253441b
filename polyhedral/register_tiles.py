"""A band rebuilt over block tiles whose points each compute several outputs into a private
accumulator (target-neutral isl work for a mapping that keeps a reduction's sums in a point's
registers across the reduction tiles, its operands copied cooperatively into tiles shared by
the block's points, `polyhedral/block_tiles.py`).

The model: an accumulator statement over [blocks x n, points x n, outputs per point x n]
(init, and its update with the reduction tile kt and the term kk below), the tile copies over
[blocks x n, kt, f], and the final statements (the store of the accumulator into the output,
an elementwise epilogue) over the outputs i. `map_register_tiles` pulls the schedule back onto
it and rebuilds the band as: block members (a mark each), then in sequence

    init:    point members (marked), each point's outputs (unroll marks)
    kt:      the copies (element f on point f mod points, a barrier mark after the last),
             the update (point members, kk, each point's outputs unrolled; a barrier mark)
    finals:  point members (i mod tile) mod points, outputs (i mod tile) / points (unrolled
             by isl, each output under its own guard: no loop of a varying trip count
             indexes the accumulators), then every final statement per output, in
             program order"""

from __future__ import annotations

import math

import islpy as isl

from akg.errors import ScheduleError
from akg.polyhedral import tree
from akg.polyhedral.block_tiles import _band, _copy_cols, _filter, _mupa, pull_back
from akg.polyhedral.tree import MARK_UNROLL


def _mupa_of(ctx, columns: list[dict]) -> isl.MultiUnionPwAff:
    mupa = None
    for col in columns:
        m = _mupa(ctx, col)
        mupa = m if mupa is None else mupa.flat_range_product(m)
    return mupa


def _stack(node, ctx, layers, above: str | None = None):
    """Bands `layers` ([(columns, marks)], outermost first) inserted at `node` (a leaf), with
    a mark `above` the outermost; returns the top node."""
    for cols, marks in reversed(layers):
        node = _band(node, ctx, cols, marks)
    if above:
        node = node.insert_mark(isl.Id(above, context=ctx))
    return node


def map_register_tiles(new_model, schedule, targets: dict, k: int, n: int, order, tiles, threads, work,
                       axes, block_marks, thread_marks, init, update, copies: list, finals: list, apply_band,
                       barrier: str | None):
    """`schedule` pulled back onto `new_model` by `targets` (statement -> (old statement,
    index expressions)), every outer band mapped by `apply_band(node, band)` but band `k`,
    rebuilt as the module says. Per band position p (output axis order[p]): `tiles[p]`
    outputs per block, `threads[p]` points, `work[p]` outputs per point, `axes[p]` its
    point axis name for the copies' spread ('x' fastest), the marks of its block and point
    members."""
    pulled = pull_back(schedule, new_model, targets)
    ctx = new_model.ctx
    ax = {p: axes[p] for p in range(n)}
    nt = {axes[p]: threads[p] for p in range(n)}
    points = math.prod(threads)
    unroll = [MARK_UNROLL if w > 1 else None for w in work]
    mine = {init.name, update.name, *(c.name for c in copies), *(f.name for f in finals)}

    def cols(stmts, expr):
        return [{s.name: (len(s.iters), expr(p, order[p])) for s in stmts} for p in range(n)]

    def apply(node, band):
        if band != k:
            return apply_band(node, band)
        names = []
        node.get_domain().foreach_set(lambda st: names.append(st.get_tuple_name()))
        if set(names) != mine:
            raise ScheduleError(f"band {k}: register tiles need the band to hold only the reduction and its epilogue")
        old_band = isl.UnionMap.from_multi_union_pw_aff(node.band_get_partial_schedule())
        for e in finals:  # the band's loops are the outputs, in order
            names_e = ", ".join(f"i{d}" for d in range(len(e.iters)))
            ident = isl.UnionMap(f"{{ {e.name}[{names_e}] -> [{', '.join(f'i{d}' for d in range(n))}] }}",
                                 context=ctx)
            dom = isl.UnionSet.from_set(e.domain)
            if not old_band.intersect_domain(dom).is_equal(ident.intersect_domain(dom)):
                raise ScheduleError(f"band {k}: {e.op.name} does not run at its own outputs in the band")
        node = node.cut()
        node = node.delete() if node.get_type() == isl.schedule_node_type.band else node
        block = cols([init, update, *copies], lambda p, a: f"i{a}")
        for p, a in enumerate(order):
            block[p].update({f.name: (len(f.iters), f"floor(i{a} / {tiles[p]})") for f in finals})
        top = _band(node, ctx, block, block_marks)
        depth = top.get_tree_depth()
        rest, passed = top, 0
        while passed < n:  # below the block members (one band each, some under marks)
            passed += rest.get_type() == isl.schedule_node_type.band
            rest = rest.child(0)
        groups = [[init], [update, *copies], finals]
        lst = isl.UnionSetList.alloc(ctx, 3)
        for g in groups:
            lst = lst.add(_filter(ctx, [(s.name, len(s.iters)) for s in g]))
        seq = rest.insert_sequence(lst)
        sdepth = seq.get_tree_depth()

        def back(node):
            return node.ancestor(node.get_tree_depth() - sdepth)

        # the accumulators' init: each point its outputs
        seq = back(_stack(seq.child(0).child(0), ctx, [
            (cols([init], lambda p, a: f"i{n + a}"), thread_marks),
            (cols([init], lambda p, a: f"i{2 * n + a}"), unroll)]))
        # the stores and the epilogue: each point its outputs, every statement per output
        leaf = seq.child(2).child(0)
        if len(finals) > 1:
            lst = isl.UnionSetList.alloc(ctx, len(finals))
            for f in finals:
                lst = lst.add(_filter(ctx, [(f.name, len(f.iters))]))
            leaf = leaf.insert_sequence(lst)
        # a point's outputs unrolled by isl itself, each under its own guard: a partial tile's
        # loop would have a varying trip count and index the accumulators by a variable
        outs = leaf.insert_partial_schedule(_mupa_of(ctx, cols(finals, lambda p, a:
                                                                f"floor((i{a} mod {tiles[p]}) / {threads[p]})")))
        for p in range(n):
            if work[p] > 1:
                outs = outs.band_member_set_ast_loop_type(p, isl.ast_loop_type.unroll)
        seq = back(_stack(outs, ctx, [
            (cols(finals, lambda p, a: f"(i{a} mod {tiles[p]}) mod {threads[p]}"), thread_marks)]))
        # the k-tiles: copies, then the update
        kt = seq.child(1).child(0)
        kt = kt.insert_partial_schedule(_mupa(ctx, {**{update.name: (len(update.iters), f"i{3 * n}")},
                                                    **{c.name: (len(c.iters), f"i{n}") for c in copies}}))
        parts = [*copies, update]
        lst = isl.UnionSetList.alloc(ctx, len(parts))
        for s in parts:
            lst = lst.add(_filter(ctx, [(s.name, len(s.iters))]))
        inner = kt.child(0).insert_sequence(lst)
        idepth = inner.get_tree_depth()
        for j, s in enumerate(parts):
            leaf = inner.child(j).child(0)
            mark = barrier if s is update or s is copies[-1] else None
            if s is update:  # each point its outputs: the k-tile's terms, each term over the outputs
                layers = [(cols([s], lambda p, a: f"i{n + a}"), thread_marks),
                          ([{s.name: (len(s.iters), f"i{3 * n + 1}")}], [None]),
                          (cols([s], lambda p, a: f"i{2 * n + a}"), unroll)]
            else:  # element f of the flattened box on point f mod points (x fastest), cyclically
                layers = [(_copy_cols(s, n, ax, nt), thread_marks),
                          ([{s.name: (len(s.iters), f"floor(i{n + 1} / {points})")}], [None])]
            top_j = _stack(leaf, ctx, layers, mark)
            inner = top_j.ancestor(top_j.get_tree_depth() - idepth)
        return inner.ancestor(inner.get_tree_depth() - depth)

    return tree.map_outer_bands(new_model, pulled, apply)

"""The GM <-> UB copies of a tile region's boxes in the NPU backend's translation
(`box_dmas`): strided DMAs with their dims merged, at most 3 per DMA (outer dims as loops), a
box that reaches past its tensor brought in by its part inside it, and such a part whose place
in the box is no 32-byte boundary shifted by way of a GM workspace."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from akg.backends.npu.boxes import Local
from akg.backends.npu.syncs import HALF
from akg.backends.npu.vector import _NotDense

if TYPE_CHECKING:
    from akg.backends.npu.translator import Translator


def copy(tr: Translator, src, sbase, dst, dbase, dims: list, reads: list, writes: list):
    """One strided copy `dst[dbase + sum i_d dst_d] = src[sbase + sum i_d src_d]` over `dims`
    (extent, src stride, dst stride; outer to inner) as an access record: dims merged where
    both sides are contiguous, at most 3 per DMA, the outer ones as loops."""
    isa = tr.isa
    merged = []
    for n, ss, ds in dims:
        if n <= 1:
            continue
        if merged and merged[-1][1] == ss * n and merged[-1][2] == ds * n:
            merged[-1] = (merged[-1][0] * n, ss, ds)
        else:
            merged.append((n, ss, ds))
    merged = merged or [(1, 1, 1)]
    if tr.dense:
        block = tr.spec.vector_block_bytes
        for buf, k in ((src, 1), (dst, 2)):
            if buf.scope is not isa.Scope.GM and any(d[0] > 1 and d[k] != 1 and (d[k] * buf.itemsize) % block
                                                     for d in merged):
                raise _NotDense()
    loops = []
    while len(merged) > 3:
        n, ss, ds = merged.pop(0)
        v = tr.fresh("d")
        loops.append((v, n))
        sbase = sbase + isa.var(v) * ss
        dbase = dbase + isa.var(v) * ds
    shape = tuple(n for n, _s, _d in merged)
    instr = isa.Dma(src.ref(sbase), dst.ref(dbase), shape, tuple(s for _n, s, _d in merged),
                    tuple(d for _n, _s, d in merged))
    for v, n in reversed(loops):
        instr = isa.Loop(v, n, (instr,))
    return ("acc", instr, list(reads), list(writes))


def box_dmas(tr: Translator, loc: Local, gm, into: bool, half) -> list:
    """The access records of the copy of a box between its tensor in GM and UB."""
    isa = tr.isa
    gstrides = list(isa.contiguous_strides(gm.shape)) if gm.shape else [1]
    gconst = 0
    if loc.view is not None:  # a window unfolded: the view's dims over the tensor's
        gstrides, gconst = loc.view.gm(gstrides)
    order = list(loc.perm) if loc.perm is not None else list(range(len(loc.sizes)))
    sizes, starts, shift = list(loc.sizes), [l for _o, l in loc.lo], 0
    if into and loc.view is None:
        # a box that reaches past the tensor (the unchosen branch of a select: `c < 4 ?
        # a[c] : b[c - 4]`) brings in only the part inside it, where the box does not move
        # with the outer loops; the lanes outside are never chosen
        for d, ((outer, lo), size) in enumerate(zip(loc.lo, loc.sizes)):
            if outer or d >= len(gm.shape):
                continue
            start, end = max(lo, 0), min(lo + size, gm.shape[d])
            if (start, end) != (lo, lo + size) and end > start:
                sizes[d], starts[d] = end - start, start
                shift += (start - lo) * loc.strides[d]
    dims = [(sizes[d], gstrides[d], loc.strides[d]) for d in order if sizes[d] > 1]
    gbase = isa.Affine(gconst)
    for (o, _l), l, gs in zip(loc.lo, starts, gstrides):
        gbase = gbase + tr.iaff(o, l) * gs
    hbase = isa.var(half) * loc.slot_elems if loc.halves else isa.Affine()
    slot = (loc.buffer.name, HALF if loc.halves else None)
    gslot = (gm.name, None)
    if not into:
        return [copy(tr, loc.buffer, hbase, gm, gbase, [(n, l, g) for n, g, l in dims], [slot], [gslot])]
    if (shift * loc.buffer.itemsize) % tr.spec.ub_alignment:
        return _shifted_in(tr, loc, gm, gbase, dims, shift, hbase, half)
    return [copy(tr, gm, gbase, loc.buffer, hbase + shift, dims, [gslot], [slot])]


def _shifted_in(tr: Translator, loc: Local, gm, gbase, dims: list, shift: int, hbase, half) -> list:
    """A box's part inside its tensor whose place in the box (`shift` elements from its start)
    is no 32-byte boundary: the part of a concat's or a pad's input that a fused consumer reads
    `k` elements in (`c < 3 ? a[c] : b[c - 3]`, `x[c - 2]` padded by 2). No DMA writes UB there
    and no vector instruction moves lanes, so the part goes by way of GM, whose addresses need
    no alignment: brought in at the box's start (aligned), written to this block's copy of the
    box in a GM workspace at its place, and the box brought back whole. (The box's other
    elements come back as the workspace holds them: the select never chooses them.)"""
    isa = tr.isa
    ub = loc.buffer
    extent = 1 + sum((n - 1) * s for n, s in zip(loc.sizes, loc.strides))
    slots = 2 if loc.halves else 1
    elems = loc.slot_elems if loc.halves else extent
    blocks = math.prod(tr.grid) if tr.grid else tr.blocks
    ws = isa.Buffer(isa.Scope.GM, tr.fresh(tr._ident(loc.name) + "_shift_ws"), (blocks * slots * elems,), ub.dtype)
    tr.workspaces.append(ws)
    wbase = (isa.BLOCK * slots + (isa.var(half) if loc.halves else 0)) * elems
    slot = (ub.name, HALF if loc.halves else None)
    wslot = (ws.name, HALF if loc.halves else None)
    return [copy(tr, gm, gbase, ub, hbase, dims, [(gm.name, None)], [slot]),
            copy(tr, ub, hbase, ws, wbase + shift, [(n, l, l) for n, _g, l in dims], [slot], [wslot]),
            copy(tr, ws, wbase, ub, hbase, [(extent, 1, 1)], [wslot], [slot])]

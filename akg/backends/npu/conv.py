"""Convolutions on the cube: a tile region marked `npu.tile.<band>.<buffers>.k<kt>.c<ct>` by the
recipe whose statements are an accumulator init, a window multiply-accumulate `acc[b, f, y, x]
+= X[b, c, y*sh + ry*dh - pt, x*sw + rx*dw - pl] * W[f, c, ry, rx]` (X possibly read through its
zero-padding test) and the cast of the accumulator to the fp16 output. Everything is read from
the statement's access functions: which loop is which, the strides, the dilation, the padding.

It is the matmul out[f, n] = W[f, k] @ im2col(X)[k, n] with k = (c, ry, rx) and n = (b, y, x):
for each L1 chunk of `ct` channels (ping-pong halves under double buffering), GM -> L1 on MTE2
of the tile's input rows as `[c1][image][row][col][16]` (NC1HWC0: each input byte once) and of
the filters' chunk as zN; then for each K step of `kt` (ping-pong halves too) on MTE1 the
filters L1 -> L0A (zZ) and `Img2col` L1 -> L0B (nZ, the taps and the zero padding made there);
one `mmad` per step into L0C (fp32, accumulating after the first step). Each image's output
positions are padded to whole fractals in L0B/L0C; L0C -> UB (converted to fp16) moves whole
fractal columns, UB -> GM only the real positions."""

from __future__ import annotations

from akg.backends.npu.affine import _affine, _buf, _is_load
from akg.backends.npu.errors import NpuMappingError
from akg.backends.npu.parse import _nests
from akg.backends.npu.syncs import HALF, Compound, SyncPass

FRACTAL = 16


class NpuConvError(NpuMappingError):
    """A convolution tile region the cube mapping does not take (not supported yet)."""


def chunk_of(region_name: str) -> int:
    """The channels per L1 chunk of a convolution's mark (`...k<kt>.c<ct>`); 0 for a matmul."""
    parts = region_name.split(".")
    return int(parts[5][1:]) if len(parts) > 5 and parts[5].startswith("c") and parts[5][1:].isdigit() else 0


def _strip_cast(e):
    while type(e).__name__ == "Cast":
        e = e.value
    return e


def _padded_load(e):
    """(load, condition) of `if_then_else(cond, X[..], 0)`, (load, None) of a plain load."""
    e = _strip_cast(e)
    if _is_load(e):
        return e, None
    name = type(e).__name__
    if name == "Call" and str(e.op.name).endswith("if_then_else") or name == "Select":
        cond, t, f = (e.args if name == "Call" else (e.condition, e.true_value, e.false_value))
        t = _strip_cast(t)
        if _is_load(t) and type(f).__name__ in ("FloatImm", "IntImm") and float(f.value) == 0.0:
            return t, cond
    return None


def _mac(nest):
    """(X load, its padding condition, W load) of `acc[i] = acc[i] + X' * W'`, else None."""
    store, value = nest.store, nest.store.value
    if type(value).__name__ != "Add":
        return None
    for acc, prod in ((value.a, value.b), (value.b, value.a)):
        if not (_is_load(acc) and acc.source.same_as(store.buffer)) or type(prod).__name__ != "Mul":
            continue
        for xe, we in ((prod.a, prod.b), (prod.b, prod.a)):
            xs, w = _padded_load(xe), _strip_cast(we)
            if xs is not None and _is_load(w) and len(xs[0].indices) == 4 and len(w.indices) == 4:
                return xs[0], xs[1], w
    return None


def _split(idx, inner: set, where: str):
    """(inner {Var: coeff}, outer {Var: coeff}, const) of an index."""
    coeffs, const = _affine(idx, where)
    return ({v: c for v, c in coeffs.items() if v in inner}, {v: c for v, c in coeffs.items() if v not in inner},
            const)


def _check_padding(cond, xload, where: str) -> None:
    """The condition must be the bounds test of the load's own indices: `0 <= i` / `i < extent`."""
    terms = []

    def split(c):
        if type(c).__name__ == "And":
            split(c.a)
            split(c.b)
        else:
            terms.append(c)

    split(cond)
    forms = [_affine(i, where) for i in xload.indices]
    shape = [int(s) for s in xload.source.shape]
    for t in terms:
        kind = type(t).__name__
        ok = kind in ("GE", "LT") and type(t.b).__name__ == "IntImm"
        if ok:
            form = _affine(t.a, where)
            dims = [d for d, f in enumerate(forms) if f == form]
            bound = int(t.b.value)
            ok = bool(dims) and (kind == "GE" and bound == 0 or kind == "LT" and bound == shape[dims[0]])
        if not ok:
            raise NpuConvError(f"{where}: the convolution's input is guarded by `{t}`, not by its padding's bounds "
                               f"test (not supported yet)")


def conv_region(tr, region, half, kt: int, ct: int, where: str) -> list:
    """The instructions (with their access records) of a convolution's tile region."""
    from akg.backends.npu.layout import ZN, ZZ, layout_dmas

    isa = tr.isa
    nests = list(_nests(region.items))
    upd = next((n for n in nests if _mac(n) is not None), None)
    if upd is None or upd not in region.items:
        raise NpuConvError(f"{where}: a convolution tile region without a window multiply-accumulate")
    xl, cond, wl = _mac(upd)
    acc = upd.store.buffer
    init = [n for n in nests if n is not upd and n.store.buffer.same_as(acc)
            and type(n.store.value).__name__ in ("FloatImm", "IntImm") and float(n.store.value.value) == 0.0]
    rest = [n for n in nests if n is not upd and n not in init]
    if len(rest) != 1 or not _is_load(_strip_cast(rest[0].store.value)) or \
            not _strip_cast(rest[0].store.value).source.same_as(acc) or str(rest[0].store.buffer.dtype) != "float16":
        raise NpuConvError(f"{where}: a convolution whose epilogue is more than the cast of its accumulator to "
                           f"float16 (not supported yet)")
    out_store = rest[0].store
    for ld in (xl, wl):
        if str(ld.source.dtype) != "float16":
            raise NpuConvError(f"{where}: operand '{ld.source.name}' is {ld.source.dtype}; the cube takes float16")
    if cond is not None:
        _check_padding(cond, xl, where)
    ext = {v: e for v, e in upd.loops}
    inner = set(ext)

    def one(idx, what):
        terms, outer, const = _split(idx, inner, where)
        if len(terms) > 1 or any(c != 1 for c in terms.values()):
            raise NpuConvError(f"{where}: {what} index {idx} is not one loop (not supported yet)")
        return (next(iter(terms)) if terms else None), outer, const

    # the accumulator is [image, filter, row, col]; the operands and the output may be in any
    # layout whose channel (and filter) dim is anywhere and whose other dims keep the order
    # image, row, col (NCHW, NHWC; weights OIHW, OHWI): each dim is found by its loop variable
    bv, fv, yv, xv = (one(i, "the accumulator")[0] for i in upd.store.indices)
    if fv is None:
        raise NpuConvError(f"{where}: the accumulator's filter dim is not a loop of the tile")
    reds = [v for v in ext if not any(s is not None and v.same_as(s) for s in (bv, fv, yv, xv))]
    cv = max(reds, key=lambda v: ext[v]) if reds else None
    if cv is None or any(ext[v] >= ext[cv] for v in reds if v is not cv):
        raise NpuConvError(f"{where}: the channel loop is not the longest reduction loop (kernel taps of 16 or "
                           f"more are not supported yet)")

    def dims_of(load, what, first):
        """(dim of `first`, dim of cv, the other dims in order) of an operand's indices."""
        forms = [_split(i, inner, where) for i in load.indices]
        with_ = [[d for d, f in enumerate(forms) if v is not None and any(u.same_as(v) for u in f[0])]
                 for v in (first, cv)]
        if first is not None and len(with_[0]) != 1 or len(with_[1]) != 1:
            raise NpuConvError(f"{where}: {what} is not read at one filter/image dim and one channel dim")
        c_dim = with_[1][0]
        terms, outer, const = forms[c_dim]
        if len(terms) != 1 or terms.get(cv) != 1 or outer or const:
            raise NpuConvError(f"{where}: {what} is not read at the whole channel range of the tile (groups are "
                               f"not supported yet)")
        rest = [d for d in range(len(forms)) if d != c_dim]
        return forms, c_dim, rest

    wf, wc_dim, w_rest = dims_of(wl, "the weights", fv)
    f_dim = next(d for d in w_rest if any(u.same_as(fv) for u in wf[d][0]))
    kr_dim, kc_dim = [d for d in w_rest if d != f_dim]
    (f_t, f_outer, f_const) = wf[f_dim]
    ryv = next(iter(wf[kr_dim][0]), None)
    rxv = next(iter(wf[kc_dim][0]), None)
    if len(f_t) != 1 or any(wf[d][1] or wf[d][2] or len(wf[d][0]) > 1 for d in (kr_dim, kc_dim)):
        raise NpuConvError(f"{where}: the weights are not read whole per tile (channel and taps inside the tile)")
    xf, xc_dim, (i_dim, r_dim, c_dim) = dims_of(xl, "the input", None)
    _bt, b_outer, b_const = xf[i_dim]
    if any(not (bv is not None and u.same_as(bv)) for u in _bt):
        raise NpuConvError(f"{where}: the input's image dim moves with another loop (not supported yet)")
    rows_t, rows_outer, top = xf[r_dim]
    cols_t, cols_outer, left = xf[c_dim]
    if any(not any(u.same_as(v) for v in (yv, ryv) if v is not None) for u in rows_t) or \
            any(not any(u.same_as(v) for v in (xv, rxv) if v is not None) for u in cols_t):
        raise NpuConvError(f"{where}: the input's row / column index is not output position x stride + tap x "
                           f"dilation (not supported yet)")
    sh, sw = (rows_t.get(yv, 1) if yv is not None else 1), (cols_t.get(xv, 1) if xv is not None else 1)
    dh = rows_t.get(ryv, 1) if ryv is not None else 1
    dw = cols_t.get(rxv, 1) if rxv is not None else 1
    if cols_outer:
        raise NpuConvError(f"{where}: output columns tiled (a tile takes whole output rows)")
    xshape = [int(v) for v in xl.source.shape]
    wshape = [int(v) for v in wl.source.shape]
    C, H, W = xshape[xc_dim], xshape[r_dim], xshape[c_dim]
    KH, KW = wshape[kr_dim], wshape[kc_dim]
    xs, ws = isa.contiguous_strides(xshape), isa.contiguous_strides(wshape)
    sxb, sxc, sxr, sxw = xs[i_dim], xs[xc_dim], xs[r_dim], xs[c_dim]
    swf, swc, swr, sww = ws[f_dim], ws[wc_dim], ws[kr_dim], ws[kc_dim]
    if sxr != W * sxw or swr != KW * sww:
        raise NpuConvError(f"{where}: input rows or kernel rows not contiguous runs of columns (not supported yet)")
    # the output: the cast's store, its filter dim found by the filter loop, the others in order
    of = [_split(i, inner, where) for i in out_store.indices]
    of_dim = [d for d, f in enumerate(of) if any(u.same_as(fv) for u in f[0])]
    if len(of_dim) != 1:
        raise NpuConvError(f"{where}: the output is not written at one filter dim")
    o_rest = [d for d in range(len(of)) if d != of_dim[0]]
    for d, v in zip(o_rest, (bv, yv, xv)):
        if any(v is None or not u.same_as(v) for u in of[d][0]):
            raise NpuConvError(f"{where}: the output's dims are not in the order image, row, column")
    oshape = [int(v) for v in out_store.buffer.shape]
    os_ = isa.contiguous_strides(oshape)
    sob, sof, soy, sox = os_[o_rest[0]], os_[of_dim[0]], os_[o_rest[1]], os_[o_rest[2]]
    OH, OW = oshape[o_rest[1]], oshape[o_rest[2]]
    if soy != OW * sox:
        raise NpuConvError(f"{where}: output rows not contiguous runs of columns (not supported yet)")
    bt = ext[bv] if bv is not None else 1
    ft = ext[fv]
    yt = ext[yv] if yv is not None else 1
    ow = ext[xv] if xv is not None else 1
    taps = KH * KW
    if ow != OW or ft % FRACTAL or C % FRACTAL or ct % FRACTAL or C % ct or (ct * taps) % kt or kt % FRACTAL:
        raise NpuConvError(f"{where}: tile (images {bt}, filters {ft}, rows {yt}, cols {ow} of {OW}), channels {C} "
                           f"in chunks of {ct}, K step {kt}: the cube needs whole output rows and channels, filters, "
                           f"chunks and steps in whole 16-element fractals")
    # input rows of the tile: the whole map for whole images, else the window's rows from y0 * sh
    whole = yt == OH
    if whole:
        rows, row0, pad_top = H, isa.Affine(), -top
        if rows_outer:
            raise NpuConvError(f"{where}: a whole-image tile whose rows move with an outer loop")
    else:
        if top != 0 or (OH - 1) * sh + (KH - 1) * dh >= H:
            raise NpuConvError(f"{where}: output rows tiled where the window reaches the padding rows "
                               f"(padded convolutions take whole images per tile)")
        rows, row0, pad_top = (yt - 1) * sh + (KH - 1) * dh + 1, tr.iaff(rows_outer, 0), 0
    positions = -(-(yt * OW) // FRACTAL) * FRACTAL
    n = bt * positions
    c1 = ct // FRACTAL
    chunks, steps = C // ct, ct * taps // kt
    buffers = int(region.name.split(".")[3]) if len(region.name.split(".")) > 3 else 1
    ways1 = 2 if buffers == 2 and chunks >= 2 and chunks % 2 == 0 else 1
    ways0 = 2 if buffers == 2 and steps >= 2 and steps % 2 == 0 else 1

    gx, gw, gout = tr._gm(_buf(xl)), tr._gm(_buf(wl)), tr._gm(out_store.buffer)
    fmap_elems = c1 * bt * rows * W * FRACTAL
    l1x = tr.alloc_in("L1", xl.source.name, (ways1, fmap_elems), "float16")
    l1w = tr.alloc_in("L1", wl.source.name, (ways1, ft * ct * taps), "float16")
    a0 = tr.alloc_in("L0A", wl.source.name, (ways0, ft * kt), "float16")
    b0 = tr.alloc_in("L0B", xl.source.name, (ways0, kt * n), "float16")
    c0 = tr.alloc_in("L0C", acc.name, (ft * n,), "float32")
    co, ch, so, sh_ = tr.fresh("c"), tr.fresh("ch"), tr.fresh("s"), tr.fresh("sh")
    chunk = isa.var(co) * 2 + isa.var(ch) if ways1 == 2 else isa.var(co) if chunks > 1 else isa.Affine()
    step = isa.var(so) * 2 + isa.var(sh_) if ways0 == 2 else isa.var(so) if steps > 1 else isa.Affine()
    h1 = isa.var(ch) if ways1 == 2 else isa.Affine()
    h0 = isa.var(sh_) if ways0 == 2 else isa.Affine()
    hs1, hs0 = (HALF if ways1 == 2 else None), (HALF if ways0 == 2 else None)

    # GM bases of the tile (outer loops and blocks)
    image0 = tr.iaff(b_outer, b_const)
    filter0 = tr.iaff(f_outer, f_const)
    xbase = image0 * sxb + row0 * sxr
    wbase = filter0 * swf

    # the chunk's loads: GM -> L1 on MTE2
    chunk_recs = []
    for i in range(bt):
        src = gx.ref(xbase + i * sxb + chunk * (ct * sxc))
        dst = l1x.ref(h1 * fmap_elems + i * (rows * W * FRACTAL))
        dma = isa.Dma(src, dst, (c1, rows * W, FRACTAL), (FRACTAL * sxc, sxw, sxc),
                      (bt * rows * W * FRACTAL, FRACTAL, 1))
        chunk_recs.append(("acc", dma, [(gx.name, None)], [(l1x.name, hs1)]))
    if taps == 1:  # a 1 x 1 window: the chunk's channel groups in one DMA (one start latency, not c1)
        src = gw.ref(wbase + chunk * ct * swc)
        dst = l1w.ref(h1 * (ft * ct * taps))
        dma = isa.Dma(src, dst, (c1, ft, FRACTAL), (FRACTAL * swc, swf, swc), (ft * FRACTAL, FRACTAL, 1))
        chunk_recs.append(("acc", dma, [(gw.name, None)], [(l1w.name, hs1)]))
    for j in range(c1 if taps > 1 else 0):
        src = gw.ref(wbase + (chunk * ct + j * FRACTAL) * swc)
        dst = l1w.ref(h1 * (ft * ct * taps) + j * (taps * ft * FRACTAL))
        dma = isa.Dma(src, dst, (taps, ft, FRACTAL), (sww, swf, swc), (ft * FRACTAL, FRACTAL, 1))
        chunk_recs.append(("acc", dma, [(gw.name, None)], [(l1w.name, hs1)]))

    # the K steps of a chunk: L1 -> L0A / L0B on MTE1, mmad on M
    a0r, b0r = a0.ref(h0 * (ft * kt)), b0.ref(h0 * (kt * n))
    step_recs = [("acc", d, [(l1w.name, hs1)], [(a0.name, hs0)])
                 for d in layout_dmas(l1w.ref(h1 * (ft * ct * taps) + step * (kt * ft)), a0r, ft, kt, ZN, ZZ)]
    load = isa.Img2col(l1x.ref(h1 * fmap_elems), b0r, (c1, bt, rows, W), (yt, OW), (KH, KW), (sh, sw), (dh, dw),
                       (pad_top, -left), step * (kt // FRACTAL), kt // FRACTAL)
    step_recs.append(("acc", load, [(l1x.name, hs1)], [(b0.name, hs0)]))
    kstep = chunk * steps + step
    accumulate = kstep if chunks * steps > 1 else False
    step_recs.append(("acc", isa.Mmad(c0.ref(0), a0r, b0r, ft, kt, n, accumulate=accumulate),
                      [(a0.name, hs0), (b0.name, hs0), (c0.name, None)], [(c0.name, None)]))
    steps_loop = _loop(isa, step_recs, so, sh_, steps, ways0, ids=(4, 5, 6))
    # the step loop as one unit of the chunk loop: it reads the chunk's L1 half on MTE1 and,
    # as a loop, keeps its L0 buffers to itself (the flags it waits for after its last
    # iteration drain them); M accumulates into L0C. A single step is no loop: its L0
    # accesses are the chunk loop's to order.
    l0 = steps == 1
    inner = Compound(steps_loop, {
        isa.Pipe.MTE1: ({(l1x.name, hs1), (l1w.name, hs1)}, {(a0.name, None), (b0.name, None)} if l0 else set()),
        isa.Pipe.M: ({(c0.name, None)} | ({(a0.name, None), (b0.name, None)} if l0 else set()), {(c0.name, None)})})
    chunk_loop = _loop(isa, chunk_recs + [inner], co, ch, chunks, ways1, ids=(1, 2, 2))
    kloop = Compound(chunk_loop, {
        isa.Pipe.MTE2: ({(gx.name, None), (gw.name, None)}, {(l1x.name, None), (l1w.name, None)}),
        isa.Pipe.MTE1: ({(l1x.name, None), (l1w.name, None)}, {(a0.name, None), (b0.name, None)}),
        isa.Pipe.M: ({(a0.name, None), (b0.name, None), (c0.name, None)}, {(c0.name, None)})})

    # L0C -> UB (fp16, whole fractal columns per image) -> GM (the real positions)
    ub = tr.alloc(out_store.buffer.name, (bt * ft * positions,), "float16")
    out_recs = []
    row_out0 = isa.Affine() if whole else _out_row0(tr, rows_outer, sh)
    obase = image0 * sob + filter0 * sof + row_out0 * soy
    for i in range(bt):
        src = c0.ref(i * positions * ft)
        dst = ub.ref(i * ft * positions)
        out_recs.append(("acc", isa.Dma(src, dst, (positions // FRACTAL, ft, FRACTAL), (ft * FRACTAL, FRACTAL, 1),
                                        (FRACTAL, positions, 1)), [(c0.name, None)], [(ub.name, None)]))
    for i in range(bt):
        src = ub.ref(i * ft * positions)
        dst = gout.ref(obase + i * sob)
        out_recs.append(("acc", isa.Dma(src, dst, (ft, yt * OW), (positions, 1), (sof, sox)),
                         [(ub.name, None)], [(gout.name, None)]))
    return [kloop] + out_recs


def _out_row0(tr, rows_outer: dict, sh: int):
    """The first output row of a tile from the outer part of the input row index (y0 * sh)."""
    out = {}
    for v, c in rows_outer.items():
        if c % sh:
            raise NpuConvError(f"{tr.name}: an output-row tile that does not start at a multiple of the stride")
        out[v] = c // sh
    return tr.iaff(out, 0)


def _loop(isa, recs, outer: str, half: str, trip: int, ways: int, ids) -> list:
    """`recs` in a loop of `trip` iterations (ping-pong pairs when `ways` is 2) with its syncs."""
    if ways == 2:
        body, before, after = SyncPass(half=half, ids=ids).body(recs, carried=2)
        return [*before, isa.Loop(outer, trip // 2, (isa.Loop(half, 2, tuple(body)),)), *after]
    if trip > 1:
        body, before, after = SyncPass(ids=ids).body(recs, carried=1)
        return [*before, isa.Loop(outer, trip, tuple(body)), *after]
    body, _before, _after = SyncPass(ids=ids).body(recs)
    return body

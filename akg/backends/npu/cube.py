"""Contractions on the cube: a tile region (marked `npu.tile.<band>.<buffers>.k<kt>` by the
recipe) whose statements are an accumulator init, a multiply-accumulate `C[..] = C[..] +
A[..] * B[..]` (found from the statement's shape and access functions, never from an op
name: transposed operands and batch dims are strides of the access functions) and an
element-wise epilogue.

The K loop runs in steps of `kt` (ping-pong halves under double buffering): GM -> L1 (zN for
A and B, nZ for a transposed A) on MTE2, L1 -> L0A (zZ) / L0B (nZ) on MTE1, one `mmad` per
step into L0C (fp32, `accumulate` = the step); then L0C -> UB (ND; converted to fp16 when the
epilogue only reads the accumulator through a cast to fp16) and the epilogue as vector
instructions on UB, then UB -> GM. Syncs come from the backend's sync pass."""

from __future__ import annotations

import numpy as np

from akg.backends.npu.affine import _affine, _buf, _is_load
from akg.backends.npu.boxes import Local
from akg.backends.npu.errors import NpuMappingError
from akg.backends.npu.parse import Nest, _dt, _loads, _nests
from akg.backends.npu.syncs import HALF, SyncPass, _compound
from akg.backends.npu.vector import _Compute


class NpuCubeError(NpuMappingError):
    """A contraction the cube cannot take as tiled (partial fractals, odd shapes)."""


def _strip_cast(e):
    while type(e).__name__ == "Cast":
        e = e.value
    return e


def mac_operands(nest, where: str):
    """(A load, B load) when `nest` is `C[idx] = C[idx] + A * B` (casts around A, B), else None."""
    store, value = nest.store, nest.store.value
    if type(value).__name__ != "Add":
        return None
    for acc, prod in ((value.a, value.b), (value.b, value.a)):
        if not (_is_load(acc) and acc.source.same_as(store.buffer)):
            continue
        if any(_affine(x, where) != _affine(y, where) for x, y in zip(acc.indices, store.indices)):
            continue
        if type(prod).__name__ != "Mul":
            continue
        a, b = _strip_cast(prod.a), _strip_cast(prod.b)
        if _is_load(a) and _is_load(b):
            return a, b
    return None


def _vars(load, where) -> dict:
    out = {}
    for idx in load.indices:
        for v, c in _affine(idx, where)[0].items():
            out[v] = c
    return out


def _has(d: dict, v) -> bool:
    return any(v.same_as(w) for w in d)


def _cast_only(expr, acc) -> bool:
    """Does `expr` read `acc` only as `Cast(float16, acc[..])`?"""
    ok = True

    def visit(e, under_cast):
        nonlocal ok
        t = type(e).__name__
        if t == "TensorLoad":
            if e.source.same_as(acc) and not under_cast:
                ok = False
            return
        if t == "Cast":
            visit(e.value, _dt(e) == "float16")
            return
        if t == "Call":
            for a in e.args:
                visit(a, False)
            return
        for name in ("a", "b", "value", "condition", "true_value", "false_value"):
            if hasattr(e, name):
                visit(getattr(e, name), False)

    visit(expr, False)
    return ok


def cube_region(tr, region, half, kt: int, where: str) -> list:
    from akg.backends.npu.layout import ND, NZ, ZN, a_operand_dmas, layout_dmas

    from akg.backends.npu.conv import chunk_of, conv_region

    if chunk_of(region.name):
        return conv_region(tr, region, half, kt, chunk_of(region.name), where)
    isa, spec = tr.isa, tr.spec
    nests = list(_nests(region.items))
    upd = next((n for n in nests if mac_operands(n, where) is not None), None)
    if upd is None:
        raise NpuCubeError(f"{where}: a cube tile region without a multiply-accumulate statement")
    if upd not in region.items:
        raise NpuCubeError(f"{where}: the multiply-accumulate is inside a serial loop with other statements "
                           f"(not supported yet)")
    acc = upd.store.buffer
    la, lb = mac_operands(upd, where)
    for ld in (la, lb):
        if str(ld.source.dtype) != "float16":
            raise NpuCubeError(f"{where}: operand '{ld.source.name}' is {ld.source.dtype}; the cube takes float16")
    init = [n for n in nests if n is not upd and n.store.buffer.same_as(acc)
            and type(n.store.value).__name__ in ("FloatImm", "IntImm") and float(n.store.value.value) == 0.0]
    epi_items = [it for it in region.items if not (isinstance(it, Nest) and (it is upd or it in init))]
    ext = {v: e for v, e in upd.loops}
    loops = [v for v, e in upd.loops if e > 1]
    sv, av, bv = _vars(upd.store, where), _vars(la, where), _vars(lb, where)
    ks = [v for v in loops if not _has(sv, v) and _has(av, v) and _has(bv, v)]
    ms = [v for v in loops if _has(sv, v) and _has(av, v) and not _has(bv, v)]
    ns = [v for v in loops if _has(sv, v) and _has(bv, v) and not _has(av, v)]
    if len(ks) != 1 or len(ms) != 1 or len(ns) != 1 or len(loops) != 3:
        raise NpuCubeError(f"{where}: the multiply-accumulate is not one m x n x k contraction per tile "
                           f"(loops {[(str(v), e) for v, e in upd.loops]}; batch members must be tiled by 1)")
    kv, mv, nv = ks[0], ms[0], ns[0]
    mt, nt, K = ext[mv], ext[nv], ext[kv]
    f = spec.fractal
    if mt % f or nt % f or K % f or kt % f or K % kt:
        raise NpuCubeError(f"{where}: a {mt} x {nt} x {K} tile (K step {kt}) is not in whole {f} x {f} fractals; "
                           f"partial fractals are refused (no padding)")
    steps = K // kt
    buffers = int(region.name.split(".")[3]) if len(region.name.split(".")) > 3 else 1
    ways = 2 if buffers == 2 and steps >= 2 and steps % 2 == 0 else 1
    inner = {v for v in loops}

    def geometry(load, rv, cv):
        """GM base (outer loops), element strides of the row and column vars."""
        gm = tr._gm(_buf(load))
        gstrides = list(isa.contiguous_strides(gm.shape)) if gm.shape else [1]
        base, sr, sc = isa.Affine(), 0, 0
        for d, idx in enumerate(load.indices):
            coeffs, const = _affine(idx, where)
            outer = {v: c for v, c in coeffs.items() if v not in inner and ext.get(v, 2) > 1}
            base = base + tr.iaff(outer, const) * gstrides[d]
            for v, c in coeffs.items():
                if v.same_as(rv):
                    sr += c * gstrides[d]
                if v.same_as(cv):
                    sc += c * gstrides[d]
        return gm, base, sr, sc

    ga, abase, sam, sak = geometry(la, mv, kv)
    gb, bbase, sbk, sbn = geometry(lb, kv, nv)
    if sak != 1 and sam != 1 or sbn != 1 and sbk != 1:
        raise NpuCubeError(f"{where}: an operand with neither matrix dim contiguous in GM (not supported yet)")
    # the epilogue's tensors in UB (the accumulator first: written by L0C -> UB)
    locals_: dict[str, Local] = {}
    first_access: dict[str, str] = {acc.name: "w"}
    tir_bufs = {acc.name: acc}
    tr._extend_box(locals_, acc, upd.store.indices, [(mv, mt), (nv, nt)], where)
    epi = list(_nests(epi_items))
    for nest in epi:
        for a, kind in [(l, "r") for l in _loads(nest.store.value)] + [(nest.store, "w")]:
            b = _buf(a)
            tir_bufs[b.name] = b
            first_access.setdefault(b.name, kind)
            tr._extend_box(locals_, b, a.indices, nest.loops, where)
    outputs = {b.name for b in tr.func.params}
    acc_shared = acc.name in outputs or len(tr.region_users[acc.name]) > 1
    loc = locals_[acc.name]
    if not acc_shared and epi and all(_cast_only(n.store.value, acc) for n in epi):
        loc.dtype = "float16"  # converted on the way out of L0C
    # an epilogue that is only `out[i] = float16(acc[i])` with acc's box: acc's UB tile (fp16
    # from L0C) is the output tile, written to GM as it is (no vector copy)
    direct = None
    if loc.dtype == "float16" and len(epi) == 1 and len(epi_items) == 1 and epi_items[0] is epi[0]:
        store, value = epi[0].store, _strip_cast(epi[0].store.value)
        same = [_affine(i, where) for i in upd.store.indices]
        if (_is_load(value) and value.source.same_as(acc) and str(store.buffer.dtype) == "float16"
                and [int(d) for d in store.buffer.shape] == [int(d) for d in acc.shape]
                and [_affine(i, where) for i in value.indices] == same
                and [_affine(i, where) for i in store.indices] == same):
            direct = store.buffer
            del locals_[direct.name]
    written = {n.store.buffer.name for n in epi} | {acc.name}
    read = {l.source.name for n in epi for l in _loads(n.store.value)}
    pre, post = [], []
    for name, lc in locals_.items():
        shared = name in outputs or len(tr.region_users[name]) > 1
        gm_backed = shared or name in tr.params
        copy_in = gm_backed and name in read and first_access[name] == "r"
        copy_out = gm_backed and name in written and shared
        lc.halves = half is not None and (copy_in or copy_out)
        padded = tr._layout(lc)
        if lc.halves:
            lc.slot_elems = -(-padded // tr._block(lc.dtype)) * tr._block(lc.dtype)
            lc.buffer = tr.alloc(name, (2, lc.slot_elems), lc.dtype)
        else:
            lc.buffer = tr.alloc(name, (padded,), lc.dtype)
        if copy_in:
            pre.extend(tr._dma(lc, tr._gm(tir_bufs[name]), into=True, half=half))
        if copy_out:
            post.extend(tr._dma(lc, tr._gm(tir_bufs[name]), into=False, half=half))
    if direct is not None:
        post.extend(tr._dma(loc, tr._gm(direct), into=False, half=half))
    # the accumulator's m and n dims in its UB box: n last and contiguous
    dims = {}
    for d, idx in enumerate(upd.store.indices):
        for v, c in _affine(idx, where)[0].items():
            if v.same_as(mv) or v.same_as(nv):
                if c != 1:
                    raise NpuCubeError(f"{where}: the accumulator is strided along a tile loop (not supported yet)")
                dims["m" if v.same_as(mv) else "n"] = d
    if loc.strides[dims["n"]] != 1 or any(s > 1 for d, s in enumerate(loc.sizes) if d not in dims.values()):
        raise NpuCubeError(f"{where}: the accumulator's n dim is not its last (not supported yet)")
    ld = loc.strides[dims["m"]]
    ubase = isa.var(half) * loc.slot_elems if loc.halves else isa.Affine()
    slot = (loc.buffer.name, HALF if loc.halves else None)
    from akg.backends.npu.cube_panel import panel_plan, panel_region

    chunks = panel_plan(spec, half, direct, pre, post, mt, nt, kt, K, ways)
    if chunks:
        return panel_region(tr, chunks, ga, abase, sam, sak, gb, bbase, sbk, sbn, mt, nt, kt, K, ways, acc, loc, ld,
                            post[0])
    a1 = tr.alloc_in("L1", la.source.name, (ways, mt * kt), "float16")
    b1 = tr.alloc_in("L1", lb.source.name, (ways, kt * nt), "float16")
    a0 = tr.alloc_in("L0A", la.source.name, (ways, mt * kt), "float16")
    b0 = tr.alloc_in("L0B", lb.source.name, (ways, kt * nt), "float16")
    c0 = tr.alloc_in("L0C", acc.name, (mt * nt,), "float32")
    ko, kh = tr.fresh("k"), tr.fresh("kh")
    if ways == 2:
        hv, kstep = isa.var(kh), isa.var(ko) * 2 + isa.var(kh)
    elif steps > 1:
        hv, kstep = isa.Affine(), isa.var(ko)
    else:
        hv, kstep = isa.Affine(), isa.Affine()
    hs = HALF if ways == 2 else None
    recs = []

    def add(dmas, reads, writes):
        recs.extend(("acc", d, reads, writes) for d in dmas)

    a1r, b1r = a1.ref(hv * (mt * kt)), b1.ref(hv * (kt * nt))
    a0r, b0r = a0.ref(hv * (mt * kt)), b0.ref(hv * (kt * nt))
    asrc = ga.ref(abase + kstep * (kt * sak))
    bsrc = gb.ref(bbase + kstep * (kt * sbk))
    to_l1, l0a = a_operand_dmas(asrc, a1r, a0r, mt, kt, sak, sam, f)
    add(to_l1, [(ga.name, None)], [(a1.name, hs)])
    if sbn == 1:  # B[k, n]: ND -> zN -> nZ
        add(layout_dmas(bsrc, b1r, kt, nt, ND, ZN, src_ld=sbk), [(gb.name, None)], [(b1.name, hs)])
        l0b = layout_dmas(b1r, b0r, kt, nt, ZN, NZ)
    else:  # B stored [n, k]: zN of the n x k matrix is nZ of B
        add(layout_dmas(bsrc, b1r, nt, kt, ND, ZN, src_ld=sbn), [(gb.name, None)], [(b1.name, hs)])
        l0b = [isa.Dma(b1r, b0r, (kt * nt,))]
    add(l0a, [(a1.name, hs)], [(a0.name, hs)])
    add(l0b, [(b1.name, hs)], [(b0.name, hs)])
    accumulate = kstep if steps > 1 else False
    recs.append(("acc", isa.Mmad(c0.ref(0), a0r, b0r, mt, kt, nt, accumulate=accumulate),
                 [(a0.name, hs), (b0.name, hs), (c0.name, None)], [(c0.name, None)]))
    ids = (4, 5, 6)
    if ways == 2:
        body, before, after = SyncPass(half=kh, ids=ids).body(recs, carried=2)
        cube = _compound(recs, [*before, isa.Loop(ko, steps // 2, (isa.Loop(kh, 2, tuple(body)),)), *after])
    elif steps > 1:
        body, before, after = SyncPass(ids=ids).body(recs, carried=1)
        cube = _compound(recs, [*before, isa.Loop(ko, steps, tuple(body)), *after])
    else:
        body, _b, _a = SyncPass(ids=ids).body(recs)
        cube = _compound(recs, body)

    out = [("acc", d, [(c0.name, None)], [slot])
           for d in layout_dmas(c0.ref(0), loc.buffer.ref(ubase), mt, nt, ZN, ND, dst_ld=ld)]
    comp = _Compute(tr, locals_, half, where)
    body = [] if direct is not None else comp.items(epi_items)
    if direct is not None and not pre:
        chunked = chunked_write_out(tr, c0, loc, post, mt, nt, half)
        if chunked is not None:
            return [cube] + chunked
    return pre + [cube] + out + body + post


def as_matrix_store(store, mt: int, nt: int):
    """A UB -> GM store of an mt x nt tile as a 2-D DMA ((mt, nt), unit column strides), or
    None: a tile whose rows are whole GM rows may come as one flat DMA of mt * nt elements."""
    from akg.backends.npu import isa

    if not isinstance(store, isa.Dma):
        return None
    if len(store.shape) == 1 and store.shape[0] == mt * nt and store.src_strides == (1,) and store.dst_strides == (1,):
        return isa.Dma(store.src, store.dst, (mt, nt), (nt, 1), (nt, 1))
    if tuple(store.shape) == (mt, nt) and store.src_strides[1] == 1 and store.dst_strides[1] == 1:
        return store
    return None


WRITE_CHUNKS = 4  # column chunks of a directly stored cube tile: L0C -> UB of one overlaps UB -> GM of another


def chunked_write_out(tr, c0, loc, post: list, mt: int, nt: int, half):
    """The write-out of a cube tile stored as it is (fp16 from L0C), in column chunks with a
    UB buffer each, so that L0C -> UB (on V) of chunk c + 1 runs while chunk c goes to GM
    (on MTE3); None where the store is not one 2-D DMA of the tile or the chunks would not
    be whole fractals."""
    from akg.backends.npu.layout import ND, ZN, layout_dmas

    isa, f = tr.isa, tr.spec.fractal
    q = next((q for q in range(WRITE_CHUNKS, 1, -1) if nt % (q * f) == 0 and mt * (nt // q) * 2 >= 4096), 1)
    if q < 2 or half is not None or len(post) != 1 or not isinstance(post[0], tuple):
        return None
    store = as_matrix_store(post[0][1], mt, nt)
    if store is None or store.src.buffer is not loc.buffer:
        return None
    nc = nt // q
    out = []
    for c in range(q):
        ub = tr.alloc(f"{loc.buffer.name}_c{c}", (mt * nc,), "float16")
        out.extend(("acc", d, [(c0.name, None)], [(ub.name, None)])
                   for d in layout_dmas(c0.ref(c * nc * mt), ub.ref(0), mt, nc, ZN, ND, dst_ld=nc))
        dst = isa.Ref(store.dst.buffer, store.dst.offset + c * nc)
        out.append(("acc", isa.Dma(ub.ref(0), dst, (mt, nc), (nc, 1), store.dst_strides),
                    [(ub.name, None)], post[0][3]))
    return out


def has_contraction(func) -> tuple[bool, str]:
    """(a multiply-accumulate statement somewhere in the kernel, its operand dtype)."""
    from tvm import tirx

    found = []

    def visit(s):
        if isinstance(s, tirx.BufferStore):
            try:
                ops = mac_operands(Nest(s, []), "kernel")
            except NpuMappingError:
                ops = None
            if ops is not None:
                found.append(str(ops[0].source.dtype))
            return
        for name in ("body", "then_case", "else_case"):
            child = getattr(s, name, None)
            if child is not None:
                visit(child)
        if isinstance(s, tirx.SeqStmt):
            for x in s.seq:
                visit(x)

    visit(func.body)
    return (bool(found), found[0] if found else "")


__all__ = ["NpuCubeError", "cube_region", "has_contraction", "mac_operands", "np"]

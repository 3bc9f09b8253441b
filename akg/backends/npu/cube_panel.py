"""A cube tile in row chunks with B's panel kept in L1, so that a chunk's write-out overlaps
the next chunk's work.

A block's single mt x nt output tile otherwise ends with its whole write-out (L0C -> UB ->
GM) after the last mmad, every other pipe idle; when all cores write at once that write
runs at a core's share of the HBM cap (1.2 TB/s over 32 cores: 37.5 B/cycle), on a 1024^3
matmul a ninth of the kernel. Here the tile runs as `q` chunks of mt / q rows in turn. The
first chunk streams its A rows and all of B's K x nt panel, which stays in L1; each later
chunk streams only its own A rows and reuses the panel, so GM reads are those of the
unchunked tile (A once, B once). Each chunk has its own L0C accumulator and L1 / L0
staging, so chunk c's L0C -> UB -> GM runs while chunk c + 1 loads and multiplies: its UB
-> GM goes a slice of rows per K step inside chunk c + 1's loop, each slice after the step's
read in program order. A core's MTE2 and MTE3 share its part of the HBM cap in program
order, so the reads keep their rate and the write takes what they leave (a write placed
after the whole loop would not even be dispatched before the loop's instructions are). A
chunk's closing flag waits come after the next chunk's loop (flag ids alternate between
chunks), so that loop's first reads do not wait for the previous chunk's last mmad. Only the
last chunk's write-out is exposed, and that one in column chunks (`cube.chunked_write_out`).

Used for a tile whose epilogue is the accumulator's cast to fp16 stored as it is, in a
region without ping-pong halves of its own, with its K steps double-buffered, when B's panel
and the chunks' buffers fit."""

from __future__ import annotations

from akg.backends.npu.syncs import HALF, SyncPass, _compound

CHUNKS = 2
MIN_STEPS = 8  # fewer K steps do not pay for the second loop


def panel_plan(spec, half, direct, pre: list, post: list, mt: int, nt: int, kt: int, K: int, ways: int) -> int:
    """The number of row chunks (0: the plain tile)."""
    q = CHUNKS
    f = spec.fractal
    if direct is None or half is not None or pre or ways != 2 or K // kt < MIN_STEPS or mt % (q * f) or len(post) != 1:
        return 0
    from akg.backends.npu.cube import as_matrix_store

    if not isinstance(post[0], tuple) or as_matrix_store(post[0][1], mt, nt) is None:
        return 0
    mq = mt // q
    if 2 * K * nt + q * ways * 2 * mq * kt > spec.l1_bytes or 4 * mt * nt > spec.l0c_bytes:
        return 0
    if q * ways * 2 * mq * kt > spec.l0a_bytes or q * ways * 2 * kt * nt > spec.l0b_bytes:
        return 0
    return q


def panel_region(tr, q: int, ga, abase, sam: int, sak: int, gb, bbase, sbk: int, sbn: int, mt: int, nt: int,
                 kt: int, K: int, ways: int, acc, loc, ld: int, post) -> list:
    """The chunked tile's records: per chunk its K loop (a compound), L0C -> UB and UB -> GM."""
    from akg.backends.npu import isa
    from akg.backends.npu.cube import chunked_write_out
    from akg.backends.npu.layout import ND, NZ, ZN, a_operand_dmas, layout_dmas

    spec = tr.spec
    f = spec.fractal
    steps = K // kt
    mq = mt // q
    from akg.backends.npu.cube import as_matrix_store

    store = as_matrix_store(post[1], mt, nt)
    b1 = tr.alloc_in("L1", gb.name, (steps * kt * nt,), "float16")  # B's K x nt panel, a zN block per K step
    a1s = [tr.alloc_in("L1", ga.name, (ways, mq * kt), "float16") for _ in range(q)]
    a0s = [tr.alloc_in("L0A", ga.name, (ways, mq * kt), "float16") for _ in range(q)]
    b0s = [tr.alloc_in("L0B", gb.name, (ways, kt * nt), "float16") for _ in range(q)]
    c0s = [tr.alloc_in("L0C", acc.name, (mq * nt,), "float32") for _ in range(q)]
    out, pending, closing = [], [], []
    for c in range(q):
        a1, a0, b0, c0 = a1s[c], a0s[c], b0s[c], c0s[c]
        ko, kh = tr.fresh("k"), tr.fresh("kh")
        if ways == 2:
            hv, kstep = isa.var(kh), isa.var(ko) * 2 + isa.var(kh)
        else:
            hv, kstep = isa.Affine(), isa.var(ko)
        hs = HALF if ways == 2 else None
        a1r, a0r, b0r = a1.ref(hv * (mq * kt)), a0.ref(hv * (mq * kt)), b0.ref(hv * (kt * nt))
        b1r = b1.ref(kstep * (kt * nt))
        # the panel's K steps are disjoint blocks: while the first chunk writes them, a step's
        # block is its ping-pong half as far as the syncs go; later chunks only read them
        b1slot = (b1.name, hs if c == 0 else None)
        recs = []

        def add(dmas, reads, writes):
            recs.extend(("acc", d, reads, writes) for d in dmas)

        asrc = ga.ref(abase + c * mq * sam + kstep * (kt * sak))
        to_l1, l0a = a_operand_dmas(asrc, a1r, a0r, mq, kt, sak, sam, f)
        add(to_l1, [(ga.name, None)], [(a1.name, hs)])
        if c == 0:
            bsrc = gb.ref(bbase + kstep * (kt * sbk))
            if sbn == 1:  # B[k, n]: ND -> zN
                add(layout_dmas(bsrc, b1r, kt, nt, ND, ZN, src_ld=sbk), [(gb.name, None)], [b1slot])
            else:  # B stored [n, k]: zN of the n x k matrix
                add(layout_dmas(bsrc, b1r, nt, kt, ND, ZN, src_ld=sbn), [(gb.name, None)], [b1slot])
        if pending and mq % steps == 0:
            # the previous chunk's rows go to GM a slice per K step, each after the step's read
            # in program order (reads first in the core's HBM share; the write takes the rest)
            (_a, prev, reads, writes), = pending
            rs = mq // steps
            src = isa.Ref(prev.src.buffer, prev.src.offset + kstep * (rs * prev.src_strides[0]))
            dst_s = isa.Ref(prev.dst.buffer, prev.dst.offset + kstep * (rs * prev.dst_strides[0]))
            recs.append(("acc", isa.Dma(src, dst_s, (rs, nt), prev.src_strides, prev.dst_strides), reads, writes))
            pending = []
        l0b = layout_dmas(b1r, b0r, kt, nt, ZN, NZ) if sbn == 1 else [isa.Dma(b1r, b0r, (kt * nt,))]
        add(l0a, [(a1.name, hs)], [(a0.name, hs)])
        add(l0b, [b1slot], [(b0.name, hs)])
        recs.append(("acc", isa.Mmad(c0.ref(0), a0r, b0r, mq, kt, nt, accumulate=kstep),
                     [(a0.name, hs), (b0.name, hs), (c0.name, None)], [(c0.name, None)]))
        # flag ids alternate between chunks, and a chunk's closing waits (which hold its pipes
        # until its last mmad) come after the next chunk's loop, so that loop's first reads do
        # not wait for them
        ids = (4, 5, 6) if c % 2 == 0 else (5, 1, 2)
        if ways == 2:
            body, before, after = SyncPass(half=kh, ids=ids).body(recs, carried=2)
            loop = isa.Loop(ko, steps // 2, (isa.Loop(kh, 2, tuple(body)),))
        else:
            body, before, after = SyncPass(ids=ids).body(recs, carried=1)
            loop = isa.Loop(ko, steps, tuple(body))
        out.append(_compound(recs, [*before, loop, *closing]) if c else _compound(recs, [*before, loop]))
        closing = after
        if c == q - 1:
            out.append(_compound(recs, list(after)))
        out.extend(pending)  # (the previous chunk's UB -> GM when it is not in slices in the loop)
        pending = []
        dst = isa.Ref(store.dst.buffer, store.dst.offset + c * mq * store.dst_strides[0])
        if c == q - 1:
            sub = ("acc", isa.Dma(store.src, dst, (mq, nt), store.src_strides, store.dst_strides), post[2], post[3])
            last = chunked_write_out(tr, c0, loc, [sub], mq, nt, None)
            if last is not None:
                out.extend(last)
                break
        ub = tr.alloc(f"{loc.buffer.name}_r{c}", (mq * nt,), "float16")
        out.extend(("acc", d, [(c0.name, None)], [(ub.name, None)])
                   for d in layout_dmas(c0.ref(0), ub.ref(0), mq, nt, ZN, ND, dst_ld=nt))
        pending.append(("acc", isa.Dma(ub.ref(0), dst, (mq, nt), (nt, 1), store.dst_strides),
                        [(ub.name, None)], post[3]))
    return out + pending

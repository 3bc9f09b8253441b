"""Hand-written NPU programs for the simulator's tests and speed measurement: an elementwise
add streamed through UB tiles (ping-pong buffers with flags, or one buffer), and a tiled
matmul GM -> L1 -> L0A/L0B -> mmad into L0C (float32) -> UB -> GM, double-buffered at L1
and at L0, its output tiles split over a grid of blocks."""

from __future__ import annotations

from akg.backends.npu.isa import (BLOCK, Buffer, Dma, Loop, Mmad, Pipe, Program, Scope, SetFlag, Vector, WaitFlag,
                                  block_axis, var)
from akg.backends.npu.layout import ND, NZ, ZN, ZZ, layout_dmas

MTE1, MTE2, MTE3, M, V = Pipe.MTE1, Pipe.MTE2, Pipe.MTE3, Pipe.M, Pipe.V


def add_program(n: int, tile: int, blocks: int = 1, double_buffer: bool = True,
                dtype: str = "float16") -> Program:
    """z = x + y over n elements: each block streams n / blocks elements through UB tiles of
    `tile` elements (two of each buffer under double buffering)."""
    lanes = 256 // (2 if dtype == "float16" else 4)
    ways = 2 if double_buffer else 1
    per_block = n // blocks
    tiles = per_block // tile
    assert per_block % tile == 0 and tiles % ways == 0 and tile % lanes == 0
    x, y, z = (Buffer(Scope.GM, name, (n,), dtype) for name in "xyz")
    nbytes = tile * (2 if dtype == "float16" else 4)
    ub = [Buffer(Scope.UB, f"{name}_ub", (ways, tile), dtype, offset=k * ways * nbytes)
          for k, name in enumerate("xyz")]
    i, j = var("i"), var("j")
    at = BLOCK * per_block + (i * ways + j) * tile
    xu, yu, zu = (b[j, 0] for b in ub)
    step = [
        WaitFlag(V, MTE2, j),
        Dma(x[at], xu, (tile,)),
        Dma(y[at], yu, (tile,)),
        SetFlag(MTE2, V, j),
        WaitFlag(MTE2, V, j),
        WaitFlag(MTE3, V, j),
        Vector("add", zu, (xu, yu), repeat=tile // lanes),
        SetFlag(V, MTE2, j),
        SetFlag(V, MTE3, j),
        WaitFlag(V, MTE3, j),
        Dma(zu, z[at], (tile,)),
        SetFlag(MTE3, V, j),
    ]
    free = [SetFlag(V, MTE2, w) for w in range(ways)] + [SetFlag(MTE3, V, w) for w in range(ways)]
    drain = [WaitFlag(V, MTE2, w) for w in range(ways)] + [WaitFlag(MTE3, V, w) for w in range(ways)]
    body = [*free, Loop("i", tiles // ways, (Loop("j", ways, tuple(step)),)), *drain]
    name = f"add_{dtype}_{n}_{'db' if double_buffer else 'sb'}"
    return Program(name, (x, y, z), tuple(ub), tuple(body), blocks=blocks)


def matmul_program(m: int, n: int, k: int, mt: int, nt: int, kt: int, kl: int,
                   out_dtype: str = "float16") -> Program:
    """C[m, n] = A[m, k] @ B[k, n] (float16 in, float32 sums, `out_dtype` out, all ND in GM).
    Block (b0, b1) of an (m / mt, n / nt) grid makes one mt x nt tile of C: K in chunks of
    `kl` through L1 (zN, ping-pong), each chunk in steps of `kt` through L0A (zZ) and L0B
    (nZ, ping-pong), one mmad per step into L0C; then L0C -> UB (ND, converted) -> GM."""
    chunks, steps = k // kl, kl // kt
    assert m % mt == n % nt == k % kl == kl % kt == 0 and chunks % 2 == 0 and steps % 2 == 0
    a = Buffer(Scope.GM, "a", (m, k), "float16")
    b = Buffer(Scope.GM, "b", (k, n), "float16")
    c = Buffer(Scope.GM, "c", (m, n), out_dtype)
    a1 = Buffer(Scope.L1, "a_l1", (2, mt * kl), "float16")
    b1 = Buffer(Scope.L1, "b_l1", (2, kl * nt), "float16", offset=a1.end)
    a0 = Buffer(Scope.L0A, "a_l0", (2, mt * kt), "float16")
    b0 = Buffer(Scope.L0B, "b_l0", (2, kt * nt), "float16")
    c0 = Buffer(Scope.L0C, "c_l0", (mt * nt,), "float32")
    cu = Buffer(Scope.UB, "c_ub", (mt, nt), out_dtype)
    co, cj, ko, kj = var("co"), var("cj"), var("ko"), var("kj")
    row, col = block_axis(0) * mt, block_axis(1) * nt
    chunk = co * 2 + cj
    kstep = ko * 2 + kj
    load_l0 = [
        WaitFlag(M, MTE1, kj),
        # the step's columns of the zN A chunk are a zN block at column kstep * kt
        *layout_dmas(a1[cj, kstep * kt * mt], a0[kj, 0], mt, kt, ZN, ZZ, src_full=(mt, kl)),
        # the step's rows of the zN B chunk: a zN block at row kstep * kt
        *layout_dmas(b1[cj, kstep * kt * 16], b0[kj, 0], kt, nt, ZN, NZ, src_full=(kl, nt)),
        SetFlag(MTE1, M, kj),
        WaitFlag(MTE1, M, kj),
        Mmad(c0[0], a0[kj, 0], b0[kj, 0], mt, kt, nt, accumulate=chunk * steps + kstep),
        SetFlag(M, MTE1, kj),
    ]
    load_l1 = [
        WaitFlag(MTE1, MTE2, cj),
        *layout_dmas(a[row, chunk * kl], a1[cj, 0], mt, kl, ND, ZN, src_ld=k),
        *layout_dmas(b[chunk * kl, col], b1[cj, 0], kl, nt, ND, ZN, src_ld=n),
        SetFlag(MTE2, MTE1, cj),
        WaitFlag(MTE2, MTE1, cj),
        Loop("ko", steps // 2, (Loop("kj", 2, tuple(load_l0)),)),
        SetFlag(MTE1, MTE2, cj),
    ]
    body = [
        SetFlag(MTE1, MTE2, 0), SetFlag(MTE1, MTE2, 1), SetFlag(M, MTE1, 0), SetFlag(M, MTE1, 1),
        Loop("co", chunks // 2, (Loop("cj", 2, tuple(load_l1)),)),
        WaitFlag(MTE1, MTE2, 0), WaitFlag(MTE1, MTE2, 1), WaitFlag(M, MTE1, 0), WaitFlag(M, MTE1, 1),
        SetFlag(M, V), WaitFlag(M, V),
        *layout_dmas(c0[0], cu[0, 0], mt, nt, ZN, ND),
        SetFlag(V, MTE3), WaitFlag(V, MTE3),
        Dma(cu[0, 0], c[row, col], (mt, nt), (nt, 1), (n, 1)),
    ]
    return Program(f"matmul_{m}x{n}x{k}", (a, b, c), (a1, b1, a0, b0, c0, cu), tuple(body),
                   grid=(m // mt, n // nt))


def drop(program: Program, unwanted) -> Program:
    """`program` without the instructions for which `unwanted(instr)` holds (loops kept)."""

    def keep(body):
        out = []
        for instr in body:
            if isinstance(instr, Loop):
                out.append(Loop(instr.var, instr.trip, keep(instr.body)))
            elif not unwanted(instr):
                out.append(instr)
        return tuple(out)

    return Program(program.name, program.params, program.buffers, keep(program.body), program.blocks,
                   program.grid)


def staged(name: str, inputs: dict, outputs: dict, body: list, extra_buffers=()) -> Program:
    """A program around UB work `body`: each UB buffer of `inputs` is loaded from a GM
    parameter of the same name with a `g_` prefix, each of `outputs` stored to one, with the
    flags that order them (MTE2 -> V before, V -> MTE3 after)."""
    params, loads, stores = [], [], []
    for buf in inputs.values():
        g = Buffer(Scope.GM, f"g_{buf.name}", buf.shape, buf.dtype)
        params.append(g)
        loads.append(Dma(g[0], buf[0], (buf.size,)))
    for buf in outputs.values():
        g = Buffer(Scope.GM, f"g_{buf.name}", buf.shape, buf.dtype)
        if g.name not in {p.name for p in params}:
            params.append(g)
        stores.append(Dma(buf[0], g[0], (buf.size,)))
    locals_ = {b.name: b for b in [*inputs.values(), *outputs.values(), *extra_buffers]}
    full = [*loads, SetFlag(MTE2, V), WaitFlag(MTE2, V), *body, SetFlag(V, MTE3), WaitFlag(V, MTE3), *stores]
    return Program(name, tuple(params), tuple(locals_.values()), tuple(full))

"""NPU recipe, contractions on the cube: finding a band's multiply-accumulate from its
statements (not from op names) and sizing its cube tile: the m x n tiles (multiples of 16),
the K step, whether the L1 / L0A / L0B / L0C / UB buffers hold them, and a rough time of the
tiles over the AI cores to choose among those that fit."""

from __future__ import annotations

from akg.polyhedral.bands import BandInfo


def contraction(program, info: BandInfo):
    """The multiply-accumulate of a band, found from its statements (not from op names): an
    update statement `C[..] += A[..] * B[..]` (casts allowed around the loads) with one summed
    axis. Returns (roles per band member: "m" in A only, "n" in B only, "b" in both,
    the summed extent K, the input dtype), or None."""
    from akg.graph.compute.expr import Call, Cast, Load, Var, walk

    if program is None:
        return None
    ops = program.ops()
    for name in info.statements:
        if not name.startswith("S") or name.endswith("_init") or not name[1:].isdigit():
            continue
        op = ops[int(name[1:])]
        red = op.reduce
        if red is None or red.reducer != "sum" or len(red.axes) != 1 or len(op.axes) != info.members:
            continue
        src = red.source
        if not (isinstance(src, Call) and src.op in ("mul", "multiply") and len(src.args) == 2):
            continue
        loads = []
        for a in src.args:
            while isinstance(a, Cast):
                a = a.value
            loads.append(a)
        if not all(isinstance(a, Load) for a in loads):
            continue
        ka = red.axes[0]
        uses = [{v for i in ld.indices for v in walk(i) if isinstance(v, Var)} for ld in loads]
        if not all(ka in u for u in uses):
            continue
        roles = []
        for ax in op.axes:
            ina, inb = ax in uses[0], ax in uses[1]
            roles.append("b" if ina and inb else "m" if ina else "n" if inb else "?")
        if roles.count("m") != 1 or roles.count("n") != 1 or "?" in roles:
            continue
        return tuple(roles), ka.extent, str(loads[0].tensor.dtype), str(loads[1].tensor.dtype)
    return None


def sixteens(n: int, cap: int = 256) -> list[int]:
    """Tile sizes for a cube dim: multiples of 16 dividing n, at most cap."""
    return [t for t in range(16, min(n, cap) + 1, 16) if n % t == 0]


def cube_fits(spec, mt: int, nt: int, kt: int, buffers: int, ub_bytes: int | None = None) -> bool:
    """Do the L1 / L0A / L0B / L0C / UB buffers of an mt x nt x kt cube tile fit? `ub_bytes`:
    UB bytes per output element (default: an epilogue with a few fp32 temporaries; 4 when
    the epilogue is the accumulator's cast to fp16, converted on its way out of L0C)."""
    ub = 2 + 2 + 2 * buffers + 4 if ub_bytes is None else ub_bytes
    return (2 * mt * kt * buffers <= spec.l0a_bytes and 2 * kt * nt * buffers <= spec.l0b_bytes
            and 2 * (mt + nt) * kt * buffers <= spec.l1_bytes and 4 * mt * nt <= spec.l0c_bytes
            and mt * nt * ub <= spec.ub_usable_bytes)


def cube_estimate(spec, tiles: int, mt: int, nt: int, K: int, kt: int, buffers: int) -> float:
    """A rough time in cycles of `tiles` mt x nt cube tiles over K in steps of kt, one per block:
    per wave, the busiest of the cube, MTE1 (L1 -> L0A / L0B, one DMA per 16 rows of B) and the
    GM reads (at a core's path rate, or its share of the L2), plus the first step's load, the
    write-out and the DMA latencies of the steps (the steps overlap under double buffering)."""
    cores = min(tiles, spec.cores)
    waves = -(-tiles // spec.cores)
    steps = K // kt
    shared = spec.l2_rate / cores if spec.l2_bytes else spec.gm_bytes_per_cycle / cores
    rate = min(spec.rate("GM->L1"), shared)
    cube = (mt // 16) * (nt // 16) * (K // 16) + steps * spec.cube_issue
    mte1 = (mt * K * 2 / spec.rate("L1->L0A") + K * nt * 2 / spec.rate("L1->L0B")
            + steps * (1 + kt // 16) * spec.dma_latency)
    reads = (mt + nt) * K * 2 / rate + steps * 2 * spec.dma_latency
    overlap = buffers == 2 and steps >= 2 and steps % 2 == 0
    work = max(cube, mte1, reads) if overlap else cube + mte1 + reads
    first = (mt + nt) * kt * 2 / rate + kt * nt * 2 / spec.rate("L1->L0B")
    out = mt * nt * 4 / spec.rate("L0C->UB") + mt * nt * 2 / spec.rate("UB->GM") + 4 * spec.dma_latency
    unique = (tiles * mt * nt * 2) / spec.gm_bytes_per_cycle
    return max(waves * (work + first + out), unique)

"""What a simulation reports: cycles and seconds, busy cycles per pipe, bytes per DMA path,
buffer high-water marks, the work done and the roofline it implies, and, on request, when
each instruction of one block ran. Every figure is a model's: the label says "npu-sim"."""

from __future__ import annotations

from dataclasses import dataclass, field

from akg.backends.npu.spec import Roofline

LABEL = "npu-sim"


@dataclass(frozen=True)
class TraceEntry:
    """One instruction of the traced block: listing index, pipe, start and end cycle, its
    text and the loop variables' values."""

    index: int
    pipe: str
    start: int
    end: int
    text: str
    iteration: tuple[tuple[str, int], ...] = ()

    @property
    def cycles(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class Wave:
    """`count` waves of `blocks` blocks running at once, one per core, each taking `cycles`."""

    count: int
    blocks: int
    cycles: int


@dataclass(frozen=True)
class SimReport:
    """Timing of one kernel run on the model. `pipe_busy` and `path_bytes` are summed over
    every block; `high_water` is per core; `roofline` is the machine's limit for the work this
    kernel did (cube flops, vector repeats, GM bytes: its HBM bytes at the HBM cap, all its GM
    path bytes at the paths' and the L2's rates) on all of the spec's cores. `gm_bytes` counts
    every byte over a GM path; of them `l2_hit_bytes` (per path) were served by the L2 and
    `hbm_bytes` went to HBM (read misses and every write)."""

    kernel: str
    spec: str  # NpuSpec.key()
    cycles: int
    seconds: float
    blocks: int
    waves: tuple[Wave, ...]
    pipe_busy: dict[str, int]
    path_bytes: dict[str, int]
    high_water: dict[str, int]
    capacity: dict[str, int]
    instructions: int  # dynamic instructions over all blocks (loop iterations not counted)
    cube_flops: int
    vector_repeats: int
    gm_bytes: int
    roofline: Roofline
    trace: tuple[TraceEntry, ...] | None = None
    label: str = LABEL
    l2_hit_bytes: dict[str, int] = field(default_factory=dict)
    hbm_bytes: int | None = None  # None: every GM byte (a report made without an L2)

    def __post_init__(self):
        if self.hbm_bytes is None:
            object.__setattr__(self, "hbm_bytes", self.gm_bytes - sum(self.l2_hit_bytes.values()))

    @property
    def l2_hits(self) -> int:
        """GM bytes the L2 served, all paths."""
        return sum(self.l2_hit_bytes.values())

    @property
    def fraction(self) -> float:
        """The roofline's bound over the cycles taken (1.0: at the machine's limit)."""
        return self.roofline.fraction(self.cycles)

    @property
    def cores(self) -> int:
        return max((w.blocks for w in self.waves), default=0)

    def utilization(self, pipe: str) -> float:
        """Busy fraction of `pipe` over the cores the kernel used."""
        return self.pipe_busy[pipe] / (self.cycles * self.cores) if self.cycles else 0.0

    def busy_intervals(self, pipe: str) -> list[tuple[int, int]]:
        """[start, end) intervals of the traced block's instructions on `pipe`, merged."""
        if self.trace is None:
            raise ValueError("this report has no trace (simulate with trace=True)")
        spans = sorted((e.start, e.end) for e in self.trace if e.pipe == pipe and e.end > e.start)
        merged: list[tuple[int, int]] = []
        for start, end in spans:
            if merged and start <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], end))
            else:
                merged.append((start, end))
        return merged

    def overlap(self, pipe_a: str, pipe_b: str) -> int:
        """Cycles of the traced block in which both pipes were busy."""
        a, b = self.busy_intervals(pipe_a), self.busy_intervals(pipe_b)
        total, j = 0, 0
        for start, end in a:
            while j < len(b) and b[j][1] <= start:
                j += 1
            k = j
            while k < len(b) and b[k][0] < end:
                total += min(end, b[k][1]) - max(start, b[k][0])
                k += 1
        return total

    def to_dict(self) -> dict:
        """The figures as plain JSON-able values (no trace)."""
        return {"label": self.label, "kernel": self.kernel, "spec": self.spec, "cycles": self.cycles,
                "seconds": self.seconds, "blocks": self.blocks,
                "waves": [[w.count, w.blocks, w.cycles] for w in self.waves],
                "pipe_busy": dict(self.pipe_busy), "path_bytes": dict(self.path_bytes),
                "high_water": dict(self.high_water), "instructions": self.instructions,
                "cube_flops": self.cube_flops, "vector_repeats": self.vector_repeats, "gm_bytes": self.gm_bytes,
                "hbm_bytes": self.hbm_bytes, "l2_hit_bytes": dict(self.l2_hit_bytes),
                "roofline": {"cube": self.roofline.cube, "vector": self.roofline.vector, "gm": self.roofline.gm,
                             "limit": self.roofline.limit},
                "fraction": self.fraction}

    def summary(self) -> str:
        """A few lines for people: cycles, time, roofline, pipes, paths, buffers."""
        r = self.roofline
        waves = ", ".join(f"{w.count} x {w.blocks} blocks x {w.cycles} cycles" for w in self.waves)
        lines = [
            f"{self.label}: kernel '{self.kernel}' on {self.spec}: {self.cycles} cycles "
            f"({self.seconds * 1e6:.2f} us simulated), {self.blocks} blocks ({waves})",
            f"  roofline: {r.bound:.0f} cycles, {r.limit}-bound (cube {r.cube:.0f}, vector {r.vector:.0f}, "
            f"gm {r.gm:.0f}); kernel at {100 * self.fraction:.1f}% of it",
            "  pipe busy: " + ", ".join(f"{p} {c} ({100 * self.utilization(p):.0f}%)"
                                         for p, c in self.pipe_busy.items() if c),
            "  bytes: " + (", ".join(f"{p} {b}" for p, b in self.path_bytes.items() if b) or "none"),
            f"  L2: {self.l2_hits} GM bytes hit ({100 * self.l2_hits / self.gm_bytes if self.gm_bytes else 0:.1f}%"
            + "".join(f", {p} {b}" for p, b in self.l2_hit_bytes.items() if b)
            + f"), HBM {self.hbm_bytes} bytes",
            "  high water: " + ", ".join(f"{s} {self.high_water[s]}/{self.capacity[s]}"
                                         for s in self.high_water if self.high_water[s]),
        ]
        return "\n".join(lines)


@dataclass(frozen=True)
class ContractionBound:
    """An attainable bound, in cycles, on an m x n x k fp16 contraction on the spec's cores,
    next to the pure cube roofline: the cube work, and the GM reads that the best tiling which
    fits the buffers still needs per core (at that core's GM -> L1 rate: its path rate, or its
    share of the L2 rate when lower), its writes (UB -> GM), and the unique bytes at the HBM cap.
    `tiling` says which tiling gave the reads ("C in L0C mt x nt", "A panel in L1", ...)."""

    cube: float
    reads: float
    writes: float
    hbm: float
    tiling: str

    @property
    def bound(self) -> float:
        return max(self.cube, self.reads, self.writes, self.hbm)

    @property
    def limit(self) -> str:
        return max((self.cube, "cube"), (self.reads, "per-core GM reads"), (self.writes, "per-core GM writes"),
                   (self.hbm, "HBM"))[1]

    def fraction(self, cycles: float) -> float:
        return self.bound / cycles if cycles > 0 else 0.0


def contraction_bound(spec, m: int, n: int, k: int, b_column_bytes: float | None = None) -> ContractionBound:
    """The attainable bound of `C[m, n] = A[m, k] @ B[k, n]` (fp16 in and out) on `spec`.

    The output is split over the cores as any grid of per-core regions Mc x Nc; a core reads
    its operands over its own GM -> L1 path. For each split the least per-core read traffic of
    three tilings that fit is taken: C tiles of mt x nt held in L0C (fp32) while k streams
    (A and B re-read per tile: Mc Nc k (1/nt + 1/mt) elements), or an A panel of mt x k kept
    in L1 while B streams past it (A once, B once per panel), or the same with a B panel; tiles
    and panels are whole (counts rounded up). A panel fits when it takes at most half of L1
    (the other half streams). Each output element is computed by one core: the instruction
    set has no atomic GM accumulate for a split of k over cores. `b_column_bytes`
    is what one column of B costs in GM bytes (default 2 k; a convolution's im2col column
    costs its share of the input map)."""
    cores = spec.cores
    col = 2.0 * k if b_column_bytes is None else float(b_column_bytes)
    cube = m * n * k / (spec.fractal_macs * cores)
    rate = spec.rate("GM->L1")
    if spec.l2_bytes:
        rate = min(rate, spec.l2_rate / cores)
    half_l1 = spec.l1_bytes / 2
    f = spec.fractal
    best = None
    for gm_ in (g for g in range(1, cores + 1) if cores % g == 0):
        gn = cores // gm_
        mc, nc = -(-m // gm_), -(-n // gn)  # the largest per-core region of this grid
        a_bytes, b_bytes = mc * k * 2.0, nc * col
        options = []
        for mt in range(f, -(-mc // f) * f + 1, f):
            cm = -(-mc // mt)
            for nt in range(f, -(-nc // f) * f + 1, f):
                if mt * nt * 4 <= spec.l0c_bytes:
                    options.append((a_bytes * -(-nc // nt) + b_bytes * cm, f"C tiles {mt}x{nt} in L0C"))
            if mt * k * 2 <= half_l1:
                options.append((a_bytes + b_bytes * cm, f"A panels {mt}x{k} in L1"))
            if mt * col <= half_l1 and mt <= nc:
                options.append((b_bytes + a_bytes * -(-nc // mt), f"B panels {k}x{mt} in L1"))
        reads, how = min(options)
        writes = mc * nc * 2 / spec.rate("UB->GM")
        cand = (max(reads / rate, writes), reads / rate, writes, f"{gm_}x{gn} core grid, {how}")
        if best is None or cand[0] < best[0]:
            best = cand
    unique = (m * k * 2 + n * col + m * n * 2) / spec.gm_bytes_per_cycle
    return ContractionBound(cube, best[1], best[2], unique, best[3])

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

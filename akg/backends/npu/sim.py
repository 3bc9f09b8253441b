"""The NPU simulator: `simulate(program, spec, args)` checks a program statically
(`check_program`), executes it in NumPy block by block, proves its synchronisation
race-free, and times it with a pipe model. The stages are modules: `sim_compile` (instructions
prepared for NumPy and timing), `sim_races`, `sim_l2` and `sim_timing`. docs/npu.md describes the model; in short:

- Functional: one NumPy operation per instruction over strided views of the scopes' memory
  (no Python loop per element); loops iterate at instruction granularity. Local buffers
  start every block filled with 0xFF bytes (NaN in float dtypes), so a kernel that reads what
  it never wrote computes NaN.
- Races: a vector clock per pipe; flags and barriers carry clocks between pipes. An access
  that overlaps an earlier access of another pipe (one of them a write) whose instruction its
  pipe has not synchronised with raises `NpuRaceError` naming both. Blocks touching the same
  GM bytes, one writing, are a race too (blocks cannot synchronise).
- Timing: the scalar unit dispatches instructions in program order into one queue per pipe
  (`queue_depth` deep); an instruction starts when it is dispatched, its pipe is free and the
  flags it waits on are set. Blocks run in waves of at most `cores` blocks; every block of a
  wave has the same timeline, and the HBM cap and the L2 rate are shared evenly by the wave's
  cores; on one core, MTE2 and MTE3 share that core's part in program order. GM reads go
  through a shared L2, computed analytically per GM DMA from its affine addresses: the bytes
  the wave's blocks read in common (and those the previous wave read, while its footprint fits
  the L2) are hits; only misses and writes use HBM. Loops whose pipe state repeats exactly
  from one iteration to the next are extrapolated (exact; off when tracing)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from akg.backends.npu.check import check_program
from akg.backends.npu.isa import Program
from akg.backends.npu.operands import Scope
from akg.backends.npu.report import SimReport, TraceEntry, Wave
from akg.backends.npu.sim_compile import PIPE_NAMES, _Compiler
from akg.backends.npu.sim_l2 import _l2_waves
from akg.backends.npu.sim_races import _execute, _Races
from akg.backends.npu.sim_timing import _time_block, _Timeline
from akg.backends.npu.spec import PATH_PIPES, NpuSpec, get_spec
from akg.errors import InputDataError


@dataclass(frozen=True)
class SimResult:
    """Every GM parameter after the run (by name; empty when not functional) and the report."""

    outputs: dict[str, np.ndarray]
    report: SimReport


# --- the entry point ---------------------------------------------------------------------------


def _gm_memory(program: Program, args) -> dict[str, np.ndarray]:
    if args is None:
        args = {}
    if not isinstance(args, Mapping):
        if len(args) > len(program.params):
            raise InputDataError(f"kernel '{program.name}' takes {len(program.params)} arguments, got {len(args)}")
        args = {p.name: a for p, a in zip(program.params, args)}
    unknown = set(args) - {p.name for p in program.params}
    if unknown:
        raise InputDataError(f"kernel '{program.name}' has no parameter(s) {', '.join(sorted(unknown))}")
    mem = {}
    for p in program.params:
        a = args.get(p.name)
        if a is None:
            array = np.zeros(p.shape, p.dtype)
        else:
            a = np.asarray(a)
            if a.size != p.size:
                raise InputDataError(f"kernel '{program.name}': parameter '{p.name}' has {p.size} elements "
                                     f"{p.shape}, the argument {a.size} {a.shape}")
            array = np.ascontiguousarray(a, dtype=p.dtype).reshape(p.shape).copy()
        mem[f"GM:{p.name}"] = array.reshape(-1).view(np.uint8)
    return mem


def simulate(program: Program, spec: NpuSpec | None = None,
             args: Sequence[np.ndarray | None] | Mapping[str, np.ndarray] | None = None, *,
             functional: bool = True, races: bool = True, trace: bool = False) -> SimResult:
    """Check `program` against `spec` (default "ascend910-like"), run it on `args` (arrays
    for its parameters in order or by name; missing ones start as zeros) and time it.
    `functional=False` skips the NumPy work (timing only, no outputs); `races=False` skips
    race detection; `trace` records when each instruction of the first block ran."""
    spec = spec or get_spec()
    marks = check_program(program, spec)
    code = _Compiler(program, spec)
    outputs: dict[str, np.ndarray] = {}
    if functional or races:
        mem = None
        if functional:
            mem = _gm_memory(program, args)
            local = {str(s): np.empty(max(marks[str(s)], 1), np.uint8)
                     for s in (Scope.L1, Scope.L0A, Scope.L0B, Scope.L0C, Scope.UB)}
            mem.update(local)
        tracker = _Races(code.body, program.blocks) if races else None
        with np.errstate(all="ignore"):
            for block in range(program.blocks):
                env = program.block_env(block)
                if mem is not None:
                    for buf in local.values():
                        buf.fill(0xFF)
                _execute(code.body, env, mem, tracker)
                if tracker is not None:
                    tracker.end_block(env)
        if tracker is not None:
            tracker.cross_block()
        if mem is not None:
            outputs = {p.name: mem[f"GM:{p.name}"].view(p.dtype).reshape(p.shape) for p in program.params}
    report = _report(program, spec, code, marks, trace)
    return SimResult(outputs, report)


def _report(program: Program, spec: NpuSpec, code: _Compiler, marks, trace: bool) -> SimReport:
    waves: list[Wave] = []
    busy, cycles = [0] * 6, 0
    traced = None
    hits = dict.fromkeys(PATH_PIPES, 0.0)
    timed: list[tuple[int, dict, _Timeline]] = []
    first = 0
    for count, size, l2 in _l2_waves(code, spec):
        # a wave times like an earlier one of its size that HBM never limited, if it misses no more
        timeline = next((tl for n, hbm, tl in timed if n == size and (hbm == l2.hbm or not tl.hbm_bound and all(
            u <= hbm.get(i, 1.0) for i, u in l2.hbm.items()))), None)
        if timeline is None or (trace and traced is None):
            timeline = _time_block(code, spec, first, size, trace and traced is None, l2.hbm)
            timed.append((size, l2.hbm, timeline))
        if timeline.trace is not None and traced is None:
            traced = tuple(TraceEntry(op.index, PIPE_NAMES[p], start, end, str(op.instr), it)
                           for op, p, start, end, it in timeline.trace)
        if waves and (waves[-1].blocks, waves[-1].cycles) == (size, timeline.cycles):
            waves[-1] = Wave(waves[-1].count + count, size, timeline.cycles)
        else:
            waves.append(Wave(count, size, timeline.cycles))
        cycles += count * timeline.cycles
        busy = [b + count * size * x for b, x in zip(busy, timeline.busy)]
        for path, n in l2.hits.items():
            hits[path] += count * n
        first += count * size
    blocks = program.blocks
    totals = code.totals
    flops, repeats, gm_bytes = totals.flops * blocks, totals.repeats * blocks, totals.gm_bytes * blocks
    l2_hits = {path: round(n) for path, n in hits.items()}
    hbm_bytes = gm_bytes - sum(l2_hits.values())
    return SimReport(
        kernel=program.name, spec=spec.key(), cycles=cycles, seconds=spec.seconds(cycles), blocks=blocks,
        waves=tuple(waves), pipe_busy=dict(zip(PIPE_NAMES, busy)),
        path_bytes={path: n * blocks for path, n in totals.path_bytes.items()},
        high_water=dict(marks), capacity={s: spec.capacity(s) for s in marks},
        instructions=totals.instructions * blocks, cube_flops=flops, vector_repeats=repeats, gm_bytes=gm_bytes,
        roofline=spec.roofline(flops, repeats * spec.vector_bytes, hbm_bytes, path_bytes=gm_bytes), trace=traced,
        l2_hit_bytes=l2_hits, hbm_bytes=hbm_bytes)

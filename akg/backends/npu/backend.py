"""The NPU backend: the TIR that the shared lowering makes of a mapped schedule (tile loops,
the outer parallel loop, `npu.tile` regions marked by the recipe) translated into an
`isa.Program`, and that program run and timed by the simulator ("npu-sim").

Translation (`translate`):
- the outermost parallel loop becomes the program's blocks (one AI core each);
- serial loops outside a tile region become `Loop`s (the innermost one, under double
  buffering, a loop over pairs of tiles with every DMA'd buffer in two ping-pong halves);
- a tile region keeps every tensor it touches in UB: its box (per dim, the span its accesses
  reach for one iteration of the loops around the region) is a UB buffer (last dim padded to
  a 32-byte block), brought in by a GM->UB DMA where the region reads before it writes, and
  written back by a UB->GM DMA where it writes a kernel output (or an intermediate another
  region reads, kept in a GM workspace); intermediates used in one region only live in UB;
- each statement's loop nest becomes vector instructions along the loop its destination is
  contiguous in (merged with outer loops where every operand stays contiguous; repeats of
  256 bytes, the tail by mask), operands invariant along it as broadcasts, the other loops as
  `Loop`s; a statement whose destination is invariant along its innermost loop is a
  reduction: its source computed into a temporary, folded across repeats
  (`reduce_*_across`), the tail by mask, then within the repeat (`reduce_*`) and combined
  with the accumulator;
- `set_flag`/`wait_flag` pairs are inserted exactly where a buffer written or read on one
  pipe is next touched on another (`insert_syncs`): within an iteration, and across
  iterations of a loop with flags set before the loop and waited for after it.

What it cannot map yet raises `CompileError` naming the statement and the reason (an
`UnsupportedError` where the kernel uses a feature the NPU does not take: a dtype, an op
without an instruction, data-dependent control flow or indexing, zero-size tensors).

The stages live in modules of their own: `parse` (the TIR as loops, regions and statements),
`affine` (index expressions), `boxes` (UB layouts), `dmas` (GM <-> UB copies of the boxes),
`vector` and `vector_emit` (statements and expressions -> vector instructions), `syncs` (flags
between pipes), `translator` (the program); this module holds `translate` and the backend."""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import Callable

import numpy as np

from akg.errors import CompileError
from akg.target import Artifact, Backend, HostArrays
from akg.backends.npu.errors import NpuCubePrecisionError, NpuMappingError
from akg.backends.npu.translator import Translator


ARTIFACT_KIND = "npu-sim"


MAX_DYNAMIC = 2_000_000  # dynamic instructions (all blocks): beyond this a vector mapping is hopeless


def _dynamic_count(body) -> int:
    from akg.backends.npu import isa

    n = 0
    for x in body:
        n += x.trip * (1 + _dynamic_count(x.body)) if isinstance(x, isa.Loop) else 1
    return n


@dataclass
class NpuExecutable:
    program: object
    spec_json: str
    outputs: tuple[int, ...]  # kernel argument positions the program writes

    @property
    def spec(self):
        from akg.backends.npu.spec import NpuSpec

        return NpuSpec.from_json(self.spec_json)


def translate(func, target, double_buffer: bool | None = None):
    """The isa.Program of a PrimFunc lowered for `target` (an NpuTarget)."""
    spec = target.spec
    name = str(func.attrs["global_symbol"]) if func.attrs is not None and "global_symbol" in func.attrs else "kernel"
    db = getattr(target, "_double_buffer", True) if double_buffer is None else double_buffer
    return Translator(func, spec, name, db).translate()


class NpuBackend(HostArrays, Backend):
    """TIR -> isa.Program, run by the NPU simulator (artifacts of kind "npu-sim")."""

    artifact_kind = ARTIFACT_KIND

    def compile(self, func, target, *, reciprocal: bool = True):
        from akg.backends.npu.check import check_program

        from akg.backends.npu.cube import has_contraction
        from akg.backends.npu.errors import NpuCapacityError

        contraction, in_dtype = has_contraction(func)
        on_cube = "npu.tile" in str(func.body) and ".k" in str(func.body)

        def refuse(why: str):
            name = str(func.attrs["global_symbol"]) if func.attrs is not None and "global_symbol" in func.attrs \
                else "kernel"
            if in_dtype == "float32":
                raise NpuCubePrecisionError(
                    f"{name}: fp32 matmul on the cube loses precision (its inputs would be cast to fp16; the fp32 "
                    f"reference tolerance is rtol 1e-5), and the vector path is too large: {why}")
            raise NpuMappingError(f"{name}: a contraction the cube does not take (operands not fp16 or not in "
                                  f"whole 16 x 16 fractals: partial tiles are refused) and the vector path is too "
                                  f"large: {why}")

        program = translate(func, target)
        spec = target.spec
        dynamic = _dynamic_count(program.body) * program.blocks
        if dynamic > MAX_DYNAMIC:
            if contraction and not on_cube:
                refuse(f"{dynamic} instructions (> {MAX_DYNAMIC})")
            raise NpuMappingError(
                f"{program.name}: the mapping needs {dynamic} instructions (> {MAX_DYNAMIC})")
        try:
            check_program(program, spec)  # capacity (a ScheduleError), alignment, bounds, paths
        except NpuCapacityError as e:
            if contraction and not on_cube:
                refuse(str(e))
            raise
        n = len(func.params)
        written = set()
        for i, p in enumerate(func.params):
            written.add(i)
        return NpuExecutable(program, spec.to_json(), tuple(range(n)))

    def export(self, executable) -> Artifact:
        return Artifact(self.artifact_kind, pickle.dumps(executable))

    def load(self, artifact: Artifact):
        if artifact.kind != self.artifact_kind:
            raise CompileError(f"an artifact of kind '{artifact.kind}' is not an npu-sim program")
        return pickle.loads(artifact.data)

    def source(self, executable, kind: str = "asm") -> str:
        return "; npu-sim program (simulated NPU, not real hardware)\n" + executable.program.listing()

    def entry(self, executable) -> Callable:
        from akg.backends.npu.sim import simulate

        program, spec = executable.program, executable.spec
        n_args = len(program.params)

        def run(*arrays):
            args = [np.asarray(a).reshape(p.shape) for p, a in zip(program.params, arrays)]
            args = [a.astype(p.dtype) if a.dtype == np.bool_ else a for p, a in zip(program.params, args)]
            args += [None] * (n_args - len(args))
            result = simulate(program, spec, args, functional=True, races=False)
            for p, a in zip(program.params, arrays):
                out = result.outputs[p.name]
                if a.dtype == np.bool_:
                    out = out != 0  # bool as float16 0 / 1
                if a.dtype != out.dtype or a.size != out.size:
                    raise CompileError(f"npu-sim: argument '{p.name}' is {a.dtype}{list(a.shape)}, the program "
                                       f"takes {out.dtype}{list(out.shape)}")
                np.copyto(a, out.reshape(a.shape))
            executable.last_report = result.report

        return run

    def measure(self, executable, tensors, *, number: int = 1, repeat: int = 1) -> list[float]:
        from akg.backends.npu.sim import simulate

        report = simulate(executable.program, executable.spec, functional=False, races=False).report
        return [float(report.cycles)] * max(repeat, 1)

    def report(self, executable, races: bool = False):
        from akg.backends.npu.sim import simulate

        return simulate(executable.program, executable.spec, functional=races, races=races).report

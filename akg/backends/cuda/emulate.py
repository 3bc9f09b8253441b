"""The CUDA emulation: the same mapped kernel the CUDA backend builds, thread bindings and
guards included (`bind.bind_threads`), with every launch turned back into serial loops
(`bind.unbind`: blocks outside, threads inside, as nested) and compiled by LLVM for the host.
It runs and is checked against the NumPy reference on any machine (target `cuda-emu`).

Serial threads are exact while threads of a block share nothing between barriers: the
mapping binds only coincident loops, and a reduction spread over threads (`reduce`) closes a
pass's thread loop at each `__syncthreads()` and opens a new one over the same threads for
the next pass; `bind.unbind` drops a barrier between two serial thread loops and splits the
threads' loops at one inside them (fission at the barrier). Per-thread values that cross a
barrier (a thread's partial) are arrays indexed by the thread here (the emulation target's
`scratch` scopes), one register on the GPU."""

from __future__ import annotations

import tvm

from akg.backends.cuda.bind import bind_threads, unbind_func
from akg.backends.cuda.target import EMU_ARTIFACT_KIND
from akg.errors import LoweringError
from akg.backends.cpu.backend import CpuBackend


def emulated(func):
    """The host PrimFunc of a mapped PrimFunc, and its launches."""
    bound, launches = bind_threads(func)
    return unbind_func(bound), launches


class CudaEmuBackend(CpuBackend):
    """Executables are TVM host modules of the emulated kernel, handled as the CPU backend's
    (shared-library artifacts, host tensors, `time_evaluator` timing: host time, useful only
    to exercise the tuner); only the compilation differs, and a model runs kernel by kernel
    (no linked driver)."""

    artifact_kind = EMU_ARTIFACT_KIND

    def compile(self, func, target, *, reciprocal: bool = True):
        host, _ = emulated(func)
        try:
            return tvm.compile(tvm.IRModule({"main": host}), target=tvm.target.Target({"kind": "llvm"})).jit()
        except Exception as e:  # TVM reports every failure as its own error types
            first = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
            raise LoweringError(f"emulated CUDA kernel: LLVM compilation failed: {first}") from e

    def source(self, executable, kind: str = "ll") -> str:
        """'ll' or 'asm' of the host code."""
        return super().source(executable, kind)

    def link(self, executables, program):
        return None

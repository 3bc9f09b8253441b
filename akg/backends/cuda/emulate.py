"""The CUDA emulation: the same mapped kernel the CUDA backend builds, thread bindings and
guards included (`bind.bind_threads`), with every launch turned back into serial loops
(`bind.unbind`: blocks outside, threads inside, as nested) and compiled by LLVM for the host.
It runs and is checked against the NumPy reference on any machine (target `cuda-emu`).

Serial threads are exact while threads of a block share nothing: the mapping binds only
coincident loops. Once shared memory comes, each `__syncthreads()` will close the thread loop
and open a new one over the same threads (loop fission at the barrier), with per-thread
values that cross it kept in arrays indexed by the thread."""

from __future__ import annotations

import tvm

from akg.backends.cuda.bind import bind_threads, unbind_func
from akg.backends.cuda.target import EMU_ARTIFACT_KIND
from akg.errors import LoweringError
from akg.target import Artifact, Backend


def emulated(func):
    """The host PrimFunc of a mapped PrimFunc, and its launches."""
    bound, launches = bind_threads(func)
    return unbind_func(bound), launches


class CudaEmuBackend(Backend):
    """Executables are TVM host modules; artifacts the shared libraries TVM exports."""

    artifact_kind = EMU_ARTIFACT_KIND

    def compile(self, func, target, *, reciprocal: bool = True):
        host, _ = emulated(func)
        try:
            return tvm.compile(tvm.IRModule({"main": host}), target=tvm.target.Target({"kind": "llvm"})).jit()
        except Exception as e:  # TVM reports every failure as its own error types
            first = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
            raise LoweringError(f"emulated CUDA kernel: LLVM compilation failed: {first}") from e

    def export(self, executable) -> Artifact:
        import os
        import tempfile

        with tempfile.TemporaryDirectory(prefix="akg-export-") as tmp:
            path = os.path.join(tmp, "kernel.so")
            executable.export_library(path)
            with open(path, "rb") as f:
                return Artifact(self.artifact_kind, f.read())

    def load(self, artifact: Artifact):
        import os
        import tempfile

        if artifact.kind != self.artifact_kind:
            raise LoweringError(f"the CUDA emulation cannot load an artifact of kind '{artifact.kind}'")
        fd, path = tempfile.mkstemp(suffix=".so", prefix="akg-cuda-emu-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(artifact.data)
            return tvm.runtime.load_module(path)
        finally:
            os.remove(path)

    def source(self, executable, kind: str = "ll") -> str:
        """'ll' or 'asm' of the host code."""
        for m in [executable, *getattr(executable, "imports", [])]:
            try:
                text = m.inspect_source(kind)
            except Exception:  # noqa: BLE001
                continue
            if text:
                return text
        return ""

    def entry(self, executable):
        return executable["main"]

    def to_device(self, array):
        return tvm.runtime.tensor(array, tvm.cpu())

    def empty(self, shape, dtype: str):
        return tvm.runtime.empty(tuple(shape), dtype, tvm.cpu())

    def view(self, arena, shape, dtype: str):
        return arena._create_view(tuple(shape), dtype)

    def to_numpy(self, tensor):
        return tensor.numpy()

    def measure(self, executable, tensors, *, number: int, repeat: int) -> list[float]:
        """Host time of the emulation (not a GPU's: useful only to exercise the tuner)."""
        timer = executable.time_evaluator("main", tvm.cpu(), number=number, repeat=repeat)
        return [float(x) for x in timer(*tensors).results]

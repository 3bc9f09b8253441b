"""CPU backend: TIR PrimFunc -> LLVM machine code through TVM, run and timed on the host."""

from __future__ import annotations

import os
import tempfile

# TVM's CPU thread pool assumes hyper-threading and starts cpu_count()/2 threads on x86:
# one thread on a 2-core machine. Use every core unless the user chose otherwise; this must
# happen before the first parallel kernel runs.
os.environ.setdefault("TVM_NUM_THREADS", str(os.cpu_count() or 1))
# After a parallel kernel, TVM's workers wait for the next one by calling sched_yield up to
# TVM_THREAD_POOL_SPIN_COUNT times before they sleep: 300000 by default, ~150 ms of a busy core
# after every model call, which slowed whatever the caller ran next (ONNX Runtime 4x, timed
# right after a 2 ms akg call). SPIN_COUNT keeps them awake for the gaps between the kernels
# of one call (microseconds: the kernels of a model are called back to back by its driver) and
# a few milliseconds after it. Read once, when the first parallel kernel starts.
SPIN_COUNT = 10000
os.environ.setdefault("TVM_THREAD_POOL_SPIN_COUNT", str(SPIN_COUNT))

import numpy as np  # noqa: E402
import tvm  # noqa: E402

from akg.backends.cpu.streaming import recompile, stream_outputs  # noqa: E402
from akg.errors import LoweringError  # noqa: E402
from akg.target import STREAM_ATTR, Artifact, Backend  # noqa: E402


class CpuBackend(Backend):
    """Executables are TVM runtime modules whose function `main` is the kernel; artifacts are
    the shared libraries TVM exports."""

    artifact_kind = "cpu-llvm-so"

    def compile(self, func, target, *, reciprocal: bool = True):
        try:
            module = tvm.compile(tvm.IRModule({"main": func}), target=target.tvm_target(reciprocal)).jit()
            if func.attrs is not None and STREAM_ATTR in func.attrs and int(func.attrs[STREAM_ATTR]):
                module = _streaming(module, func)
            return module
        except Exception as e:  # TVM reports every failure as its own error types
            first = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
            raise LoweringError(f"LLVM compilation failed: {first}") from e

    def export(self, executable) -> Artifact:
        module = executable
        with tempfile.TemporaryDirectory(prefix="akg-export-") as tmp:
            path = os.path.join(tmp, "kernel.so")
            module.export_library(path)
            with open(path, "rb") as f:
                return Artifact(self.artifact_kind, f.read())

    def load(self, artifact: Artifact):
        if artifact.kind != self.artifact_kind:
            raise LoweringError(f"backend '{self.artifact_kind}' cannot load an artifact of kind '{artifact.kind}'")
        fd, path = tempfile.mkstemp(suffix=".so", prefix="akg-kernel-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(artifact.data)
            return tvm.runtime.load_module(path)
        finally:
            os.remove(path)  # the loaded library stays mapped

    def source(self, executable, kind: str = "asm") -> str:
        """Generated code: 'asm' or 'll' (LLVM IR)."""
        mod = executable
        for m in [mod, *getattr(mod, "imports", [])]:
            try:
                text = m.inspect_source(kind)
            except Exception:
                continue
            if text:
                return text
        return ""

    def entry(self, executable):
        return executable["main"]

    def to_device(self, array: np.ndarray):
        return tvm.runtime.tensor(array, tvm.cpu())

    def empty(self, shape, dtype: str):
        return tvm.runtime.empty(tuple(shape), dtype, tvm.cpu())

    def view(self, arena, shape, dtype: str):
        return arena._create_view(tuple(shape), dtype)

    def to_numpy(self, tensor) -> np.ndarray:
        return tensor.numpy()

    def link(self, executables, program):
        """The model as one TVM module: a TIR driver that calls every kernel (`driver.py`);
        None (kernel by kernel) for a model with bfloat16 or float8 tensors, whose type the
        driver's LLVM code does not describe as the kernels check it."""
        from akg.backends.cpu.driver import CpuDriver
        from akg.graph.types import is_storage

        specs = [*program.inputs, *program.outputs, *((None, str(w.dtype)) for w in program.weights)]
        if any(is_storage(dtype) for _, dtype in specs) or any(is_storage(d) for _, d, _ in program.temps):
            return None

        return CpuDriver(executables, program, self)

    def measure(self, executable, tensors, *, number: int, repeat: int) -> list[float]:
        timer = executable.time_evaluator("main", tvm.cpu(), number=number, repeat=repeat)
        return [float(x) for x in timer(*tensors).results]


def _streaming(module, func):
    """`module` recompiled with streaming stores into the outputs of `func` that it never
    reads back (`akg.backends.cpu.streaming`); `module` itself where there are none."""
    names = {hex(p.__chandle__()): p.name for p in func.params if hasattr(p, "__chandle__")}
    rewrite = stream_outputs(module.inspect_source("ll"), names)
    return recompile(rewrite.text) if rewrite.stores else module

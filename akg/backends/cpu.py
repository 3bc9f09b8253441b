"""CPU backend: TIR PrimFunc -> LLVM machine code through TVM, for the host CPU."""

from __future__ import annotations

import os

# TVM's CPU thread pool assumes hyper-threading and starts cpu_count()/2 threads on x86:
# one thread on a 2-core machine. Use every core unless the user chose otherwise; this must
# happen before the first parallel kernel runs.
os.environ.setdefault("TVM_NUM_THREADS", str(os.cpu_count() or 1))

import tvm  # noqa: E402

from akg.errors import LoweringError
from akg.target import CpuTarget


def compile_cpu(func, target: CpuTarget, reciprocal: bool = True):
    """An executable module whose function `main` is the kernel."""
    try:
        return tvm.compile(tvm.IRModule({"main": func}), target=target.tvm_target(reciprocal))
    except Exception as e:  # TVM reports every failure as its own error types
        first = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
        raise LoweringError(f"LLVM compilation failed: {first}") from e


def source(exe, kind: str = "asm") -> str:
    """Generated code of an executable: 'asm' or 'll' (LLVM IR)."""
    mod = exe.mod
    for m in [mod, *getattr(mod, "imports", [])]:
        try:
            text = m.inspect_source(kind)
        except Exception:
            continue
        if text:
            return text
    return ""

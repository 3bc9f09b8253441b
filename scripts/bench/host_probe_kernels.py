"""The kernels of `timing.HostProbe`, in TVMScript (which reads them from this file)."""

from __future__ import annotations

import os

from tvm.script import tirx as T

F32 = "float32"
STREAM = 8 << 20  # floats: 32 MiB in, 32 MiB out, past any L3 this VM sees


def stream_kernel():
    n = STREAM

    @T.prim_func
    def stream(a: T.Buffer((n,), dtype=F32), b: T.Buffer((n,), dtype=F32)):
        for i0 in T.parallel(n // 1024):
            for i1 in T.vectorized(1024):
                b[i0 * 1024 + i1] = a[i0 * 1024 + i1] * T.float32(0.5) + T.float32(0.5)

    return stream, [(n,), (n,)]


def compute_kernel():
    threads = int(os.environ.get("TVM_NUM_THREADS") or os.cpu_count() or 1)

    @T.prim_func
    def compute(x: T.Buffer((threads, 4096), dtype=F32)):
        for t in T.parallel(threads):
            for r, i in T.grid(256, 4096):
                x[t, i] = x[t, i] * T.float32(0.5) + T.float32(0.5)

    return compute, [(threads, 4096)]

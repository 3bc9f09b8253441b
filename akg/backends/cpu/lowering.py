"""CPU lowering hooks: what the TIR generator emits for LLVM (reassociation fences on the
folds of vector reductions, local buffers on the stack, vector reductions where the target
lets float sums be reordered)."""

from __future__ import annotations

import numpy as np
from tvm import tirx

from akg.polyhedral.astgen import LoweringHooks

STACK_BYTES = 16 * 1024
REDUCE_BLOCK = 64  # terms per partial of a blocked float sum (see LoweringHooks.reduce_block)


def llvm_fence(value: tirx.PrimExpr, dtype: str) -> tirx.PrimExpr:
    """`value`, with no reassociation across this point: LLVM's reassociation (allowed by
    fast-math) would otherwise merge the independent accumulator chains, once it has unrolled
    their loop, back into one serial chain."""
    if not dtype.startswith("float"):
        return value
    return tirx.call_llvm_pure_intrin(dtype, "llvm.arithmetic.fence", value)


def stack_alloc(buf: tirx.Buffer) -> tirx.Stmt:
    """A local buffer on the stack (TVM otherwise puts buffers of 1 KiB or more on the heap,
    where LLVM cannot keep them in registers)."""
    nbytes = int(np.prod([int(d) for d in buf.shape])) * np.dtype(buf.dtype).itemsize
    if nbytes <= STACK_BYTES:
        return tirx.AllocBuffer(buf, {"disable_lower_builtin": True})
    return tirx.AllocBuffer(buf)


def llvm_prefetch(element: tirx.BufferLoad) -> tirx.Stmt:
    """A read prefetch of the cache line holding `element` into all cache levels
    (`prefetcht0`). TVM's own `tirx.prefetch` names an intrinsic this LLVM no longer has."""
    return tirx.Evaluate(tirx.call_llvm_intrin("void", "llvm.prefetch.p0", tirx.address_of(element),
                                               tirx.const(0, "int32"), tirx.const(3, "int32"),
                                               tirx.const(1, "int32")))


def cpu_lowering(target, config) -> LoweringHooks:
    """Vector reductions as wide as the CPU's vectors when the config vectorises and the
    target allows reordering float sums (`CpuTarget.fast_math_reassoc`); long float sums
    blocked (`REDUCE_BLOCK` terms per partial) so that their error grows like
    block + n / block rather than n: per lane of vector reductions, and for serial sum loops
    only where LLVM may not reorder them (where it may, it splits them into several
    accumulators itself, which blocking on top of measured less accurate). Coscheduled
    statements stay together (`LoweringHooks.group_coscheduled`): a 16-channel 3x3 conv at 8 px
    whose accumulators were copied in and out around its reduction, 7.4 -> 5.9 us alone (Zen 4)."""
    reduce_bits = target.vector_bits if (config.has("vectorize") and target.fast_math_reassoc) else 0
    return LoweringHooks(fence=llvm_fence, local_alloc=stack_alloc, reduce_bits=reduce_bits,
                         fast_math=config.has("fast_math"), reduce_block=REDUCE_BLOCK,
                         serial_block=0 if target.fast_math_reassoc else REDUCE_BLOCK, prefetch=llvm_prefetch,
                         copy_bits=target.vector_bits if config.has("vectorize") else 0,
                         group_coscheduled=True, stream_stores=config.has("stream"))

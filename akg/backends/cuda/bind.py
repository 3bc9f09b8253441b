"""Mapped TIR -> TIR with thread bindings: the loops the CUDA recipe marked
(`blockIdx.<axis>.<n>`, `threadIdx.<axis>.<n>`, kept by astgen as `akg.mark` attributes)
become `thread_extent` launches of n blocks or threads along the axis, their body guarded
where the loop ran fewer iterations (a partial tile); code outside any mapped loop (an
unmapped band, a scalar statement) becomes a kernel of one block of one thread. Every
maximal launched region is one CUDA kernel, in program order (TVM names them `<name>_kernel`,
`<name>_kernel_1`, ...), so statements in sequence at the top are separate launches: the
grid-wide synchronisation between outer bands. `unbind` turns the launches back into serial
loops, blocks outside threads, for the emulation on the host."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import tvm
from tvm import tirx

from akg.errors import LoweringError

_MARK = re.compile(r"^(blockIdx|threadIdx)\.([xyz])\.(\d+)$")
_AXES = "xyz"
BARRIER = "barrier"
WARP_BARRIER = "barrier.warp"  # after warp shuffles: they synchronise the lanes themselves
_SCRATCH_SCOPES = ("shared", "local")


@dataclass(frozen=True)
class Launch:
    """One kernel's launch: blocks and threads along x, y, z."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]

    @property
    def threads(self) -> int:
        return math.prod(self.block)

    def to_list(self) -> list:
        return [list(self.grid), list(self.block)]


def _is_gpu_mark(stmt) -> re.Match | None:
    if isinstance(stmt, tirx.AttrStmt) and stmt.attr_key == "akg.mark":
        return _MARK.match(str(stmt.node))
    return None


def _has_marks(stmt) -> bool:
    found = []

    def visit(s):
        if found:
            return
        if _is_gpu_mark(s):
            found.append(s)
        for c in _children(s):
            visit(c)

    visit(stmt)
    return bool(found)


def _children(s) -> list:
    if isinstance(s, tirx.SeqStmt):
        return list(s.seq)
    if isinstance(s, (tirx.For, tirx.AttrStmt)):
        return [s.body]
    if isinstance(s, tirx.IfThenElse):
        return [s.then_case] + ([s.else_case] if s.else_case is not None else [])
    return []


def _rebuild(s, children: list):
    if isinstance(s, tirx.SeqStmt):
        return tirx.SeqStmt(children)
    if isinstance(s, tirx.For):
        return tirx.For(s.loop_var, s.min, s.extent, s.kind, children[0], s.thread_binding, s.annotations)
    if isinstance(s, tirx.AttrStmt):
        return tirx.AttrStmt(s.node, s.attr_key, s.value, children[0])
    if isinstance(s, tirx.IfThenElse):
        return tirx.IfThenElse(s.condition, children[0], children[1] if len(children) > 1 else None)
    return s


def _is_barrier(stmt) -> bool:
    return isinstance(stmt, tirx.AttrStmt) and stmt.attr_key == "akg.mark" and str(stmt.node) == BARRIER


def _is_warp_barrier(stmt) -> bool:
    return isinstance(stmt, tirx.AttrStmt) and stmt.attr_key == "akg.mark" and str(stmt.node) == WARP_BARRIER


def sync_threads() -> tirx.Stmt:
    """`__syncthreads()`."""
    return tirx.Evaluate(tirx.op.tvm_storage_sync("shared"))


def is_sync(stmt) -> bool:
    return (isinstance(stmt, tirx.Evaluate) and isinstance(stmt.value, tvm.ir.Call)
            and getattr(stmt.value.op, "name", "") == "tirx.tvm_storage_sync")


def _scope(buf) -> str:
    return str(buf.scope())


def _inside_blocks(body, allocs: list):
    """The kernel body with the allocations placed below its block launches."""
    if isinstance(body, tirx.AttrStmt) and body.attr_key == "thread_extent" \
            and str(body.node.thread_tag).startswith("blockIdx"):
        return tirx.AttrStmt(body.node, body.attr_key, body.value, _inside_blocks(body.body, allocs))
    return tirx.SeqStmt([*(tirx.AllocBuffer(b) for b in allocs), body])


def _launch_attr(tag: str, var, extent: int, body):
    iv = tirx.IterVar(tvm.ir.Range(0, extent), var, tirx.IterVar.ThreadIndex, tag)
    return tirx.AttrStmt(iv, "thread_extent", tirx.const(extent, "int32"), body)


class _Binder:
    def __init__(self, name: str):
        self.name = name
        self.launches: list[Launch] = []
        self._dims: dict[str, int] | None = None
        self.scratch: list = []  # shared/local buffers, allocated in the kernels that use them

    def top(self, s):
        """Host-level code: allocations stay (those of a block's or a thread's memory move into
        the kernels using them), sequences and host loops are walked, and each region with
        mapped loops, or without any, becomes a kernel."""
        if isinstance(s, tirx.AllocBuffer) and _scope(s.buffer) in _SCRATCH_SCOPES:
            self.scratch.append(s.buffer)
            return None
        if isinstance(s, (tirx.AllocBuffer, tirx.DeclBuffer, tirx.LetStmt)):
            return s
        if isinstance(s, tirx.SeqStmt):
            kept = [x for x in (self.top(c) for c in s.seq) if x is not None]
            return kept[0] if len(kept) == 1 else tirx.SeqStmt(kept)
        if not _has_marks(s):
            return self._kernel(s, single=True)
        if _is_gpu_mark(s):
            return self._kernel(s)
        if isinstance(s, tirx.AttrStmt) and s.attr_key == "akg.mark":
            return self.top(s.body)
        if isinstance(s, (tirx.For, tirx.IfThenElse)):  # a host loop or condition around kernels
            return _rebuild(s, [self.top(c) for c in _children(s)])
        raise LoweringError(f"{self.name}: cannot place {type(s).__name__} around mapped loops")

    def _kernel(self, s, single: bool = False):
        self._dims = {}
        body = self.device(s)
        dims, self._dims = self._dims, None
        if single or not any(k.startswith("threadIdx") for k in dims):
            body = _launch_attr("threadIdx.x", tirx.Var("tx", "int32"), 1, body)
            dims.setdefault("threadIdx.x", 1)
        if single or not any(k.startswith("blockIdx") for k in dims):
            # one block: still one launch around everything (TVM cuts a kernel per outer launch)
            body = _launch_attr("blockIdx.x", tirx.Var("bx", "int32"), 1, body)
        grid = tuple(dims.get(f"blockIdx.{a}", 1) for a in _AXES)
        block = tuple(dims.get(f"threadIdx.{a}", 1) for a in _AXES)
        self.launches.append(Launch(grid, block))
        free = tirx.analysis.undefined_vars(body) if self.scratch else []
        mine = [b for b in self.scratch if any(v.same_as(b) for v in free)]
        return _inside_blocks(body, mine) if mine else body

    def device(self, s):
        if _is_barrier(s):  # every thread of the block waits after the code below
            return tirx.SeqStmt([self.device(s.body), sync_threads()])
        if _is_warp_barrier(s):
            return self.device(s.body)
        match = _is_gpu_mark(s)
        if match is None:
            kids = _children(s)
            return _rebuild(s, [self.device(c) for c in kids]) if kids else s
        kind, axis, count = match.group(1), match.group(2), int(match.group(3))
        inner = s.body
        tag = f"{kind}.{axis}"
        if self._dims.get(tag, count) != count:
            raise LoweringError(f"{self.name}: {tag} is mapped with {self._dims[tag]} and {count} in one kernel")
        if not isinstance(inner, tirx.For):  # a loop of one iteration: isl left no loop
            if kind == "blockIdx" or count == 1:
                return self.device(inner)
            var = tirx.Var(f"{kind[0]}{axis}_0", "int32")  # the point at thread 0 only
            self._dims[tag] = count
            return _launch_attr(tag, var, count, tirx.IfThenElse(tirx.EQ(var, 0), self.device(inner), None))
        extent = inner.extent
        if not isinstance(extent, tirx.IntImm) or int(extent.value) != count:
            if isinstance(extent, tirx.IntImm) and int(extent.value) > count:
                raise LoweringError(f"{self.name}: a loop of {extent.value} iterations mapped to {count} {kind}")
            body = tirx.IfThenElse(tirx.LT(inner.loop_var, extent), self.device(inner.body), None)
        else:
            body = self.device(inner.body)
        self._dims[tag] = count
        return _launch_attr(tag, inner.loop_var, count, body)


def bind_threads(func: tirx.PrimFunc) -> tuple[tirx.PrimFunc, list[Launch]]:
    """The PrimFunc with its mapped loops bound to blocks and threads, and every kernel's
    launch in program order."""
    binder = _Binder(str(func.attrs["global_symbol"]) if func.attrs and "global_symbol" in func.attrs else "main")
    body = binder.top(func.body)
    new = func.with_body(body)
    return new, binder.launches


def unbind(stmt):
    """Launches back into serial loops (blocks around threads, as they were nested): the
    emulation's kernel. A barrier between two thread loops is dropped (the serial loops run
    one after the other); one inside the threads' loops splits them there (fission): each
    barrier closes the serial loops over the block's threads and opens new ones over the same
    threads, so every thread finishes the code before the barrier before any starts the code
    after it (`_fission`)."""
    if is_sync(stmt):
        return tirx.Evaluate(tirx.const(0, "int32"))
    if isinstance(stmt, tirx.AttrStmt) and stmt.attr_key == "thread_extent":
        iv = stmt.node
        if str(iv.thread_tag).startswith("threadIdx") and _has_sync(stmt.body):
            return _fission(stmt)
        return tirx.For(iv.var, 0, stmt.value, tirx.ForKind.SERIAL, unbind(stmt.body))
    kids = _children(stmt)
    return _rebuild(stmt, [unbind(c) for c in kids]) if kids else stmt


def _fission(stmt):
    """The nest of thread launches `stmt` (threadIdx z, y, x as nested) whose body holds
    barriers at its top level, as a sequence of serial nests over the same threads, one per
    stretch between barriers (the loop variables are reused: each nest binds them afresh).
    Values crossing a barrier must live in memory indexed by the thread (the mapping's
    per-thread arrays); a buffer allocated inside the nest, a barrier under a condition or in
    a loop of the thread are refused."""
    nest = []
    body = stmt
    while isinstance(body, tirx.AttrStmt) and body.attr_key == "thread_extent" \
            and str(body.node.thread_tag).startswith("threadIdx"):
        nest.append(body)
        body = body.body
    items = list(body.seq) if isinstance(body, tirx.SeqStmt) else [body]
    stretches, current = [], []
    for item in items:
        if is_sync(item):
            stretches.append(current)
            current = []
            continue
        if _has_sync(item):
            raise LoweringError("a barrier under a condition or in a loop of a thread: the emulation splits "
                                "the threads' loops only at barriers at their top level")
        if isinstance(item, (tirx.AllocBuffer, tirx.DeclBuffer)) and any(_has_sync(x) for x in items):
            raise LoweringError("a buffer allocated in the threads' loops lives across a barrier; "
                                "the emulation keeps per-thread values only in arrays indexed by the thread")
        current.append(item)
    stretches.append(current)
    loops = []
    for part in stretches:
        if not part:
            continue
        inner = unbind(part[0] if len(part) == 1 else tirx.SeqStmt(part))
        for attr in reversed(nest):
            inner = tirx.For(attr.node.var, 0, attr.value, tirx.ForKind.SERIAL, inner)
        loops.append(inner)
    if not loops:
        return tirx.Evaluate(tirx.const(0, "int32"))
    return loops[0] if len(loops) == 1 else tirx.SeqStmt(loops)


def _has_sync(stmt) -> bool:
    return is_sync(stmt) or any(_has_sync(c) for c in _children(stmt))


def unbind_func(func: tirx.PrimFunc) -> tirx.PrimFunc:
    return func.with_body(unbind(func.body))

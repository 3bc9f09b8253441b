"""Each CUDA launch's memory traffic and operations, read off its bound TIR: the no-GPU model of cuda.py."""

from __future__ import annotations

import math
from dataclasses import dataclass

SECTOR = 32  # bytes of one DRAM / L2 transaction
WARP = 32


@dataclass
class LaunchTraffic:
    """One CUDA kernel's global-memory traffic (bytes, in 32-byte sectors) and operations, per
    the model of cuda.py's docstring."""

    bytes: float = 0.0
    flops: float = 0.0
    blocks: int = 1
    shared: float = 0.0  # shared-memory wavefronts (a warp's access: one per bank conflict degree)


def _flat_index(buffer, indices):
    from tvm import tirx

    flat, stride = None, 1
    for dim, idx in reversed(list(zip(buffer.shape, indices))):
        term = idx if stride == 1 else idx * stride
        flat = term if flat is None else flat + term
        stride = stride * int(dim) if isinstance(dim, tirx.IntImm) else stride
    return flat if flat is not None else tirx.const(0, "int32")


def _dtype(node) -> str:
    for attr in ("dtype", "ty"):
        try:
            value = getattr(node, attr, None)
        except AttributeError:  # a Var's dtype needs a BufferType
            continue
        if value is not None and not callable(value):
            return str(value)
    return ""


def _uses(expr, var) -> bool:
    from tvm.tirx.analysis import undefined_vars

    return any(v.same_as(var) for v in undefined_vars(expr, []))


def _expr_nodes(expr, indices: bool = True):
    """Every node of an expression, depth first (this TVM has no Python post_order_visit);
    `indices`: also those of the loads' indices."""
    from tvm.ir import Expr, Var

    stack = [expr]
    while stack:
        node = stack.pop()
        yield node
        for attr in ("a", "b", "value", "condition", "true_value", "false_value"):
            child = getattr(node, attr, None)
            if isinstance(child, Expr):
                stack.append(child)
        for attr in ("args", "indices") if indices else ("args",):
            children = getattr(node, attr, None) if not isinstance(node, Var) else None
            if children is not None:
                stack.extend(c for c in children if isinstance(c, Expr))


def _is_load(node) -> bool:
    """A buffer load (this TVM's `TensorLoad`: its buffer is `source`)."""
    return hasattr(node, "source") and hasattr(node, "indices")


def _lane_step(analyzer, flat, var):
    """How far the address moves (elements) from one lane of `var` to the next: an int, or None
    when that is not one constant (not affine in the lane: checked at a few lanes)."""
    from tvm import tirx
    from tvm.sym.analyzer import Analyzer

    def at(k):  # a fresh analyzer each time: a Let binds the var, once per analyzer
        return Analyzer().simplify(tirx.Let(var, tirx.const(k, _dtype(var) or "int32"), flat))

    steps = set()
    for k in (0, 7, 16, 30):
        delta = Analyzer().simplify(at(k + 1) - at(k))
        if not isinstance(delta, tirx.IntImm):
            return None
        steps.add(int(delta.value))
    return steps.pop() if len(steps) == 1 else None


def _warp_sectors(flat, threads: dict, itemsize: int, others=()) -> int | None:
    """The sectors the first warp's lanes touch, from each lane's address (threadIdx.x
    fastest, then y, z) relative to lane 0's, when every such offset is a constant (an
    address through a div/mod of the thread, a block tile copied by a flattened thread id);
    lane 0's address taken sector-aligned. None when some offset is not a constant."""
    offsets = _lane_offsets(flat, threads, others)
    if offsets is None:
        return None
    return len({d * itemsize // SECTOR for d in offsets})


def _iterations(flat, loops) -> int:
    """How often a thread issues an access at `flat` inside `loops` ((var, extent, unrolled)):
    the innermost loops its address does not depend on are dropped (a register or L1 hit), and
    so is any unrolled loop it does not depend on (nvcc loads it once for the unrolled copies:
    a register tile's operand)."""
    loops = list(loops)
    while loops and not _uses(flat, loops[-1][0]):
        loops.pop()
    return math.prod(loop[1] for loop in loops if not (loop[2] and not _uses(flat, loop[0])))


def _lane_offsets(flat, threads: dict, others=()) -> list[int] | None:
    """Each lane's address minus lane 0's for the first warp (threadIdx.x fastest, then y,
    z), or None when some is not a constant; where one depends on the variables `others`
    too (a serial loop, a block index inside a div/mod: a padded tile's row), the offsets at
    0 for all of them (the first iteration of the first block)."""
    from tvm import tirx
    from tvm.sym.analyzer import Analyzer

    dims = [threads[t] for t in ("threadIdx.x", "threadIdx.y", "threadIdx.z") if t in threads]
    if not dims:
        return None
    total = math.prod(e for _, e in dims)

    def at(lane):
        expr, rest = flat, lane
        for var, extent in dims:
            expr = tirx.Let(var, tirx.const(rest % extent, _dtype(var) or "int32"), expr)
            rest //= extent
        return Analyzer().simplify(expr)

    base, out = at(0), []
    for lane in range(min(WARP, total)):
        delta = Analyzer().simplify(at(lane) - base)
        if not isinstance(delta, tirx.IntImm):
            if others:
                fixed = flat
                for var in others:
                    fixed = tirx.Let(var, tirx.const(0, _dtype(var) or "int32"), fixed)
                return _lane_offsets(Analyzer().simplify(fixed), threads)
            return None
        out.append(int(delta.value))
    return out


def _bank_wavefronts(flat, threads: dict, itemsize: int, others=()) -> int | None:
    """Wavefronts of a warp's shared-memory access: the most distinct 4-byte words that its
    lanes touch in one of the 32 banks (lane 0's word taken in bank 0); None when a lane's
    offset is not a constant."""
    offsets = _lane_offsets(flat, threads, others)
    if offsets is None:
        return None
    words: dict[int, set] = {}
    for d in offsets:
        word = d * itemsize // 4
        words.setdefault(word % 32, set()).add(word)
    return max(len(w) for w in words.values())


def _sectors(step, lanes: int, itemsize: int) -> int:
    if step is None:
        return lanes
    if step == 0:
        return 1
    stride = abs(step) * itemsize
    if stride >= SECTOR:
        return lanes
    return max(1, math.ceil(((lanes - 1) * stride + itemsize) / SECTOR))


def launch_traffic(bound_func) -> list[LaunchTraffic]:
    """The traffic of each launch (each outermost `thread_extent` region) of a bound PrimFunc."""
    import tvm
    from tvm import tirx

    from tvm.sym.analyzer import Analyzer

    analyzer = Analyzer()
    out: list[LaunchTraffic] = []

    def scope(buf) -> str:
        try:
            return str(buf.scope()) or "global"
        except AttributeError:
            return "global"

    def count(buf, indices, ctx, seen: set) -> float:
        if scope(buf) not in ("global", ""):
            return 0.0
        flat = analyzer.simplify(_flat_index(buf, indices))
        key = (buf.name, str(flat))
        if key in seen:  # the same address twice in one statement: one load, kept in a register
            return 0.0
        seen.add(key)
        itemsize = max(1, tvm.runtime.DataType(buf.dtype).bits // 8)
        iterations = _iterations(flat, ctx["loops"])
        threads = ctx["threads"]
        bx, by = threads.get("threadIdx.x", (None, 1))[1], threads.get("threadIdx.y", (None, 1))[1]
        lanes_x = min(WARP, bx)
        step = _lane_step(analyzer, flat, threads["threadIdx.x"][0]) if "threadIdx.x" in threads else 0
        warp = _warp_sectors(flat, threads, itemsize, _others(ctx)) if step is None else None
        if warp is not None:  # not affine along x, but each lane's offset a constant: count them
            return ctx["warps"] * iterations * warp * SECTOR
        sectors = _sectors(step, lanes_x, itemsize)
        groups = max(1, WARP // lanes_x) if by > 1 else 1
        if groups > 1 and "threadIdx.y" in threads and _lane_step(analyzer, flat, threads["threadIdx.y"][0]) == 0:
            groups = 1
        return ctx["warps"] * iterations * sectors * groups * SECTOR

    def _others(ctx) -> list:
        return [loop[0] for loop in ctx["loops"]] + list(ctx.get("block_vars", ()))

    def count_shared(buf, indices, ctx, seen: set) -> float:
        """A shared-memory access's wavefronts: per warp and iteration, as many as the most
        distinct 4-byte words its lanes touch in one bank (1: conflict-free or a broadcast)."""
        if not scope(buf).startswith("shared"):
            return 0.0
        flat = analyzer.simplify(_flat_index(buf, indices))
        key = (buf.name, str(flat))
        if key in seen:
            return 0.0
        seen.add(key)
        itemsize = max(1, tvm.runtime.DataType(buf.dtype).bits // 8)
        return ctx["warps"] * _iterations(flat, ctx["loops"]) * (
            _bank_wavefronts(flat, ctx["threads"], itemsize, _others(ctx)) or 1)

    from tvm.ir import Call

    arithmetic = (tirx.Add, tirx.Sub, tirx.Mul, tirx.Div, tirx.Max, tirx.Min, tirx.FloorDiv, Call)

    def ops_of(expr) -> int:
        """Floating-point operations of an expression (not its address arithmetic)."""
        return sum(isinstance(n, arithmetic) and _dtype(n).startswith("float")
                   for n in _expr_nodes(expr, indices=False))

    def walk(stmt, ctx):
        if isinstance(stmt, tirx.AttrStmt) and stmt.attr_key == "thread_extent":
            iv = stmt.node
            tag = str(iv.thread_tag)
            extent = int(stmt.value)
            new = dict(ctx)
            if ctx.get("launch") is None:
                new = {"launch": LaunchTraffic(), "loops": (), "blocks": 1, "threads": {}}
                out.append(new["launch"])
            new["threads"] = dict(new["threads"])
            if tag.startswith("blockIdx"):
                new["blocks"] = new["blocks"] * extent
                new["block_vars"] = (*new.get("block_vars", ()), iv.var)
                new["launch"].blocks = new["blocks"]
            else:
                new["threads"][tag] = (iv.var, extent)
            # the index's range, for loops whose trip count depends on it (a tile's copies)
            analyzer.bind(iv.var, tvm.ir.Range.from_min_extent(0, extent), allow_override=True)
            nthreads = math.prod(e for _, e in new["threads"].values()) if new["threads"] else 1
            new["warps"] = new["blocks"] * math.ceil(nthreads / WARP)
            walk(stmt.body, new)
            return
        if isinstance(stmt, tirx.For):
            extent = analyzer.const_int_bound(stmt.extent).max_value
            analyzer.bind(stmt.loop_var, tvm.ir.Range.from_min_extent(0, max(1, int(extent))), allow_override=True)
            unrolled = stmt.kind == tirx.ForKind.UNROLLED
            walk(stmt.body, {**ctx, "loops": (*ctx.get("loops", ()), (stmt.loop_var, max(1, int(extent)), unrolled))})
            return
        if isinstance(stmt, tirx.BufferStore) and ctx.get("launch") is not None:
            launch = ctx["launch"]
            seen: set = set()
            loads = [n for n in _expr_nodes(stmt.value) if _is_load(n)]
            for load in loads + [i for idx in stmt.indices for i in _expr_nodes(idx) if _is_load(i)]:
                launch.bytes += count(load.source, load.indices, ctx, seen)
                launch.shared += count_shared(load.source, load.indices, ctx, seen)
            launch.bytes += count(stmt.buffer, stmt.indices, ctx, set())
            launch.shared += count_shared(stmt.buffer, stmt.indices, ctx, set())
            nthreads = math.prod(e for _, e in ctx["threads"].values()) if ctx["threads"] else 1
            per_thread = math.prod(loop[1] for loop in ctx.get("loops", ()))
            launch.flops += ops_of(stmt.value) * per_thread * nthreads * ctx["blocks"]
            return
        for child in _children(stmt):
            walk(child, ctx)

    walk(bound_func.body, {"launch": None, "loops": (), "blocks": 1, "threads": {}})
    return out


def _children(s) -> list:
    from tvm import tirx

    if isinstance(s, tirx.SeqStmt):
        return list(s.seq)
    if isinstance(s, tirx.IfThenElse):
        return [s.then_case] + ([s.else_case] if s.else_case is not None else [])
    for attr in ("body", "block"):
        child = getattr(s, attr, None)
        if isinstance(child, tirx.Stmt):
            return [child]
    return []

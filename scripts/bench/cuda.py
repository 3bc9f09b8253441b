#!/usr/bin/env python
"""CUDA benchmark (issue 18): akg's CUDA kernels, with and without a GPU, in one run.

Suite: matmul 4096^3 fp32 and fp16, softmax and layer_norm 4096x1024 fp32, and from the kernel
suite bias_gelu 4096x3072 (elementwise), reduce_sum 4096x1024 over the rows, conv2d
(1,64,56,56)x(64,64,3,3) pad 1 (`--small` shrinks every shape, for tests).

Without a GPU (always): each kernel is built for the spec's target (`--spec sm_80`: `cuda`,
`sm_90`: `cuda-sm90`) with akg's default mapping (and `--samples N` sampled configs of its knob
space), and the table gives, per kernel, its launches (grid x block), what
`nvcc --resource-usage` reports (registers per thread, shared memory per block, spill bytes) and
a roofline ESTIMATE from the spec, labelled "estimate (no GPU)". The model:

- ideal: max(flops / peak, compulsory bytes / DRAM bandwidth), compulsory bytes being every
  input read once and every output written once, flops a contraction's 2 x multiply-adds (for
  the others the kernel's executed ops: the memory term dominates them); the peak is the spec's FP32 rate, for fp16
  its rate without tensor cores (`peak_fp16_simt`: akg's mapping uses no MMA yet). A lower
  bound for any kernel on that GPU without tensor cores (cuBLAS's fp16 matmul uses them and
  can beat it).
- mapping: the same max with a third term, with the ops the bound TIR executes ("ops
  executed": floating-point operations per thread times threads, a reduction tree's and idle
  guarded lanes' included), the bytes the mapping's global loads and stores move and the
  shared-memory wavefronts its shared loads and stores take, read off the bound TIR of each
  launch: every access counts once per warp per iteration of the serial loops around it
  that its address depends on (a thread re-reading one address in consecutive iterations is
  taken as a register or L1 hit: nvcc keeps it in a register; so is one in the iterations of
  an unrolled loop its address does not depend on: nvcc loads it once for the unrolled
  copies, a register tile's operand reused for a row or column of its outputs). Global
  accesses are counted in 32-byte sectors: a warp's 32 lanes along `threadIdx.x` touch
  ceil(span / 32) sectors of a contiguous span, one sector when the address does not move
  with the lane (a broadcast), 32 when it moves by 32 bytes or more or not affinely; an address
  not affine along x whose offset from lane 0 is a constant for each lane of the first warp
  (a tile copied by the flattened thread id, through a div/mod) counts the distinct sectors
  of those offsets. Shared accesses are counted in wavefronts, the most distinct 4-byte words
  the first warp's lanes touch in one of the 32 banks (1: conflict-free or a broadcast; 1
  too where a lane's offset is not a constant), served one per SM per clock (the clock from
  the spec's FP32 peak: 64 FP32 lanes per SM on sm_80, 128 from sm_86). No reuse across warps
  or blocks is assumed beyond what the kernel stages in shared memory itself (L2 hits are not
  modelled), so a plain matmul reads its operands once per warp of outputs, a tiled one once
  per block and k-tile; register pressure and latency are not modelled. Intermediates the
  kernel keeps in global memory (softmax's exponentials) count as traffic. The estimated
  time is the max of the three terms per launch (the table names the largest: compute,
  memory or shared), divided by min(1, blocks / SMs) (a launch of 4 blocks keeps 4 SMs busy),
  summed over launches; "est. of ideal" is ideal time / mapping time. It is an estimate, not
  a bound: L1 and L2 hits make real kernels faster, and latency, occupancy and tail effects
  slower.

With a GPU (nvidia-smi lists one; the spec is the preset nearest its compute capability): the
device-memory bandwidth measured by a 1 GiB device-to-device copy (2 bytes moved per byte
copied), cuBLAS through `torch.matmul` (fp32 with TF32 off, and fp16), PyTorch eager for the
others, TVM MetaSchedule for CUDA at the same number of trials as akg's tuner
(`--trials`, peers.tune_metaschedule), and akg's kernels tuned at `--trials` and timed by the
CUDA backend; each peer that cannot run says why (torch without CUDA, a TVM without the CUDA
runtime, akg's backend not running kernels yet) and is left out. The issue's targets: matmul
fp32 and fp16 >= 80% of cuBLAS; softmax and layer_norm >= 80% of the measured bandwidth; the
geomean over the suite of MetaSchedule time / akg time >= 1.0.

    python scripts/bench/cuda.py [--spec sm_80] [--samples 2] [--only matmul_f32,softmax] [--small]
                                 [--trials 64] [--no-gpu] [--json out.json] [--record docs/performance.md]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import random
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

LN_EPS = 1e-5
SECTOR = 32  # bytes of one DRAM / L2 transaction
WARP = 32


@dataclass
class Workload:
    name: str
    build: Callable  # GraphBuilder -> None
    kind: str  # "matmul" (target: of cuBLAS), "bandwidth" (of the measured bandwidth) or "suite"
    torch_fn: Callable | None = None  # (torch, tensors on the GPU) -> output, the eager / cuBLAS peer
    dtype: str = "float32"
    flops: float | None = None  # a contraction's 2 x multiply-adds (else: the kernel's counted ops)


def _matmul(m, k, n, dtype):
    def build(b):
        b.output(b.matmul(b.input("a", (m, k), dtype), b.input("b", (k, n), dtype)))
    return Workload(f"matmul {m}x{k}x{n} {dtype}", build, "matmul", lambda t, a, b: t.matmul(a, b), dtype,
                    2.0 * m * n * k)


def _softmax(r, c):
    def build(b):
        b.output(b.softmax(b.input("x", (r, c))))
    return Workload(f"softmax {r}x{c}", build, "bandwidth", lambda t, x: t.softmax(x, dim=-1))


def _layer_norm(r, c):
    def build(b):
        b.output(b.layer_norm(b.input("x", (r, c)), b.input("g", (c,)), b.input("bt", (c,)), epsilon=LN_EPS))
    return Workload(f"layer_norm {r}x{c}", build, "bandwidth",
                    lambda t, x, g, bt: t.nn.functional.layer_norm(x, (c,), g, bt, LN_EPS))


def _bias_gelu(r, c):
    def build(b):
        b.output(b.gelu(b.add(b.input("x", (r, c)), b.input("bias", (c,)))))
    # akg's gelu is the erf form (graph/ops); torch's default approximate="none" is the same
    return Workload(f"bias_gelu {r}x{c}", build, "suite", lambda t, x, bias: t.nn.functional.gelu(x + bias))


def _reduce_sum(r, c):
    def build(b):
        b.output(b.sum(b.input("x", (r, c)), axes=[1]))
    return Workload(f"reduce_sum {r}x{c} (rows)", build, "suite", lambda t, x: t.sum(x, dim=1))


def _conv2d(n, c, hw, f, kk):
    def build(b):
        b.output(b.conv2d(b.input("x", (n, c, hw, hw)), b.input("w", (f, c, kk, kk)), padding=[kk // 2, kk // 2]))
    return Workload(f"conv2d ({n},{c},{hw},{hw})x({f},{c},{kk},{kk})", build, "suite",
                    lambda t, x, w: t.nn.functional.conv2d(x, w, padding=kk // 2),
                    flops=2.0 * n * f * hw * hw * c * kk * kk)  # odd kk, "same" padding


def workloads(small: bool = False) -> dict[str, Workload]:
    if small:
        return {"matmul_f32": _matmul(64, 64, 64, "float32"), "matmul_f16": _matmul(64, 64, 64, "float16"),
                "softmax": _softmax(16, 256), "layer_norm": _layer_norm(16, 256),
                "bias_gelu": _bias_gelu(64, 128), "reduce_sum": _reduce_sum(64, 256),
                "conv2d": _conv2d(1, 8, 8, 8, 3)}
    return {"matmul_f32": _matmul(4096, 4096, 4096, "float32"), "matmul_f16": _matmul(4096, 4096, 4096, "float16"),
            "softmax": _softmax(4096, 1024), "layer_norm": _layer_norm(4096, 1024),
            "bias_gelu": _bias_gelu(4096, 3072), "reduce_sum": _reduce_sum(4096, 1024),
            "conv2d": _conv2d(1, 64, 56, 64, 3)}


def graph_of(w: Workload):
    from akg.graph import GraphBuilder

    b = GraphBuilder(w.name.split()[0])
    w.build(b)
    return b.build()


def compulsory_bytes(graph) -> int:
    return sum(v.type.nbytes for v in (*graph.inputs, *graph.outputs))


# ---------------------------------------------------------------------------------------------
# The no-GPU model: the mapping's global traffic, read off the bound TIR
# ---------------------------------------------------------------------------------------------
@dataclass
class LaunchTraffic:
    """One CUDA kernel's global-memory traffic (bytes, in 32-byte sectors) and operations, per
    the model of the module docstring."""

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


FP32_LANES = {"sm_80": 64}  # FP32 lanes per SM (an A100's 64; 128 from sm_86 on, H100 included)


def shared_wavefronts_per_s(spec) -> float:
    """Shared-memory wavefronts the GPU serves per second: one per SM per clock (32 banks of
    4 bytes), the clock taken from the spec's FP32 peak (2 flops per lane per clock)."""
    lanes = FP32_LANES.get(spec.arch, 64 if spec.compute_capability < (8, 6) else 128)
    return spec.peak_fp32 / (2 * lanes)


def peak_flops(spec, dtype: str) -> float:
    return spec.peak_fp16_simt if dtype == "float16" else spec.peak_fp32


def estimate(kernel, graph, spec, dtype: str, flops: float | None = None) -> dict:
    """The roofline estimate of one built kernel (see the module docstring); `flops`: the
    workload's own (a contraction's), else the ideal takes the kernel's counted ops."""
    from akg.backends.cuda.bind import bind_threads

    bound, _ = bind_threads(kernel.func)
    traffic = launch_traffic(bound)
    peak = peak_flops(spec, dtype)
    ops = sum(t.flops for t in traffic)
    flops = flops or ops
    mapped_bytes = sum(t.bytes for t in traffic)
    shared_rate = shared_wavefronts_per_s(spec)
    # a launch of fewer blocks than SMs gets that fraction of the GPU
    terms = [((t.flops / peak, "compute"), (t.bytes / spec.dram_bandwidth, "memory"),
              (t.shared / shared_rate, "shared"), min(1.0, t.blocks / spec.sms)) for t in traffic]
    mapped_s = sum(max(c[0], m[0], sh[0]) / fill for c, m, sh, fill in terms)
    limits: dict[str, float] = {}
    for *parts, fill in terms:
        top = max(parts)
        limits[top[1]] = limits.get(top[1], 0.0) + top[0] / fill
    ideal_bytes = compulsory_bytes(graph)
    ideal_s = max(flops / peak, ideal_bytes / spec.dram_bandwidth)
    return {"flops": flops, "ops": ops, "ideal_bytes": ideal_bytes, "mapped_bytes": mapped_bytes, "ideal_s": ideal_s,
            "mapped_s": mapped_s, "bound": "compute" if flops / peak >= ideal_bytes / spec.dram_bandwidth else "memory",
            "shared_wavefronts": sum(t.shared for t in traffic),
            "mapped_bound": max(limits, key=limits.get) if limits else "compute"}


def describe(kernel) -> dict:
    exe = kernel.executable
    launches, resources = [], []
    for name, launch in zip(exe.kernels, exe.launches):
        grid = "x".join(str(g) for g in launch.grid if g > 1) or "1"
        block = "x".join(str(b) for b in launch.block if b > 1) or "1"
        launches.append(f"{grid} x {block}")
        r = exe.resources.get(name)
        if r is not None:
            spill = r.spill_stores + r.spill_loads
            resources.append(f"{r.registers} regs, {r.shared_bytes} B smem"
                             + (f", {spill} B spill" if spill else ""))
        else:
            resources.append("?")
    return {"launches": launches, "resources": resources, "config": str(kernel.config)}


def sampled_configs(graph, target, count: int, seed: int = 0) -> list:
    """`count` configs sampled from the knob space of the graph's kernel, valid ones only."""
    from akg.errors import AkgError
    from akg.graph.pipeline import plan_model
    from akg.tuner.task import TuningTask

    subgraph = plan_model(graph, target).kernels[0].subgraph
    space = TuningTask(subgraph, target).space()
    rng, found = random.Random(seed), []
    for _ in range(count * 20):
        if len(found) >= count:
            break
        config = space.sample(rng)
        try:
            space.validate(config)
        except AkgError:
            continue
        if all(str(config) != str(c) for c in found):
            found.append(config)
    return found


def no_gpu_row(key: str, w: Workload, target, samples: int) -> dict:
    import akg
    from akg.errors import AkgError

    graph = graph_of(w)
    row = {"key": key, "workload": w.name, "kind": w.kind, "dtype": w.dtype, "variants": []}
    configs = [("default", None)] + [(f"sample {k + 1}", c) for k, c in
                                     enumerate(sampled_configs(graph, target, samples) if samples else [])]
    for label, config in configs:
        t0 = time.perf_counter()
        try:
            kernel = akg.build(graph, target=target, config=config)
            variant = {"label": label, **describe(kernel),
                       **estimate(kernel, graph, target.spec, w.dtype, w.flops)}
        except AkgError as e:
            variant = {"label": label, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"}
        variant["build_s"] = time.perf_counter() - t0
        row["variants"].append(variant)
    return row


def _si(v: float, unit: str) -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= scale:
            return f"{v / scale:.3g} {prefix}{unit}"
    return f"{v:.3g} {unit}"


def _ms(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{s * 1e3:.3g} ms" if s >= 1e-4 else f"{s * 1e6:.3g} us"


def no_gpu_table(rows: list[dict], spec) -> str:
    lines = [f"Spec `{spec.arch}` ({spec.name}): {spec.sms} SMs, {spec.dram_bandwidth / 1e9:.0f} GB/s, "
             f"FP32 {spec.peak_fp32 / 1e12:.3g} TFLOP/s, FP16 without tensor cores "
             f"{spec.peak_fp16_simt / 1e12:.3g} TFLOP/s. Times are **estimate (no GPU)**: the model of "
             "`scripts/bench/cuda.py`'s docstring, not measurements.", "",
             "| kernel | config | launches (grid x block) | nvcc: per kernel | ops executed | compulsory bytes | "
             "mapping's global bytes | ideal time, estimate (no GPU) | mapping time, estimate (no GPU) | "
             "est. of ideal |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        for v in r["variants"]:
            if "error" in v:
                lines.append(f"| {r['workload']} | {v['label']} | - | {v['error']} | | | | | | |")
                continue
            lines.append(
                f"| {r['workload']} | {v['label']}: `{v['config'].removeprefix('smart: ')}` | "
                f"{'; '.join(v['launches'])} | {'; '.join(v['resources'])} | {_si(v['ops'], 'op')} | "
                f"{_si(v['ideal_bytes'], 'B')} | {_si(v['mapped_bytes'], 'B')} | {_ms(v['ideal_s'])} "
                f"({v['bound']}) | {_ms(v['mapped_s'])} ({v.get('mapped_bound', '?')}) | "
                f"{v['ideal_s'] / v['mapped_s']:.1%} |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# With a GPU
# ---------------------------------------------------------------------------------------------
def gpu_info() -> dict | None:
    """{"name", "compute_capability": (major, minor), "memory"} of GPU 0, or None without one."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        proc = subprocess.run([smi, "--query-gpu=name,compute_cap,memory.total", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0 or not proc.stdout.strip():
        return None
    name, cc, memory = [p.strip() for p in proc.stdout.strip().splitlines()[0].split(",")][:3]
    try:
        major, minor = (int(p) for p in cc.split("."))
    except ValueError:
        major, minor = 8, 0
    return {"name": name, "compute_capability": (major, minor), "memory": memory}


def nearest_spec(cc: tuple[int, int]) -> str:
    """The preset nearest a compute capability: the newest preset not newer than it (the oldest
    preset for an older GPU)."""
    from akg.backends.cuda.spec import GPU_SPECS, get_spec

    presets = sorted(GPU_SPECS, key=lambda n: get_spec(n).compute_capability)
    fitting = [n for n in presets if get_spec(n).compute_capability <= tuple(cc)]
    return fitting[-1] if fitting else presets[0]


def torch_cuda():
    """(torch, None) when torch sees a CUDA GPU, else (None, the reason)."""
    try:
        import torch
    except ImportError:
        return None, "torch is not installed"
    if not torch.cuda.is_available():
        return None, f"torch {torch.__version__} has no CUDA device (a CPU build, or no driver)"
    return torch, None


def time_cuda(torch, fn, repeat: int = 20, min_seconds: float = 0.2) -> float:
    """Median seconds per call of `fn` on the GPU (CUDA events around a batch of calls)."""
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    one = max(start.elapsed_time(end) / 1e3, 1e-6)
    number = max(1, int(min_seconds / repeat / one))
    samples = []
    for _ in range(repeat):
        start.record()
        for _ in range(number):
            fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / 1e3 / number)
    return statistics.median(samples)


def measure_bandwidth(torch, nbytes: int = 1 << 30) -> float:
    """Device-memory bandwidth (bytes/s): a device-to-device copy of `nbytes`, read and written."""
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    seconds = time_cuda(torch, lambda: dst.copy_(src), repeat=10)
    return 2 * nbytes / seconds


def torch_peer(torch, w: Workload, graph) -> float:
    """Seconds of the peer (cuBLAS through torch.matmul for matmul, TF32 off; eager otherwise)."""
    import numpy as np

    from akg.graph.interpreter import random_inputs

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    inputs = random_inputs(graph, 0)
    tensors = [torch.from_numpy(np.ascontiguousarray(inputs[v.name])).cuda() for v in graph.inputs]
    return time_cuda(torch, lambda: w.torch_fn(torch, *tensors))


def cuda_tvm_target(spec):
    import tvm

    return tvm.target.Target({"kind": "cuda", "arch": spec.arch, "max_threads_per_block": spec.max_threads_per_block,
                              "max_num_threads": spec.max_threads_per_block, "thread_warp_size": spec.warp_size,
                              "max_shared_memory_per_block": spec.shared_per_block,
                              "registers_per_block": spec.registers_per_block})


def metaschedule_peer(graph, spec, trials: int, work_dir: str) -> dict:
    """MetaSchedule for CUDA at `trials` (peers.tune_metaschedule) on akg's computation as TE,
    timed on the GPU by TVM's time_evaluator; {"s": ...} or {"error": why}."""
    import numpy as np
    import tvm

    if not tvm.runtime.enabled("cuda"):
        return {"error": "this TVM has no CUDA runtime (built without CUDA): MetaSchedule cannot measure"}
    import peers
    from akg.graph.compute.lower import lower_graph
    from akg.graph.compute.to_te import to_te
    from akg.graph.interpreter import random_inputs

    program = lower_graph(graph)
    target = cuda_tvm_target(spec)
    result = peers.tune_metaschedule(to_te(program), target, trials=trials, work_dir=work_dir)
    if result.kernel is None:
        return {"error": f"no valid schedule in {result.trials} trials", "tune_s": result.tune_seconds}
    dev = tvm.cuda(0)
    inputs = random_inputs(graph, 0)
    arrays = ([inputs[t.name] for t in program.inputs] + [np.asarray(a) for a in program.params.values()]
              + [np.zeros(t.shape, t.dtype) for t in program.outputs])
    args = [tvm.runtime.tensor(a, dev) for a in arrays]
    evaluator = result.kernel.mod.time_evaluator("main", dev, number=10, repeat=10, min_repeat_ms=50)
    return {"s": statistics.median(evaluator(*args).results), "tune_s": result.tune_seconds, "trials": result.trials}


def akg_on_gpu(graph, target, trials: int, db_path: str) -> dict:
    """akg's kernel tuned at `trials` on `target` and timed by the CUDA backend; {"s": ...} or
    {"error": why} (the backend raises NoGpuError while it cannot run kernels)."""
    import akg
    from akg.errors import AkgError
    from akg.graph.interpreter import random_inputs

    import numpy as np

    out = {}
    try:  # a backend that cannot run kernels would fail every trial: say so once, skip tuning
        target.backend().to_device(np.zeros(1, "float32"))
    except AkgError as e:
        return {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:160]} (not tuned)"}
    try:
        t0 = time.perf_counter()
        result = akg.tune(graph, target=target, trials=trials, db=f"sqlite:///{db_path}", seed=0)
        out["tune_s"] = time.perf_counter() - t0
        out["failures"] = sum(k.failures for k in result.kernels)
        kernel = akg.build(graph, target=target, db=f"sqlite:///{db_path}")
        out["config"] = str(kernel.config)
        tensors, outs = kernel.device_arguments(**random_inputs(graph, 0))
        samples = kernel.target.backend().measure(kernel.executable, [*tensors, *outs], number=10, repeat=10)
        out["s"] = statistics.median(samples)
    except AkgError as e:
        out["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
    return out


def gpu_rows(names: list[str], ws: dict[str, Workload], spec_name: str, trials: int, tmp: str) -> tuple[dict, list]:
    from akg.target import get_target

    info = gpu_info()
    target = get_target(f"cuda-{spec_name.replace('_', '')}")
    meta = {"gpu": info["name"], "cc": "%d.%d" % info["compute_capability"], "spec": spec_name, "notes": []}
    torch, why = torch_cuda()
    if torch is None:
        meta["notes"].append(f"torch peers skipped: {why}")
    else:
        meta["bandwidth"] = measure_bandwidth(torch)
    rows = []
    for name in names:
        w = ws[name]
        graph = graph_of(w)
        row = {"key": name, "workload": w.name, "kind": w.kind, "bytes": compulsory_bytes(graph)}
        if torch is not None:
            try:
                row["torch_s"] = torch_peer(torch, w, graph)
            except Exception as e:  # noqa: BLE001  (a peer failing is reported, not fatal)
                row["torch_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
        try:
            row["ms"] = metaschedule_peer(graph, target.spec, trials, os.path.join(tmp, f"ms_{name}"))
        except Exception as e:  # noqa: BLE001
            row["ms"] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"}
        row["akg"] = akg_on_gpu(graph, target, trials, os.path.join(tmp, f"akg_{name}.db"))
        rows.append(row)
        print(f"{name}: torch {_ms(row.get('torch_s'))}, MS {_ms(row['ms'].get('s'))}, akg {_ms(row['akg'].get('s'))}",
              file=sys.stderr, flush=True)
    return meta, rows


def gpu_table(meta: dict, rows: list[dict], trials: int) -> str:
    bw = meta.get("bandwidth")
    lines = [f"GPU: {meta['gpu']} (compute capability {meta['cc']}; spec `{meta['spec']}`); measured device-memory "
             f"bandwidth: {f'{bw / 1e9:.0f} GB/s' if bw else 'not measured'}.", "",
             f"| kernel | akg tuned ({trials} trials) | cuBLAS / torch eager | MetaSchedule ({trials} trials) | "
             "akg vs MS | issue target | met |", "|---|---|---|---|---|---|---|"]
    ratios = []
    for r in rows:
        akg_s, torch_s, ms_s = r["akg"].get("s"), r.get("torch_s"), r["ms"].get("s")
        if akg_s and ms_s:
            ratios.append(ms_s / akg_s)
        if r["kind"] == "matmul":
            goal = "akg >= 80% of cuBLAS"
            met = None if not (akg_s and torch_s) else torch_s / akg_s >= 0.8
            got = f" ({torch_s / akg_s:.0%})" if akg_s and torch_s else ""
        elif r["kind"] == "bandwidth":
            goal = "akg >= 80% of measured bandwidth"
            met = None if not (akg_s and bw) else r["bytes"] / akg_s >= 0.8 * bw
            got = f" ({r['bytes'] / akg_s / bw:.0%})" if akg_s and bw else ""
        else:
            goal, met, got = "(in the geomean)", None, ""
        akg_cell = _ms(akg_s) if akg_s else f"not measured: {r['akg'].get('error', '?')}"
        torch_cell = _ms(torch_s) if torch_s else r.get("torch_error", "skipped")
        ms_cell = _ms(ms_s) if ms_s else f"not measured: {r['ms'].get('error', '?')}"
        lines.append(f"| {r['workload']} | {akg_cell} | {torch_cell} | {ms_cell} | "
                     f"{f'{ms_s / akg_s:.2f}x' if akg_s and ms_s else '-'} | {goal}{got} | "
                     f"{'-' if met is None else ('**met**' if met else 'not met')} |")
    if ratios:
        geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
        lines.append(f"\nGeomean of MetaSchedule time / akg time over {len(ratios)} of {len(rows)} kernels: "
                     f"{geo:.2f}x ({'**met**' if geo >= 1.0 and len(ratios) == len(rows) else 'not met'}; target >= 1.0x).")
    else:
        lines.append("\nGeomean vs MetaSchedule: not measured (see the cells above).")
    lines += [f"- {n}" for n in meta["notes"]]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default=None, help="GPU spec of the estimate (default: nearest the GPU, else sm_80)")
    ap.add_argument("--samples", type=int, default=0, help="sampled configs per kernel besides the default")
    ap.add_argument("--only", help="comma-separated kernels: " + ", ".join(workloads()))
    ap.add_argument("--small", action="store_true", help="small shapes (tests)")
    ap.add_argument("--trials", type=int, default=64, help="trials for akg and MetaSchedule (GPU only)")
    ap.add_argument("--no-gpu", action="store_true", help="the no-GPU report even where a GPU is present")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--record", type=Path, help="append the report to this markdown file")
    ap.add_argument("--note", default="", help="a line for the record (the machine's load, ...)")
    args = ap.parse_args(argv)
    from akg.target import get_target

    ws = workloads(args.small)
    names = args.only.split(",") if args.only else list(ws)
    unknown = [n for n in names if n not in ws]
    if unknown:
        ap.error(f"unknown kernels {unknown}; known: {', '.join(ws)}")
    info = None if args.no_gpu else gpu_info()
    spec_name = args.spec or (nearest_spec(info["compute_capability"]) if info else "sm_80")
    target = get_target(f"cuda-{spec_name.replace('_', '')}")
    rows = []
    for name in names:
        t0 = time.perf_counter()
        rows.append(no_gpu_row(name, ws[name], target, args.samples))
        print(f"{name}: {time.perf_counter() - t0:.1f}s", file=sys.stderr, flush=True)
    text = no_gpu_table(rows, target.spec)
    report = {"spec": spec_name, "no_gpu": rows}
    if info is not None:
        with tempfile.TemporaryDirectory(prefix="akg-cuda-bench-") as tmp:
            meta, grows = gpu_rows(names, ws, spec_name, args.trials, tmp)
        text = gpu_table(meta, grows, args.trials) + "\n\nGenerated kernels (resources, and the spec's " \
            "estimate for comparison):\n\n" + text
        report.update(gpu=meta, gpu_rows=grows)
    else:
        text += ("\n\nNo GPU here (nvidia-smi lists none" + (", or --no-gpu" if args.no_gpu else "") +
                 "): cuBLAS, PyTorch eager, MetaSchedule and akg's tuned times, the measured bandwidth and the "
                 "issue's targets need one and are not reported.")
    command = shlex.join(["python", "scripts/bench/cuda.py", *(argv if argv is not None else sys.argv[1:])])
    header = (f"date: {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC; host: {platform.node() or '?'} "
              f"({os.cpu_count()} CPUs{'; GPU: ' + info['name'] if info else '; no GPU'}); command: `{command}`"
              + (f". {args.note}" if args.note else ""))
    print(header + "\n\n" + text)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=str))
    if args.record:
        title = f"CUDA: {info['name']}" if info else "CUDA: generated kernels and a roofline estimate (no GPU)"
        with open(args.record, "a") as f:
            f.write(f"\n## {title} ({dt.date.today()})\n\n{header}\n\n{text}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

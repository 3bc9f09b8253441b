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
from cuda_traffic import launch_traffic  # noqa: E402

LN_EPS = 1e-5


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
# Without a GPU: the roofline estimate of each built kernel, and the report
# ---------------------------------------------------------------------------------------------
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

    from akg.target import get_target

    program = lower_graph(graph, moments=get_target("cuda").one_read_moments)  # as akg lowers it for CUDA
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

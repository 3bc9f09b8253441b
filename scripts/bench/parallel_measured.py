#!/usr/bin/env python
"""Auto-parallel on this machine: the measured step time of gloo runs against the cost model.

The training steps of examples/mlp.mir (cross entropy, SGD) and examples/transformer_block.mir
(loss: mean of the output squared, SGD) on 2 and 4 local processes (`akg.distributed.
run_distributed`), each under several plans per process count (data parallel, Megatron tensor
parallel, mixed, two pipeline stages, and the search's plan on each mesh; a searched plan whose
per-rank program equals a hand plan's is not run twice). Per plan:

- predicted: `cost.evaluate(step, plan, cluster)`, the cost model itself, with the cluster
  CALIBRATED in the same run for the same process count (`calibrate(n)`): n processes started
  the way `run_distributed` starts its ranks (spawned, gloo, the same threads per process),
  all busy at once so that an oversubscribed machine is measured oversubscribed, each timing
  * akg-compiled kernels (default configs, as the runner compiles), each timed over the same
    window on every rank: matmuls of two sizes and adds from L2- to DRAM-sized -> the
    ClusterSpec's achieved-rate curves (`flops_curve`, `bandwidth_curve`), a one-element add
    -> the cost of one compiled call (`call_s`);
  * gloo all-reduces through the runner's own path (`_Collectives.run`: copy to a tensor, the
    all-reduce, back to NumPy) over the whole world and over groups of 2, at 4 B to 4 MiB, in
    rounds over the sizes after a barrier (as a step runs them), the MEAN time per call (on a
    shared machine the scheduler's wake-ups are a heavy tail that a step pays), fitted to a
    ring: alpha per message x 2(k-1) + beta 2(k-1)/k B (`fit_hops`) -> the cluster's alpha
    and beta with `library="gloo"` (the model then also prices gloo's stand-ins: a
    reduce-scatter is an all-reduce of the whole buffer, an all-to-all a gather of every
    rank's whole buffer);
  * send/recv ping-pongs between rank pairs as the runner sends -> `p2p_alpha`;
- "with measured kernels": the same model and cluster with kernel times measured as a tuning
  database would give them: every op that is a kernel of its own, at its local shapes,
  compiled alone by akg and timed (`MeasuredKernels`, x the calibration's slowdown with all
  ranks busy); fused elementwise ops stay on the roofline;
- measured: the median of `run_distributed(..., steps=K)`'s `step_s` (the slowest rank's time
  per step, barrier to barrier) after dropping the first `--warmup` steps;
- the ratio measured / predicted, and per model and process count whether the model ranks
  the plans in the measured order (Kendall tau over the plans; pairs whose measured medians
  differ by less than their spread are reported as ties within noise).

    python scripts/bench/parallel_measured.py [--models mlp,transformer_block] [--processes 2,4]
        [--steps 16] [--warmup 3] [--json out.json]

The machine this was written for has 2 cores: 4 processes oversubscribe it (the output says
so); the calibration runs with the same process count, so the model's numbers include it.
"""

import os

for _var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):  # before NumPy loads (ranks inherit it)
    os.environ.pop(_var, None)
if __name__ == "__main__":  # kernels timed here run as a rank's: one thread (each rank sets its own)
    for _var in ("OMP_NUM_THREADS", "TVM_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import asdict, dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SIZES = (4, 4096, 65536, 1 << 20, 4 << 20)  # bytes per all-reduce
P2P_SIZES = (4, 65536, 1 << 20)  # bytes per send
MATMULS = ((32, 256, 256), (128, 768, 768))  # (m, k, n): a small and a transformer-sized matmul
ADDS = (1 << 13, 1 << 17, 1 << 20)  # elements: from L2 (96 KiB moved) to DRAM (12 MiB)


# --- calibration --------------------------------------------------------------------------------


@dataclass
class Calibration:
    """This machine with `processes` ranks busy at once, `threads` threads each: the achieved
    kernel rates, the cost of one compiled call, and the gloo samples with their fits
    (seconds, bytes, FLOP/s)."""

    processes: int
    threads: int
    flops: float
    bandwidth: float
    call_s: float
    alpha: float  # latency per all-reduce call (`fit_latency`)
    alpha_hop: float  # and per ring message
    beta: float  # seconds per byte
    p2p_alpha: float = 0.0  # one send/recv message's latency (ping-pong, half the round trip; `fit_p2p`)
    samples: list = field(default_factory=list)  # all-reduces: (group size, bytes, seconds)
    hop_error: float = 0.0  # the fit's largest relative error over the samples
    p2p_samples: list = field(default_factory=list)  # (bytes, seconds one way)
    flops_curve: list = field(default_factory=list)  # (FLOPs of a matmul, FLOP/s), small to large
    bandwidth_curve: list = field(default_factory=list)  # (bytes an add moves, bytes/s), small to large

    def cluster(self):
        """A ClusterSpec of this host as the calibration saw it: every process one device, all
        in one node, collectives as gloo runs them with the measured latencies, the measured
        kernel rate curves and call cost."""
        from akg.graph.parallel.cost import ClusterSpec, GiB

        try:
            mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / self.processes
        except (ValueError, OSError, AttributeError):
            mem = 4 * GiB
        return ClusterSpec(f"host-{self.processes}p", self.flops, self.bandwidth, mem, self.processes,
                           self.alpha, self.beta, self.alpha, self.beta, message_alpha=self.alpha_hop,
                           note=f"calibrated: akg kernels and gloo collectives, {self.processes} processes "
                                f"x {self.threads} threads on {os.cpu_count()} cores",
                           library="gloo", p2p_alpha=self.p2p_alpha or None, call_s=self.call_s,
                           shared_cores=os.cpu_count() or 1,
                           flops_curve=tuple(map(tuple, self.flops_curve)),
                           bandwidth_curve=tuple(map(tuple, self.bandwidth_curve)))

    def describe(self) -> str:
        curves = lambda c, unit: ", ".join(f"{r / 1e9:.1f}" for _, r in c) + f" {unit}"  # noqa: E731
        return (f"{self.processes} processes x {self.threads} thread(s): matmul {curves(self.flops_curve, 'GFLOP/s')} "
                f"(small, large), add {curves(self.bandwidth_curve, 'GB/s')} (L2 to DRAM sizes), one compiled call "
                f"{self.call_s * 1e6:.0f} us, all-reduce {self.alpha * 1e6:.0f} us a call + {self.alpha_hop * 1e6:.0f} us "
                f"per ring message, beta "
                f"{1 / max(self.beta, 1e-15) / 1e9:.3f} GB/s (fit within {self.hop_error:.0%}); send/recv "
                f"{self.p2p_alpha * 1e6:.0f} us a message")


def _per_call(f, window_s: float, barrier=None) -> float:
    """Seconds per call of f, called over a window of `window_s` seconds that starts at
    `barrier()` (every rank busy at the same time: an oversubscribed machine is measured so)."""
    if barrier is not None:
        barrier()
    count, t0 = 0, time.perf_counter()
    while True:
        f()
        count += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= window_s:
            return elapsed / count


def _kernel_rates(barrier=None, window_s: float = 0.5) -> tuple[list, list, float]:
    """Of akg-compiled kernels (default configs, as the runner compiles them), every rank timing
    at once: [(FLOPs, FLOP/s)] of matmuls (`MATMULS`), [(bytes, bytes/s)] of adds (`ADDS`), and
    the seconds of one tiny compiled call."""
    from akg.compiler import compile_model
    from akg.graph.builder import GraphBuilder

    def one(op, *shapes):
        b = GraphBuilder(op)
        ins = [b.input(f"in{i}", s) for i, s in enumerate(shapes)]
        b.output(b.op(op, *ins))
        g = b.build()
        f = compile_model(g, "cpu")
        args = {v.name: np.random.default_rng(0).standard_normal(v.shape).astype(np.float32) for v in g.inputs}
        f(**args)
        return lambda: f(**args)

    flops, bw = [], []
    for m, k, n in MATMULS:
        mm = one("matmul", (m, k), (k, n))
        flops.append((2 * m * k * n, 2 * m * k * n / _per_call(mm, window_s, barrier)))
    for size in ADDS:
        add = one("add", (size,), (size,))
        bw.append((3 * 4 * size, 3 * 4 * size / _per_call(add, window_s / 2, barrier)))
    tiny = one("add", (1,), (1,))
    call = _per_call(tiny, window_s / 2, barrier)
    return flops, bw, call


def _calibrate_rank(rank: int, n: int, threads: int, store: str, reps: int, results) -> None:
    """One calibration rank: kernels, then the all-reduces (world, then groups of 2)."""
    for var in ("OMP_NUM_THREADS", "TVM_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(threads)
    try:
        from datetime import timedelta

        import torch
        import torch.distributed as dist

        from akg.distributed import _Collectives
        from akg.graph.builder import GraphBuilder
        from akg.graph.parallel.mesh import Mesh

        torch.set_num_threads(threads)
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=n,
                                timeout=timedelta(seconds=120))
        mesh = Mesh.parse(f"a={n}", n) if n <= 2 or n % 2 else Mesh.parse(f"a={n // 2},b=2", n)
        axes = [tuple(mesh.names)] + ([("b",)] if len(mesh.names) > 1 else [])  # the world, then pairs
        rates = _kernel_rates(dist.barrier)  # every rank at once: the oversubscription is measured
        samples = []
        for ax in axes:
            coll = _Collectives(mesh, rank, [ax], 120)
            k = mesh.group_size(ax)
            calls = []
            for nbytes in SIZES:
                b = GraphBuilder("ar")
                x = b.input("x", (max(1, nbytes // 4),))
                b.output(b.op("all_reduce", x, mesh=str(mesh), axes=",".join(ax)))
                calls.append((b.build().nodes[-1], np.ones(max(1, nbytes // 4), np.float32)))
            times = [[] for _ in calls]
            for i in range(reps + 2):  # rounds over the sizes, a barrier each, as a step runs them
                dist.barrier()
                for j, (node, data) in enumerate(calls):
                    t = time.perf_counter()
                    coll.run(node, data)
                    if i >= 2:
                        times[j].append(time.perf_counter() - t)
            samples += [(k, data.nbytes, statistics.fmean(ts)) for (_, data), ts in zip(calls, times)]
        p2p = _ping_pong(dist, rank, n, reps)
        dist.barrier()
        results.put(("ok", rank, rates, samples, p2p))
        dist.destroy_process_group()
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        import traceback

        results.put(("error", rank, repr(e), traceback.format_exc()))


def _ping_pong(dist, rank: int, n: int, reps: int) -> list:
    """One-way seconds of a send/recv message as the runner sends (isend of a copy, a blocking
    recv), between rank pairs (0, 1), (2, 3)... at once: half of a round trip, the mean over
    `reps` after two warm-up trips, at `P2P_SIZES`. Ranks without a partner return []."""
    import torch

    peer = rank ^ 1
    if peer >= n:
        return []
    out = []
    for nbytes in P2P_SIZES:
        buf = np.ones(max(1, nbytes // 4), np.float32)
        got = torch.empty(buf.shape, dtype=torch.float32)
        times = []
        for i in range(reps + 2):
            t = time.perf_counter()
            if rank % 2 == 0:
                dist.isend(torch.from_numpy(buf.copy()), dst=peer, tag=7).wait()
                dist.recv(got, src=peer, tag=8)
            else:
                dist.recv(got, src=peer, tag=7)
                dist.isend(torch.from_numpy(buf.copy()), dst=peer, tag=8).wait()
            if i >= 2:
                times.append((time.perf_counter() - t) / 2)
        out.append((buf.nbytes, statistics.fmean(times)))
    return out


def calibrate(n: int, reps: int = 30, timeout_s: float = 300.0) -> Calibration:
    """Measure this machine with `n` processes at once (see the module docstring); the
    slowest rank's numbers (a step waits for the slowest)."""
    import multiprocessing as mp
    import queue
    import shutil

    threads = max(1, (os.cpu_count() or 1) // n)  # as run_distributed gives its ranks
    tmp = tempfile.mkdtemp(prefix="akg-calib-")
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=_calibrate_rank, args=(r, n, threads, os.path.join(tmp, "store"), reps, results),
                         daemon=True) for r in range(n)]
    got = []
    try:
        for p in procs:
            p.start()
        end = time.monotonic() + timeout_s
        while len(got) < n:
            try:
                msg = results.get(timeout=max(0.1, end - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"calibration with {n} processes did not finish in {timeout_s:.0f} s") from None
            if msg[0] == "error":
                raise RuntimeError(f"calibration rank {msg[1]} failed: {msg[2]}\n{msg[3]}")
            got.append(msg)
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
        shutil.rmtree(tmp, ignore_errors=True)
    flops = [(w, min(m[2][0][i][1] for m in got)) for i, (w, _) in enumerate(got[0][2][0])]
    bw = [(w, min(m[2][1][i][1] for m in got)) for i, (w, _) in enumerate(got[0][2][1])]
    call = max(m[2][2] for m in got)
    samples = [(k, b, max(m[3][i][2] for m in got)) for i, (k, b, _) in enumerate(got[0][3])]
    alpha, hop, beta, err = fit_latency(samples)
    pairs = [m[4] for m in got if m[4]]
    p2p = [(b, max(p[i][1] for p in pairs)) for i, (b, _) in enumerate(pairs[0])]
    return Calibration(n, threads, flops[-1][1], bw[-1][1], call, alpha, hop, beta, fit_p2p(p2p), samples, err, p2p,
                       flops, bw)


# --- the fits ----------------------------------------------------------------------------------


def _nnls(rows, t) -> tuple[np.ndarray, float]:
    """Non-negative least squares of t ~ rows @ x with relative errors weighted alike; (x,
    the largest relative error)."""
    from scipy.optimize import nnls

    a, t = np.asarray(rows, np.float64), np.asarray(t, np.float64)
    w = 1 / t
    x, _ = nnls(a * w[:, None], t * w)
    return x, float(np.max(np.abs(a @ x - t) / t))


def fit_latency(samples) -> tuple[float, float, float, float]:
    """t = alpha + alpha_hop 2(k-1) + beta 2(k-1)/k B over all-reduce samples (k, B, t), every
    term non-negative: a call's fixed latency (on an oversubscribed host the scheduler's
    wake-ups), the ring's 2(k-1) messages one after another, the bytes. (alpha, alpha_hop,
    beta, the largest relative error)."""
    rows = [(1.0, 2.0 * (k - 1), 2 * (k - 1) / k * b) for k, b, _ in samples]
    (a, h, b), err = _nnls(rows, [s for _, _, s in samples])
    return float(a), float(h), max(float(b), 1e-13), err


def fit_p2p(samples) -> float:
    """The latency of one send/recv message: t = alpha + beta B over (B, t) ping-pong samples."""
    (a, _), _ = _nnls([(1.0, b) for b, _ in samples], [t for _, t in samples])
    return max(float(a), 1e-7)


# --- the kernels as the runner calls them -------------------------------------------------------


class MeasuredKernels:
    """`cost.KernelTimes` from the kernels themselves, as a tuning database gives the model
    measured times: every op that is a kernel of its own (`cost.starts_kernel`), at the local
    shapes a plan gives it, compiled alone by akg (default config, as the runner compiles) and
    timed in this process (one thread, as a rank), times the calibration's `slowdown` (how
    much slower a kernel runs with every rank busy at once than alone). An op is timed once,
    whichever plan asks. Elementwise and layout ops fuse into those kernels: None, the
    model's fused roofline prices them."""

    def __init__(self, slowdown: float = 1.0, window_s: float = 0.05):
        self.slowdown, self.window_s = slowdown, window_s
        self.cache: dict = {}

    def time(self, call) -> float | None:
        from akg.graph.parallel.cost import starts_kernel

        if not starts_kernel(call.op):
            return None
        if call not in self.cache:
            self.cache[call] = _time_op(call, self.window_s)
        return self.cache[call] * self.slowdown


def _time_op(call, window_s: float) -> float:
    from akg.compiler import compile_model
    from akg.graph.builder import GraphBuilder

    b = GraphBuilder("op")
    ins = [b.input(f"in{i}", t.shape, t.dtype) for i, t in enumerate(call.ins)]
    out = b.op(call.op, *ins, **call.attrs)
    b.output(*(out if isinstance(out, tuple) else (out,)))
    g = b.build()
    f = compile_model(g, "cpu")
    rng = np.random.default_rng(0)
    args = {}
    for v in g.inputs:
        if np.dtype(v.dtype).kind == "f":
            args[v.name] = rng.standard_normal(v.shape).astype(v.dtype)
        else:  # indices (labels): in range of anything they index
            args[v.name] = np.zeros(v.shape, v.dtype)
    f(**args)
    return _per_call(lambda: f(**args), window_s)


def slowdown(alone: tuple, together: "Calibration") -> float:
    """How much slower kernels run with every rank busy than alone: the geometric mean over the
    calibration's matmuls and adds of (rate alone) / (rate together)."""
    ratios = [a / t for (_, a), (_, t) in zip(alone[0] + alone[1], together.flops_curve + together.bandwidth_curve)]
    return float(math.exp(statistics.fmean(math.log(r) for r in ratios))) if ratios else 1.0


# --- models and plans ---------------------------------------------------------------------------


def models(names):
    """name -> (model, training step, pins(dp, tp) of its Megatron layout, pipeline cut)."""
    from akg.graph.io import load_model
    from akg.graph.parallel.sharding import Sharding
    from akg.graph.train import train_step, with_mean_square_loss

    col = lambda *a: Sharding(((), tuple(a)))  # noqa: E731
    row = lambda *a: Sharding((tuple(a), ()))  # noqa: E731
    vec = lambda *a: Sharding((tuple(a),))  # noqa: E731

    def mlp_pins(dp, tp):
        pins = {"fc1.weight": col(tp), "fc1.bias": vec(tp), "fc2.weight": row(tp)}
        if dp:
            pins.update({"x": row(dp), "labels": vec(dp)})
        return pins

    def block_pins(dp, tp):
        pins = {}
        for nm in ("query", "key", "value", "ffn_in"):
            pins[f"{nm}.weight"], pins[f"{nm}.bias"] = col(tp), vec(tp)
        pins["attn_out.weight"], pins["ffn_out.weight"] = row(tp), row(tp)
        if dp:
            pins["x"] = row(dp)
        return pins

    out = {}
    for name in names:
        if name == "mlp":
            model = load_model(ROOT / "examples" / "mlp.mir")
            out[name] = (model, train_step(model, "loss", optimizer="sgd", lr=0.01), mlp_pins, "relu1")
        elif name == "transformer_block":
            model = with_mean_square_loss(load_model(ROOT / "examples" / "transformer_block.mir"))
            out[name] = (model, train_step(model, "loss", optimizer="sgd", lr=0.01), block_pins, "attn_norm")
        else:
            raise SystemExit(f"unknown model {name} (mlp, transformer_block)")
    return out


MESHES = {2: ["dp=2", "tp=2", "pp=2"], 4: ["dp=4", "tp=4", "dp=2,tp=2", "dp=2,pp=2"]}


def hand_plans(step, n: int, pins_of, cut: str):
    """(label, plan) of the hand plans for `n` processes (manual.py): data parallel, Megatron,
    Megatron x dp, two stages (x dp)."""
    from akg.graph.parallel.manual import data_parallel_plan, pipeline_stages, propagated_plan, with_stages
    from akg.graph.parallel.mesh import Mesh

    out = []
    for text in MESHES[n]:
        mesh = Mesh.parse(text, n)
        sizes = dict(mesh.axes)
        if "pp" in sizes:
            sub = Mesh(tuple((a, s) for a, s in mesh.axes if a != "pp"), n)
            base = data_parallel_plan(step, sub) if sub.axes else propagated_plan(step, sub, {})
            out.append((f"{text} stages" + (" x dp" if sub.axes else ""),
                        with_stages(base, mesh, "pp", pipeline_stages(step, [cut]))))
        elif "tp" in sizes:
            dp = "dp" if "dp" in sizes else None
            out.append((f"{text} Megatron" + (" x dp" if dp else ""), propagated_plan(step, mesh, pins_of(dp, "tp"))))
        else:
            out.append((f"{text} data parallel", data_parallel_plan(step, mesh)))
    return out


def searched_plans(step, n: int, cluster):
    """(label, plan) of the search on every mesh of `n` processes without a pipeline axis."""
    from akg.errors import NoPlanError, ShardingError
    from akg.graph.parallel.mesh import Mesh
    from akg.graph.parallel.search import search

    out, shapes = [], set()
    for text in MESHES[n]:
        shape = tuple(s for _, s in Mesh.parse(text).axes)
        if "pp" in text or shape in shapes:  # the search does not read axis names: tp=4 is dp=4
            continue
        shapes.add(shape)
        try:
            out.append((f"{text} searched", search(step, Mesh.parse(text, n), cluster)))
        except (NoPlanError, ShardingError) as e:
            print(f"  (no searched plan on {text}: {e})", flush=True)
    return out


def program_text(step, plan) -> str:
    from akg.graph.parallel.spmd import spmd, spmd_stages

    staged = plan.stages is not None and len(plan.stages) > 1
    return "\n".join(map(str, spmd_stages(step, plan) if staged else [spmd(step, plan)]))


# --- measuring and ranking ----------------------------------------------------------------------


def measure(model, step, plan, steps: int, warmup: int) -> dict:
    from akg.distributed import run_distributed
    from akg.graph.interpreter import random_inputs
    from akg.graph.train import initial_state, state_names

    state = set(state_names(step))
    batch = {k: a for k, a in random_inputs(step, 0).items() if k not in state}
    t = time.perf_counter()
    run = run_distributed(step, plan, {**batch, **initial_state(model, step)}, steps=steps)
    kept = sorted(run.step_s[warmup:] or run.step_s)
    q = lambda p: kept[min(len(kept) - 1, int(p * (len(kept) - 1) + 0.5))]  # noqa: E731
    return {"measured_s": statistics.median(kept), "q25_s": q(0.25), "q75_s": q(0.75), "steps": len(kept),
            "compile_s": run.compile_s, "wall_s": time.perf_counter() - t, "collectives": dict(run.collectives)}


def kendall_tau(a, b) -> float:
    """Kendall's tau-a between two sequences of numbers (1: the same order)."""
    n, s = len(a), 0
    for i in range(n):
        for j in range(i + 1, n):
            s += np.sign(a[i] - a[j]) * np.sign(b[i] - b[j])
    return float(s / (n * (n - 1) / 2)) if n > 1 else 1.0


def ranking(rows, key: str = "predicted_s") -> dict:
    """The plans of `rows` ordered by measurement and by `key`, Kendall tau, and the pairs the
    model orders against the measurement, each marked as a tie within noise where the two
    measured interquartile ranges overlap."""
    meas = [r["measured_s"] for r in rows]
    pred = [r[key] for r in rows]
    flipped = []
    for i in range(len(rows)):
        for j in range(i + 1, len(rows)):
            if np.sign(meas[i] - meas[j]) * np.sign(pred[i] - pred[j]) < 0:
                a, b = rows[i], rows[j]
                noise = a["q25_s"] <= b["q75_s"] and b["q25_s"] <= a["q75_s"]
                flipped.append((a["plan"], b["plan"], noise))
    return {"measured_order": [r["plan"] for r in sorted(rows, key=lambda r: r["measured_s"])],
            "predicted_order": [r["plan"] for r in sorted(rows, key=lambda r: r[key])],
            "tau": kendall_tau(meas, pred), "flipped": flipped,
            "agrees": not flipped, "agrees_beyond_noise": all(noise for _, _, noise in flipped)}


def table(rows) -> str:
    """The markdown table of the measured rows."""
    lines = ["| model | processes | plan | predicted ms (compute + comm) | measured ms (IQR) | measured / "
             "predicted | with measured kernels ms (compute) | measured / that | collectives per step |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        coll = ", ".join(f"{k} x{v}" for k, v in sorted(r["collectives"].items())) or "-"
        lines.append(f"| {r['model']} | {r['processes']} | {r['plan']} | {r['predicted_s'] * 1e3:.2f} "
                     f"({r['compute_s'] * 1e3:.2f} + {r['comm_s'] * 1e3:.2f}) | "
                     f"{r['measured_s'] * 1e3:.1f} ({r['q25_s'] * 1e3:.1f}-{r['q75_s'] * 1e3:.1f}) | "
                     f"{r['measured_s'] / r['predicted_s']:.2f} | {r['kernels_s'] * 1e3:.2f} "
                     f"({r['kernels_compute_s'] * 1e3:.2f}) | {r['measured_s'] / r['kernels_s']:.2f} | {coll} |")
    return "\n".join(lines)


def rank_lines(rows) -> list[str]:
    out = []
    groups = dict.fromkeys((r["model"], r["processes"]) for r in rows)
    for model, n in groups:
        mine = [r for r in rows if r["model"] == model and r["processes"] == n]
        if len(mine) < 2:
            continue
        for key, what in (("predicted_s", "the cost model"), ("kernels_s", "with measured kernels")):
            rk = ranking(mine, key)
            flips = "; ".join(f"{a} vs {b}{' (within noise)' if noise else ''}" for a, b, noise in rk["flipped"])
            out.append(f"- {model}, {n} processes, {what}: tau {rk['tau']:+.2f}; measured "
                       f"{' < '.join(rk['measured_order'])}; predicted {' < '.join(rk['predicted_order'])}"
                       + (f"; flipped: {flips}" if flips else "; same order"))
    return out


def machine() -> str:
    try:
        cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except (OSError, StopIteration):
        cpu = platform.processor() or "?"
    return f"{platform.node()}: {cpu}, {os.cpu_count()} cores"


def others() -> str:
    """Load average and the busiest other processes (the measurement shares the machine)."""
    try:
        ps = subprocess.run(["ps", "-eo", "pid,pcpu,args", "--sort=-pcpu"], capture_output=True, text=True,
                            timeout=5).stdout.splitlines()[1:6]
    except (OSError, subprocess.SubprocessError):
        ps = []
    me = os.getpid()
    busy = [l.strip()[:110] for l in ps if float(l.split()[1]) > 20 and int(l.split()[0]) != me]
    return f"load {os.getloadavg()[0]:.1f}" + (f"; others busy: {' | '.join(busy)}" if busy else "")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="mlp,transformer_block")
    ap.add_argument("--processes", default="2,4")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--no-search", action="store_true", help="hand plans only")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    from akg.graph.parallel.cost import evaluate

    t_start = time.time()
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {machine()}; {others()}", flush=True)
    procs = [int(x) for x in args.processes.split(",")]
    cores = os.cpu_count() or 1
    cals, measured_kernels = {}, {}
    alone = _kernel_rates()  # this process alone, one thread as a rank (set at the top)
    for n in procs:
        cals[n] = calibrate(n)
        note = f" (OVERSUBSCRIBED: {n} processes on {cores} cores)" if n > cores else ""
        measured_kernels[n] = MeasuredKernels(slowdown(alone, cals[n]))
        print(f"calibration, {cals[n].describe()}; kernels {measured_kernels[n].slowdown:.2f}x slower than one "
              f"process alone{note}", flush=True)
    rows = []
    for name, (model, step, pins_of, cut) in models(args.models.split(",")).items():
        for n in procs:
            cal = cals[n]
            cluster, measured = cal.cluster(), measured_kernels[n]
            plans = hand_plans(step, n, pins_of, cut)
            if not args.no_search:
                plans += searched_plans(step, n, cluster)
            seen = {}
            for label, plan in plans:
                text = program_text(step, plan)
                if text in seen:
                    print(f"  {name} {label}: the same per-rank program as {seen[text]}, not run again", flush=True)
                    continue
                seen[text] = label
                p = evaluate(step, plan, cluster)
                r = evaluate(step, plan, cluster, measured)
                m = measure(model, step, plan, args.steps + args.warmup, args.warmup)
                row = {"model": name, "processes": n, "plan": label, "mesh": str(plan.mesh),
                       "predicted_s": p.step_time, "compute_s": p.compute, "comm_s": p.communication,
                       "kernels_s": r.step_time, "kernels_compute_s": r.compute, **m}
                rows.append(row)
                print(f"  {name} {n}p {label}: predicted {p.step_time * 1e3:.2f} ms ({p.compute * 1e3:.2f} compute, "
                      f"{p.communication * 1e3:.2f} comm; with measured kernels {r.step_time * 1e3:.2f}), measured "
                      f"{m['measured_s'] * 1e3:.1f} ms (IQR {m['q25_s'] * 1e3:.1f}-{m['q75_s'] * 1e3:.1f}), "
                      f"ratio {m['measured_s'] / p.step_time:.2f}; compile {m['compile_s']:.1f} s, "
                      f"{m['collectives']}", flush=True)
    print()
    print(table(rows))
    print()
    for line in rank_lines(rows):
        print(line)
    print(f"\n{time.time() - t_start:.0f} s in all; at the end {others()}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "calibration": {n: asdict(c) for n, c in cals.items()}, "args": vars(args),
                       "machine": machine()}, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())

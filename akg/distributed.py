"""akg.distributed: a per-rank SPMD graph (`akg.graph.parallel.spmd`) run on N local processes
with torch.distributed (gloo), its kernels compiled by akg on every rank.

The per-rank graph is cut at its collective ops into segments (`akg.graph.parallel.segments`):
runs of ordinary nodes, each compiled by `akg.compiler.compile_model` (once per rank, default
configs), and the collectives between them, done with torch.distributed over one process group
per mesh group. gloo has no reduce-scatter or all-to-all on CPU: they are an all-reduce or an
all-gather and a slice; `shard_slice` and `mark_partial` move no data and run locally; a
pipeline plan's `send`/`recv` are tagged point-to-point messages (sends posted, waited for at
the end of the step). The graph's whole inputs are sharded by the parent as the plan says,
each rank gets its pieces; outputs are gathered on rank 0 and put together by the parent,
which checks that replicas agree. With microbatches, each rank streams them through its
stage's phases in 1F1B order and updates once on their mean gradient.

Processes are spawned (no inherited state), every collective has a timeout, and the parent
watches them: a rank that raises or dies ends the run with `RankFailedError` naming it, a run
past its deadline (or a rank hung while its peers wait) with `RankTimeoutError`; the other
ranks are terminated, none is left over.

    result = run_distributed(step_graph, plan, inputs, steps=3)
    result.outputs, result.history, result.step_s
"""

from __future__ import annotations

import logging
import os
import queue as queue_mod
import shutil
import tempfile
import time
import traceback
import zlib
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Mapping

import numpy as np

from akg.errors import InputDataError, RankFailedError, RankTimeoutError, ShardingError
from akg.graph.ir import Graph, Node
from akg.graph.ops.collective import exchange, group_axes
from akg.graph.ops.registry import COLLECTIVE
from akg.graph.parallel.mesh import Mesh
from akg.graph.parallel.plan import Plan
from akg.graph.parallel.segments import P2P, segments
from akg.graph.parallel.spmd import fed_back, shard_inputs, spmd, spmd_stages
from akg.graph.parallel.stages import Phases, microbatch_phases, one_f_one_b, stage_of_rank, unshard_stage_outputs
from akg.graph.train import NEW

log = logging.getLogger(__name__)


# --- one rank ----------------------------------------------------------------------------------


@dataclass
class _Job:
    """What one rank is given (pickled into the spawned process)."""

    rank: int
    mesh: Mesh
    per_rank: Graph
    inputs: dict[str, np.ndarray]
    steps: int
    target: str
    store: str  # a file for torch.distributed's FileStore rendezvous
    timeout_s: float
    group_axes: list[tuple[str, ...]]  # of every rank's collectives: each rank makes every group
    threads: int
    fault: tuple[str, int] | None = None  # tests: ("raise" | "exit" | "hang", rank)
    micro: list[dict[str, np.ndarray]] | None = None  # per microbatch its data (then `inputs`: the state)
    stage: int = 0
    stages: int = 1


class _Collectives:
    """The collective ops of one rank through torch.distributed, one process group per mesh
    group (every rank creates every group, in the same order, as torch requires)."""

    def __init__(self, mesh: Mesh, rank: int, axes_sets: list[tuple[str, ...]], timeout_s: float):
        import torch.distributed as dist

        self.dist, self.mesh, self.rank = dist, mesh, rank
        self.groups: dict[tuple[int, ...], object] = {}
        self.counts: Counter = Counter()
        self.pending: list = []  # sends not yet known to be received
        for axes in axes_sets:
            for g in mesh.groups(axes):
                key = tuple(sorted(g))
                if len(key) > 1 and key not in self.groups:
                    self.groups[key] = dist.new_group(list(key), timeout=timedelta(seconds=timeout_s))

    def finish(self) -> None:
        """Wait for this step's sends."""
        for work in self.pending:
            work.wait()
        self.pending.clear()

    def run(self, node: Node, x: np.ndarray | None, mb: int = 0) -> np.ndarray:
        import torch

        op, attrs = node.op, node.attrs
        if Mesh.parse(attrs["mesh"], self.mesh.devices_per_node).axes != self.mesh.axes:
            raise ShardingError(f"'{op}' producing %{node.output.name} runs on mesh {attrs['mesh']}, "
                                f"the processes form {self.mesh}")
        if op in P2P:
            from akg.graph.parallel.stages import peer

            other = peer(self.mesh, self.rank, attrs["axes"], attrs["shift"])
            tag = zlib.crc32(f"{attrs['tag']}/{mb}".encode()) >> 1  # one message per value and microbatch
            self.counts[op] += 1
            if op == "send":
                wire = x.view(np.uint8) if x.dtype == np.bool_ else x
                self.pending.append(self.dist.isend(torch.from_numpy(np.require(wire, requirements="C").copy()),
                                                    dst=other, tag=tag))
                return x
            dtype = np.dtype(attrs["dtype"])
            buf = np.empty(tuple(attrs["shape"]), np.uint8 if dtype == np.bool_ else dtype)
            self.dist.recv(torch.from_numpy(buf), src=other, tag=tag)
            return buf.view(dtype)
        order = self.mesh.group(self.rank, group_axes(attrs["axes"]))
        k, i = len(order), order.index(self.rank)
        if k == 1:
            return exchange(op, attrs, [x])[0]
        if op == "shard_slice":
            return np.ascontiguousarray(np.split(x, k, axis=attrs["dim"])[i])
        if op == "mark_partial":
            return x if i == 0 else np.zeros_like(x)
        self.counts[op] += 1
        group = self.groups[tuple(sorted(order))]
        wire = x.view(np.uint8) if x.dtype == np.bool_ else x
        t = torch.from_numpy(np.require(wire, requirements="C").copy())  # 0-d stays 0-d
        if op in ("all_reduce", "reduce_scatter"):
            self.dist.all_reduce(t, group=group)
            total = t.numpy()
            if op == "all_reduce":
                return total
            return np.ascontiguousarray(np.split(total, k, axis=attrs["dim"])[i])
        parts = [torch.empty_like(t) for _ in range(k)]
        self.dist.all_gather(parts, t, group=group)
        by_rank = dict(zip(sorted(order), parts))  # torch orders a group's ranks ascending
        pieces = [by_rank[r].numpy().view(x.dtype) for r in order]
        if op == "all_gather":
            return np.concatenate(pieces, axis=attrs["dim"])
        if op == "all_to_all":
            s, c = attrs["split_dim"], attrs["concat_dim"]
            return np.concatenate([np.split(p, k, axis=s)[i] for p in pieces], axis=c)
        raise ShardingError(f"'{op}' is not a collective the process runner knows")


def _run_rank(job: _Job, results) -> None:
    """The body of one spawned process: rendezvous, compile, run the steps, report."""
    for var in ("OMP_NUM_THREADS", "TVM_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(job.threads)
    try:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(job.threads)
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        dist.init_process_group("gloo", init_method=f"file://{job.store}", rank=job.rank,
                                world_size=job.mesh.size, timeout=timedelta(seconds=job.timeout_s))
        try:
            _steps(job, results)
        finally:
            dist.destroy_process_group()
    except BaseException as e:  # reported to the parent, which names the rank
        results.put(("error", job.rank, type(e).__name__, str(e), traceback.format_exc(), time.time()))
        raise SystemExit(1)


def _compiled(g: Graph | None, target: str) -> list:
    """`g`'s segments, each compiled (collectives: None), first calls made (they link and load:
    not part of a step's time)."""
    from akg.compiler import compile_model

    if g is None:
        return []
    plan = [(seg, None if seg.is_collective else compile_model(seg.graph, target)) for seg in segments(g)]
    for seg, compiled in plan:
        if compiled is not None:
            compiled(**{v.name: np.zeros(v.shape, v.dtype) for v in seg.graph.inputs})
    return plan


def _execute(plan: list, env: dict, coll: _Collectives, mb: int = 0) -> None:
    for seg, compiled in plan:
        if compiled is None:
            env[seg.outputs[0]] = coll.run(seg.node, env[seg.inputs[0]] if seg.inputs else None, mb)
        else:
            env.update(zip(seg.outputs, compiled(**{n: env[n] for n in seg.inputs})))


def _microbatches(job: _Job, phases: Phases, parts: dict, coll: _Collectives, fixed: dict) -> dict:
    """One step of streamed microbatches on this rank (1F1B): forward and backward per
    microbatch, the update once on the mean of the accumulated gradients. The environment
    after the update, per-microbatch outputs (the loss) averaged."""
    m = len(job.micro)
    envs: list[dict | None] = [{**fixed, **job.micro[i]} for i in range(m)]
    done_after = "B" if parts["backward"] else "F"
    acc: dict[str, np.ndarray] = {}
    per_mb: dict[str, list[np.ndarray]] = {}
    outs = [v.name for v in job.per_rank.outputs]
    for phase, i in one_f_one_b(job.stage, job.stages, m):
        _execute(parts["forward" if phase == "F" else "backward"], envs[i], coll, i)
        if phase == done_after:
            for name in phases.accumulated:
                acc[name] = envs[i][name] if name not in acc else acc[name] + envs[i][name]
            for name in outs:
                if name in envs[i]:
                    per_mb.setdefault(name, []).append(np.asarray(envs[i][name]))
            envs[i] = None
    env = {**fixed, **{n: (a / np.asarray(m, a.dtype)).astype(a.dtype) for n, a in acc.items()}}
    _execute(parts["update"], env, coll)
    for name, values in per_mb.items():
        if name not in env:
            env[name] = np.mean(np.stack(values), axis=0).astype(values[0].dtype)
    return env


def _steps(job: _Job, results) -> None:
    import torch.distributed as dist

    if job.fault and job.fault[1] == job.rank:
        _fault(job.fault[0])
    coll = _Collectives(job.mesh, job.rank, job.group_axes, job.timeout_s)
    t0 = time.perf_counter()
    if job.micro is None:
        plan = _compiled(job.per_rank, job.target)
    else:
        phases = microbatch_phases(job.per_rank)
        parts = {name: _compiled(getattr(phases, name), job.target) for name in ("forward", "backward", "update")}
    compile_s = time.perf_counter() - t0
    feed = fed_back(job.per_rank)
    out_names = [v.name for v in job.per_rank.outputs]
    tokens = {i for i, v in enumerate(job.per_rank.outputs) if job.per_rank.producer(v) is not None
              and job.per_rank.producer(v).op == "send"}
    constants = {v.name: np.asarray(a) for v, a in job.per_rank.constants.items()}
    state = dict(job.inputs)
    history, step_s = [], []
    for step in range(job.steps):
        dist.barrier()
        coll.counts.clear()
        t = time.perf_counter()
        if job.micro is None:
            env = {**constants, **state}
            _execute(plan, env, coll)
        else:
            env = _microbatches(job, phases, parts, coll, {**constants, **state})
        coll.finish()
        step_s.append(time.perf_counter() - t)
        outs = [np.asarray(env[n]) if i not in tokens else None for i, n in enumerate(out_names)]
        last = step == job.steps - 1
        kept = {out_names[i]: outs[i] for i in range(len(outs)) if (last or i not in feed) and i not in tokens}
        gathered = [None] * job.mesh.size if job.rank == 0 else None
        dist.gather_object(kept, gathered, dst=0)
        history.append(gathered)
        state.update({name: outs[i] for i, name in feed.items()})
    times = [None] * job.mesh.size if job.rank == 0 else None
    dist.gather_object((step_s, compile_s, dict(coll.counts)), times, dst=0)
    if job.rank == 0:
        results.put(("done", 0, history, times))
    else:
        results.put(("done", job.rank, None, None))


def _fault(kind: str) -> None:
    if kind == "raise":
        raise RuntimeError("injected fault")
    if kind == "exit":
        os._exit(3)
    if kind == "hang":
        time.sleep(3600)


# --- the parent --------------------------------------------------------------------------------


@dataclass
class DistributedRun:
    """A finished multi-process run. `outputs`: the last step's whole outputs, in graph-output
    order; `history`: per step the whole outputs that are not fed back (a training step's
    loss), by output name (the last step: every output); `step_s`: per step the slowest
    rank's wall time; `compile_s`: the slowest rank's compile time (and first calls);
    `collectives`: the data-moving collectives rank 0 ran in the last step, by op."""

    names: list[str]
    outputs: list[np.ndarray]
    history: list[dict[str, np.ndarray]]
    step_s: list[float]
    compile_s: float
    collectives: Counter
    processes: int
    programs: list[Graph] = field(repr=False)  # the per-rank graph (one per pipeline stage)


def run_distributed(graph: Graph, plan: Plan, inputs: Mapping[str, np.ndarray], *, steps: int = 1,
                    microbatches: int = 1, target: str = "cpu", timeout_s: float = 300.0,
                    fault: tuple[str, int] | None = None) -> DistributedRun:
    """Run `graph` under `plan` on one local process per mesh device, `steps` times (a training
    step's `new.X` outputs feed its inputs `X` between steps, on the ranks); `inputs` are the
    whole values. A plan with pipeline stages runs each stage's graph (`spmd_stages`) on the
    ranks of its position along the pipeline axis.

    `microbatches` > 1 (a training step, the graph one microbatch's): every data input holds
    the step's microbatches one after another along dim 0; each rank streams them through its
    forward and backward phases in 1F1B order (`microbatch_phases`, `one_f_one_b`) and updates
    once with the mean of their gradients; per-microbatch outputs (the loss) are averaged.
    `fault` (tests only): make a rank fail ("raise", "exit" or "hang")."""
    import multiprocessing as mp

    if steps < 1 or microbatches < 1:
        raise InputDataError(f"steps and microbatches must be at least 1, got {steps} and {microbatches}")
    mesh = plan.mesh
    staged = plan.stages is not None and len(plan.stages) > 1
    programs = spmd_stages(graph, plan) if staged else [spmd(graph, plan)]
    program_of = [programs[stage_of_rank(plan, r) if staged else 0] for r in range(mesh.size)]
    micro: list[list[dict] | None] = [None] * mesh.size
    if microbatches == 1:
        pieces = [{v.name: ins[v.name] for v in program_of[r].inputs}
                  for r, ins in enumerate(shard_inputs(graph, plan, inputs))]
    else:
        state, batches = _split_microbatches(graph, inputs, microbatches)
        per_mb = [shard_inputs(graph, plan, {**state, **b}) for b in batches]
        pieces = [{v.name: per_mb[0][r][v.name] for v in program_of[r].inputs if v.name in state}
                  for r in range(mesh.size)]
        micro = [[{v.name: mb[r][v.name] for v in program_of[r].inputs if v.name not in state} for mb in per_mb]
                 for r in range(mesh.size)]
    axes_sets = list(dict.fromkeys(group_axes(n.attrs["axes"]) for g in programs for n in g.nodes
                                   if n.opdef.kind == COLLECTIVE and n.op not in P2P))
    n = mesh.size
    threads = max(1, (os.cpu_count() or 1) // n)
    tmp = tempfile.mkdtemp(prefix="akg-dist-")
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=_run_rank, name=f"akg-rank{r}", daemon=True,
                         args=(_Job(r, mesh, program_of[r], pieces[r], steps, str(target), os.path.join(tmp, "store"),
                                    timeout_s, axes_sets, threads, fault, micro[r],
                                    stage_of_rank(plan, r) if staged else 0, len(programs)), results))
             for r in range(n)]
    try:
        for p in procs:
            p.start()
        done, history, times = _wait(procs, results, timeout_s + 60.0)
    finally:
        _stop(procs)
        results.close()
        shutil.rmtree(tmp, ignore_errors=True)
    hist = [unshard_stage_outputs(graph, plan, ranks, names=[k for d in ranks for k in d]) for ranks in history]
    names = [v.name for v in graph.outputs]
    outputs = [hist[-1][name] for name in names]
    fed = {v.name for v in graph.outputs if v.name.startswith("new.")} if steps > 1 else set()
    hist = [{k: a for k, a in h.items() if k not in fed} for h in hist]
    step_s = [max(t[0][s] for t in times) for s in range(steps)]
    counts: Counter = Counter(times[0][2])
    return DistributedRun(names, outputs, hist, step_s, max(t[1] for t in times), counts, n, programs)


def _split_microbatches(graph: Graph, inputs: Mapping[str, np.ndarray], m: int) -> tuple[dict, list[dict]]:
    """A training step's state inputs, and its data inputs cut into `m` microbatches along dim 0."""
    outs = {v.name for v in graph.outputs}
    state = {v.name: np.asarray(inputs[v.name]) for v in graph.inputs if NEW + v.name in outs and v.name in inputs}
    if not state:
        raise InputDataError(f"microbatches stream a training step (outputs new.X for inputs X); "
                             f"'{graph.name}' is none")
    batches: list[dict] = [{} for _ in range(m)]
    for v in graph.inputs:
        if v.name in state:
            continue
        if v.name not in inputs:
            raise InputDataError(f"missing input {v.name}")
        a = np.asarray(inputs[v.name])
        if v.type.rank == 0 or a.shape != (m * v.shape[0], *v.shape[1:]):
            raise InputDataError(f"input {v.name}: {m} microbatches of {v.type} need shape "
                                 f"{(m * v.shape[0], *v.shape[1:]) if v.type.rank else '(m, ...)'}, got {a.shape}")
        for i, part in enumerate(np.split(a, m)):
            batches[i][v.name] = part
    return state, batches


def _wait(procs, results, deadline_s: float):
    """Every rank's report. When one fails (an error report, or a process gone without one),
    the reports of the next moment are read too and the earliest failure is blamed: the
    others are mostly its echo (a peer's closed connection, a collective's timeout)."""
    end = time.monotonic() + deadline_s
    done: set[int] = set()
    history = times = None
    errors: list[tuple] = []
    while len(done) < len(procs) and not errors:
        try:
            msg = results.get(timeout=0.2)
        except queue_mod.Empty:
            msg = None
        if msg is not None and msg[0] == "error":
            errors.append(msg)
        elif msg is not None:
            done.add(msg[1])
            if msg[1] == 0:
                history, times = msg[2], msg[3]
        elif any(r not in done and p.exitcode not in (None, 0) for r, p in enumerate(procs)):
            break
        elif time.monotonic() > end:
            waiting = [r for r in range(len(procs)) if r not in done]
            raise RankTimeoutError(f"the run did not finish in {deadline_s:.0f} s: rank(s) "
                                   f"{', '.join(map(str, waiting))} of {len(procs)} still running")
    if len(done) == len(procs):
        return done, history, times
    grace = time.monotonic() + 1.0
    while time.monotonic() < grace:
        try:
            msg = results.get(timeout=0.1)
        except queue_mod.Empty:
            continue
        if msg[0] == "error":
            errors.append(msg)
    reported = {m[1] for m in errors}
    silent = [(r, p.exitcode) for r, p in enumerate(procs)
              if r not in done and r not in reported and p.exitcode not in (None, 0)]
    if silent:  # a rank that died without a word (a crash, a kill) is the cause of the others' errors
        r, code = silent[0]
        echo = f"; then rank {errors[0][1]}: {errors[0][2]}: {errors[0][3][:200]}" if errors else ""
        err = RankFailedError(f"rank {r} of {len(procs)} died (exit code {code}) without a report{echo}"
                              + _others(procs, done | {r} | reported))
        err.rank, err.rank_traceback = r, None
        raise err
    raise _failed(min(errors, key=lambda m: m[5]), procs, done)


def _failed(msg, procs, done: set[int]) -> RankFailedError | RankTimeoutError:
    """The error of a rank's report; the rank's traceback is its `rank_traceback` (and logged).
    A rank that timed out waiting blames the ranks still running without a word (hung)."""
    _, rank, name, text, tb, _ = msg
    log.debug("rank %d failed:\n%s", rank, tb)
    silent = [r for r, p in enumerate(procs) if r not in done and r != rank and p.is_alive()]
    if silent and ("timeout" in text.lower() or "timed out" in text.lower()):
        err = RankTimeoutError(f"rank(s) {', '.join(map(str, silent))} of {len(procs)} did not answer in time "
                               f"(hung?): rank {rank} waited for them and gave up ({name}: {text}); stopped them")
        err.rank, err.rank_traceback = silent[0], tb
        return err
    err = RankFailedError(f"rank {rank} of {len(procs)} failed: {name}: {text}" + _others(procs, done | {rank}))
    err.rank, err.rank_traceback = rank, tb
    return err


def _others(procs, settled: set[int]) -> str:
    running = [r for r, p in enumerate(procs) if r not in settled and p.is_alive()]
    return f" (stopped the other ranks: {', '.join(map(str, running))})" if running else ""


def _stop(procs) -> None:
    """End every rank still running: terminate, then kill what is left."""
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(timeout=5)
        if p.is_alive():
            p.kill()
            p.join(timeout=5)


def plan_for(graph: Graph, mesh: Mesh) -> tuple[Plan, str]:
    """The plan `akg run --processes` runs: the search's (`akg.graph.parallel.search`) where
    it exists, else data parallel over the whole mesh; and how it was made, in words."""
    try:
        from akg.graph.parallel.search import search
    except ImportError:
        from akg.graph.parallel.manual import data_parallel_plan

        return data_parallel_plan(graph, mesh), "data parallel (no search)"
    return search(graph, mesh), "searched plan"

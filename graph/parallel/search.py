"""The auto-parallel search (graph/parallel): a plan for a graph on a mesh.

1. The forward pass is cut into segments at values every forward path passes through (the
   residual stream between layers); backward and update nodes join the segment whose
   activations and parameters they read. Segments with the same signature (ops, attributes,
   types, roles and edges relative to the segment) are repeats of one layer: their nodes and
   inputs are tied to one choice each, so a 96-layer model is the same integer program as a
   2-layer one with larger weights.
2. One integer program over all ops (`ilp.py`): a binary per strategy of each tied class of
   nodes and per sharding of each class of graph inputs, resharding costs on edges as edge
   variables, a per-device memory constraint; solved by HiGHS through `scipy.optimize.milp`.
3. With a pipeline axis, the segments are cut into stages by dynamic programming over the
   segment boundaries (the slowest stage paces 1F1B; every stage must fit in memory).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Callable, Mapping

from akg.errors import NoPlanError, ShardingError
from akg.graph.ir import Graph, Node, Value
from akg.graph.parallel.cost import (ClusterSpec, KernelTimes, StepRoles, a100, collective_time, compute_time,
                                     evaluate, fused_traffic, in_flight, intra_node, local_bytes, output_sharding, reshard_time)
from akg.graph.parallel.mesh import Mesh
from akg.graph.parallel.plan import Plan, node_key
from akg.graph.parallel.sharding import Sharding
from akg.graph.parallel.strategy import OpCall, axis_assignments, dims_from

log = logging.getLogger(__name__)
REFINE_SHARPNESS = (None, 8.0, 2.0)  # None: only the slowest stage weighs m (a subgradient)


def _nearness(t: float, top: float, sharpness: float | None) -> float:
    """How much a stage of time `t` counts as the slowest (`top`): 1 for the slowest, else 0
    (sharpness None) or (t / top) ** sharpness."""
    if top <= 0:
        return 1.0
    if sharpness is None:
        return 1.0 if t >= top else 0.0
    return (t / top) ** sharpness

# --- segments and their classes ----------------------------------------------------------------


@dataclass
class Segments:
    """`of_node[id(node)]` and `of_value[name]` (sources used in one segment only): segment
    indices; `count`: how many; `klass[s]`: the class of segment s (equal for repeats)."""

    of_node: dict[int, int]
    of_source: dict[str, int | None]  # None: a source used by several segments (its own class)
    count: int
    klass: list[int]
    local_index: dict[int, int]  # id(node) -> position within its segment
    source_index: dict[str, int]  # source name -> position among its segment's sources


def segment(graph: Graph, roles: StepRoles, pinned: Mapping[str, Sharding] | None = None) -> Segments:
    """Cut `graph` into segments and class them (see the module docstring)."""
    pinned = pinned or {}
    forward = [n for n in graph.nodes if id(n) in roles.forward]
    pos = {id(n): i for i, n in enumerate(forward)}
    last_use: dict[Value, int] = {}
    for i, n in enumerate(forward):
        for v in n.inputs:
            last_use[v] = i
    produced = {v for n in forward for v in n.outputs}
    seg_of: dict[int, int] = {}
    seg, open_count = 0, 0
    for i, n in enumerate(forward):
        seg_of[id(n)] = seg
        open_count += sum(1 for v in n.outputs if last_use.get(v, -1) > i)
        open_count -= sum(1 for v in set(n.inputs) if v in produced and last_use[v] == i)
        if open_count == 1 and i + 1 < len(forward):
            seg += 1
    producer = {v: n for n in graph.nodes for v in n.outputs}
    sources = [*graph.inputs, *graph.constants]
    source_set = set(sources)
    users: dict[Value, set[int]] = {v: set() for v in sources}
    # backward and update nodes: the latest segment whose forward values or single-segment
    # sources they read; else the earliest of their producers'
    fwd_segs: dict[Value, set[int]] = {}
    for n in forward:
        for v in n.inputs:
            if v in source_set:
                fwd_segs.setdefault(v, set()).add(seg_of[id(n)])
    # sources the forward pass reads in one segment only (a layer's weights; not tied embeddings)
    first_seg_of_source = {v: next(iter(s)) for v, s in fwd_segs.items() if len(s) == 1}
    undecided: list[Node] = []
    undecided_ids: set[int] = set()
    for n in graph.nodes:
        if id(n) in seg_of:
            continue
        fwd = [seg_of[id(producer[v])] for v in n.inputs if v in producer and id(producer[v]) in pos]
        fwd += [first_seg_of_source[v] for v in n.inputs if v in first_seg_of_source]
        back = [seg_of[id(producer[v])] for v in n.inputs if v in producer and id(producer[v]) in seg_of
                and id(producer[v]) not in undecided_ids]
        if fwd:
            seg_of[id(n)] = max(fwd)
        elif back:
            seg_of[id(n)] = min(back)
        else:
            undecided.append(n)
            undecided_ids.add(id(n))
            seg_of[id(n)] = -1
    if undecided:  # nodes of sources only (an optimizer's decay of its state): their readers' segment
        readers: dict[Value, list[Node]] = {}
        for n in graph.nodes:
            for v in n.inputs:
                readers.setdefault(v, []).append(n)
        for n in reversed(undecided):
            after = [seg_of[id(r)] for v in n.outputs for r in readers.get(v, ()) if seg_of.get(id(r), -1) >= 0]
            seg_of[id(n)] = min(after) if after else 0
    for n in graph.nodes:
        for v in n.inputs:
            if v in source_set:
                users[v].add(seg_of[id(n)])
    of_source = {v.name: (next(iter(users[v])) if len(users[v]) == 1 else None) for v in sources}
    count = max(seg_of.values(), default=0) + 1
    members: list[list[Node]] = [[] for _ in range(count)]
    for n in graph.nodes:
        members[seg_of[id(n)]].append(n)
    local_index = {id(n): i for ms in members for i, n in enumerate(ms)}
    seg_sources: list[list[Value]] = [[] for _ in range(count)]
    for ms in members:
        for n in ms:
            for v in n.inputs:
                s = of_source.get(v.name) if v in source_set else None
                if s is not None and v not in seg_sources[s]:
                    seg_sources[s].append(v)
    source_index = {v.name: i for vs in seg_sources for i, v in enumerate(vs)}
    outputs = {v.name for v in graph.outputs}
    spread: dict[Value, int] = {}  # how far from its producer's segment a value is read
    for n in graph.nodes:
        for v in n.inputs:
            if v in producer:
                spread[v] = max(spread.get(v, 0), abs(seg_of[id(n)] - seg_of[id(producer[v])]))

    def ref(v: Value, here: int):
        if v in source_set:
            s = of_source[v.name]
            if s is None:
                return ("global", v.name)
            return ("src", s - here, source_index[v.name], str(pinned.get(v.name, "")))
        p = producer[v]
        at = seg_of[id(p)]
        if spread.get(v, 0) > 1:  # read far from where it is made (a global step count): by identity
            return ("node@", at, local_index[id(p)], p.outputs.index(v))
        return ("node", at - here, local_index[id(p)], p.outputs.index(v))

    signatures: list[tuple] = []
    for s, ms in enumerate(members):
        sig = []
        for n in ms:
            sink = []
            for v in n.outputs:
                if v.name in outputs:
                    target = v.name[len("new."):] if v.name.startswith("new.") else None
                    sink.append(ref(graph.value(target), s) if target and target in of_source else ("out", v.name))
            sig.append((n.op, n.attrs, tuple(v.type for v in n.inputs), tuple(v.type for v in n.outputs),
                        id(n) in roles.forward, roles.per_step(n),
                        tuple(v.name in roles.kept for v in n.outputs), tuple(v.name in roles.waiting for v in n.outputs),
                        tuple(ref(v, s) for v in n.inputs), tuple(sink),
                        tuple(str(pinned.get(v.name, "")) for v in n.outputs)))
        sig.append(tuple((v.type, str(pinned.get(v.name, ""))) for v in seg_sources[s]))
        signatures.append(tuple(sig))
    seen: dict[tuple, int] = {}
    klass = [seen.setdefault(sig, len(seen)) for sig in signatures]
    return Segments(seg_of, of_source, count, klass, local_index, source_index)


# --- choices -------------------------------------------------------------------------------------


def source_choices(t, mesh: Mesh) -> list[Sharding]:
    """Every way to lay out a graph input on `mesh` without partial sums, replicated first."""
    out = [Sharding.replicated(t.rank)]
    if t.rank == 0:
        return out
    for combo in axis_assignments(mesh, t.rank):
        s = Sharding(dims_from(mesh, combo, t.rank))
        if s.divides(t.shape, mesh) and s not in out:
            out.append(s)
    return out


def submesh(mesh: Mesh, pp_axis: str | None) -> Mesh:
    """The mesh the strategies are drawn from: the axes but the pipeline's and those of size 1
    (which split nothing)."""
    return Mesh(tuple((n, s) for n, s in mesh.axes if n != pp_axis and s > 1), mesh.devices_per_node)


def pipeline_axis(mesh: Mesh, pp_axis: str | None) -> str | None:
    if pp_axis is not None:
        mesh.axis_size(pp_axis)
        return pp_axis
    return "pp" if "pp" in mesh.names and mesh.axis_size("pp") > 1 else None


# --- the search ----------------------------------------------------------------------------------


def search(graph: Graph, mesh: Mesh, cluster: ClusterSpec | None = None, *, memory_budget: float | None = None,
           pinned: Mapping[str, Sharding] | None = None, pp_axis: str | None = None, microbatches: int | None = None,
           kernels: KernelTimes | None = None, time_limit: float = 60.0, refine: int = 2) -> Plan:
    """The cheapest plan for `graph` (one microbatch of a training step, or any graph) on
    `mesh` under `cluster`'s cost model: per-op strategies and input shardings from one
    integer program, pipeline stages along `pp_axis` (default: an axis named `pp`).
    `memory_budget` (bytes per device) defaults to the cluster's device memory; `pinned`
    fixes the sharding of named inputs or node outputs. With stages, up to `refine` rounds
    of programs weigh each segment by how near its stage is to the slowest at the last cut
    (1F1B pays the slowest stage's work m times, the others' once), each round from the best
    plan so far; the cheapest plan is kept. NoPlanError when nothing fits."""
    from akg.graph.parallel.ilp import Problem

    t0 = time.perf_counter()
    cluster = cluster or a100()
    budget = cluster.memory if memory_budget is None else float(memory_budget)
    pp_axis = pipeline_axis(mesh, pp_axis)
    pp = mesh.axis_size(pp_axis) if pp_axis else 1
    m = microbatches or (pp if pp > 1 else 1)
    if pp > 1 and m < 1:
        raise ShardingError(f"microbatches must be at least 1, got {m}")
    pinned = dict(pinned or {})
    sub = submesh(mesh, pp_axis)
    _check_pins(graph, pinned, sub, pp_axis)
    roles = StepRoles.of(graph)
    segs = segment(graph, roles, pinned)
    if pp > segs.count:
        raise NoPlanError(f"the graph has {segs.count} pipeline-cuttable segments, fewer than the {pp} stages of {mesh}")

    def solve(seg_weight=None):
        problem = Problem(graph, mesh, sub, cluster, roles, segs, pinned, pp=pp, microbatches=m, kernels=kernels,
                          seg_weight=seg_weight)
        choice, inputs, objective = problem.solve(budget, time_limit=time_limit)
        outputs = {v.name: output_sharding(graph, _Partial(mesh, inputs), v) for v in graph.outputs}
        plan = Plan(mesh, choice, inputs, outputs, pp_axis=pp_axis, microbatches=m)
        if pp > 1:
            plan.stages = pipeline_stages(graph, plan, cluster, roles, segs, budget, kernels)
        return plan, problem, objective, evaluate(graph, plan, cluster, kernels, roles)

    plan, problem, objective, prediction = solve()
    for _ in range(refine if pp > 1 else 0):
        # 1F1B pays the slowest stage's microbatch work m times, the others' once, and the
        # update of the slowest updating stage: weigh each segment by how close its stage is
        # to the slowest (sharp: the gradient of the pipeline time at this cut, which can
        # throw the cost onto another stage; smoother: stages near the slowest weigh near m)
        # and solve again; the best plan is kept, and the next round starts from it
        stage_of = {k: i for i, keys in enumerate(plan.stages) for k in keys}
        times, updates = prediction.stage_times, prediction.stage_updates
        top, top_up = max(times), max(updates)
        better, fastest = None, prediction.step_time
        for sharpness in REFINE_SHARPNESS:
            weight = [(1.0, 1.0 / pp)] * segs.count
            for n in graph.nodes:
                st = stage_of[node_key(n)]
                near = _nearness(times[st], top, sharpness)
                weight[segs.of_node[id(n)]] = (1.0 + (m - 1) * near,
                                               1.0 / pp + (1 - 1.0 / pp) * _nearness(updates[st], top_up, sharpness))
            try:
                again = solve(weight)
            except NoPlanError:
                continue
            log.debug("refine on %s (sharpness %s): %.4g -> %.4g s", mesh, sharpness, prediction.step_time,
                      again[3].step_time)
            if again[3].memory <= budget * (1 + 1e-9) and again[3].step_time < fastest:
                better, fastest = again, again[3].step_time
        if better is None:
            break
        plan, problem, objective, prediction = better
    if prediction.memory > budget * (1 + 1e-9):
        raise NoPlanError(f"the best plan on {mesh} needs {_gib(prediction.memory)} per device, "
                          f"more than the {_gib(budget)} budget")
    plan.predicted = {**prediction.as_dict(), "objective": objective, "search_seconds": time.perf_counter() - t0,
                      "ilp": problem.stats, "segments": segs.count, "segment_classes": len(set(segs.klass))}
    return plan


@dataclass
class _Partial:
    """Enough of a plan to ask where outputs go before the plan exists."""

    mesh: Mesh
    inputs: dict

    def sharding_of_input(self, name, rank):
        return self.inputs.get(name, Sharding.replicated(rank))

    def sharding_of_output(self, name, rank):
        return Sharding.replicated(rank)


def _gib(n: float) -> str:
    return f"{n / (1 << 30):.2f} GiB"


def _check_pins(graph: Graph, pinned: Mapping[str, Sharding], mesh: Mesh, pp_axis: str | None) -> None:
    for name, s in pinned.items():
        v = graph.value(name) if name in {x.name for x in graph.values} else None
        if v is None:
            raise ShardingError(f"pinned value %{name} is not in graph '{graph.name}'")
        if pp_axis is not None and pp_axis in s.axes:
            raise ShardingError(f"pinned %{name} {s} uses the pipeline axis '{pp_axis}'")
        s.check(v.shape, mesh, f"pinned %{name}")


# --- pipeline stages ---------------------------------------------------------------------------


def pipeline_stages(graph: Graph, plan: Plan, cluster: ClusterSpec, roles: StepRoles, segs: Segments,
                    budget: float, kernels: KernelTimes | None = None) -> list[list[str]]:
    """Contiguous segments per stage minimising the slowest stage's microbatch time (what
    paces 1F1B), every stage within `budget` with its in-flight activations; dynamic
    programming over segment boundaries. NoPlanError when no cut fits."""
    mesh, pp = plan.mesh, plan.mesh.axis_size(plan.pp_axis)
    m = plan.microbatches
    S = segs.count
    mb, once, inputs_mem, kept, waiting = [0.0] * S, [0.0] * S, [0.0] * S, [0.0] * S, [0.0] * S
    producer = {v: n for n in graph.nodes for v in n.outputs}
    src = {}
    for v in (*graph.inputs, *graph.constants):
        src[v] = plan.sharding_of_input(v.name, v.type.rank)
    for n in graph.nodes:
        src.update(zip(n.outputs, plan.strategy(n).outputs))
    crossing: list[list[tuple[int, float]]] = [[] for _ in range(S)]  # per consumer segment: (producer seg, s)
    intra = intra_node(mesh, plan.pp_axis)
    seen_sources: list[set] = [set() for _ in range(S)]
    traffic = fused_traffic(graph)
    for n in graph.nodes:
        s = segs.of_node[id(n)]
        st = plan.strategy(n)
        per_step = roles.per_step(n)
        t = compute_time(OpCall.of(n), st, mesh, cluster, kernels, traffic.get(id(n)))
        for v, want in zip(n.inputs, st.inputs):
            t += reshard_time(src[v], want, v.type, mesh, cluster)
            p = producer.get(v)
            if p is not None and segs.of_node[id(p)] != s and not per_step:
                crossing[s].append((segs.of_node[id(p)],
                                    collective_time("send_recv", local_bytes(v.type, want, mesh), 2, cluster, intra)))
            elif p is None and v not in seen_sources[s]:
                seen_sources[s].add(v)
                inputs_mem[s] += local_bytes(v.type, src[v], mesh)
        (once if per_step else mb)[s] += t
        for v in n.outputs:
            if v.name in roles.kept:
                kept[s] += local_bytes(v.type, src[v], mesh)
            if v.name in roles.waiting:
                waiting[s] += local_bytes(v.type, src[v], mesh)
    INF = math.inf

    def stage_cost(i: int, j: int, k: int, p2p: float) -> float:
        """Segments i..j (inclusive) as stage k: its microbatch time, inf when it does not fit."""
        memory = sum(inputs_mem[i:j + 1]) + sum(waiting[i:j + 1]) + sum(kept[i:j + 1]) * in_flight(k, pp, m)
        if memory > budget:
            return INF
        return sum(mb[i:j + 1]) + p2p

    # p2p[i][j]: sends into segments i..j from segments before i
    best = [[INF] * (S + 1) for _ in range(pp + 1)]
    cut = [[-1] * (S + 1) for _ in range(pp + 1)]
    best[0][0] = 0.0
    cost_of: dict[tuple[int, int, int], float] = {}
    for i in range(S):
        p2p = 0.0
        for j in range(i, S):
            p2p += sum(sec for a, sec in crossing[j] if a < i)
            for k in range(pp):
                cost_of[i, j, k] = stage_cost(i, j, k, p2p)
    for k in range(1, pp + 1):
        for j in range(k, S + 1):
            for i in range(k - 1, j):
                if best[k - 1][i] == INF:
                    continue
                c = max(best[k - 1][i], cost_of[i, j - 1, k - 1])
                if c < best[k][j]:
                    best[k][j], cut[k][j] = c, i
    if best[pp][S] == INF:
        raise NoPlanError(f"no cut of the {S} segments into {pp} pipeline stages fits "
                          f"{_gib(budget)} per device on {mesh}")
    bounds, j = [], S
    for k in range(pp, 0, -1):
        i = cut[k][j]
        bounds.append((i, j))
        j = i
    bounds.reverse()
    stages: list[list[str]] = [[] for _ in range(pp)]
    stage_of_seg = {s: k for k, (i, j) in enumerate(bounds) for s in range(i, j)}
    for n in graph.nodes:
        stages[stage_of_seg[segs.of_node[id(n)]]].append(node_key(n))
    return stages


# --- meshes and the grid baseline ---------------------------------------------------------------


def factorisations(n: int, *, max_pp: int | None = None, max_tp: int | None = None) -> list[tuple[int, int, int]]:
    """Every (dp, tp, pp) with dp * tp * pp = n."""
    out = []
    for pp in range(1, n + 1):
        if n % pp or (max_pp is not None and pp > max_pp):
            continue
        for tp in range(1, n // pp + 1):
            if (n // pp) % tp or (max_tp is not None and tp > max_tp):
                continue
            out.append((n // pp // tp, tp, pp))
    return out


def grid_mesh(dp: int, tp: int, pp: int, devices_per_node: int = 8) -> Mesh:
    """Megatron's layout: pipeline outermost, then data, tensor innermost (inside a node)."""
    return Mesh((("pp", pp), ("dp", dp), ("tp", tp)), devices_per_node)


@dataclass
class GridPoint:
    dp: int
    tp: int
    pp: int
    plan: Plan | None
    reason: str = ""

    @property
    def step_time(self) -> float:
        return self.plan.predicted["step_time"] if self.plan else math.inf


def grid_plans(graph_of: Callable[[int, int, int], tuple[Graph, int]], devices: int, cluster: ClusterSpec,
               pins_of: Callable[[Graph, Mesh], Mapping[str, Sharding]], *, memory_budget: float | None = None,
               max_tp: int | None = None, max_pp: int | None = None) -> list[GridPoint]:
    """Every (dp, tp, pp) factorisation of `devices` with the uniform layout `pins_of` gives
    (Megatron's shardings; with tp = pp = 1 pure data parallel), priced by the same model:
    the parameters pinned, the ops between them propagated by the same program.
    `graph_of(dp, tp, pp)` gives the microbatch graph and the number of microbatches."""
    out = []
    for dp, tp, pp in factorisations(devices, max_tp=max_tp, max_pp=max_pp):
        mesh = grid_mesh(dp, tp, pp, cluster.devices_per_node)
        try:
            graph, m = graph_of(dp, tp, pp)
            plan = search(graph, mesh, cluster, memory_budget=memory_budget, pinned=pins_of(graph, mesh),
                          microbatches=m)
            out.append(GridPoint(dp, tp, pp, plan))
        except (NoPlanError, ShardingError) as e:
            out.append(GridPoint(dp, tp, pp, None, str(e)))
    return out


def search_meshes(graph_of: Callable[[int, int, int], tuple[Graph, int]], devices: int, cluster: ClusterSpec, *,
                  memory_budget: float | None = None, max_tp: int | None = None, max_pp: int | None = None
                  ) -> list[GridPoint]:
    """The search on every (pp, dp, tp) mesh of `devices` (per-op shardings free): the plan
    of the cheapest is the searched plan."""
    out = []
    for dp, tp, pp in factorisations(devices, max_tp=max_tp, max_pp=max_pp):
        mesh = grid_mesh(dp, tp, pp, cluster.devices_per_node)
        try:
            graph, m = graph_of(dp, tp, pp)
            out.append(GridPoint(dp, tp, pp, search(graph, mesh, cluster, memory_budget=memory_budget,
                                                    microbatches=m)))
        except (NoPlanError, ShardingError) as e:
            out.append(GridPoint(dp, tp, pp, None, str(e)))
    return out

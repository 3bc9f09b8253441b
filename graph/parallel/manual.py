"""Plans without the search (graph stage `parallel`): shardings pinned on the graph's inputs
and propagated node by node, and data parallelism as such a pinning.

`propagated_plan` walks the nodes in order and gives each the strategy that is cheapest from
how its inputs already lie and how its graph outputs are delivered (`output_sharding`): fewest
bytes communicated, then fewest resharding steps, then fewest mesh axes splitting its outputs
that split none of its inputs, then the smallest local work. Partial sums are reduced where a
consumer cannot take them (a contraction over the batch stays a partial sum until the update
needs the gradient whole); a strategy that needs a replicated input turned into partial sums
(`mark_partial`) is taken only when nothing else fits. A reduce-scatter is priced as the
all-reduce it replaces and a split no input has comes last, so that the plan does not start
splitting activations by itself (sequence parallelism) where the pins do not ask for it.

Pin a Megatron split on the weights and it follows through the layers (column then row: one
all-reduce per layer pair); pin the batch dim of the data and it is data parallel. Greedy,
without look-ahead: the search (`graph/parallel/search.py`) is what finds good plans; these
are for tests, examples and runs without a search.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np

from akg.errors import ShardingError
from akg.graph.ir import Graph, Value
from akg.graph.parallel.mesh import Mesh
from akg.graph.parallel.plan import Plan, node_key
from akg.graph.parallel.reshard import reshard
from akg.graph.parallel.sharding import Sharding
from akg.graph.parallel.spmd import output_sharding
from akg.graph.parallel.strategy import OpCall, Strategy, strategies
from akg.graph.train import NEW, state_names


def _bytes(shape: Sequence[int], s: Sharding, dtype: str, mesh: Mesh) -> int:
    return math.prod(s.local_shape(shape, mesh)) * np.dtype(dtype).itemsize


def reshard_bytes(src: Sharding, dst: Sharding, v: Value, mesh: Mesh) -> tuple[float, int, bool]:
    """(bytes a rank sends, steps, whether a replicated value is made partial) from `src` to `dst`."""
    sent, steps, marks = 0.0, 0, False
    for step in reshard(src, dst, v.shape, mesh):
        n = mesh.group_size((step.axis,))
        local = _bytes(v.shape, step.before, v.dtype, mesh)
        if step.op in ("all_reduce", "reduce_scatter"):  # a scatter is priced as the all-reduce: see
            sent += 2 * (n - 1) / n * local  # the module docstring
        elif step.op == "all_to_all":
            sent += (n - 1) / n * local
        elif step.op == "all_gather":
            sent += (n - 1) * local
        marks |= step.op == "mark_partial"
        steps += 1
    return sent, steps, marks


def _cost(node, st: Strategy, held: Mapping[Value, Sharding], delivered: Mapping[Value, Sharding],
          mesh: Mesh) -> tuple:
    sent, steps, marks = 0.0, 0, False
    edges = [(v, held[v], want) for v, want in zip(node.inputs, st.inputs)]
    edges += [(v, s, delivered[v]) for v, s in zip(node.outputs, st.outputs) if v in delivered]
    for v, have, want in edges:
        b, k, m = reshard_bytes(have, want, v, mesh)
        sent, steps, marks = sent + b, steps + k, marks or m
    split = {a for v in node.inputs for d in held[v].dims for a in d}
    new_splits = len({a for s in st.outputs for d in s.dims for a in d} - split)
    work = sum(math.prod(s.local_shape(v.shape, mesh)) for v, s in
               zip((*node.inputs, *node.outputs), (*st.inputs, *st.outputs)))
    return (marks, sent, steps, new_splits, work)


def propagated_plan(graph: Graph, mesh: Mesh, inputs: Mapping[str, Sharding],
                    outputs: Mapping[str, Sharding] | None = None) -> Plan:
    """A plan from shardings pinned on some inputs and constants (the rest replicated),
    each node given its cheapest strategy from how its inputs lie (see the module docstring)."""
    known = {v.name for v in (*graph.inputs, *graph.constants)}
    unknown = sorted(set(inputs) - known)
    if unknown:
        raise ShardingError(f"graph '{graph.name}' has no input or constant %{unknown[0]} to pin")
    held: dict[Value, Sharding] = {}
    for v in (*graph.inputs, *graph.constants):
        s = inputs.get(v.name, Sharding.replicated(v.type.rank))
        s.check(v.shape, mesh, f"%{v.name}")
        held[v] = s
    plan = Plan(mesh, {}, dict(inputs), dict(outputs or {}))
    delivered = {v: output_sharding(graph, plan, v) for v in graph.outputs}
    for node in graph.nodes:
        options = strategies(OpCall.of(node), mesh)
        best = min(options, key=lambda st: _cost(node, st, held, delivered, mesh))
        plan.choice[node_key(node)] = best
        held.update(zip(node.outputs, best.outputs))
    return plan


def data_inputs(graph: Graph) -> list[Value]:
    """The inputs that carry a batch: all but a training step's parameters and state."""
    state = set(state_names(graph)) if any(v.name.startswith(NEW) for v in graph.outputs) else set()
    return [v for v in graph.inputs if v.name not in state and v.type.rank > 0]


def data_parallel_plan(graph: Graph, mesh: Mesh, axes: Sequence[str] | None = None) -> Plan:
    """Data parallelism over `axes` (default: every mesh axis): the batch (dim 0) of every data
    input split over them, parameters replicated, the rest propagated. ShardingError when a
    batch does not split evenly."""
    axes = tuple(mesh.names if axes is None else axes)
    pins = {}
    for v in data_inputs(graph):
        s = Sharding.split(v.type.rank, 0, *axes)
        s.check(v.shape, mesh, f"data input %{v.name} (batch split over {','.join(axes)})")
        pins[v.name] = s
    return propagated_plan(graph, mesh, pins)


def with_stages(plan: Plan, mesh: Mesh, pp_axis: str, stages: Sequence[Sequence[str]]) -> Plan:
    """`plan` (made on `mesh` less its pipeline axis) on `mesh`, its nodes cut into `stages`
    (node keys per stage, in order) along `pp_axis`."""
    if any(pp_axis in s.axes for st in plan.choice.values() for s in (*st.inputs, *st.outputs)):
        raise ShardingError(f"the plan already splits over the pipeline axis '{pp_axis}'")
    return Plan(mesh, dict(plan.choice), dict(plan.inputs), dict(plan.outputs),
                stages=[list(s) for s in stages], pp_axis=pp_axis)


def pipeline_stages(graph: Graph, cuts: Sequence[str]) -> list[list[str]]:
    """Node keys per stage of a forward graph or a training step (`akg.graph.train`), cut after
    the forward values `cuts`, in order (len(cuts) + 1 stages): the forward nodes up to the first
    cut form stage 0, and so on. In a training step the cotangent `grad.V` goes with V's first
    user (whose VJP makes it), the rest of V's own VJP (`grad.V.<hint>`) with V, a parameter's
    update (`update.P...`, `new.P`) with P's first user: each stage differentiates and updates
    its own layers, and only boundary activations and their cotangents cross."""
    keys = [node_key(n) for n in graph.nodes]
    missing = [c for c in cuts if c not in keys]
    if missing:
        raise ShardingError(f"graph '{graph.name}' has no node %{missing[0]} to cut after")
    backward = ("grad.", "update.", NEW)
    stage: dict[str, int] = {}
    k = 0
    for key in keys:
        if not key.startswith(backward):
            stage[key] = k
            if k < len(cuts) and key == cuts[k]:
                k += 1
    first_user: dict[str, int] = {}  # value name -> the stage of its first forward user
    for node in graph.nodes:
        if node_key(node) in stage:
            for v in node.inputs:
                first_user.setdefault(v.name, stage[node_key(node)])
    names = set(first_user) | set(stage)
    for key in keys:
        if key in stage:
            continue
        parts = key.split(".")[1:]
        for i in range(len(parts), 0, -1):
            v = ".".join(parts[:i])
            if v in names:  # grad.V (V's cotangent, made by V's users) or grad.V.hint (V's own VJP)
                exact = i == len(parts) or key.startswith(("update.", NEW))
                stage[key] = first_user.get(v, stage.get(v)) if exact else stage.get(v, first_user.get(v))
                break
        else:
            stage[key] = len(cuts)
    out: list[list[str]] = [[] for _ in range(len(cuts) + 1)]
    for key in keys:
        out[stage[key]].append(key)
    return out

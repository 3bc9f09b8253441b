"""The SPMD rewrite (graph stage `parallel`, after the search): a graph and its Plan -> one
per-rank graph, the same program for every rank of the mesh.

Its inputs have the local shapes of the plan's input shardings; every node is what one device
computes under its strategy (`emit_local`); on every edge where the producer's sharding is not
the one the consumer's strategy takes, the resharding steps (`reshard`) are emitted as
collective ops, once per value and target sharding. Graph outputs are delivered in
`plan.outputs` (default replicated; a training step's `new.X` in the sharding of its input `X`,
so that the step's outputs feed the next step as they are). A plan with pipeline stages gets
one such graph per stage (`spmd_stages`), the values crossing stages sent and received.

Constants stay whole in the per-rank graph (every rank reads the model's weights, as a
one-device run does) and are cut by `shard_slice` where the plan stores them split or a
consumer takes a piece; slicing moves no data, and the graph stays one self-contained
program. A training step's parameters are inputs already, so they arrive as pieces.

Names: every original value keeps its name on its local piece (`%fc1` is this rank's piece of
`%fc1`); a resharded copy is named after the value and its steps (`%grad.fc1.weight.all_reduce_dp`);
ops a strategy adds are named after their node (`%loss.div`); a graph output that needed
resharding keeps the output's name, the piece it came from is `<name>.local`.
"""

from __future__ import annotations

from collections import Counter
from typing import Mapping, Sequence

import numpy as np

from akg.errors import InputDataError, ShardingError
from akg.graph.autodiff import rebuilt
from akg.graph.builder import GraphBuilder
from akg.graph.ir import Graph, Value
from akg.graph.ops import get_op
from akg.graph.ops.registry import COLLECTIVE
from akg.graph.parallel.mesh import Mesh
from akg.graph.parallel.plan import Plan, node_key
from akg.graph.parallel.reshard import COMMUNICATING, reshard
from akg.graph.parallel.sharding import Sharding
from akg.graph.parallel.strategy import OpCall, emit_local
from akg.graph.train import NEW
from akg.graph.types import TensorType


class _LocalEmitter:
    """What strategies and resharding steps emit through (`op`, `const`, `b.<op>(...)`): a
    builder whose every new value gets the hint `<base>.<op>`."""

    def __init__(self, b: GraphBuilder, hints: dict[Value, str], base: str):
        self._b, self._hints, self._base = b, hints, base

    def op(self, op: str, *inputs, name: str | None = None, **attrs):
        tensors = [v for v in inputs if isinstance(v, Value)]
        numeric = [v for v in tensors if v.dtype != "bool"] or tensors
        dtype = numeric[0].dtype if numeric else "float32"
        values = [v if isinstance(v, Value) else self.const(v, dtype=dtype) for v in inputs]
        out = self._b.op(op, *values, **attrs)
        for v in out if isinstance(out, tuple) else (out,):
            self._hints[v] = name or f"{self._base}.{op}"
        return out

    def const(self, value, name: str | None = None, dtype=None) -> Value:
        v = self._b.const(value, dtype=dtype)
        self._hints[v] = name or f"{self._base}.c"
        return v

    def __getattr__(self, op: str):
        if op.startswith("_"):
            raise AttributeError(op)
        get_op(op)
        return lambda *inputs, **attrs: self.op(op, *inputs, **attrs)


# --- shardings of the graph's boundary ------------------------------------------------------------


def input_sharding(graph: Graph, plan: Plan, v: Value) -> Sharding:
    """How graph input `v` arrives on the ranks (the plan's, else replicated)."""
    return plan.sharding_of_input(v.name, v.type.rank)


def output_sharding(graph: Graph, plan: Plan, v: Value) -> Sharding:
    """How graph output `v` is delivered: `plan.outputs`, else (a training step's `new.X`) the
    sharding of input `X`, else replicated."""
    if v.name in plan.outputs:
        return plan.outputs[v.name]
    if v.name.startswith(NEW):
        fed = [i for i in graph.inputs if i.name == v.name[len(NEW):] and i.type == v.type]
        if fed:
            return input_sharding(graph, plan, fed[0])
    return Sharding.replicated(v.type.rank)


# --- the rewrite --------------------------------------------------------------------------------


def spmd(graph: Graph, plan: Plan) -> Graph:
    """The per-rank graph of `graph` under `plan` (see the module docstring). ShardingError
    when the plan misses a node, a strategy does not fit its node, a sharding does not
    divide its value, or the plan has pipeline stages (`spmd_stages` writes those)."""
    if plan.stages is not None and len(plan.stages) > 1:
        raise ShardingError(f"the plan cuts '{graph.name}' into {len(plan.stages)} pipeline stages over "
                            f"'{plan.pp_axis}': one program per stage, see spmd_stages")
    return _rewrite(graph, plan, {}, 1, None)[0]


def spmd_stages(graph: Graph, plan: Plan) -> list[Graph]:
    """One per-rank graph per pipeline stage of `plan` (`plan.stages`, along `plan.pp_axis`):
    stage k's graph runs on the ranks at position k of that axis. A value one stage makes and
    another uses is sent once (`send` in the producer's graph, its token among that graph's
    outputs; `recv` in the consumer's, under the value's name), as the producer holds it; the
    consumer reshards it if it must. Each stage takes the inputs its nodes use; an output is
    delivered by the stage that makes it, a training step's `new.X` by every stage that takes
    `X` (so that it feeds back there). Strategies split over the other mesh axes only. The
    graphs are one microbatch's program: streaming `plan.microbatches` of them through the
    stages (1F1B) is a schedule of whoever runs them."""
    mesh, pp = plan.mesh, plan.pp_axis
    if not plan.stages or pp is None:
        raise ShardingError("the plan has no pipeline stages (plan.stages and plan.pp_axis): use spmd")
    if len(plan.stages) != mesh.axis_size(pp):
        raise ShardingError(f"the plan has {len(plan.stages)} stages, its pipeline axis '{pp}' {mesh.axis_size(pp)} "
                            f"positions")
    stage_of: dict[str, int] = {}
    for k, keys in enumerate(plan.stages):
        for key in keys:
            if key in stage_of:
                raise ShardingError(f"%{key} is in stages {stage_of[key]} and {k}")
            stage_of[key] = k
    missing = [node_key(n) for n in graph.nodes if node_key(n) not in stage_of]
    if missing:
        raise ShardingError(f"the plan's stages leave out {len(missing)} node(s), e.g. %{missing[0]}")
    return _rewrite(graph, plan, stage_of, len(plan.stages), pp)


class _Program:
    """One per-rank program being written (the whole graph's, or one stage's)."""

    def __init__(self, graph: Graph, plan: Plan, inputs: Sequence[Value]):
        self.mesh = plan.mesh
        self.b = GraphBuilder.rewriting(graph)
        self.hints: dict[Value, str] = {}
        self.names: dict[Value, str] = {}
        self.held: dict[Value, tuple[Value, Sharding]] = {}  # original value -> (local piece, how it lies)
        self.copies: dict[tuple[Value, Sharding], Value] = {}
        self.tokens: list[Value] = []
        for v in inputs:
            s = input_sharding(graph, plan, v)
            s.check(v.shape, self.mesh, f"input %{v.name}")
            self.b.release(v.name)
            self.held[v] = (self.b.input(v.name, s.local_shape(v.shape, self.mesh), v.dtype), s)
        for v, a in graph.constants.items():
            self.b.release(v.name)
            self.held[v] = (self.b.const(a, name=v.name), Sharding.replicated(v.type.rank))
            if v.name in plan.inputs:  # stored split: sliced once, up front
                s = plan.inputs[v.name]
                s.check(v.shape, self.mesh, f"constant %{v.name}")
                self.held[v] = (self.to(v, s), s)

    def emitter(self, base: str) -> _LocalEmitter:
        return _LocalEmitter(self.b, self.hints, base)

    def to(self, v: Value, want: Sharding) -> Value:
        """The local piece of `v` laid out as `want` (resharded once per target)."""
        local, have = self.held[v]
        if have == want:
            return local
        if (v, want) not in self.copies:
            cur = local
            for step in reshard(have, want, v.shape, self.mesh):
                cur = self.emitter(v.name).op(step.op, cur, name=f"{v.name}.{step.op}_{step.axis}",
                                              **step.attrs(self.mesh))
            self.copies[v, want] = cur
        return self.copies[v, want]

    def build(self, outputs: Sequence[Value]) -> Graph:
        self.b.output(*outputs, *self.tokens)
        return rebuilt(self.b.build(), self.names, self.hints)


def _rewrite(graph: Graph, plan: Plan, stage_of: Mapping[str, int], n: int, pp: str | None) -> list[Graph]:
    mesh = plan.mesh
    for what, given, known in (("input or constant", plan.inputs, [*graph.inputs, *graph.constants]),
                               ("output", plan.outputs, graph.outputs)):
        unknown = sorted(set(given) - {v.name for v in known})
        if unknown:
            raise ShardingError(f"the plan lays out %{unknown[0]}, which is no {what} of '{graph.name}'")
    uses: list[set[Value]] = [set() for _ in range(n)]
    for node in graph.nodes:
        uses[stage_of.get(node_key(node), 0)].update(node.inputs)
    if n == 1:
        uses[0] = set(graph.inputs)
    programs = [_Program(graph, plan, [v for v in graph.inputs if v in uses[k]]) for k in range(n)]
    home: dict[Value, int] = {}

    def fetch(k: int, v: Value) -> None:
        """Make `v` held in stage k: received from the stage that made it."""
        if v in programs[k].held:
            return
        if v not in home:
            raise ShardingError(f"stage {k} needs input %{v.name}, which no node of it takes")
        j = home[v]
        local, s = programs[j].held[v]
        common = dict(mesh=str(mesh), axes=pp, tag=v.name)
        programs[j].tokens.append(programs[j].emitter(v.name).op("send", local, name=f"{v.name}.send{k}",
                                                               shift=k - j, **common))
        got = programs[k].emitter(v.name).op("recv", shift=j - k, shape=list(local.shape), dtype=local.dtype,
                                             **common)
        programs[k].names[got] = v.name
        programs[k].held[v] = (got, s)

    for node in graph.nodes:
        k = stage_of.get(node_key(node), 0)
        prog = programs[k]
        st = plan.strategy(node)
        where = f"'{node.op}' producing %{node_key(node)} (strategy {st})"
        if len(st.inputs) != len(node.inputs) or len(st.outputs) != len(node.outputs):
            raise ShardingError(f"{where}: the strategy has {len(st.inputs)} inputs and {len(st.outputs)} "
                                f"outputs, the node {len(node.inputs)} and {len(node.outputs)}")
        for s, v in zip((*st.inputs, *st.outputs), (*node.inputs, *node.outputs)):
            s.check(v.shape, mesh, f"{where}, %{v.name}")
            if pp is not None and pp in s.axes:
                raise ShardingError(f"{where}: splits %{v.name} over the pipeline axis '{pp}'")
        for v in node.inputs:
            fetch(k, v)
        args = [prog.to(v, s) for v, s in zip(node.inputs, st.inputs)]
        outs = emit_local(prog.emitter(node_key(node)), OpCall.of(node), st, args, mesh)
        if len(outs) != len(node.outputs):
            raise ShardingError(f"{where}: the local computation gives {len(outs)} outputs, not {len(node.outputs)}")
        for o, lo, s in zip(node.outputs, outs, st.outputs):
            want = TensorType(s.local_shape(o.shape, mesh), o.dtype)
            if lo.type != want:
                raise ShardingError(f"{where}: the local computation gives %{o.name} as {lo.type}, "
                                    f"its sharding {s} needs {want}")
            if lo in prog.hints:  # a value the strategy made, not one of its inputs passed through
                prog.names[lo] = o.name
            prog.held[o] = (lo, s)
            home[o] = k

    delivered: list[list[Value]] = [[] for _ in range(n)]
    inputs = {v.name: v for v in graph.inputs}
    for v in graph.outputs:
        fed = inputs.get(v.name[len(NEW):]) if v.name.startswith(NEW) else None
        where = [k for k in range(n) if fed is not None and fed in uses[k]] or [home.get(v, 0)]
        s = output_sharding(graph, plan, v)
        s.check(v.shape, mesh, f"output %{v.name}")
        for k in where:
            prog = programs[k]
            fetch(k, v)
            local = prog.held[v][0]
            out = prog.to(v, s)
            if out is not local and prog.names.get(local) == v.name:
                prog.names[local] = prog.b.unique(f"{v.name}.local")
                prog.names[out] = v.name
            delivered[k].append(out)
    return [prog.build(outs) for prog, outs in zip(programs, delivered)]


# --- ranks' data --------------------------------------------------------------------------------


def shard_inputs(graph: Graph, plan: Plan, inputs: Mapping[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
    """Per rank, its pieces of `graph`'s whole inputs under `plan`."""
    missing = [v.name for v in graph.inputs if v.name not in inputs]
    if missing:
        raise InputDataError(f"missing input(s) of '{graph.name}': {', '.join(missing)}")
    out: list[dict[str, np.ndarray]] = [{} for _ in range(plan.mesh.size)]
    for v in graph.inputs:
        a = np.asarray(inputs[v.name])
        if a.shape != v.shape:
            raise InputDataError(f"input {v.name} has shape {a.shape}, the graph takes {v.shape}")
        s = input_sharding(graph, plan, v)
        for r in range(plan.mesh.size):
            out[r][v.name] = s.shard(a, plan.mesh, r)
    return out


def unshard_outputs(graph: Graph, plan: Plan, per_rank: Sequence[Sequence[np.ndarray]]) -> list[np.ndarray]:
    """`graph`'s whole outputs from every rank's outputs of its per-rank graph. ShardingError
    when ranks that must hold the same piece disagree (`replicas_agree`)."""
    whole = []
    for i, v in enumerate(graph.outputs):
        s = output_sharding(graph, plan, v)
        pieces = [np.asarray(outs[i]) for outs in per_rank]
        bad = replicas_agree(s, pieces, plan.mesh)
        if bad is not None:
            raise ShardingError(f"output %{v.name} ({s}): ranks {bad[0]} and {bad[1]} hold different data for "
                                f"the same piece")
        whole.append(s.unshard(pieces, plan.mesh).astype(v.dtype, copy=False))
    return whole


def replicas_agree(s: Sharding, pieces: Sequence[np.ndarray], mesh: Mesh) -> tuple[int, int] | None:
    """None when every two ranks that hold the same piece of a value laid out as `s` (same
    position on its split and partial axes) hold equal arrays; else such a pair of ranks."""
    first: dict[tuple, int] = {}
    for r in range(mesh.size):
        c = mesh.coords(r)
        key = tuple(c[a] for a in s.axes)
        if key not in first:
            first[key] = r
        elif not np.array_equal(pieces[r], pieces[first[key]], equal_nan=True):
            return first[key], r
    return None


def fed_back(per_rank: Graph) -> dict[int, str]:
    """A training step's outputs that are its next inputs: output index -> input name (`new.X`
    -> `X`, same local type)."""
    by_name = {v.name: v for v in per_rank.inputs}
    out = {}
    for i, v in enumerate(per_rank.outputs):
        x = by_name.get(v.name[len(NEW):]) if v.name.startswith(NEW) else None
        if x is not None and x.type == v.type:
            out[i] = x.name
    return out


def collective_counts(per_rank: Graph, *, communicating: bool = True) -> Counter:
    """How many collective ops of each kind the per-rank graph runs (only those that move
    data, sends and receives included, unless `communicating` is False)."""
    moving = (*COMMUNICATING, "send", "recv")
    return Counter(n.op for n in per_rank.nodes
                   if n.opdef.kind == COLLECTIVE and (n.op in moving or not communicating))


def simulate_plan(graph: Graph, plan: Plan, inputs: Mapping[str, np.ndarray],
                  per_rank: Graph | None = None) -> list[np.ndarray]:
    """`graph`'s whole outputs computed by its per-rank graph (`spmd(graph, plan)` unless
    given) on simulated ranks: the inputs sharded, every rank run, the outputs unsharded."""
    from akg.graph.parallel.simulate import simulate

    per_rank = spmd(graph, plan) if per_rank is None else per_rank
    return unshard_outputs(graph, plan, simulate(per_rank, plan.mesh, shard_inputs(graph, plan, inputs)))

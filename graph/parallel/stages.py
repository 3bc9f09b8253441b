"""Pipeline stages on simulated ranks (graph stage `parallel`): the per-stage graphs of
`spmd_stages` run together, every rank the graph of its position on the pipeline axis.

Each stage's ranks run their graph in lockstep (its collectives stay inside the stage); a
`send` posts its value to the peer's mailbox and goes on, a `recv` waits until the value is
there, so the stages advance in turns. A stage graph whose recv never gets its value is a
ShardingError naming it (a plan whose stages wait on each other), not a hang.

For streaming microbatches (the multi-process runner, `akg.distributed`), a training step's
stage graph is cut into its forward, backward and update phases (`microbatch_phases`), and
`one_f_one_b` orders a stage's forward and backward work.

    outs = simulate_stages(stage_graphs, plan, inputs_per_rank)   # outs[rank]: {name: array}
    whole = unshard_stage_outputs(graph, plan, outs)                # {name: whole array}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from akg.errors import ShardingError
from akg.graph.interpreter import bind_inputs
from akg.graph.ir import Graph, Value
from akg.graph.ops.collective import exchange, group_axes
from akg.graph.ops.registry import COLLECTIVE
from akg.graph.parallel.mesh import Mesh
from akg.graph.parallel.plan import Plan, node_key
from akg.graph.parallel.spmd import output_sharding, replicas_agree, shard_inputs, spmd_stages
from akg.graph.train import NEW


def peer(mesh: Mesh, rank: int, axis: str, shift: int) -> int:
    """The rank `shift` positions from `rank` along `axis`."""
    c = mesh.coords(rank)
    c[axis] += shift
    if not 0 <= c[axis] < mesh.axis_size(axis):
        raise ShardingError(f"rank {rank} has no peer {shift:+d} along '{axis}' on mesh {mesh}")
    return mesh.rank(c)


def stage_of_rank(plan: Plan, rank: int) -> int:
    return plan.mesh.coords(rank)[plan.pp_axis]


def stage_inputs(stage_graphs: Sequence[Graph], plan: Plan, per_rank: Sequence[Mapping[str, np.ndarray]]
                 ) -> list[dict[str, np.ndarray]]:
    """Per rank, the pieces its stage's graph takes (of every input's pieces)."""
    out = []
    for r, ins in enumerate(per_rank):
        g = stage_graphs[stage_of_rank(plan, r)]
        out.append({v.name: ins[v.name] for v in g.inputs})
    return out


def simulate_stages(stage_graphs: Sequence[Graph], plan: Plan, inputs: Sequence[Mapping[str, np.ndarray]]
                    ) -> list[dict[str, np.ndarray]]:
    """Every rank's outputs (by name, send tokens left out) of the stage graphs run together;
    `inputs[rank]` holds (at least) what that rank's stage graph takes."""
    envs = [{0: _bound(stage_graphs[stage_of_rank(plan, r)], inputs[r])} for r in range(plan.mesh.size)]
    _lockstep([[(n, 0) for n in g.nodes] for g in stage_graphs], plan, envs, None)
    return [{v.name: envs[r][0][v] for v in stage_graphs[stage_of_rank(plan, r)].outputs
             if not _is_token(stage_graphs[stage_of_rank(plan, r)], v)} for r in range(plan.mesh.size)]


def _bound(g: Graph, given: Mapping[str, np.ndarray]) -> dict[Value, np.ndarray]:
    env = dict(g.constants)
    env.update(bind_inputs(g, {v.name: given[v.name] for v in g.inputs if v.name in given}))
    return env


def _lockstep(work: Sequence[Sequence[tuple]], plan: Plan, envs: list[dict], mark) -> None:
    """Run every stage's work together: `work[k]` lists (node, slot) items, each running the
    node on every rank of stage k in its environment `envs[rank][slot]`, and (None, marker)
    items calling `mark(k, marker)`; a send posts to the peer's mailbox (per slot), a receive
    waits for it."""
    mesh, pp = plan.mesh, plan.pp_axis
    ranks = [[r for r in range(mesh.size) if stage_of_rank(plan, r) == k] for k in range(len(work))]
    mailbox: dict[tuple, np.ndarray] = {}
    cursor = [0] * len(work)
    while any(c < len(w) for c, w in zip(cursor, work)):
        moved = False
        for k, items in enumerate(work):
            while cursor[k] < len(items):
                node, slot = items[cursor[k]]
                if node is None:
                    mark(k, slot)
                elif node.op == "recv":
                    keys = [(peer(mesh, r, pp, node.attrs["shift"]), r, node.attrs["tag"], slot) for r in ranks[k]]
                    if not all(key in mailbox for key in keys):
                        break
                    for r, key in zip(ranks[k], keys):
                        envs[r][slot][node.output] = mailbox.pop(key)
                elif node.op == "send":
                    for r in ranks[k]:
                        x = envs[r][slot][node.inputs[0]]
                        mailbox[r, peer(mesh, r, pp, node.attrs["shift"]), node.attrs["tag"], slot] = x
                        envs[r][slot][node.output] = x
                elif node.opdef.kind == COLLECTIVE:
                    (x,), (out,) = node.inputs, node.outputs
                    axes = group_axes(node.attrs["axes"])
                    if pp in axes:
                        raise ShardingError(f"'{node.op}' producing %{out.name} runs over the pipeline axis '{pp}'")
                    for group in mesh.groups(axes):
                        if group[0] in ranks[k]:
                            got = exchange(node.op, node.attrs, [envs[r][slot][x] for r in group])
                            for r, a in zip(group, got):
                                envs[r][slot][out] = np.asarray(a).astype(out.dtype, copy=False)
                else:
                    for r in ranks[k]:
                        with np.errstate(all="ignore"):
                            results = node.opdef.evaluate([envs[r][slot][v] for v in node.inputs], node.attrs)
                        for v, a in zip(node.outputs, results):
                            envs[r][slot][v] = np.asarray(a).astype(v.dtype, copy=False)
                cursor[k] += 1
                moved = True
        if not moved:
            waiting = [f"stage {k} at recv %{w[cursor[k]][0].output.name}" for k, w in enumerate(work)
                       if cursor[k] < len(w)]
            raise ShardingError(f"the stages wait on each other: {', '.join(waiting)}")


def _is_token(g: Graph, v: Value) -> bool:
    p = g.producer(v)
    return p is not None and p.op == "send"


def unshard_stage_outputs(graph: Graph, plan: Plan, per_rank: Sequence[Mapping[str, np.ndarray]],
                          names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """`graph`'s whole outputs (those in `names`, default all) from every rank's outputs by
    name: a rank without one (its stage does not deliver it) takes the piece of its peer
    along the pipeline axis that has it. ShardingError where ranks holding one piece disagree."""
    mesh, pp = plan.mesh, plan.pp_axis
    whole = {}
    for v in graph.outputs:
        if names is not None and v.name not in names:
            continue
        s = output_sharding(graph, plan, v)
        pieces = []
        for r in range(mesh.size):
            holders = [r] if pp is None else \
                [r, *(peer(mesh, r, pp, k - stage_of_rank(plan, r)) for k in range(mesh.axis_size(pp)))]
            holders = [h for h in holders if v.name in per_rank[h]]
            if not holders:
                raise ShardingError(f"no rank delivers output %{v.name} (rank {r} and its pipeline peers)")
            pieces.append(np.asarray(per_rank[holders[0]][v.name]))
        bad = replicas_agree(s, pieces, mesh)
        if bad is not None:
            raise ShardingError(f"output %{v.name} ({s}): ranks {bad[0]} and {bad[1]} hold different data "
                                f"for the same piece")
        whole[v.name] = s.unshard(pieces, mesh).astype(v.dtype, copy=False)
    return whole


def simulate_stages_plan(graph: Graph, plan: Plan, inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """`graph`'s whole outputs computed by its stage graphs on simulated ranks."""
    stage_graphs = spmd_stages(graph, plan)
    ranks = stage_inputs(stage_graphs, plan, shard_inputs(graph, plan, inputs))
    whole = unshard_stage_outputs(graph, plan, simulate_stages(stage_graphs, plan, ranks))
    return [whole[v.name] for v in graph.outputs]


# --- microbatches (1F1B) ------------------------------------------------------------------------


@dataclass(frozen=True)
class Phases:
    """A training step's stage graph cut for streaming microbatches: `forward` (per
    microbatch, up to the cotangents coming back from a later stage), `backward` (per
    microbatch, the rest), `update` (once per step, reading the microbatches' mean of
    `accumulated`: the gradients); any of them None when empty. Each is an ordinary graph
    whose inputs are the stage graph's inputs or values of an earlier phase, by name."""

    forward: Graph | None
    backward: Graph | None
    update: Graph | None
    accumulated: tuple[str, ...]


def microbatch_phases(g: Graph) -> Phases:
    """Cut stage graph `g` (of a training step: outputs `new.X` for state inputs `X`) into its
    phases: the update is every node named `update.*` / `new.*` and what it needs that no
    microbatch's data reaches; the backward part every other node that a receive from a later
    stage reaches."""
    state = {v.name[len(NEW):] for v in g.outputs if v.name.startswith(NEW)}
    per_mb: set[Value] = {v for v in g.inputs if v.name not in state}  # values a microbatch's data reaches
    late: set[Value] = set()  # values a later stage's cotangents reach
    for n in g.nodes:
        if any(v in per_mb for v in n.inputs) or (n.op == "recv"):
            per_mb.update(n.outputs)
        if any(v in late for v in n.inputs) or (n.op == "recv" and n.attrs["shift"] > 0):
            late.update(n.outputs)
    update = {id(n) for n in g.nodes if node_key(n).startswith(("update.", NEW))}
    for n in reversed(g.nodes):  # what the update needs and no microbatch reaches
        if id(n) not in update and not any(v in per_mb for v in n.outputs):
            users = [u for v in n.outputs for u in g.users()[v]]
            if users and all(id(u) in update for u in users):
                update.add(id(n))
    mb = [n for n in g.nodes if id(n) not in update]
    forward = [n for n in mb if not any(v in late for v in n.outputs)]
    backward = [n for n in mb if any(v in late for v in n.outputs)]
    upd = [n for n in g.nodes if id(n) in update]
    made_mb = {v for n in mb for v in n.outputs}
    accumulated = tuple(dict.fromkeys(v.name for n in upd for v in n.inputs if v in made_mb))
    return Phases(_part(g, forward), _part(g, backward), _part(g, upd), accumulated)


def _part(g: Graph, nodes: list) -> Graph | None:
    """The nodes as a graph: inputs what they read from outside (constants stay constants),
    outputs what others read and `g`'s outputs among theirs."""
    if not nodes:
        return None
    members = set(map(id, nodes))
    inside = {v for n in nodes for v in n.outputs}
    users = g.users()
    outs = set(g.outputs)
    outputs = [v for n in nodes for v in n.outputs if v in outs or any(id(u) not in members for u in users[v])]
    used = list(dict.fromkeys(v for n in nodes for v in n.inputs if v not in inside))
    ins = [v for v in used if v not in g.constants]
    consts = {v: g.constants[v] for v in used if v in g.constants}
    if not outputs:
        return None
    return Graph(g.name, ins, outputs, nodes, consts)


def one_f_one_b(stage: int, stages: int, microbatches: int) -> list[tuple[str, int]]:
    """The 1F1B order of one stage's work: ("F", i) and ("B", i) per microbatch i. The first
    stages run `stages - stage - 1` forwards ahead, then alternate, then drain the backwards."""
    warm = min(stages - stage - 1, microbatches)
    order = [("F", i) for i in range(warm)]
    for i in range(microbatches - warm):
        order += [("F", warm + i), ("B", i)]
    order += [("B", i) for i in range(microbatches - warm, microbatches)]
    return order


def simulate_microbatches(stage_graphs: Sequence[Graph], plan: Plan, state: Sequence[Mapping[str, np.ndarray]],
                          micro: Sequence[Sequence[Mapping[str, np.ndarray]]]) -> list[dict[str, np.ndarray]]:
    """One training step of streamed microbatches on simulated ranks, as the process runner
    does it: every stage's forward and backward phases per microbatch in 1F1B order, the
    update once on the mean of the accumulated gradients. `state[rank]`: the rank's state
    inputs, `micro[rank][i]`: its data of microbatch i. Every rank's outputs by name
    (per-microbatch ones, the loss, averaged)."""
    mesh, m, n = plan.mesh, len(micro[0]), len(stage_graphs)
    phases = [microbatch_phases(g) for g in stage_graphs]
    stage = [stage_of_rank(plan, r) for r in range(mesh.size)]
    envs = [{i: _bound(stage_graphs[stage[r]], {**state[r], **micro[r][i]}) for i in range(m)}
            for r in range(mesh.size)]
    acc: list[dict[Value, np.ndarray]] = [{} for _ in range(mesh.size)]
    per_mb: list[dict[Value, list]] = [{} for _ in range(mesh.size)]
    work = []
    for k, ph in enumerate(phases):
        done_after = "B" if ph.backward is not None else "F"
        items: list[tuple] = []
        for phase, i in one_f_one_b(k, n, m):
            part = ph.forward if phase == "F" else ph.backward
            items += [(node, i) for node in (part.nodes if part is not None else ())]
            if phase == done_after:
                items.append((None, ("done", i)))
        items.append((None, ("update",)))
        items += [(node, "u") for node in (ph.update.nodes if ph.update is not None else ())]
        work.append(items)

    def mark(k: int, what: tuple) -> None:
        g, ph = stage_graphs[k], phases[k]
        for r in (r for r in range(mesh.size) if stage[r] == k):
            if what[0] == "done":
                env = envs[r][what[1]]
                for name in ph.accumulated:
                    v = g.value(name)
                    acc[r][v] = env[v] if v not in acc[r] else acc[r][v] + env[v]
                for v in g.outputs:
                    if v in env and not _is_token(g, v):
                        per_mb[r].setdefault(v, []).append(env[v])
            else:
                fixed = {**g.constants, **{v: np.asarray(state[r][v.name]) for v in g.inputs if v.name in state[r]}}
                envs[r]["u"] = {**fixed, **{v: (a / np.asarray(m, a.dtype)).astype(a.dtype) for v, a in acc[r].items()}}

    _lockstep(work, plan, envs, mark)
    out = []
    for r in range(mesh.size):
        g = stage_graphs[stage[r]]
        got = {}
        for v in g.outputs:
            if _is_token(g, v):
                continue
            if v in envs[r]["u"]:
                got[v.name] = envs[r]["u"][v]
            else:
                got[v.name] = np.mean(np.stack(per_mb[r][v]), axis=0).astype(v.dtype)
        out.append(got)
    return out

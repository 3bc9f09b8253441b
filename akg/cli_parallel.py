"""`akg parallel`: the auto-parallel plan of a model on a device mesh (graph/parallel/search.py),
its predicted step time and per-device memory, and with --explain the collectives and their
costs per layer."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import click
from rich.markup import escape
from rich.table import Table

from akg.cli import Finite, console, print_table
from akg.errors import InputError

_SIZE = re.compile(r"\s*([0-9]*\.?[0-9]+)\s*([KMGTP]?i?B?)?\s*", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1e3, "kb": 1e3, "kib": 1 << 10, "m": 1e6, "mb": 1e6, "mib": 1 << 20,
          "g": 1e9, "gb": 1e9, "gib": 1 << 30, "t": 1e12, "tb": 1e12, "tib": 1 << 40}


class ByteSize(click.ParamType):
    """`16GiB`, `80GB`, `512MiB`, `1e9` (bytes)."""

    name = "size"

    def convert(self, value, param, ctx):
        if isinstance(value, (int, float)):
            return float(value)
        m = _SIZE.fullmatch(str(value))
        unit = (m.group(2) or "").lower() if m else None
        if m is None or unit not in _UNITS:
            try:
                v = float(value)
            except ValueError:
                self.fail(f"{value!r} is not a size (e.g. 16GiB, 80GB, 512MiB).", param, ctx)
        else:
            v = float(m.group(1)) * _UNITS[unit]
        if not v > 0:
            self.fail(f"{value!r}: a memory budget must be positive.", param, ctx)
        return v


def _gib(n: float) -> str:
    return f"{n / (1 << 30):.2f} GiB"


def _ms(s: float) -> str:
    return f"{s * 1e3:.3f} ms"


def _model(name: str, batch: int, layers: int | None, optimizer: str):
    """A GPT spec name builds its training step; anything else is a model file."""
    from akg.graph.parallel import gpt

    if name in gpt.SPECS:
        return gpt.build(name, batch, layers=layers, optimizer=optimizer)
    path = Path(name)
    if not path.exists():
        raise InputError(f"{name}: no such model file, nor a GPT spec (known: {', '.join(gpt.SPECS)})")
    from akg.graph.io import load_model

    return load_model(path)


def _pins(graph, texts):
    from akg.graph.parallel.sharding import Sharding

    out = {}
    for t in texts:
        name, eq, layout = t.partition("=")
        if not eq:
            raise InputError(f"--pin {t!r}: write NAME=SHARDING, e.g. wte=[S(tp), R]")
        out[name.strip()] = Sharding.parse(layout)
    return out


def _pattern(name: str) -> str:
    """`l3.fc1.weight` -> `l*.fc1.weight`: the number of the first numbered part (a layer's)."""
    parts = name.split(".")
    for i, part in enumerate(parts[:-1]):
        if re.search(r"\d", part):
            parts[i] = re.sub(r"\d+$", "*", part)
            break
    return ".".join(parts)


@click.command("parallel")
@click.argument("model")
@click.option("--mesh", "mesh_text", required=True, help="The device mesh as named axes, e.g. dp=2,tp=4 "
              "(an axis named pp cuts pipeline stages).")
@click.option("--memory", type=ByteSize(), default=None,
              help="Per-device memory budget, e.g. 16GiB (default: the cluster's device memory).")
@click.option("--cluster", "cluster_name", default="a100", show_default=True,
              help="Cluster preset: a100, h100, host (this machine, measured); '@25' sets the inter-node "
                   "Gb/s (a100@25).")
@click.option("--devices-per-node", type=click.IntRange(1), default=None,
              help="Devices sharing a node's fast links (default: the cluster's).")
@click.option("--batch", type=click.IntRange(1), default=8, show_default=True,
              help="GPT specs: sequences per (micro)batch of the graph planned.")
@click.option("--layers", type=click.IntRange(1), default=None, help="GPT specs: another number of layers.")
@click.option("--microbatches", type=click.IntRange(1), default=None,
              help="Microbatches per step (default: the pipeline's stages, else 1).")
@click.option("--optimizer", type=click.Choice(["adam", "sgd"]), default="adam", show_default=True)
@click.option("--pin", "pins", multiple=True, help="Fix a value's sharding: NAME=SHARDING, e.g. "
              "'l0.fc1.weight=[R, S(tp)]' (repeatable).")
@click.option("--explain", is_flag=True, help="Per layer: the collectives of the plan and what they cost.")
@click.option("--time-limit", type=Finite(0.0, min_open=True), default=60.0, show_default=True,
              help="Seconds the solver may spend on one program.")
def parallel_cmd(model: str, mesh_text: str, memory: float | None, cluster_name: str, devices_per_node: int | None,
                 batch: int, layers: int | None, microbatches: int | None, optimizer: str, pins: tuple[str, ...],
                 explain: bool, time_limit: float) -> None:
    """Search the parallel plan of MODEL (a GPT spec: gpt-350m, gpt-2.6b, gpt-39b, built as a
    training step with its parameters as inputs; or a model file) on a device mesh: per-op
    shardings from one integer program, pipeline stages along a `pp` axis. Prints the plan,
    its predicted step time and per-device memory; exit 8 when no plan fits the memory."""
    from akg.graph.parallel.cost import cluster as cluster_of
    from akg.graph.parallel.mesh import Mesh
    from akg.graph.parallel.search import search

    cluster = cluster_of(cluster_name)
    mesh = Mesh.parse(mesh_text, devices_per_node or cluster.devices_per_node)
    graph = _model(model, batch, layers, optimizer)
    plan = search(graph, mesh, cluster, memory_budget=memory, pinned=_pins(graph, pins),
                  microbatches=microbatches, time_limit=time_limit)
    p = plan.predicted
    budget = cluster.memory if memory is None else memory
    console.print(f"model {graph.name}: {len(graph.nodes)} nodes, {len(graph.inputs)} inputs")
    console.print(f"mesh {mesh} ({mesh.size} devices, {mesh.devices_per_node} per node) on {cluster.describe()}")
    console.print(f"predicted step time {_ms(p['step_time'])} (compute {_ms(p['compute'])}, "
                  f"communication {_ms(p['communication'])})" +
                  (f", {plan.microbatches} microbatches" if plan.microbatches > 1 else ""))
    console.print(f"memory per device {_gib(p['memory'])} of {_gib(budget)}: inputs {_gib(p['memory.inputs'])}, "
                  f"activations {_gib(p['memory.activations'])}, gradients {_gib(p['memory.gradients'])}")
    st = p["ilp"]
    console.print(f"search {p['search_seconds']:.2f} s: {p['segments']} segments in {p['segment_classes']} classes, "
                  f"{st['deciding']} deciding classes, {st['choices']} choices, {st['edge_variables']} edge variables, "
                  f"{st['rows']} rows ({st['method']}, {st['solver']})")
    if plan.stages:
        sizes = ", ".join(str(len(s)) for s in plan.stages)
        times = ", ".join(f"{t * 1e3:.2f}" for t in p["stage_times"])
        console.print(f"pipeline over {plan.pp_axis}: {len(plan.stages)} stages of {sizes} nodes, "
                      f"microbatch ms per stage {times}")
    table = Table(title="input shardings (layers alike shown once as l*)")
    table.add_column("inputs")
    table.add_column("type")
    table.add_column("sharding")
    rows: dict[tuple[str, str, str], int] = defaultdict(int)
    for v in graph.inputs:
        rows[(_pattern(v.name), str(v.type), str(plan.sharding_of_input(v.name, v.type.rank)))] += 1
    for (name, t, s), n in rows.items():
        table.add_row(name + (f"  (x{n})" if n > 1 else ""), t, s)
    print_table(table)
    if explain:
        _explain(graph, plan, cluster)


def _explain(graph, plan, cluster) -> None:
    """Per segment class (a layer and its repeats): the collectives the plan runs, with their
    cost per run and how often they run per step."""
    from akg.graph.parallel.cost import StepRoles, charges
    from akg.graph.parallel.search import segment

    roles = StepRoles.of(graph)
    segs = segment(graph, roles)
    m = plan.microbatches
    by_class: dict[int, list] = defaultdict(list)
    first_of_class: dict[int, int] = {}
    count = defaultdict(int)
    for s in range(segs.count):
        first_of_class.setdefault(segs.klass[s], s)
        count[segs.klass[s]] += 1
    names: dict[int, list[str]] = defaultdict(list)
    for n in graph.nodes:
        s = segs.of_node[id(n)]
        if first_of_class[segs.klass[s]] == s and id(n) in roles.forward:
            names[s].append(n.outputs[0].name)
    for ch in charges(graph, plan, cluster, roles=roles):
        if ch.kind == "compute" or ch.node is None:
            continue
        s = segs.of_node[id(ch.node)]
        if first_of_class[segs.klass[s]] != s:
            continue
        for step, seconds in ch.steps:
            if step.communicates:
                by_class[s].append((ch.value, ch.node.outputs[0].name, str(step), seconds, 1 if ch.once else m))
    total = 0.0
    for s in sorted(first_of_class.values()):
        k = count[segs.klass[s]]
        fwd = names.get(s) or ["(backward/update only)"]
        items = by_class.get(s, [])
        cost = sum(sec * runs for *_, sec, runs in items)
        total += cost * k
        console.print(escape(f"\nlayer {s} [{fwd[0]} .. {fwd[-1]}]" + (f" and {k - 1} alike" if k > 1 else "") +
                             f": {len(items)} collectives, {_ms(cost)} per step" +
                             (f" each, {_ms(cost * k)} together" if k > 1 else "")))
        for value, reader, step, sec, runs in sorted(items, key=lambda it: -it[3] * it[4]):
            console.print(escape(f"  {step:<28} %{value} for %{reader}: {_ms(sec)}" + (f" x{runs}" if runs > 1 else "")))
    console.print(f"\ncommunication per step: {_ms(total)} (pipeline sends not listed)")


COMMANDS = [parallel_cmd]

"""Fusion partitioning (graph stage after expansion and simplification): cut a graph of basic
ops into Subgraphs, one kernel each, in execution order, and record why each cut was made.

Rules (docs/fusion.md): elementwise and layout ops fuse with each other and with reductions
on either side; a matmul/conv ("anchor") takes elementwise/layout epilogues and side inputs
but never a second anchor, a reduction or an expensive prologue; no fusion creates a cycle
between kernels; a kernel holds at most `max_ops` ops and `max_reduce_depth` chained
reduction stages. Every refused fusion is logged at DEBUG and kept as a `Cut` with its reason.
"""

from __future__ import annotations

import heapq
import logging
import re
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from akg.graph.interpreter import bind_inputs, evaluate
from akg.graph.ir import Graph, Node, Value
from akg.graph.layout import derived_names
from akg.graph.ops import CONV, LINALG, POOL, REDUCE
from akg.graph.subgraph import Subgraph

log = logging.getLogger(__name__)

ANCHOR_KINDS = (LINALG, CONV)  # heavy contractions: one per kernel, epilogues only
STAGE_KINDS = (REDUCE, POOL)  # reduction stages (scatter_add counts as one too)
# What a matmul/conv may take as a prologue: pure index changes (inlined into its operand
# accesses) and casts. Arithmetic would be recomputed for every use inside the contraction.
CHEAP_PROLOGUE = frozenset({"reshape", "squeeze", "expand_dims", "transpose", "broadcast_to",
                            "slice", "strided_slice", "cast"})
# Pure index changes: a kernel that reads one as a prologue computes nothing for it, so each
# kernel reading it may hold its own copy instead of one kernel writing it out for the others.
INDEX_CHANGES = CHEAP_PROLOGUE - {"cast"}


@dataclass(frozen=True)
class FusionLimits:
    """Size limits that keep a fused kernel schedulable by the polyhedral pipeline."""

    max_ops: int = 24  # basic ops per kernel
    max_reduce_depth: int = 4  # reduction stages chained one after another in a kernel


# --- the result ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cut:
    """A value that leaves kernel `producer` for kernel `consumer`, and why they stay apart."""

    value: str
    producer: int
    consumer: int
    reason: str

    def __str__(self) -> str:
        return f"%{self.value}: k{self.producer} -> k{self.consumer}: {self.reason}"


@dataclass(frozen=True)
class FusedKernel:
    """One kernel of a partition: its subgraph and the parent-graph names of the values it
    reads (`inputs`, in the subgraph's input order) and writes (`outputs`, likewise). The
    constants it uses are constants of its subgraph, not inputs."""

    subgraph: Subgraph
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    @property
    def name(self) -> str:
        return self.subgraph.name

    @property
    def nodes(self) -> tuple[Node, ...]:
        return self.subgraph.graph.nodes

    @property
    def ops(self) -> tuple[str, ...]:
        return tuple(n.op for n in self.nodes)


@dataclass(frozen=True)
class Partition:
    """`graph` (the expanded, simplified graph whose value names everything here refers to)
    cut into `kernels`, listed in a valid execution order, and the `cuts` between them.

    A runtime calls the kernels in order, passing values by name: each kernel's inputs are
    graph inputs or outputs of earlier kernels. Graph outputs that no kernel writes are graph
    inputs or constants of `graph`.
    """

    graph: Graph
    kernels: tuple[FusedKernel, ...]
    cuts: tuple[Cut, ...]

    @property
    def subgraphs(self) -> list[Subgraph]:
        return [k.subgraph for k in self.kernels]

    def __len__(self) -> int:
        return len(self.kernels)

    def kernel_of(self, value: str) -> int | None:
        """Index of the kernel that writes `value` (None for graph inputs and constants)."""
        for i, k in enumerate(self.kernels):
            if any(v.name == value for n in k.nodes for v in n.outputs):
                return i
        return None

    def evaluate(self, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray]) -> list[np.ndarray]:
        """Run the kernels in order with the reference interpreter, passing values by name, as
        a runtime would; returns the graph's outputs."""
        env: dict[str, np.ndarray] = {v.name: a for v, a in bind_inputs(self.graph, inputs).items()}
        env.update((v.name, a) for v, a in self.graph.constants.items())
        for k in self.kernels:
            outs = evaluate(k.subgraph.graph, {name: env[name] for name in k.inputs})
            env.update(zip(k.outputs, outs))
        return [env[v.name] for v in self.graph.outputs]


# --- partitioning -------------------------------------------------------------------------------


def partition(graph: Graph, *, simplify: bool = True, pack_weights: bool = True, winograd: bool = True,
              limits: FusionLimits = FusionLimits(), target=None) -> Partition:
    """Cut `graph` into kernels through the pipeline's passes (`akg.graph.pipeline.PASSES`):
    expand composites, simplify (unless told not to), run the 3x3 convs that the target takes
    as Winograd that way (`akg.graph.winograd`, unless told not to), store constant matmul
    weights as panels (`akg.graph.layout`, unless told not to; `target` decides their width),
    then `fuse`. Tuning and compiling for one target must pass that same target, so that they
    cut the same kernels (workload keys). New callers use `akg.graph.pipeline.plan_model`."""
    from akg.graph.pipeline import PASSES, plan_model  # the pipeline sits above this stage

    skip = {name for name, on in (("simplify", simplify), ("layout", pack_weights), ("winograd", winograd))
            if not on}
    return plan_model(graph, target, passes=[p for p in PASSES if p.name not in skip], limits=limits)


def fuse(graph: Graph, limits: FusionLimits = FusionLimits()) -> Partition:
    """The fusion pass alone: cut an expanded (and simplified) graph into kernels, fusing
    greedily along producer -> consumer edges in topological order."""
    return _Partitioner(graph, limits).run()


def constant_only_nodes(nodes: Sequence[Node], constants) -> list[Node]:
    """The nodes (given in topological order) computed from constants alone, such as a weight's
    relayout into panels (`akg.graph.layout`); kernel names leave them out."""
    derived = set(constants)
    out = []
    for node in nodes:
        if all(v in derived for v in node.inputs):
            derived.update(node.outputs)
            out.append(node)
    return out


def _kind(node: Node) -> str:
    return node.opdef.kind


def _is_anchor(node: Node) -> bool:
    return _kind(node) in ANCHOR_KINDS


def _is_stage(node: Node) -> bool:
    return _kind(node) in STAGE_KINDS or node.op == "scatter_add"


def _label(node: Node) -> str:
    return f"{node.op} %{node.outputs[0].name}"


class _Partitioner:
    """Greedy union of node groups: every edge is tried once, when its consumer is reached
    (edges into a prologue-to-be are tried last)."""

    def __init__(self, graph: Graph, limits: FusionLimits):
        self.graph, self.limits = graph, limits
        self.nodes = graph.nodes
        self.producer: dict[Value, int] = {v: i for i, n in enumerate(self.nodes) for v in n.outputs}
        self.users: list[list[int]] = [[] for _ in self.nodes]
        for i, n in enumerate(self.nodes):
            for v in n.inputs:
                p = self.producer.get(v)
                if p is not None and i not in self.users[p]:
                    self.users[p].append(i)
        self.group = list(range(len(self.nodes)))  # node -> group id
        self.members: dict[int, list[int]] = {i: [i] for i in range(len(self.nodes))}
        self.refused: dict[tuple[int, int], str] = {}
        self.copies: dict[int, list[int]] = {}  # group -> index changes it holds a copy of (rule 7)

    # --- the greedy loop ------------------------------------------------------------------------

    def run(self) -> Partition:
        deferred = []
        for i in range(len(self.nodes)):
            if self.prefers_consumer(i):
                deferred.append(i)
            else:
                self.try_producers(i)
        for i in deferred:
            self.try_producers(i)
        self.copy_index_changes()
        return self.result()

    def try_producers(self, i: int) -> None:
        node = self.nodes[i]
        for v in node.inputs:
            p = self.producer.get(v)
            if p is None or self.group[p] == self.group[i] or (p, i) in self.refused:
                continue
            reason = self.why_not(self.group[p], self.group[i])
            if reason is None:
                self.merge(self.group[p], self.group[i])
            else:
                self.refused[(p, i)] = reason
                log.debug("%s: not fusing %s into %s: %s", self.graph.name,
                          _label(self.nodes[p]), _label(node), reason)

    def prefers_consumer(self, i: int) -> bool:
        """An index change or cast that only feeds matmuls/convs joins its consumer as a
        prologue rather than its producer when the value is written out anyway (it has other
        users: as an epilogue it would cost one more output buffer), or when the producer is a
        reduction stage (a pool or reduce): as its epilogue a reshape that changes the rank
        (a flatten before a classifier) would make the stage's loops run over the reshaped
        output, with divisions in every index (LeNet-5's pool + flatten: 23 us for 6,400
        elements). Its producer edges are tried after every other edge."""
        node = self.nodes[i]
        if not (node.op in CHEAP_PROLOGUE and self.users[i] and all(_is_anchor(self.nodes[u]) for u in self.users[i])):
            return False
        producers = [p for v in node.inputs if (p := self.producer.get(v)) is not None]
        return any(len(self.users[p]) > 1 or _is_stage(self.nodes[p]) for p in producers)

    def merge(self, a: int, b: int) -> None:
        keep, gone = (a, b) if len(self.members[a]) >= len(self.members[b]) else (b, a)
        for n in self.members[gone]:
            self.group[n] = keep
        self.members[keep] = sorted(self.members[keep] + self.members.pop(gone))

    def copy_index_changes(self) -> None:
        """Rule 7: an index change (`INDEX_CHANGES`) of values its own kernel does not compute
        (graph inputs, constants, other kernels' outputs), read by other kernels too, is copied
        into each of them instead of being written out: a reshape of a transformer's input
        that the query projection took as its prologue left that kernel writing the reshaped
        input for the key and value projections, 24 against 2.7 us for the same matmul.
        The kernel keeps the copy where the size limit allows; each copy reads what the
        original reads, which every reader's kernel can read already (it comes before them)."""
        for n, node in enumerate(self.nodes):
            if node.op not in INDEX_CHANGES or len(node.outputs) != 1:
                continue
            home = self.group[n]
            if any((p := self.producer.get(v)) is not None and self.group[p] == home for v in node.inputs):
                continue
            if all(self.nodes[m].op in INDEX_CHANGES for m in self.members[home]):
                continue  # a kernel of index changes alone: copying would leave it writing nothing
            for u in self.users[n]:
                g = self.group[u]
                if g == home or n in self.copies.get(g, ()):
                    continue
                if len(self.members[g]) + len(self.copies.get(g, ())) + 1 > self.limits.max_ops:
                    continue
                self.copies.setdefault(g, []).append(n)
                log.debug("%s: %s copied into the kernel of %s", self.graph.name, _label(node), _label(self.nodes[u]))

    # --- the rules ------------------------------------------------------------------------------

    def why_not(self, p: int, c: int) -> str | None:
        """Why producer group p may not join consumer group c, or None if it may."""
        P, C = self.members[p], self.members[c]
        edges = [(v, u, pos) for u in C for pos, v in enumerate(self.nodes[u].inputs)
                 if v in self.producer and self.group[self.producer[v]] == p]
        for v, u, pos in edges:
            if self.nodes[u].op == "gather" and pos == 0:
                return f"gather %{self.nodes[u].outputs[0].name} reads %{v.name} at data-dependent positions"
        anchor_p, anchor_c = self.anchor(P), self.anchor(C)
        if anchor_p is not None and anchor_c is not None:
            return (f"two matmul/conv ops never share a kernel "
                    f"({_label(self.nodes[anchor_p])}, {_label(self.nodes[anchor_c])})")
        anchor = anchor_p if anchor_p is not None else anchor_c
        if anchor is not None:
            stage = next((n for n in P + C if _is_stage(self.nodes[n])), None)
            if stage is not None:
                return (f"a kernel with {_label(self.nodes[anchor])} takes no reduction "
                        f"({_label(self.nodes[stage])})")
        if anchor_c is not None and not self.upstream(anchor_c, C).isdisjoint(u for _, u, _ in edges):
            costly = next((n for n in P if self.nodes[n].op not in CHEAP_PROLOGUE), None)
            if costly is not None:
                return (f"{_label(self.nodes[anchor_c])} takes only index-change or cast prologues, "
                        f"not {_label(self.nodes[costly])}")
        if len(P) + len(C) > self.limits.max_ops:
            return f"the kernel would hold {len(P) + len(C)} ops (limit {self.limits.max_ops})"
        depth = self.reduce_depth(sorted(P + C))
        if depth > self.limits.max_reduce_depth:
            return f"the kernel would chain {depth} reduction stages (limit {self.limits.max_reduce_depth})"
        detour = self.detour(p, c)
        if detour is not None:
            return f"a cycle: %{detour[0]} also feeds {detour[1]} in another kernel, which feeds back in"
        return None

    def anchor(self, members: list[int]) -> int | None:
        return next((n for n in members if _is_anchor(self.nodes[n])), None)

    def upstream(self, node: int, members: list[int]) -> set[int]:
        """`node` and its ancestors inside the group `members`."""
        inside, seen, stack = set(members), {node}, [node]
        while stack:
            for v in self.nodes[stack.pop()].inputs:
                p = self.producer.get(v)
                if p is not None and p in inside and p not in seen:
                    seen.add(p)
                    stack.append(p)
        return seen

    def reduce_depth(self, members: list[int]) -> int:
        """The most reduction stages on one producer -> consumer chain inside the group."""
        inside, depth = set(members), {}
        for n in members:  # topological: node indices follow the graph's order
            before = [depth[p] for v in self.nodes[n].inputs
                      if (p := self.producer.get(v)) is not None and p in inside]
            depth[n] = max(before, default=0) + _is_stage(self.nodes[n])
        return max(depth.values(), default=0)

    def detour(self, p: int, c: int) -> tuple[str, str] | None:
        """A path p -> x -> ... -> c through another group x (merging would make a cycle):
        the value leaving p and the first op on the way, or None."""
        last = max(self.members[c])
        starts = []
        for n in self.members[p]:
            for u in self.users[n]:
                g = self.group[u]
                if g not in (p, c) and min(self.members[g]) < last:
                    starts.append((g, n, u))
        seen: set[int] = set()
        for g0, n, u in starts:
            stack = [g0]
            while stack:
                g = stack.pop()
                if g in seen:
                    continue
                seen.add(g)
                for m in self.members[g]:
                    for w in self.users[m]:
                        h = self.group[w]
                        if h == c:
                            value = next(v for v in self.nodes[n].outputs if v in self.nodes[u].inputs)
                            return value.name, _label(self.nodes[u])
                        if h != g and h not in seen and min(self.members[h]) < last:
                            stack.append(h)
        return None

    # --- the partition --------------------------------------------------------------------------

    def ordered_groups(self) -> list[int]:
        """Groups in a topological order of the kernel graph (earliest first node first)."""
        succ: dict[int, set[int]] = {g: set() for g in self.members}
        indegree = dict.fromkeys(self.members, 0)
        for n, users in enumerate(self.users):
            for u in users:
                a, b = self.group[n], self.group[u]
                if a != b and b not in succ[a]:
                    succ[a].add(b)
                    indegree[b] += 1
        ready = [(self.members[g][0], g) for g, d in indegree.items() if d == 0]
        heapq.heapify(ready)
        order = []
        while ready:
            _, g = heapq.heappop(ready)
            order.append(g)
            for h in succ[g]:
                indegree[h] -= 1
                if indegree[h] == 0:
                    heapq.heappush(ready, (self.members[h][0], h))
        if len(order) != len(self.members):
            raise AssertionError(f"internal: the kernels of {self.graph.name} form a cycle")
        return order

    def result(self) -> Partition:
        graph = self.graph
        order = self.ordered_groups()
        index = {g: k for k, g in enumerate(order)}
        graph_outputs = set(graph.outputs)
        kernels = []
        cuts: dict[tuple[str, int, int], Cut] = {}
        for k, g in enumerate(order):
            members = sorted(self.members[g] + self.copies.get(g, []))
            nodes = [self.nodes[n] for n in members]
            inside = set(members)
            inputs: list[Value] = []
            constants: dict[Value, np.ndarray] = {}
            for n in members:
                for v in self.nodes[n].inputs:
                    p = self.producer.get(v)
                    if v in graph.constants:
                        constants[v] = graph.constants[v]
                    elif p is None or p not in inside:
                        if v not in inputs:
                            inputs.append(v)
                        if p is not None:
                            key = (v.name, index[self.group[p]], k)
                            cuts.setdefault(key, Cut(v.name, key[1], k, self.refused[(p, n)]))
            outputs = [v for n in self.members[g] for v in self.nodes[n].outputs
                       if v in graph_outputs or not self.users[n]
                       or any(u not in inside and v in self.nodes[u].inputs
                              and n not in self.copies.get(self.group[u], ()) for u in self.users[n])]
            fixed = {id(node) for node in constant_only_nodes(nodes, graph.constants)}
            ops = list(dict.fromkeys(node.op for node in nodes if id(node) not in fixed)) \
                or list(dict.fromkeys(node.op for node in nodes))
            name = f"{graph.name}.k{k}_{'_'.join(ops[:3])}"
            sub = Graph(name, inputs, outputs, nodes, constants)
            kernels.append(FusedKernel(Subgraph(sub, name, occurrences=1),
                                       tuple(v.name for v in inputs), tuple(v.name for v in outputs)))
        log.debug("%s: %d kernel(s) from %d op(s), %d cut(s)", graph.name, len(kernels), len(self.nodes), len(cuts))
        return Partition(graph, tuple(kernels), tuple(sorted(cuts.values(), key=lambda c: (c.consumer, c.producer))))


# --- text ---------------------------------------------------------------------------------------


_NAME = re.compile(r"%([A-Za-z0-9_.]*[A-Za-z0-9_])")  # a value name in a listing


def emit_partition(p: Partition, model=None) -> str:
    """A readable listing: each kernel, its ops, inputs, outputs and the cuts into it. Given
    `model` (the user's graph the partition was planned from), in the user's names: values the
    layout pass derived from a weight (its panels and their relayout views) are shown as that
    weight, their relayout ops are not listed, and the parts of expanded composite ops are
    said to be whose."""
    g = p.graph
    derived = derived_names(g, model) if model is not None else {}
    user_types = {v.name: v.type for v in model.values} if model is not None else {}
    types = {v.name: v.type for v in g.values}

    def name(n: str) -> str:
        return derived.get(n, n)

    def typ(n: str) -> str:
        return str(user_types[derived[n]]) if n in derived else str(types[n])

    def rename(text: str) -> str:
        return _NAME.sub(lambda m: "%" + name(m.group(1)), text)

    def visible(nodes):
        return [n for n in nodes if not all(v.name in derived for v in n.outputs)]

    def unique(names):
        return list(dict.fromkeys(names))

    nodes = {id(n): n for k in p.kernels for n in k.nodes}  # an index change copied into kernels once
    hidden = len(nodes) - len(visible(nodes.values()))
    copied = sum(len(k.nodes) for k in p.kernels) - len(nodes)
    lines = [f"fusion of @{g.name}: {len(p.kernels)} kernel(s) from {len(nodes)} basic op(s)"
             + (f", {hidden} of them reading weights stored as panels (not listed)" if hidden else "")
             + (f", {copied} index change(s) copied into the kernels that read them" if copied else "")]
    writer = {n: i for i, k in enumerate(p.kernels) for n in k.outputs}
    readers: dict[str, list[int]] = {}
    for i, k in enumerate(p.kernels):
        for n in k.inputs:
            readers.setdefault(n, []).append(i)
    graph_outputs = {v.name for v in g.outputs}
    for i, k in enumerate(p.kernels):
        ops = visible(k.nodes)
        lines.append(f"k{i} {k.name}  ({len(ops)} ops)")
        lines.append("  ops:    " + (", ".join(f"%{n.outputs[0].name}={n.op}" for n in ops) or "none"))

        def source(n: str) -> str:
            return f" <- k{writer[n]}" if n in writer else " (graph input)"

        def sinks(n: str) -> str:
            to = [f"k{j}" for j in readers.get(n, [])] + (["graph output"] if n in graph_outputs else [])
            return f" -> {', '.join(to)}" if to else " (unused)"

        ins = unique(f"%{name(n)}: {typ(n)}{source(n)}" for n in k.inputs)
        lines.append("  in:     " + (", ".join(ins) or "none"))
        consts = []
        for v in k.subgraph.graph.constants:
            if v.name in derived:
                consts.append(f"%{name(v.name)}: {typ(v.name)} (stored as panels {v.type})")
            else:
                consts.append(f"%{v.name}: {v.type}")
        if consts:
            lines.append("  consts: " + ", ".join(unique(consts)))
        lines.append("  out:    " + ", ".join(unique(f"%{name(n)}: {typ(n)}{sinks(n)}" for n in k.outputs)))
        for cut in p.cuts:
            if cut.consumer == i:
                lines.append(f"  cut:    {rename(str(cut))}")
    direct = [v for v in g.outputs if v.name not in writer]
    if direct:
        lines.append("graph outputs written by no kernel: " + ", ".join(f"%{name(v.name)}" for v in direct))
    if model is None:
        return "\n".join(lines) + "\n"
    # values of expanded composite ops are named after the user's op: say whose they are
    producer = {v.name: n.op for n in model.nodes for v in n.outputs}
    parts: dict[str, None] = {}
    for k in p.kernels:
        for n in [*(v.name for node in k.nodes for v in node.outputs), *(v.name for v in k.subgraph.graph.constants)]:
            if n in user_types or n in derived:
                continue
            head = n
            while "." in head and head not in producer:
                head = head.rsplit(".", 1)[0]
            if head in producer:
                parts[head] = None
    if parts:
        lines.append("expanded: " + ", ".join(f"%{h}.* are parts of %{h} = {producer[h]}" for h in parts))
    return "\n".join(lines) + "\n"

"""Per-rank graphs cut for running (graph stage `parallel`, before the multi-process runner
`akg.distributed`): the ordinary nodes between collectives become segments compiled as
models, the collectives stay single ops the runner does itself."""

from __future__ import annotations

from dataclasses import dataclass

from akg.graph.ir import Graph, Node, Value
from akg.graph.ops.registry import COLLECTIVE

P2P = ("send", "recv")  # point to point: kept in program order (see `segments`)


@dataclass(frozen=True)
class Segment:
    """One piece of a per-rank graph: `graph` (ordinary nodes, compiled as one model) or
    `node` (one collective op); `inputs`/`outputs` the value names it reads and writes."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    graph: Graph | None = None
    node: Node | None = None

    @property
    def is_collective(self) -> bool:
        return self.node is not None

    def __str__(self) -> str:
        if self.node is not None:
            ins = ", ".join("%" + n for n in self.inputs)
            return f"{self.node.op}({ins}) -> %{self.outputs[0]} over {self.node.attrs['axes']}"
        return f"kernels ({len(self.graph.nodes)} nodes) -> {', '.join('%' + n for n in self.outputs)}"


def segments(per_rank: Graph) -> list[Segment]:
    """`per_rank` cut at its collectives, in waves: every ordinary node whose inputs are ready
    goes into one compiled segment, then every collective that is ready, and so on (the
    fewest segments the dependences allow: a data-parallel step is forward and backward,
    the gradient all-reduces, then the updates)."""
    ready: set[Value] = set(per_rank.inputs) | set(per_rank.constants)
    remaining = list(per_rank.nodes)
    users = per_rank.users()
    outputs = set(per_rank.outputs)
    waves: list[list[Node] | Node] = []
    while remaining:
        wave, avail = [], set(ready)
        for n in remaining:
            if n.opdef.kind != COLLECTIVE and all(v in avail for v in n.inputs):
                wave.append(n)
                avail.update(n.outputs)
        if wave:
            waves.append(wave)
            taken = set(map(id, wave))
            remaining = [n for n in remaining if id(n) not in taken]
            ready = avail
        colls, blocked = [], False  # sends and receives keep their program order (no deadlock)
        for n in remaining:
            if n.opdef.kind != COLLECTIVE:
                continue
            p2p = n.op in P2P
            if (p2p and blocked) or not all(v in ready for v in n.inputs):
                blocked = blocked or p2p
                continue
            colls.append(n)
            waves.append(n)
            ready.update(n.outputs)
        taken = set(map(id, colls))
        remaining = [n for n in remaining if id(n) not in taken]
    out = []
    for i, w in enumerate(waves):
        if isinstance(w, Node):
            out.append(Segment(tuple(v.name for v in w.inputs), (w.output.name,), node=w))
            continue
        inside = {v for n in w for v in n.outputs}
        members = set(map(id, w))
        seg_outs = [v for n in w for v in n.outputs
                    if v in outputs or any(id(u) not in members for u in users[v])]
        if not seg_outs:
            continue
        used = list(dict.fromkeys(v for n in w for v in n.inputs if v not in inside))
        ins = [v for v in used if v not in per_rank.constants]
        consts = {v: per_rank.constants[v] for v in used if v in per_rank.constants}
        g = Graph(f"{per_rank.name}.seg{i}", ins, seg_outs, w, consts)
        out.append(Segment(tuple(v.name for v in ins), tuple(v.name for v in seg_outs), graph=g))
    return out

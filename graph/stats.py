"""Model statistics for `akg show`: op counts, parameter count, FLOPs estimate."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from akg.graph.ir import Graph, Node


@dataclass(frozen=True)
class GraphStats:
    nodes: int
    op_counts: dict[str, int]
    parameters: int  # elements in constants (weights)
    parameter_bytes: int
    flops: int


def node_flops(node: Node) -> int:
    return node.opdef.count_flops([v.type for v in node.inputs], [v.type for v in node.outputs], node.attrs)


def graph_stats(graph: Graph) -> GraphStats:
    return GraphStats(
        nodes=len(graph.nodes),
        op_counts=dict(Counter(n.op for n in graph.nodes).most_common()),
        parameters=sum(v.type.size for v in graph.constants),
        parameter_bytes=sum(v.type.nbytes for v in graph.constants),
        flops=sum(node_flops(n) for n in graph.nodes),
    )

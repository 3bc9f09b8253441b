"""A parallel plan: what the search chooses and the SPMD rewrite carries out.

For a graph on a mesh: the strategy of every node (keyed by the name of its first output),
the sharding of every graph input and constant, and the sharding every graph output is
delivered in (replicated unless said). Pipeline plans also cut the nodes into stages over a
`pp` mesh axis. `predicted` holds the cost model's numbers for the plan (seconds, bytes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from akg.errors import ShardingError
from akg.graph.ir import Graph, Node
from akg.graph.parallel.mesh import Mesh
from akg.graph.parallel.sharding import Sharding
from akg.graph.parallel.strategy import OpCall, Strategy, strategies


def node_key(node: Node) -> str:
    return node.outputs[0].name


@dataclass
class Plan:
    mesh: Mesh
    choice: dict[str, Strategy]
    inputs: dict[str, Sharding]
    outputs: dict[str, Sharding] = field(default_factory=dict)
    stages: list[list[str]] | None = None  # node keys per pipeline stage, in order
    pp_axis: str | None = None  # the mesh axis the stages lie along
    predicted: dict = field(default_factory=dict)
    microbatches: int = 1  # per step, streamed through the stages (1F1B); the graph is one microbatch's

    def strategy(self, node: Node) -> Strategy:
        try:
            return self.choice[node_key(node)]
        except KeyError:
            raise ShardingError(f"the plan has no strategy for '{node.op}' producing %{node_key(node)}") from None

    def sharding_of_input(self, name: str, rank: int) -> Sharding:
        return self.inputs.get(name, Sharding.replicated(rank))

    def sharding_of_output(self, name: str, rank: int) -> Sharding:
        return self.outputs.get(name, Sharding.replicated(rank))


def uniform_plan(graph: Graph, mesh: Mesh, pick, inputs: Mapping[str, Sharding] | None = None,
                 outputs: Mapping[str, Sharding] | None = None) -> Plan:
    """A plan choosing for every node `pick(node, its strategies)` (a Strategy; None for
    replicated): for tests and hand-written plans."""
    choice = {}
    for node in graph.nodes:
        options = strategies(OpCall.of(node), mesh)
        chosen = pick(node, options)
        choice[node_key(node)] = options[0] if chosen is None else chosen
    return Plan(mesh, choice, dict(inputs or {}), dict(outputs or {}))

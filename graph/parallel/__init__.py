"""Auto-parallel (graph stage): a model on a device mesh as one per-rank SPMD graph.

    mesh = Mesh.parse("dp=2,tp=4")
    plan = search.search(step_graph, mesh, cluster)  # one strategy per op (a MILP), stages
    rank_graph = spmd.spmd(step_graph, plan)         # collectives inserted on the edges
    outs = simulate.simulate(rank_graph, mesh, inputs_per_rank)

The pieces: `mesh` (named axes), `sharding` (how a value lies on the mesh), the sharding rules
of every op family (`defsharding` next to each family in graph/ops, helpers in `rules`),
`strategy` (an op's legal strategies), `reshard` (layout changes as collectives), `cost`
(rooflines and alpha-beta links), `search`/`ilp` (the integer program, pipeline stages),
`spmd`/`stages`/`segments` (the rewrite), `simulate` (ranks in one process). docs/parallel.md.

The classes are imported lazily (`from akg.graph.parallel import Mesh, Plan`): the collective
ops (graph/ops) import `mesh` while the op registry is still loading. Functions live in their
modules (`akg.graph.parallel.search.search`), whose names they share.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "Mesh": "mesh", "Sharding": "sharding", "Strategy": "strategy", "OpCall": "strategy",
    "Plan": "plan", "ClusterSpec": "cost",
}


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'akg.graph.parallel' has no attribute '{name}'")
    return getattr(importlib.import_module(f"akg.graph.parallel.{module}"), name)


__all__ = sorted(_EXPORTS)

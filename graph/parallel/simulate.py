"""The reference interpreter over simulated ranks: one per-rank SPMD graph evaluated for every
rank of its mesh in one process, node by node in lockstep; a collective op exchanges the
arrays of each of its groups (`akg.graph.ops.collective.exchange`).

    outs = simulate(per_rank_graph, mesh, [inputs_of_rank_0, inputs_of_rank_1, ...])
    outs[rank] -> that rank's outputs, in graph-output order
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from akg.errors import InputDataError, ShardingError
from akg.graph.interpreter import bind_inputs
from akg.graph.ir import Graph, Value
from akg.graph.ops.collective import exchange, group_axes
from akg.graph.ops.registry import COLLECTIVE
from akg.graph.parallel.mesh import Mesh


def simulate(graph: Graph, mesh: Mesh, inputs: Sequence[Mapping[str, np.ndarray]]) -> list[list[np.ndarray]]:
    """Every rank's outputs of `graph` (a per-rank graph) on `mesh`, given every rank's inputs."""
    if len(inputs) != mesh.size:
        raise InputDataError(f"{len(inputs)} ranks' inputs for mesh {mesh} of {mesh.size} devices")
    envs: list[dict[Value, np.ndarray]] = []
    for rank_inputs in inputs:
        env = dict(graph.constants)
        env.update(bind_inputs(graph, rank_inputs))
        envs.append(env)
    for node in graph.nodes:
        if node.opdef.kind == COLLECTIVE:
            if Mesh.parse(node.attrs["mesh"], mesh.devices_per_node).axes != mesh.axes:
                raise ShardingError(f"'{node.op}' producing %{node.output.name} runs on mesh "
                                    f"{node.attrs['mesh']}, the graph is simulated on {mesh}")
            axes = group_axes(node.attrs["axes"])
            (x,), (out,) = node.inputs, node.outputs
            for group in mesh.groups(axes):
                got = exchange(node.op, node.attrs, [envs[r][x] for r in group])
                for r, a in zip(group, got):
                    envs[r][out] = np.asarray(a).astype(out.dtype, copy=False)
            continue
        for env in envs:
            args = [env[v] for v in node.inputs]
            with np.errstate(all="ignore"):
                results = node.opdef.evaluate(args, node.attrs)
            for v, r in zip(node.outputs, results):
                env[v] = np.asarray(r).astype(v.dtype, copy=False)
    return [[env[v] for v in graph.outputs] for env in envs]

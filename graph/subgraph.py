"""Subgraph: the unit of kernel generation and tuning, with its canonical workload key."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from akg.graph.ir import Graph
from akg.graph.memory import require_memory
from akg.graph.types import TensorType, is_uniform

# Constants of at most this many elements, or repeating one value, are compiled into the
# kernel (so their values are part of the workload); larger ones are kernel arguments.
INLINE_CONSTANT_LIMIT = 1


def _inlined(a: np.ndarray) -> bool:
    """What lower_graph folds into the expressions (akg.graph.compute.lower: one repeated
    value, NaN included), so that the key holds the values the kernel is compiled with."""
    return a.size <= INLINE_CONSTANT_LIMIT or is_uniform(a)


@dataclass(frozen=True, eq=False)
class Subgraph:
    """One kernel's worth of graph. Its inputs are the values that enter the kernel, its
    outputs the values that leave it."""

    graph: Graph
    name: str = ""
    occurrences: int = field(default=1, compare=False)

    def __post_init__(self):
        if not self.name:
            object.__setattr__(self, "name", self.graph.name)

    @cached_property
    def workload_key(self) -> str:
        """A hash of ops, attributes, shapes, dtypes and edge structure, independent of value
        and graph names, so the same kernel in two models shares one key."""
        return workload_key(self.graph)


def canonical_form(graph: Graph) -> dict:
    """A name-free description of the graph (what the workload key hashes)."""
    index: dict = {}

    def ref(v) -> int:
        return index[v]

    inputs = []
    for v in graph.inputs:
        index[v] = len(index)
        inputs.append([list(v.shape), v.dtype])
    consts = []
    for v, a in graph.constants.items():
        index[v] = len(index)
        data = a.flat[0].item() if _inlined(a) and a.size else None
        consts.append([list(v.shape), v.dtype, repr(data)])
    nodes = []
    for n in graph.nodes:
        attrs = {k: list(val) if isinstance(val, tuple) else val for k, val in n.attrs.items()}
        nodes.append([n.op, attrs, [ref(v) for v in n.inputs], [[list(v.shape), v.dtype] for v in n.outputs]])
        for v in n.outputs:
            index[v] = len(index)
    return {"inputs": inputs, "constants": consts, "nodes": nodes, "outputs": [ref(v) for v in graph.outputs]}


def workload_key(graph: Graph) -> str:
    text = json.dumps(canonical_form(graph), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def graph_from_canonical(form: dict, name: str = "workload") -> Graph:
    """A graph with the structure a canonical form describes (constants that were not inlined
    come back with made-up, non-uniform data): enough to rebuild a workload's loop nests."""
    import math

    from akg.graph.builder import GraphBuilder

    b = GraphBuilder(name)
    values = [b.input(f"in{k}", shape, dtype) for k, (shape, dtype) in enumerate(form["inputs"])]
    for k, (shape, dtype, data) in enumerate(form["constants"]):
        require_memory(TensorType(shape, dtype).nbytes, f"constant {TensorType(shape, dtype)} of workload '{name}'")
        if data == "None":
            array = (np.arange(int(np.prod(shape)), dtype=np.int64) % 7 + 1).reshape(shape).astype(dtype)
        else:
            fill = eval(data, {"__builtins__": {}}, {"nan": math.nan, "inf": math.inf})
            array = np.full(shape, fill, dtype=dtype)
        values.append(b.const(array, name=f"c{k}"))
    for op, attrs, inputs, outs in form["nodes"]:
        out = b.op(op, *(values[i] for i in inputs), **attrs)
        values.extend(out if isinstance(out, tuple) else (out,))
    b.output(*(values[i] for i in form["outputs"]))
    return b.build()

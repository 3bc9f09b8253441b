"""Expansion: composite ops (softmax, layer_norm, dense, ...) become the basic ops that the
kernel generator handles, through the expanders registered next to each op."""

from __future__ import annotations

from typing import Any

import numpy as np

from akg.errors import AkgError
from akg.graph.builder import GraphBuilder
from akg.graph.ir import Graph, Value
from akg.graph.ops import COMPOSITE, EXPANDERS, get_op


class Emitter:
    """What an expander writes through: ops and constants named after the expanded value."""

    def __init__(self, builder: GraphBuilder, final_names: tuple[str, ...]):
        self._b = builder
        self._final = final_names
        self._parts = 0

    def _name(self, hint: str | None) -> str:
        base = f"{self._final[0]}.{hint or self._parts}"
        self._parts += 1
        return self._b.unique(base)

    def op(self, op: str, *inputs: Value | float, hint: str | None = None, final: bool = False,
           **attrs: Any):
        """Emit a basic op; `final=True` gives its output(s) the expanded op's own name(s)."""
        names = (self._final if len(self._final) > 1 else self._final[0]) if final else self._name(hint)
        return self._b.op(op, *(self.const(v, like=inputs) if not isinstance(v, Value) else v for v in inputs),
                          name=names, **attrs)

    def const(self, value, like=(), dtype: str | None = None) -> Value:
        if dtype is None:
            tensors = [v for v in like if isinstance(v, Value) and v.dtype != "bool"]
            dtype = tensors[0].dtype if tensors else "float32"
        return self._b.const(np.asarray(value, dtype=dtype), name=self._name("c"))


def expand(graph: Graph) -> Graph:
    """A graph with every composite op replaced by its expansion (others copied as they are)."""
    if not any(get_op(n.op).kind == COMPOSITE for n in graph.nodes):
        return graph
    b = GraphBuilder.rewriting(graph)
    env = b.copy_io(graph)
    for node in graph.nodes:
        ins = [env[v] for v in node.inputs]
        if get_op(node.op).kind == COMPOSITE:
            b.release(*(v.name for v in node.outputs))
            emitter = Emitter(b, tuple(v.name for v in node.outputs))
            out = EXPANDERS.get(node.op)(emitter, *ins, **node.attrs)
            outs = out if isinstance(out, tuple) else (out,)
        else:
            outs = b.copy_node(node, ins)
        for old, new in zip(node.outputs, outs):
            if old.name != new.name or old.type != new.type:
                raise AkgError(f"internal: the expander of '{node.op}' gave {new!r} for {old!r}")
            env[old] = new
    b.output(*(env[v] for v in graph.outputs))
    return b.build()

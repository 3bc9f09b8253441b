"""Storage widening: every op on a bfloat16 or float8 value computes in float32, so that kernels
only load-convert and convert-store these types (a `cast` to or from float32).

The graph IR and the reference interpreter keep the storage types (the interpreter computes
the same way: float32 in, rounded to nearest even when stored). This pass runs where a graph is
about to become kernels (the "storage" step of `PASSES`, and `lower_graph`): a node that reads
or writes a storage value, other than a cast, reads float32 casts of its storage inputs and
writes float32 results that are cast back to the declared storage type. Casts stay (the cast op
itself goes through float32, `akg.graph.ops.elementwise.cast`). Inputs, outputs and constants
keep their names and types.
"""

from __future__ import annotations

from akg.graph.builder import GraphBuilder
from akg.graph.ir import Graph, Value
from akg.graph.types import is_storage


def has_storage(graph: Graph) -> bool:
    return any(is_storage(v.dtype) for v in graph.values)


def widen_storage(graph: Graph) -> Graph:
    """The same computation with every op on a storage type done in float32 between casts."""
    if not has_storage(graph):
        return graph
    b = GraphBuilder.rewriting(graph)
    fresh = b.unique
    env: dict[Value, Value] = b.copy_io(graph)
    wide: dict[Value, Value] = {}  # a storage value of the new graph -> its float32 cast

    def widened(v: Value) -> Value:
        x = env[v]
        if not is_storage(v.dtype):
            return x
        if x not in wide:
            wide[x] = b.op("cast", x, name=fresh(f"{v.name}.f32"), to="float32")
        return wide[x]

    for node in graph.nodes:
        touches = any(is_storage(v.dtype) for v in (*node.inputs, *node.outputs))
        if node.op == "cast" or not touches:
            outs = b.copy_node(node, [env[v] for v in node.inputs])
        else:
            names = []
            for v in node.outputs:
                if not is_storage(v.dtype):
                    b.release(v.name)
                names.append(fresh(f"{v.name}.f32") if is_storage(v.dtype) else v.name)
            attrs = {k: ("float32" if isinstance(a, str) and is_storage(a) else a) for k, a in node.attrs.items()}
            out = b.op(node.op, *(widened(v) for v in node.inputs), name=names, **attrs)  # a dtype attr too
            outs = []
            for old, new in zip(node.outputs, out if isinstance(out, tuple) else (out,)):
                if is_storage(old.dtype):
                    b.release(old.name)
                    new = b.op("cast", new, name=old.name, to=old.dtype)  # rounded, as stored
                outs.append(new)
        for old, new in zip(node.outputs, outs):
            env[old] = new
    b.output(*(env[v] for v in graph.outputs))
    return b.build()

"""A builder API to create graphs in Python: `b.relu(b.matmul(x, w))`."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from akg.errors import InvalidGraphError
from akg.graph.ir import Graph, Node, Value
from akg.graph.ops import OPS, get_op
from akg.graph.types import TensorType, canonical_dtype


class GraphBuilder:
    """Collects inputs, constants and nodes, inferring every output type as it goes.

    Any registered op is a method: `b.add(x, y)`, `b.conv2d(x, w, strides=[2, 2])`,
    `b.split(x, sections=2)` (a tuple for multi-output ops). Python numbers given as inputs
    become scalar constants of the dtype of the op's first non-bool tensor input.
    """

    def __init__(self, name: str = "main"):
        self.name = name
        self._inputs: list[Value] = []
        self._constants: dict[Value, np.ndarray] = {}
        self._nodes: list[Node] = []
        self._outputs: list[Value] = []
        self._names: set[str] = set()
        self._counter = 0

    # --- naming ---------------------------------------------------------------------

    def fresh_name(self, hint: str | None = None) -> str:
        if hint is not None:
            if hint in self._names:
                raise InvalidGraphError(f"value %{hint} is defined more than once")
            self._names.add(hint)
            return hint
        while str(self._counter) in self._names:
            self._counter += 1
        name = str(self._counter)
        self._names.add(name)
        return name

    # --- rewriting a graph ------------------------------------------------------------
    # A pass that rewrites a graph (expand, widen_storage, decompose_complex) builds the new one
    # with every old name reserved: the values it adds get `unique` names that never take a
    # name an old value still has to get back, and each old value is `release`d just before
    # it is defined again under its own name.

    @classmethod
    def rewriting(cls, graph: Graph) -> GraphBuilder:
        b = cls(graph.name)
        b._names.update(v.name for v in graph.values)
        return b

    def release(self, *names: str) -> None:
        """Let reserved names be defined (again)."""
        self._names.difference_update(names)

    def unique(self, base: str) -> str:
        """`base`, else `base1`, `base2`, ...: the first name not taken (not reserved by this call)."""
        name, k = base, 1
        while name in self._names:
            name, k = f"{base}{k}", k + 1
        return name

    def copy_io(self, graph: Graph) -> dict[Value, Value]:
        """`graph`'s inputs and constants declared again under their names, in their order;
        the map from old to new values."""
        env: dict[Value, Value] = {}
        for v in graph.inputs:
            self.release(v.name)
            env[v] = self.input(v.name, v.shape, v.dtype)
        for v, a in graph.constants.items():
            self.release(v.name)
            env[v] = self.const(a, name=v.name)
        return env

    def copy_node(self, node: Node, inputs: Sequence[Value]) -> tuple[Value, ...]:
        """`node` as it is, on `inputs`, its outputs under their names."""
        self.release(*(v.name for v in node.outputs))
        out = self.op(node.op, *inputs, name=[v.name for v in node.outputs], **node.attrs)
        return out if isinstance(out, tuple) else (out,)

    # --- definitions ----------------------------------------------------------------

    def input(self, name: str, shape: Sequence[int], dtype: object = "float32") -> Value:
        v = Value(self.fresh_name(name), TensorType(shape, dtype))
        self._inputs.append(v)
        return v

    def const(self, value: Any, name: str | None = None, dtype: object = None) -> Value:
        array = np.asarray(value, dtype=None if dtype is None else canonical_dtype(dtype))
        if array.dtype == np.float64 and dtype is None and not isinstance(value, np.ndarray):
            array = array.astype(np.float32)  # Python floats default to f32, as in most frameworks
        v = Value(self.fresh_name(name), TensorType.of(array))
        self._constants[v] = array
        return v

    def op(self, op: str, *inputs: Value | float | int, name: str | Sequence[str] | None = None,
           **attrs: Any) -> Value | tuple[Value, ...]:
        opdef = get_op(op)
        tensors = [v for v in inputs if isinstance(v, Value)]
        numeric = [v for v in tensors if v.dtype != "bool"] or tensors  # where(cond, 1.0, x)
        dtype = numeric[0].dtype if numeric else "float32"
        values = [v if isinstance(v, Value) else self.const(v, dtype=dtype) for v in inputs]
        checked = opdef.check_attrs(attrs)
        types = opdef.infer_types([v.type for v in values], checked)
        names = [name] if isinstance(name, str) or name is None else list(name)
        if len(names) == 1 and len(types) > 1 and names[0] is None:
            names = [None] * len(types)
        if len(names) != len(types):
            raise InvalidGraphError(f"op '{op}' has {len(types)} outputs, {len(names)} names given")
        outputs = [Value(self.fresh_name(n), t) for n, t in zip(names, types)]
        self._nodes.append(Node(op, values, checked, outputs))
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def __getattr__(self, op: str):
        if op.startswith("_") or op not in OPS:
            raise AttributeError(op)
        return lambda *inputs, **attrs: self.op(op, *inputs, **attrs)

    def output(self, *values: Value) -> None:
        self._outputs.extend(values)

    def build(self) -> Graph:
        return Graph(self.name, self._inputs, self._outputs, self._nodes, self._constants)

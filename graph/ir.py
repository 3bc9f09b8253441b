"""The graph IR: SSA values, nodes, and immutable validated graphs in topological order."""

from __future__ import annotations

import heapq
import re
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from akg.errors import InvalidGraphError, ShapeError
from akg.graph.ops import Attrs, get_op
from akg.graph.types import TensorType

NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*")

# Graph -> text for `str(graph)`: the `.mir` format registers its emitter (akg.graph.io.mir), so
# that the IR needs nothing of the formats above it.
_text_printer: Callable[[Graph], str] | None = None


def set_text_printer(printer: Callable[[Graph], str]) -> None:
    """Make `printer` what `str(graph)` returns."""
    global _text_printer
    _text_printer = printer


class Value:
    """An SSA value: a graph input, a constant, or one output of a node.

    Values compare by identity; a graph's names are unique, so names identify values
    within one graph.
    """

    __slots__ = ("name", "type")

    def __init__(self, name: str, type: TensorType):
        if not NAME_RE.fullmatch(name):
            raise InvalidGraphError(f"bad value name {name!r} (letters, digits, '_', '.', '-')")
        self.name = name
        self.type = type

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def dtype(self) -> str:
        return self.type.dtype

    def __repr__(self) -> str:
        return f"%{self.name}: {self.type}"


class Node:
    """One op application: `outputs = op(inputs) {attrs}`; attrs are checked on creation."""

    __slots__ = ("op", "inputs", "attrs", "outputs")

    def __init__(self, op: str, inputs: Sequence[Value], attrs: Mapping[str, Any],
                 outputs: Sequence[Value]):
        self.op = op
        self.inputs = tuple(inputs)
        self.attrs = attrs if isinstance(attrs, Attrs) else get_op(op).check_attrs(attrs)
        self.outputs = tuple(outputs)

    @property
    def opdef(self):
        return get_op(self.op)

    @property
    def output(self) -> Value:
        if len(self.outputs) != 1:
            raise InvalidGraphError(f"op '{self.op}' has {len(self.outputs)} outputs, not one")
        return self.outputs[0]

    def __repr__(self) -> str:
        outs = ", ".join(f"%{v.name}" for v in self.outputs)
        ins = ", ".join(f"%{v.name}" for v in self.inputs)
        return f"{outs} = {self.op}({ins}) {self.attrs!r}"


def _at(value: Value, error: InvalidGraphError) -> InvalidGraphError:
    """Tag an error with the value it concerns, so a parser can point at its definition."""
    error.value_name = value.name
    return error


def _frozen(array: np.ndarray) -> np.ndarray:
    out = np.array(array, copy=True)
    out.setflags(write=False)
    return out


class Graph:
    """An immutable SSA graph. Construction validates it:

    unique value names; every used value defined; nodes sorted topologically (a cycle is an
    error naming its values); attributes valid; each node's declared output types equal to
    what its op infers; constants matching their declared types.
    """

    def __init__(self, name: str, inputs: Sequence[Value], outputs: Sequence[Value],
                 nodes: Iterable[Node], constants: Mapping[Value, np.ndarray] | None = None):
        self.name = name
        self.inputs = tuple(inputs)
        self.outputs = tuple(outputs)
        consts = dict(constants or {})
        self._check_constants(consts)
        self.constants: Mapping[Value, np.ndarray] = MappingProxyType(
            {v: _frozen(a) for v, a in consts.items()}
        )
        nodes = list(nodes)
        self._producer: dict[Value, Node | None] = {}
        self._by_name: dict[str, Value] = {}
        for v in (*self.inputs, *consts):
            self._define(v, None)
        for node in nodes:
            for v in node.outputs:
                self._define(v, node)
        self.nodes = tuple(self._toposort(nodes))
        for node in self.nodes:
            self._check_types(node)
        for v in self.outputs:
            if v not in self._producer:
                raise _at(v, InvalidGraphError(f"graph output %{v.name} is not defined"))
        if not self.outputs:
            raise InvalidGraphError(f"graph '{name}' has no outputs")

    # --- validation -----------------------------------------------------------------

    def _define(self, v: Value, node: Node | None) -> None:
        if v in self._producer or v.name in self._by_name:
            raise _at(v, InvalidGraphError(f"value %{v.name} is defined more than once"))
        self._producer[v] = node
        self._by_name[v.name] = v

    @staticmethod
    def _check_constants(consts: Mapping[Value, np.ndarray]) -> None:
        for v, a in consts.items():
            a = np.asarray(a)
            if TensorType(a.shape, a.dtype) != v.type:
                raise _at(v, ShapeError(
                    f"constant %{v.name} is declared {v.type} but holds {TensorType.of(a)}"
                ))

    def _toposort(self, nodes: list[Node]) -> list[Node]:
        for node in nodes:
            for v in node.inputs:
                if v not in self._producer:
                    raise _at(node.outputs[0], InvalidGraphError(
                        f"value %{v.name} is used by '{node.op}' (defining "
                        f"{', '.join('%' + o.name for o in node.outputs)}) but never defined"
                    ))
        pending = {id(n): sum(self._producer[v] is not None for v in n.inputs) for n in nodes}
        users: dict[int, list[Node]] = {}
        for n in nodes:
            for v in n.inputs:
                p = self._producer[v]
                if p is not None:
                    users.setdefault(id(p), []).append(n)
        position = {id(n): i for i, n in enumerate(nodes)}
        ready = [i for i, n in enumerate(nodes) if pending[id(n)] == 0]  # a heap of positions:
        order: list[Node] = []  # the first ready node in the given order comes next (stable)
        while ready:
            n = nodes[heapq.heappop(ready)]
            order.append(n)
            for u in users.get(id(n), ()):
                pending[id(u)] -= 1
                if pending[id(u)] == 0:
                    heapq.heappush(ready, position[id(u)])
        if len(order) != len(nodes):
            stuck = [n for n in nodes if pending[id(n)] > 0]
            names = ", ".join("%" + o.name for n in stuck for o in n.outputs)
            raise _at(stuck[0].outputs[0], InvalidGraphError(f"the graph has a cycle through {names}"))
        return order

    def _check_types(self, node: Node) -> None:
        try:
            inferred = node.opdef.infer_types([v.type for v in node.inputs], node.attrs)
        except InvalidGraphError as e:
            raise _at(node.outputs[0], e) from None
        if len(inferred) != len(node.outputs):
            raise _at(node.outputs[0], InvalidGraphError(
                f"op '{node.op}' produces {len(inferred)} outputs, "
                f"{len(node.outputs)} are bound ({', '.join('%' + o.name for o in node.outputs)})"
            ))
        for v, t in zip(node.outputs, inferred):
            if v.type != t:
                raise _at(v, ShapeError(
                    f"%{v.name} = {node.op}(...) is declared {v.type} but the op gives {t}"
                ))

    # --- queries --------------------------------------------------------------------

    def producer(self, v: Value) -> Node | None:
        """The node defining v, or None for inputs and constants."""
        return self._producer[v]

    def value(self, name: str) -> Value:
        try:
            return self._by_name[name]
        except KeyError:
            raise InvalidGraphError(f"graph '{self.name}' has no value %{name}") from None

    @property
    def values(self) -> tuple[Value, ...]:
        """Every value: inputs, constants, then node outputs in topological order."""
        return (*self.inputs, *self.constants, *(v for n in self.nodes for v in n.outputs))

    def users(self) -> dict[Value, list[Node]]:
        out: dict[Value, list[Node]] = {v: [] for v in self.values}
        for n in self.nodes:
            for v in n.inputs:
                if n not in out[v]:
                    out[v].append(n)
        return out

    # --- equality -------------------------------------------------------------------

    def structure(self) -> tuple:
        """A hashable description of everything but constant data, used by __eq__."""
        names = lambda vs: tuple((v.name, v.type) for v in vs)  # noqa: E731
        return (
            self.name,
            names(self.inputs),
            names(self.constants),
            tuple((n.op, names(n.inputs), n.attrs, names(n.outputs)) for n in self.nodes),
            names(self.outputs),
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Graph) or self.structure() != other.structure():
            return False
        theirs = {v.name: a for v, a in other.constants.items()}
        return all(
            a.dtype == theirs[v.name].dtype and np.array_equal(a, theirs[v.name], equal_nan=True)
            for v, a in self.constants.items()
        )

    def __hash__(self) -> int:
        return hash(self.structure())

    def __reduce__(self):
        # rebuilt (and revalidated) from its parts; MappingProxyType itself does not pickle
        return (Graph, (self.name, self.inputs, self.outputs, self.nodes, dict(self.constants)))

    def __repr__(self) -> str:
        return f"<Graph {self.name}: {len(self.inputs)} inputs, {len(self.nodes)} nodes>"

    def __str__(self) -> str:
        return repr(self) if _text_printer is None else _text_printer(self)

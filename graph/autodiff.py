"""Reverse-mode autodiff (the optional `graph/autodiff` pass): a scalar loss and the values to
differentiate become one graph of the loss and its gradients.

The backward pass is built from the VJP rules registered next to each op family (`defvjp` in
`graph/ops/<family>.py`) as ordinary graph ops, so the result prints, parses, runs in the
reference interpreter and expands like any model; `grad` of a graph that already holds gradient
ops is just `grad` of a graph.

Naming: the gradient of a value `%v` is `%grad.v`; the temporaries of the rule of a node `%n`
are `%grad.n.<hint>`. When the graph already has values named `grad.*`, the prefix becomes
`grad2`, `grad3`, ...
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

from akg.errors import AkgError, InvalidGraphError, ShapeError
from akg.graph.builder import GraphBuilder
from akg.graph.ir import Graph, Node, Value
from akg.graph.ops import VJP_RULES
from akg.graph.types import TensorType, is_float

# --- the emitter VJP rules write through --------------------------------------------------------


class VjpEmitter:
    """Emits the ops of one node's VJP rule into the gradient graph.

    `op` and `const` add values named `<prefix>.<node>.<hint>`; `out`/`outs` are the node's
    forward outputs (rules may reuse them: `exp`'s gradient is `g * out`)."""

    def __init__(self, builder: GraphBuilder, names: dict[Value, str], base: str,
                 outs: tuple[Value, ...]):
        self._b, self._names, self._base = builder, names, base
        self.outs = outs

    @property
    def out(self) -> Value:
        (v,) = self.outs
        return v

    def _hint(self, v: Value, hint: str) -> Value:
        self._names[v] = f"{self._base}.{hint}"
        return v

    def op(self, op: str, *inputs: Value | float, hint: str | None = None, **attrs):
        tensors = [v for v in inputs if isinstance(v, Value) and v.dtype != "bool"]
        dtype = tensors[0].dtype if tensors else "float32"
        ins = [v if isinstance(v, Value) else self.const(v, dtype=dtype) for v in inputs]
        out = self._b.op(op, *ins, **attrs)
        for v in out if isinstance(out, tuple) else (out,):
            self._hint(v, hint or op)
        return out

    def const(self, value, like: Value | None = None, dtype: str | None = None) -> Value:
        """A constant of `like`'s dtype (or `dtype`; float32 by default)."""
        if dtype is None:
            dtype = like.dtype if like is not None else getattr(value, "dtype", "float32")
        return self._hint(self._b.const(np.asarray(value, dtype=dtype)), "c")

    def zeros(self, t: TensorType) -> Value:
        zero = self.const(0, dtype=t.dtype)
        return zero if t.shape == () else self.op("broadcast_to", zero, shape=list(t.shape), hint="zeros")

    def unbroadcast(self, g: Value, shape: Sequence[int]) -> Value:
        """Sum a cotangent of a broadcast result back to an operand of `shape`."""
        shape = tuple(shape)
        if g.shape == shape:
            return g
        lead = g.type.rank - len(shape)
        axes = [*range(lead), *(lead + i for i, d in enumerate(shape) if d == 1 and g.shape[lead + i] != 1)]
        if axes:
            g = self.op("sum", g, axes=axes, hint="unbroadcast")
        return g if g.shape == shape else self.op("reshape", g, shape=list(shape), hint="unbroadcast")

    def broadcast_back(self, g: Value, axes: Iterable[int], shape: Sequence[int]) -> Value:
        """The inverse of a reduction over `axes` of a tensor of `shape`: g (reduced, with or
        without kept dims) spread back over the reduced axes."""
        axes = set(axes)
        kept = [1 if i in axes else d for i, d in enumerate(shape)]
        if list(g.shape) != kept:
            g = self.op("reshape", g, shape=kept, hint="keepdims")
        return g if tuple(kept) == tuple(shape) else self.op("broadcast_to", g, shape=list(shape))


# --- grad ---------------------------------------------------------------------------------------


def _resolve(graph: Graph, v: str | Value, role: str) -> Value:
    if isinstance(v, Value):
        if graph.value(v.name) is not v:
            raise InvalidGraphError(f"the {role} %{v.name} is not a value of graph '{graph.name}'")
        return v
    try:
        return graph.value(v)
    except InvalidGraphError:
        raise InvalidGraphError(f"{role}: graph '{graph.name}' has no value %{v}") from None


def _prefix(graph: Graph) -> str:
    taken = {v.name.split(".", 1)[0] for v in graph.values if "." in v.name}
    prefix, k = "grad", 1
    while prefix in taken:
        k += 1
        prefix = f"grad{k}"
    return prefix


def _active(graph: Graph, wrt: Iterable[Value]) -> set[Value]:
    """Float values that depend on `wrt` through differentiable ops."""
    active = set(wrt)
    for node in graph.nodes:
        if node.opdef.differentiable and any(v in active for v in node.inputs):
            active.update(v for v in node.outputs if is_float(v.dtype))
    return active


def trainable_params(graph: Graph, loss: str | Value | None = None) -> list[Value]:
    """The constants a training step updates: floating-point constants with at least one axis
    that the loss depends on through differentiable ops (all outputs when loss is None), less
    batch-norm running statistics (inputs 3 and 4 of `batch_norm`). Scalar constants (literals
    such as an attention scale) stay constants."""
    targets = set(graph.outputs) if loss is None else {_resolve(graph, loss, "loss")}
    needed = set(targets)
    for node in reversed(graph.nodes):
        if any(v in needed for v in node.outputs) and node.opdef.differentiable:
            needed.update(node.inputs)
    stats = {n.inputs[i] for n in graph.nodes if n.op == "batch_norm" for i in (3, 4)}
    return [v for v in graph.constants
            if is_float(v.dtype) and v.type.rank > 0 and v in needed and v not in stats]


def grad(graph: Graph, loss: str | Value, wrt: Sequence[str | Value] | None = None) -> Graph:
    """A graph with the inputs of `graph` whose outputs are the scalar `loss` and then the
    gradient of the loss with respect to each of `wrt` (names or values; default:
    `trainable_params`), named `grad.<name>`. Only the forward values the backward pass needs
    are kept. Non-differentiable ops pass no gradient; a differentiable op without a rule
    raises MissingRuleError."""
    loss_v = _resolve(graph, loss, "loss")
    if loss_v.shape != () or not is_float(loss_v.dtype):
        raise ShapeError(f"the loss %{loss_v.name} must be a floating-point scalar, it is {loss_v.type}")
    targets = trainable_params(graph, loss_v) if wrt is None else [_resolve(graph, w, "wrt") for w in wrt]
    seen: set[Value] = set()
    for w in targets:
        if not is_float(w.dtype):
            raise ShapeError(f"cannot differentiate with respect to %{w.name}: {w.type} is not floating-point")
        if w in seen:
            raise InvalidGraphError(f"wrt names %{w.name} twice")
        seen.add(w)
    prefix = _prefix(graph)
    b = _builder_over(graph)
    names: dict[Value, str] = {}  # cotangents: grad.<value>
    hints: dict[Value, str] = {}  # rule temporaries: grad.<node>.<hint>
    active = _active(graph, targets)

    cts: dict[Value, list[Value]] = {}
    seed = b.const(np.ones((), dtype=loss_v.dtype))
    names[seed] = f"{prefix}.{loss_v.name}"
    cts[loss_v] = [seed]

    def cotangent(v: Value) -> Value | None:
        parts = cts.get(v)
        if not parts:
            return None
        total = parts[0]
        for part in parts[1:]:
            total = b.op("add", total, part)
        cts[v] = [total]
        names.setdefault(total, f"{prefix}.{v.name}")
        return total

    for node in reversed(graph.nodes):
        if not node.opdef.differentiable or not any(v in cts for v in node.outputs):
            continue
        if not any(v in active for v in node.inputs):
            continue
        e = VjpEmitter(b, hints, f"{prefix}.{node.outputs[0].name}", node.outputs)
        gs = [cotangent(v) or e.zeros(v.type) for v in node.outputs]
        rule = VJP_RULES.get(node.op)
        results = rule(e, gs[0] if len(gs) == 1 else tuple(gs), *node.inputs, **node.attrs)
        if len(results) != len(node.inputs):
            raise AkgError(f"internal: the VJP rule of '{node.op}' gave {len(results)} cotangents "
                           f"for {len(node.inputs)} inputs")
        for v, r in zip(node.inputs, results):
            if r is None or v not in active:
                continue
            if r.type != v.type:
                raise AkgError(f"internal: the VJP rule of '{node.op}' gave {r.type} for %{v.name}: {v.type}")
            cts.setdefault(v, []).append(r)

    outputs = [loss_v]
    forward = set(graph.values)
    claimed: set[Value] = set()
    for w in targets:
        g = cotangent(w)
        if g is None:
            g = VjpEmitter(b, hints, f"{prefix}.{w.name}", ()).zeros(w.type)
        elif g in claimed or g in forward:
            g = b.op("reshape", g, shape=list(w.shape))  # an output of its own
        claimed.add(g)
        names[g] = f"{prefix}.{w.name}"
        outputs.append(g)
    b.output(*outputs)
    return rebuilt(b.build(), names, hints)


def value_and_grad(graph: Graph, loss: str | Value, wrt: Sequence[str | Value] | None = None
                   ) -> Callable[[Mapping[str, np.ndarray]], tuple[np.ndarray, dict[str, np.ndarray]]]:
    """A function of the graph's inputs (by name) returning the loss and {wrt name: gradient},
    evaluated by the reference interpreter on the graph `grad` builds."""
    from akg.graph.interpreter import evaluate

    g = grad(graph, loss, wrt)
    names = [v.name for v in (trainable_params(graph, loss) if wrt is None else
                              [_resolve(graph, w, "wrt") for w in wrt])]

    def run(inputs: Mapping[str, np.ndarray]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        value, *grads = evaluate(g, inputs)
        return value, dict(zip(names, grads))

    return run


# --- graph plumbing -----------------------------------------------------------------------------


def _builder_over(graph: Graph) -> GraphBuilder:
    """A builder already holding `graph`'s inputs, constants and nodes (the same values)."""
    b = GraphBuilder(graph.name)
    b._inputs = list(graph.inputs)
    b._constants = dict(graph.constants)
    b._nodes = list(graph.nodes)
    b._names = {v.name for v in graph.values}
    return b


def rebuilt(graph: Graph, names: Mapping[Value, str] = {}, hints: Mapping[Value, str] = {}) -> Graph:
    """`graph` less the nodes and constants its outputs do not need (inputs stay), with values
    renamed by `names`, then by `hints`; a clashing new name gets a numeric suffix (hints
    yield to names)."""
    live = set(graph.outputs)
    keep: list[Node] = []
    for node in reversed(graph.nodes):
        if any(v in live for v in node.outputs):
            keep.append(node)
            live.update(node.inputs)
    keep.reverse()
    used = [*graph.inputs, *(v for v in graph.constants if v in live), *(v for n in keep for v in n.outputs)]
    taken = {v.name for v in used if v not in names and v not in hints}
    final: dict[Value, str] = {}
    renamed = [(v, names[v]) for v in used if v in names]
    renamed += [(v, hints[v]) for v in used if v in hints and v not in names]
    for v, want in renamed:
        name, k = want, 1
        while name in taken:
            name, k = f"{want}{k}", k + 1
        taken.add(name)
        final[v] = name
    new = {v: Value(final.get(v, v.name), v.type) for v in used}
    nodes = [Node(n.op, [new[v] for v in n.inputs], n.attrs, [new[v] for v in n.outputs]) for n in keep]
    return Graph(graph.name, [new[v] for v in graph.inputs], [new[v] for v in graph.outputs], nodes,
                 {new[v]: a for v, a in graph.constants.items() if v in live})



"""Complex decomposition: every complex64 value of a graph becomes a (real, imaginary) pair of
float32 values, and the ops on them float arithmetic, because TVM's TIR has no complex dtype.

The graph IR and the reference interpreter keep complex64 (NumPy evaluates it natively); this
pass runs where a graph is about to become kernels (the "complex" step of `PASSES`, and
`lower_graph` for a kernel built on its own). At the graph's edges a complex64 tensor of
shape S is a float32 tensor of shape S + (2,) with the same name: real and imaginary parts
interleaved, which is exactly NumPy's memory layout of complex64, so a caller's complex64 array
goes in as `a.view(np.float32).reshape(S + (2,))` without a copy and a result comes back as
`out.view(np.complex64).reshape(S)` (`akg.kernel.Kernel`, `akg.runtime.CompiledModel`).

Rules (`COMPLEX_RULES`, keyed by op): complex / real / imag pick or pair the parts; add, sub,
neg, where, sum and the layout ops apply to each part; mul is (ac - bd) + (ad + bc)i; div
multiplies by the conjugate over c^2 + d^2; abs is sqrt(re^2 + im^2); cast between complex and
real keeps the real part. Anything else on a complex value is an UnsupportedOpError.
"""

from __future__ import annotations

from typing import Any, Callable, Union

import numpy as np

from akg.errors import UnsupportedOpError
from akg.graph.builder import GraphBuilder
from akg.graph.ir import Graph, Node, Value
from akg.graph.ops import LAYOUT, get_op
from akg.graph.types import COMPLEX_PART, is_complex
from akg.registry import Registry

Pair = tuple[Value, Value]
Part = Union[Value, Pair]  # a real value, or the (re, im) pair of a complex one


def has_complex(graph: Graph) -> bool:
    return any(is_complex(v.dtype) for v in graph.values)


def complex_io(graph: Graph) -> frozenset[str]:
    """Names of the graph's inputs and outputs that are complex (float32 pairs in a kernel)."""
    return frozenset(v.name for v in (*graph.inputs, *graph.outputs) if is_complex(v.dtype))


class _Rewriter:
    """Emits the float ops of the decomposed graph, naming helpers `<value>.<what>`."""

    def __init__(self, graph: Graph):
        self.b = GraphBuilder.rewriting(graph)

    def name(self, base: str) -> str:
        return self.b.unique(base)

    def op(self, op: str, *inputs: Value, hint: str, **attrs: Any) -> Value:
        return self.b.op(op, *inputs, name=self.name(hint), **attrs)

    def const(self, value: float, dtype: str, hint: str) -> Value:
        return self.b.const(np.asarray(value, dtype), name=self.name(hint))


Rule = Callable[[_Rewriter, Node, list], "list[Part]"]
COMPLEX_RULES: Registry[Rule] = Registry("complex decomposition rule")


def _rule(*ops: str):
    def wrap(fn: Rule) -> Rule:
        for op in ops:
            COMPLEX_RULES.register(op, fn)
        return fn

    return wrap


def _pair(node: Node, x: Part) -> Pair:
    if not isinstance(x, tuple):
        raise UnsupportedOpError(node.op, reason=f"it mixes complex and real operands ({x.type}); "
                                                 "cast the real one to complex first")
    return x


@_rule("complex")
def _complex(r: _Rewriter, node: Node, ins: list) -> list:
    re, im = ins
    out = node.outputs[0]
    if re.shape != out.shape:
        re = r.op("broadcast_to", re, hint=f"{out.name}.re", shape=out.shape)
    if im.shape != out.shape:
        im = r.op("broadcast_to", im, hint=f"{out.name}.im", shape=out.shape)
    return [(re, im)]


@_rule("real")
def _real(r: _Rewriter, node: Node, ins: list) -> list:
    return [_pair(node, ins[0])[0]]


@_rule("imag")
def _imag(r: _Rewriter, node: Node, ins: list) -> list:
    return [_pair(node, ins[0])[1]]


@_rule("add", "sub")
def _add_sub(r: _Rewriter, node: Node, ins: list) -> list:
    (a, b), (c, d) = (_pair(node, x) for x in ins)
    n = node.outputs[0].name
    return [(r.op(node.op, a, c, hint=f"{n}.re"), r.op(node.op, b, d, hint=f"{n}.im"))]


@_rule("neg")
def _neg(r: _Rewriter, node: Node, ins: list) -> list:
    a, b = _pair(node, ins[0])
    n = node.outputs[0].name
    return [(r.op("neg", a, hint=f"{n}.re"), r.op("neg", b, hint=f"{n}.im"))]


@_rule("mul")
def _mul(r: _Rewriter, node: Node, ins: list) -> list:
    (a, b), (c, d) = (_pair(node, x) for x in ins)
    n = node.outputs[0].name
    re = r.op("sub", r.op("mul", a, c, hint=f"{n}.ac"), r.op("mul", b, d, hint=f"{n}.bd"), hint=f"{n}.re")
    im = r.op("add", r.op("mul", a, d, hint=f"{n}.ad"), r.op("mul", b, c, hint=f"{n}.bc"), hint=f"{n}.im")
    return [(re, im)]


@_rule("div")
def _div(r: _Rewriter, node: Node, ins: list) -> list:
    """(a + bi) / (c + di) = ((ac + bd) + (bc - ad)i) / (c^2 + d^2), as NumPy's textbook
    formula for complex64 would be without its scaling (which only matters near overflow)."""
    (a, b), (c, d) = (_pair(node, x) for x in ins)
    n = node.outputs[0].name
    den = r.op("add", r.op("mul", c, c, hint=f"{n}.cc"), r.op("mul", d, d, hint=f"{n}.dd"), hint=f"{n}.den")
    re_num = r.op("add", r.op("mul", a, c, hint=f"{n}.ac"), r.op("mul", b, d, hint=f"{n}.bd"), hint=f"{n}.re_num")
    im_num = r.op("sub", r.op("mul", b, c, hint=f"{n}.bc"), r.op("mul", a, d, hint=f"{n}.ad"), hint=f"{n}.im_num")
    return [(r.op("div", re_num, den, hint=f"{n}.re"), r.op("div", im_num, den, hint=f"{n}.im"))]


@_rule("abs")
def _abs(r: _Rewriter, node: Node, ins: list) -> list:
    a, b = _pair(node, ins[0])
    n = node.outputs[0].name
    sq = r.op("add", r.op("mul", a, a, hint=f"{n}.aa"), r.op("mul", b, b, hint=f"{n}.bb"), hint=f"{n}.sq")
    return [r.op("sqrt", sq, hint=f"{n}.abs")]


@_rule("where")
def _where(r: _Rewriter, node: Node, ins: list) -> list:
    cond, x, y = ins
    (a, b), (c, d) = _pair(node, x), _pair(node, y)
    n = node.outputs[0].name
    return [(r.op("where", cond, a, c, hint=f"{n}.re"), r.op("where", cond, b, d, hint=f"{n}.im"))]


@_rule("sum")
def _sum(r: _Rewriter, node: Node, ins: list) -> list:
    a, b = _pair(node, ins[0])
    n = node.outputs[0].name
    return [(r.op("sum", a, hint=f"{n}.re", **node.attrs), r.op("sum", b, hint=f"{n}.im", **node.attrs))]


@_rule("cast")
def _cast(r: _Rewriter, node: Node, ins: list) -> list:
    x, out = ins[0], node.outputs[0]
    n = out.name
    if isinstance(x, tuple):
        if is_complex(out.dtype):  # complex64 -> complex64
            return [x]
        re = x[0]  # complex -> real keeps the real part (as NumPy does)
        return [re if re.dtype == out.dtype else r.op("cast", re, hint=f"{n}.re", to=out.dtype)]
    part = COMPLEX_PART[out.dtype]
    re = x if x.dtype == part else r.op("cast", x, hint=f"{n}.re", to=part)
    zero = r.const(0.0, part, f"{n}.zero")
    return [(re, r.op("broadcast_to", zero, hint=f"{n}.im", shape=out.shape) if out.shape else zero)]


def _layout(r: _Rewriter, node: Node, ins: list) -> list:
    """A layout op moves elements: the same move on each part (pad fills the imaginary part
    with 0, concat pairs its inputs)."""
    n = node.outputs[0].name
    if node.op == "concat":
        pairs = [_pair(node, x) for x in ins]
        return [tuple(r.op("concat", *(p[k] for p in pairs), hint=f"{n}.{w}", **node.attrs)
                      for k, w in ((0, "re"), (1, "im")))]
    if len(node.outputs) != 1 or any(isinstance(x, tuple) for x in ins[1:]):
        raise UnsupportedOpError(node.op, reason="on complex64 values it is not decomposed")
    a, b = _pair(node, ins[0])
    rest = ins[1:]
    im_attrs = dict(node.attrs)
    if node.op == "pad":
        im_attrs["value"] = 0.0
    return [(r.op(node.op, a, *rest, hint=f"{n}.re", **node.attrs),
             r.op(node.op, b, *rest, hint=f"{n}.im", **im_attrs))]


def decompose_complex(graph: Graph) -> Graph:
    """The same computation with every complex64 value as two float32 values; complex inputs
    and outputs become float32 tensors with a trailing axis of 2 (re, im), same names."""
    if not has_complex(graph):
        return graph
    r = _Rewriter(graph)
    b = r.b
    env: dict[Value, Part] = {}
    for v in graph.inputs:  # in their order, complex or not
        b.release(v.name)
        if not is_complex(v.dtype):
            env[v] = b.input(v.name, v.shape, v.dtype)
            continue
        part, rank = COMPLEX_PART[v.dtype], len(v.shape)
        x = b.input(v.name, (*v.shape, 2), part)
        re, im = (r.op("reshape", r.op("slice", x, hint=f"{v.name}.{w}_slice", begin=(0,) * rank + (k,),
                                       end=(*v.shape, k + 1)), hint=f"{v.name}.{w}", shape=v.shape)
                  for k, w in ((0, "re"), (1, "im")))
        env[v] = (re, im)
    for v, a in graph.constants.items():
        if not is_complex(v.dtype):
            b.release(v.name)
            env[v] = b.const(a, name=v.name)
            continue
        part = COMPLEX_PART[v.dtype]
        env[v] = (b.const(np.ascontiguousarray(a.real, part), name=r.name(f"{v.name}.re")),
                  b.const(np.ascontiguousarray(a.imag, part), name=r.name(f"{v.name}.im")))
    for node in graph.nodes:
        ins = [env[v] for v in node.inputs]
        if not any(is_complex(v.dtype) for v in (*node.inputs, *node.outputs)):
            outs = b.copy_node(node, ins)
        elif node.op in COMPLEX_RULES:
            outs = tuple(COMPLEX_RULES.get(node.op)(r, node, ins))
        elif get_op(node.op).kind == LAYOUT:
            outs = tuple(_layout(r, node, ins))
        else:
            raise UnsupportedOpError(node.op, reason="on complex64 values it has no decomposition "
                                                     f"(known: {', '.join(sorted(COMPLEX_RULES))}, layout ops)")
        for old, new in zip(node.outputs, outs):
            env[old] = new
    outputs: list[Value] = []
    joined: dict[Value, Value] = {}
    for v in graph.outputs:
        x = env[v]
        if v in joined:
            outputs.append(joined[v])
            continue
        b.release(v.name)
        if isinstance(x, tuple):
            col = [r.op("reshape", p, hint=f"{v.name}.{w}_col", shape=(*v.shape, 1))
                   for p, w in zip(x, ("re", "im"))]
            out = b.op("concat", *col, name=v.name, axis=len(v.shape))
        elif x.name != v.name:
            out = b.op("reshape", x, name=v.name, shape=x.shape)
        else:
            out = x
        joined[v] = out
        outputs.append(out)
    b.output(*outputs)
    return b.build()

"""One-read statistics (part of a kernel's lowering, `lower_graph`, on targets with
`Target.one_read_moments`): a mean and a centred second moment of the same values over the
same axes,

    m = mean(x, axes, keepdims=True);  c = x - m;  v = mean(c * c, axes)

(a layer norm's or a batch norm's statistics, `variance`, the decomposed layer norms of ONNX
and MindIR files) read `x` twice: once for the mean, once more for the variance around it.
Both come from one read as sums of `x` shifted by the mean k of its first few values along
the axes (`shift_window` of them along the innermost one):

    d = x - k;  s = mean(d);  q = mean(d * d);  m = k + s;  v = q - s * s   (at least 0)

The shift keeps the difference q - s * s away from the cancellation that the textbook
E[x^2] - E[x]^2 suffers when the values sit far from zero (float32 loses all digits of the
variance of 1000 + N(0, 1) that way); its error grows with (m - k)^2 / v, how far the shift
lies from the mean in standard deviations (the "shifted data" algorithm), which a shift made of
w of the n values bounds by n / w, whatever the data. The two
sums reduce side by side in one loop (sibling reductions), so a row's statistics cost one pass
over it instead of two: a 4096 x 1024 float32 layer norm reads each row once for its statistics
and once (from L1) for its output.

Only floating-point statistics over at least two elements are rewritten; the output ``m`` keeps
its value up to rounding, ``v`` up to the rounding of the shifted sums, NaN and infinities
propagate as before (a negative rounding residue is cleared by a select, which lets NaN
through).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from akg.graph.ir import Graph, Node, Value
from akg.graph.simplify import _Rewriter, dce
from akg.graph.types import TensorType, is_float, normalize_axes


# The error of the variance grows with (m - k)^2 / v, which is at most n / w for a shift k that
# averages w of the n values (at most n for one value). The shift averages the fewest values
# (a power of two) that keep n / w at most SHIFT_BOUND: a 1024-wide row's first 16, a 64-wide
# row's first. Its sum is a chain of vector steps that every row's loop waits for, so not more
# (BERT-base's 128 x 768 layer norm, noisy host: 6.7-7.6 us with one value, 6.9-11.7 us with
# 16, 7.6-11.1 us with two reads; docs/performance.md).
SHIFT_BOUND = 64


def shift_window(n: int, extent: int) -> int:
    """How many values of the innermost reduced axis (of `extent`) the shift of `n` reduced
    values averages."""
    return min(extent, 1 << max(0, math.ceil(n / SHIFT_BOUND) - 1).bit_length())


@dataclass(frozen=True)
class _Moments:
    """One match: `mean` (keepdims) and `var` (the mean of the centred square) of `x`."""

    x: Value
    axes: tuple[int, ...]
    mean: Node
    var: Node


def _axes(node: Node, rank: int) -> tuple[int, ...]:
    return tuple(sorted(normalize_axes(node.attrs["axes"], rank)))


def find_moments(graph: Graph) -> list[_Moments]:
    """The (mean, centred second moment) pairs of `graph` that one read can compute."""
    uses = graph.users()
    found: list[_Moments] = []
    for node in graph.nodes:
        if node.op != "mean" or not node.attrs["keepdims"]:
            continue
        x, m = node.inputs[0], node.outputs[0]
        if not is_float(x.dtype) or x.dtype == "float16":
            continue
        axes = _axes(node, x.type.rank)
        if math.prod(x.shape[a] for a in axes) < 2:
            continue
        for centred in uses.get(m, ()):
            if centred.op != "sub" or centred.inputs != (x, m) or centred.outputs[0].type != x.type:
                continue
            c = centred.outputs[0]
            squares = [u for u in uses.get(c, ()) if u.op == "mul" and u.inputs == (c, c)]
            var = next((u for sq in squares for u in uses.get(sq.outputs[0], ())
                        if u.op == "mean" and _axes(u, x.type.rank) == axes), None)
            if var is not None:
                found.append(_Moments(x, axes, node, var))
                break
    return found


def one_read_moments(graph: Graph) -> Graph:
    """`graph` with each mean and centred second moment of one tensor computed from one read
    (module docstring); the graph unchanged where there is none."""
    matches = {id(m.mean): m for m in find_moments(graph)}
    if not matches:
        return graph
    rw = _Rewriter(graph)
    replaced: dict[int, Value] = {}
    for node in rw.walk():
        match = matches.get(id(node))
        if match is not None:
            mean, var = _emit(rw, match)
            rw.replace(node.outputs[0], mean)
            replaced[id(match.var)] = var
        elif id(node) in replaced:
            rw.replace(node.outputs[0], replaced[id(node)])
        else:
            rw.keep(node)
    return dce(rw.finish("one_read_moments"))


def _emit(rw: _Rewriter, match: _Moments) -> tuple[Value, Value]:
    """The nodes of the one-read statistics of `match`; its new mean and variance values."""
    x, axes = match.x, match.axes
    dtype, rank = x.dtype, x.type.rank
    kept = tuple(1 if i in axes else n for i, n in enumerate(x.shape))
    base = match.mean.outputs[0].name

    def value(suffix: str, shape: tuple[int, ...], dt: str = dtype) -> Value:
        return Value(rw.fresh(f"{base}.{suffix}"), TensorType(shape, dt))

    def const(suffix: str, number: float) -> Value:
        v = value(suffix, ())
        rw.constants[v] = np.asarray(number, dtype=dtype)
        return v

    # the shift: the mean of the first few values along the innermost reduced axis
    last = axes[-1]
    window = shift_window(math.prod(x.shape[a] for a in axes), x.shape[last])
    end = [window if i == last else n for i, n in enumerate(kept)]
    first = value("shift_window", tuple(end))
    rw.emit("slice", [x], {"begin": [0] * rank, "end": end}, [first])
    if window > 1:
        shift = value("shift", kept)
        rw.emit("mean", [first], {"axes": list(axes), "keepdims": True}, [shift])
    else:
        shift = first
    d = value("shifted", x.shape)
    rw.emit("sub", [x, shift], {}, [d])
    s = value("shifted_mean", kept)
    rw.emit("mean", [d], {"axes": list(axes), "keepdims": True}, [s])
    d2 = value("shifted_sq", x.shape)
    rw.emit("mul", [d, d], {}, [d2])
    out = match.var.outputs[0]
    q = value("shifted_sq_mean", out.shape)
    rw.emit("mean", [d2], {"axes": list(axes), "keepdims": match.var.attrs["keepdims"]}, [q])
    mean = value("one_read", kept)
    rw.emit("add", [shift, s], {}, [mean])
    s2 = value("shifted_mean_sq", kept)
    rw.emit("mul", [s, s], {}, [s2])
    if s2.shape != out.shape:
        flat = value("shifted_mean_sq_flat", out.shape)
        rw.emit("reshape", [s2], {"shape": list(out.shape)}, [flat])
        s2 = flat
    diff = value("var_residue", out.shape)
    rw.emit("sub", [q, s2], {}, [diff])
    negative = value("var_negative", out.shape, "bool")
    zero = const("zero", 0.0)
    rw.emit("less", [diff, zero], {}, [negative])
    var = value("var_one_read", out.shape)
    rw.emit("where", [negative, zero, diff], {}, [var])
    rw.changes += 1
    return mean, var

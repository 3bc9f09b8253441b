"""ONNX's reductions and contractions in the ONNX op table (`ONNX_OPS`): the Reduce* family,
ArgMax / ArgMin, CumSum / CumProd (a masked reduction), MatMul and Gemm."""

from __future__ import annotations

from typing import Callable

import numpy as np

from akg.graph.io.onnx_layout import _axes
from akg.graph.io.onnx_ops import ONNX_OPS, OnnxOpContext as Ctx, _abs
from akg.graph.ir import Value
from akg.graph.types import is_float


# --- reductions -----------------------------------------------------------------------------------


def _reduce(c: Ctx, x: Value, fn: Callable[[Value, list[int] | None, bool], Value]) -> Value:
    axes = _axes(c, 1)
    keep = bool(c.int_("keepdims", 1))
    if not axes:
        if c.int_("noop_with_empty_axes", 0):
            return c.make("reshape", x, shape=x.shape)
        axes = None
    if axes is not None:
        axes = sorted({c.axis(a, len(x.shape), "axes") for a in axes})
    return fn(x, axes, keep)


def _register_reduce(name: str, ops: str, fn: Callable[[Ctx, Value, list[int] | None, bool], Value]) -> None:
    ONNX_OPS.add(name, ops, lambda c: _reduce(c, c.v(0), lambda x, axes, keep: fn(c, x, axes, keep)))


for _onnx, _akg in {"ReduceSum": "sum", "ReduceMean": "mean", "ReduceProd": "prod"}.items():
    _register_reduce(_onnx, _akg, lambda c, x, axes, keep, _akg=_akg: c.make(_akg, x, axes=axes, keepdims=keep))


def _reduced_shape(x: Value, axes: list[int] | None, keep: bool) -> list[int]:
    axes = range(len(x.shape)) if axes is None else axes
    return [1 if i in axes else d for i, d in enumerate(x.shape) if keep or i not in axes]


def _extreme(akg_op: str):
    """ReduceMax / ReduceMin: bools as any / all (through int8); over an empty axis, the
    reduction's identity (-inf / +inf, the type's extremes for integers, False / True)."""
    def fn(c: Ctx, x: Value, axes: list[int] | None, keep: bool) -> Value:
        if x.type.size == 0:
            if x.dtype == "bool":
                fill = akg_op == "min"
            elif is_float(x.dtype):
                fill = -np.inf if akg_op == "max" else np.inf
            else:
                fill = np.iinfo(x.dtype).min if akg_op == "max" else np.iinfo(x.dtype).max
            shape = _reduced_shape(x, axes, keep)
            return c.imp.const(np.full(shape, fill, dtype=x.dtype), c.name)
        if x.dtype == "bool":
            wide = c.make(akg_op, c.make("cast", x, to="int8", what="int8"), axes=axes, keepdims=keep, what="int8_red")
            return c.make("cast", wide, to="bool")
        return c.make(akg_op, x, axes=axes, keepdims=keep)
    return fn


_register_reduce("ReduceMax", "max (bool: through int8)", _extreme("max"))
_register_reduce("ReduceMin", "min (bool: through int8)", _extreme("min"))


_register_reduce("ReduceL1", "sum, abs", lambda c, x, axes, keep: c.make(
    "sum", c.make("abs", x, what="abs") if is_float(x.dtype) else _abs(c.with_args([x])), axes=axes, keepdims=keep))
_register_reduce("ReduceL2", "sqrt, sum, mul", lambda c, x, axes, keep: _cast_back(c, x, c.make(
    "sqrt", c.make("sum", c.make("mul", _float(c, x), _float(c, x), what="sq"), axes=axes, keepdims=keep,
                 what="sum"))))
_register_reduce("ReduceSumSquare", "sum, mul", lambda c, x, axes, keep: c.make(
    "sum", c.make("mul", x, x, what="sq"), axes=axes, keepdims=keep))
_register_reduce("ReduceLogSum", "log, sum", lambda c, x, axes, keep: c.make(
    "log", c.make("sum", x, axes=axes, keepdims=keep, what="sum")))


def _float(c: Ctx, x: Value) -> Value:
    return x if is_float(x.dtype) else c.make("cast", x, to="float32", what="float")


def _cast_back(c: Ctx, x: Value, y: Value) -> Value:
    return y if y.dtype == x.dtype else c.make("cast", y, to=x.dtype)


@ONNX_OPS.register_op("ReduceLogSumExp", "max, exp, sum, log")
def _reduce_log_sum_exp(c: Ctx):
    def fn(x, axes, keep):
        if x.type.size == 0:  # the log of an empty sum
            return c.imp.const(np.full(_reduced_shape(x, axes, keep), -np.inf, dtype=x.dtype), c.name)
        m = c.make("max", x, axes=axes, keepdims=True, what="max")
        s = c.make("sum", c.make("exp", c.make("sub", x, m, what="shifted"), what="exp"), axes=axes, keepdims=True,
                 what="sum")
        out = c.make("add", c.make("log", s, what="log"), m, what="lse")
        return out if keep else c.make("reshape", out, shape=[d for i, d in enumerate(out.shape)
                                                             if i not in (axes or range(len(x.shape)))])
    return _reduce(c, c.v(0), fn)


def reverse(c: Ctx, x: Value, axis: int, what: str) -> Value:
    """x with `axis` in reverse order (a gather by constant indices)."""
    index = c.const(np.arange(x.shape[axis] - 1, -1, -1, dtype=np.int64), "int64", f"{what}_index")
    return c.make("gather", x, index, axis=axis, what=what)


def _arg(akg_op: str):
    def convert(c: Ctx):
        x = c.v(0)
        axis = c.axis(c.int_("axis", 0), len(x.shape))
        keep = bool(c.int_("keepdims", 1))
        if not c.int_("select_last_index", 0):
            return c.make("cast", c.make(akg_op, x, axis=axis, keepdims=keep, what="index"), to="int64")
        # the last extreme: the first one of the reversed axis, counted from the end
        first = c.make(akg_op, reverse(c, x, axis, "reversed"), axis=axis, keepdims=keep, what="index")
        first = c.make("cast", first, to="int64", what="index64")
        return c.make("sub", c.scalar(x.shape[axis] - 1, "int64", "last"), first)
    return convert


ONNX_OPS.add("ArgMax", "argmax, cast", _arg("argmax"))
ONNX_OPS.add("ArgMin", "argmin, cast", _arg("argmin"))


# --- linear algebra -------------------------------------------------------------------------------


def matmul(c: Ctx, a: Value, b: Value) -> Value:
    """NumPy's matmul: 1-D operands become a row / a column, batch axes broadcast."""
    ra, rb = len(a.shape), len(b.shape)
    if ra == 0 or rb == 0:
        raise c.fail(f"MatMul needs tensors, got {a.type} and {b.type}")
    if ra == 1:
        a = c.make("reshape", a, shape=[1, a.shape[0]], what="row")
    if rb == 1:
        b = c.make("reshape", b, shape=[b.shape[0], 1], what="col")
    op = "matmul" if len(a.shape) == 2 and len(b.shape) == 2 else "batch_matmul"
    out = c.make(op, a, b, what="product" if ra == 1 or rb == 1 else None)
    if ra == 1 or rb == 1:
        shape = list(out.shape)
        if rb == 1:
            shape.pop(-1)
        if ra == 1:
            shape.pop(-1 if rb == 1 else -2)
        out = c.make("reshape", out, shape=shape)
    return out


@ONNX_OPS.register_op("MatMul", "matmul, batch_matmul")
def _matmul(c: Ctx):
    return matmul(c, c.v(0), c.v(1))


@ONNX_OPS.register_op("Gemm", "matmul, mul, add")
def _gemm(c: Ctx):
    a, b = c.v(0), c.v(1)
    out = c.make("matmul", a, b, transpose_a=bool(c.int_("transA", 0)), transpose_b=bool(c.int_("transB", 0)),
               what="product")
    alpha, beta = c.float_("alpha", 1.0), c.float_("beta", 1.0)
    if alpha != 1.0:
        out = c.make("mul", out, c.scalar(alpha, out, "alpha"), what="scaled")
    if c.has(2):
        bias = c.v(2)
        if beta != 1.0:
            bias = c.make("mul", bias, c.scalar(beta, bias, "beta"), what="bias")
        out = c.make("add", out, bias)
    return out


def _scan(c: Ctx, combine: str):
    """CumSum / CumProd along one axis as a masked reduction: out[i] = reduce over j of
    (j before i ? x[j] : identity), the mask a constant [n, n] (exclusive, reverse as asked)."""
    def convert(c: Ctx):
        x = c.v(0)
        rank = len(x.shape)
        axis = c.axis(int(np.asarray(c.known(1, "axis")).reshape(-1)[0]), rank)
        n = x.shape[axis]
        j, i = np.arange(n)[:, None], np.arange(n)[None, :]
        exclusive, backwards = c.int_("exclusive", 0), c.int_("reverse", 0)
        mask = (j > i if exclusive else j >= i) if backwards else (j < i if exclusive else j <= i)
        shape = [1] * (rank + 1)
        shape[axis], shape[axis + 1] = n, n
        wide = c.make("reshape", x, shape=[*x.shape[:axis + 1], 1, *x.shape[axis + 1:]], what="wide")
        picked = c.make("where", c.const(mask.reshape(shape), "bool", "mask"), wide,
                        c.scalar(0 if combine == "sum" else 1, x, "identity"), what="picked")
        return c.make(combine, picked, axes=[axis], keepdims=False)
    return convert


ONNX_OPS.add("CumSum", "where (a constant mask), sum", _scan(None, "sum"))
ONNX_OPS.add("CumProd", "where (a constant mask), prod", _scan(None, "prod"))

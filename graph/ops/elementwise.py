"""Elementwise ops: unary math, binary arithmetic with broadcasting, comparisons, where, cast."""

from __future__ import annotations

import numpy as np
from scipy import special

from akg.errors import ShapeError
from akg.graph.ops.registry import ELEMWISE, Attr, defop
from akg.graph.types import TensorType, broadcast_shapes, is_float

# --- dtype rules ---------------------------------------------------------------------------


def _need(t: TensorType, ok, what: str) -> None:
    if not ok(t.dtype):
        raise ShapeError(f"needs {what} input, got {t}")


def _float_only(t: TensorType) -> TensorType:
    _need(t, is_float, "a floating-point")
    return t


def _numeric(t: TensorType) -> TensorType:
    _need(t, lambda d: d != "bool", "a numeric (non-bool)")
    return t


def _bool_only(t: TensorType) -> TensorType:
    _need(t, lambda d: d == "bool", "a bool")
    return t


def _to_bool(t: TensorType) -> TensorType:
    return _float_only(t).with_dtype("bool")


def _same_dtype(*ts: TensorType) -> str:
    dtypes = {t.dtype for t in ts}
    if len(dtypes) != 1:
        raise ShapeError(
            "inputs must share one dtype (insert a cast), got " + ", ".join(str(t) for t in ts)
        )
    return dtypes.pop()


# --- unary ------------------------------------------------------------------------------------


def _unary(name: str, fn, infer=_float_only, differentiable: bool = True, attrs=()):
    defop(name, kind=ELEMWISE, arity=1, infer=infer, attrs=attrs, differentiable=differentiable)(fn)


_unary("neg", np.negative, _numeric)
_unary("abs", np.abs, _numeric)
_unary("exp", np.exp)
_unary("log", np.log)
_unary("sqrt", np.sqrt)
_unary("rsqrt", lambda x: 1 / np.sqrt(x))
_unary("reciprocal", lambda x: 1 / x)
_unary("tanh", np.tanh)
_unary("sigmoid", lambda x: special.expit(x).astype(x.dtype))
_unary("relu", lambda x: np.maximum(x, np.zeros((), x.dtype)), _numeric)
_unary("relu6", lambda x: np.clip(x, 0, 6).astype(x.dtype), _numeric)
_unary("erf", lambda x: special.erf(x).astype(x.dtype))
_unary("sin", np.sin)
_unary("cos", np.cos)
_unary("floor", np.floor, differentiable=False)
_unary("ceil", np.ceil, differentiable=False)
_unary("round", np.round, differentiable=False)  # half to even, as IEEE nearbyint
_unary("sign", np.sign, _numeric, differentiable=False)
_unary("logical_not", np.logical_not, _bool_only, differentiable=False)
_unary("isnan", np.isnan, _to_bool, differentiable=False)
_unary("isinf", np.isinf, _to_bool, differentiable=False)


def gelu_reference(x: np.ndarray, approximate: str) -> np.ndarray:
    """GELU: x * Phi(x) ('none', exact erf form) or its tanh approximation ('tanh')."""
    xf = x.astype(np.float64)
    if approximate == "tanh":
        y = 0.5 * xf * (1 + np.tanh(np.sqrt(2 / np.pi) * (xf + 0.044715 * xf**3)))
    else:
        y = 0.5 * xf * (1 + special.erf(xf / np.sqrt(2)))
    return y.astype(x.dtype)


@defop("gelu", kind=ELEMWISE, infer=lambda x, approximate: _float_only(x),
       attrs=[Attr("approximate", "str", "none", choices=("none", "tanh"))])
def gelu(x, approximate):
    return gelu_reference(x, approximate)


# --- binary -----------------------------------------------------------------------------------


def _broadcast(a: TensorType, b: TensorType, out_dtype: str | None = None, check=None) -> TensorType:
    dtype = _same_dtype(a, b)
    if check is not None:
        check(TensorType((), dtype))
    return TensorType(broadcast_shapes(a.shape, b.shape), out_dtype or dtype)


def _binary(name: str, fn, check=_numeric, out_dtype: str | None = None, differentiable=True):
    defop(name, kind=ELEMWISE, arity=2, differentiable=differentiable,
          infer=lambda a, b: _broadcast(a, b, out_dtype, check))(fn)


def _divide(a, b):
    """True division for floats; floor division for integers (as TVM's floordiv)."""
    return np.true_divide(a, b) if is_float(a.dtype.name) else np.floor_divide(a, b)


_binary("add", np.add)
_binary("sub", np.subtract)
_binary("mul", np.multiply)
_binary("div", _divide)
_binary("pow", np.power, _float_only)
_binary("maximum", np.maximum)
_binary("minimum", np.minimum)
_binary("mod", np.mod, differentiable=False)  # floor mod: the result has the divisor's sign

for _name, _fn in [("equal", np.equal), ("not_equal", np.not_equal), ("less", np.less),
                   ("less_equal", np.less_equal), ("greater", np.greater),
                   ("greater_equal", np.greater_equal)]:
    _binary(_name, _fn, check=lambda t: t, out_dtype="bool", differentiable=False)

_binary("logical_and", np.logical_and, _bool_only, differentiable=False)
_binary("logical_or", np.logical_or, _bool_only, differentiable=False)


# --- where, cast ------------------------------------------------------------------------------


def _where_infer(cond: TensorType, a: TensorType, b: TensorType) -> TensorType:
    _bool_only(cond)
    dtype = _same_dtype(a, b)
    return TensorType(broadcast_shapes(cond.shape, a.shape, b.shape), dtype)


@defop("where", kind=ELEMWISE, infer=_where_infer)
def where(cond, a, b):
    """select: a where cond is true, else b (all three broadcast)."""
    return np.where(cond, a, b)


@defop("cast", kind=ELEMWISE, infer=lambda x, to: x.with_dtype(to), attrs=[Attr("to", "dtype")])
def cast(x, to):
    """Convert dtype; float -> int truncates toward zero, anything -> bool is x != 0."""
    return x.astype(to)


# --- compute definitions ----------------------------------------------------------------------

from akg.graph.compute.expr import call, cast as cast_expr, compute, const, select  # noqa: E402
from akg.graph.compute.helpers import broadcast_load  # noqa: E402
from akg.graph.ops.registry import defcompute  # noqa: E402


def _map(ctx, fn, *inputs):
    """out[i] = fn(inputs read at i under broadcasting)."""
    return compute(ctx.out.shape, lambda *i: fn(*(broadcast_load(t, i) for t in inputs)), ctx.name)


_DIRECT_UNARY = {
    "neg": "neg", "abs": "abs", "exp": "exp", "log": "log", "sqrt": "sqrt", "rsqrt": "rsqrt",
    "tanh": "tanh", "sigmoid": "sigmoid", "erf": "erf", "sin": "sin", "cos": "cos",
    "floor": "floor", "ceil": "ceil", "round": "round", "logical_not": "not",
    "isnan": "isnan", "isinf": "isinf",
}


@defcompute(*_DIRECT_UNARY)
def _unary_compute(ctx, x):
    op = _DIRECT_UNARY[ctx.op]
    return _map(ctx, lambda v: call(op, v), x)


@defcompute("relu")
def _relu_compute(ctx, x):
    return _map(ctx, lambda v: call("max", v, const(0, v.dtype)), x)


@defcompute("relu6")
def _relu6_compute(ctx, x):
    return _map(ctx, lambda v: call("min", call("max", v, const(0, v.dtype)), const(6, v.dtype)), x)


@defcompute("reciprocal")
def _reciprocal_compute(ctx, x):
    return _map(ctx, lambda v: const(1, v.dtype) / v, x)


@defcompute("sign")
def _sign_compute(ctx, x):
    def sign(v):
        zero = const(0, v.dtype)
        return select(call("gt", v, zero), const(1, v.dtype),
                      select(call("lt", v, zero), const(-1, v.dtype), zero))
    return _map(ctx, sign, x)


def gelu_expr(v, approximate: str):
    half, one = const(0.5, v.dtype), const(1, v.dtype)
    if approximate == "tanh":
        inner = const(float(np.sqrt(2 / np.pi)), v.dtype) * (v + const(0.044715, v.dtype) * v * v * v)
        return half * v * (one + call("tanh", inner))
    return half * v * (one + call("erf", v * const(float(1 / np.sqrt(2)), v.dtype)))


@defcompute("gelu")
def _gelu_compute(ctx, x, approximate):
    return _map(ctx, lambda v: gelu_expr(v, approximate), x)


_BINARY = {"add": "add", "sub": "sub", "mul": "mul", "pow": "pow", "maximum": "max",
           "minimum": "min", "mod": "floormod", "equal": "eq", "not_equal": "ne", "less": "lt",
           "less_equal": "le", "greater": "gt", "greater_equal": "ge", "logical_and": "and",
           "logical_or": "or"}


@defcompute(*_BINARY)
def _binary_compute(ctx, a, b):
    op = _BINARY[ctx.op]
    return _map(ctx, lambda x, y: call(op, x, y), a, b)


@defcompute("div")
def _div_compute(ctx, a, b):
    op = "div" if is_float(a.dtype) else "floordiv"
    return _map(ctx, lambda x, y: call(op, x, y), a, b)


@defcompute("where")
def _where_compute(ctx, c, a, b):
    return _map(ctx, select, c, a, b)


@defcompute("cast")
def _cast_compute(ctx, x, to):
    if to == "bool":
        return _map(ctx, lambda v: call("ne", v, const(0, v.dtype)), x)
    return _map(ctx, lambda v: cast_expr(to, v), x)

"""Scalar operations of the compute IR as TIR expressions (part of the isl AST -> TIR lowering,
`akg.polyhedral.astgen`): calls, reduction identities and combiners, C identifiers for tensor
names, and the widest vector loop the lowering emits."""

from __future__ import annotations

import re

import numpy as np
import tvm
from tvm import tirx
from tvm.sym import detect_linear_equation

from akg.errors import LoweringError
from akg.polyhedral.intrinsics import FAST_F32

MAX_VECTOR = 64  # lanes; longer constant loops are left to LLVM's vectorizer

_FLOAT_UNARY = {
    "exp": tirx.exp, "log": tirx.log, "sqrt": tirx.sqrt, "rsqrt": tirx.rsqrt, "tanh": tirx.tanh,
    "sigmoid": tirx.sigmoid, "erf": tirx.erf, "sin": tirx.sin, "cos": tirx.cos,
    "floor": tirx.floor, "ceil": tirx.ceil, "round": tirx.nearbyint,
}
# Results no fast-math fold may combine: with reassociation allowed LLVM folds sin(x) / cos(x)
# into a vector tan, which came out as x itself on x86 (ONNX's Tan, expanded to sin / cos)
FENCED_CALLS = ("sin", "cos")
_COMPARE = {"eq": tirx.EQ, "ne": tirx.NE, "lt": tirx.LT, "le": tirx.LE, "gt": tirx.GT, "ge": tirx.GE}


def ident(name: str) -> str:
    """A C identifier for a tensor name (TVM's C code generators name parameters after buffers)."""
    name = re.sub(r"\W", "_", name)
    return "t" + name if name[:1].isdigit() else name


# Reductions keep TIR's own Max/Min: a NaN test on their running value's dependence chain cost
# a 4096 x 1024 softmax 15-35% (Zen 4), so a max/min reduction still drops a NaN (docs/mir.md;
# the measurements: docs/performance.md)
COMBINE = {"sum": lambda a, b: a + b, "prod": lambda a, b: a * b, "max": tirx.Max, "min": tirx.Min}


def extremum(op: str, a, b, dtype: str, nan: bool = True) -> tirx.PrimExpr:
    """The elementwise max or min (`op`) of `a` and `b`, of `dtype`. With `nan`, a NaN operand of
    a float gives NaN, as in NumPy's maximum: TIR's Max is `a > b ? a : b` through LLVM (NaN only
    from `b`) and C's fmaxf in C code generators (NaN from neither), so floats get
    `isnan(b) ? NaN : (b > a ? b : a)` (one compare, one max instruction and a masked move on
    x86), with a call `b` (a lane exchange) bound once. A number operand needs no test:
    `c > x ? c : x` returns a NaN `x` and is one max instruction (relu, clip). Without `nan` (a
    target whose own max propagates NaN) the plain Max/Min."""
    plain = tirx.Max if op == "max" else tirx.Min
    if not nan or not dtype.startswith("float"):
        return plain(a, b)
    wins = tirx.GT if op == "max" else tirx.LT
    for c, x in ((a, b), (b, a)):
        if isinstance(c, tirx.FloatImm) and not np.isnan(c.value):
            return tirx.Select(wins(c, x), c, x)
    if isinstance(b, tvm.ir.Call):
        v = tirx.Var("other", dtype)
        return tirx.Let(v, b, extremum(op, a, v, dtype, nan))
    return tirx.Select(tirx.isnan(b), tirx.const(np.nan, dtype), tirx.Select(wins(b, a), b, a))


def reduce_identity(reducer: str, dtype: str, value: bool = False):
    """The initial value of a `reducer` over `dtype` (an arg-reduction's index, or with
    `value` its running value)."""
    if reducer == "sum":
        return tirx.const(0, dtype)
    if reducer == "prod":
        return tirx.const(1, dtype)
    if reducer.startswith("arg") and not value:
        return tirx.const(0, "int32")
    lowest = reducer in ("max", "argmax")
    if dtype.startswith("float"):
        return tirx.const(-np.inf if lowest else np.inf, dtype)
    return tirx.min_value(dtype) if lowest else tirx.max_value(dtype)


def tir_call(op: str, args: list, exprs: list, dtype: str, fast_math: bool = True, fence=None,
             nan: bool = True) -> tirx.PrimExpr:
    """The compute IR's call `op` on lowered `args` (`exprs`: the IR operands, for their
    dtypes); float32 transcendental functions by their vectorisable expansions with
    `fast_math`, fp16 math in fp32; max and min propagate NaN with `nan` (`extremum`)."""
    if op in _FLOAT_UNARY:
        (x,) = args
        src = exprs[0].dtype
        if fast_math and op in FAST_F32 and src in ("float16", "float32"):
            fast = FAST_F32[op]
            fn = (lambda v: fast(v, fence)) if fence is not None else fast
        else:
            fn = _FLOAT_UNARY[op]
        if src == "float16":  # compute fp16 math in fp32
            return tirx.Cast("float16", fn(tirx.Cast("float32", x)))
        return fn(x)
    if op == "neg":
        return -args[0]
    if op == "abs":
        return tirx.abs(args[0])
    if op == "not":
        return tirx.Not(args[0])
    if op == "isnan":
        return tirx.isnan(args[0])
    if op == "isinf":
        return tirx.isinf(args[0])
    if op == "sign":
        raise LoweringError("sign is expanded by its compute definition")
    a, b = args
    if op == "add":
        return a + b
    if op == "sub":
        return a - b
    if op == "mul":
        return a * b
    if op == "div":
        if isinstance(b, tirx.FloatImm) and b.value == 0:  # TVM refuses to fold x / 0.0
            return a * tirx.const(float(np.copysign(np.inf, b.value)), dtype)
        return tirx.Div(a, b)
    if op == "floordiv":
        return floor_div(a, b)
    if op == "floormod":
        if dtype.startswith("float"):
            return a - tirx.floor(a / b) * b
        return floor_mod(a, b)
    if op in ("max", "min"):
        return extremum(op, a, b, dtype, nan)
    if op == "pow":
        if dtype == "float16":
            return tirx.Cast("float16", tirx.power(tirx.Cast("float32", a), tirx.Cast("float32", b)))
        return tirx.power(a, b)
    if op == "and":
        return tirx.And(a, b)
    if op == "or":
        return tirx.Or(a, b)
    if op in _COMPARE:
        return _COMPARE[op](a, b)
    raise LoweringError(f"no TIR lowering for '{op}'")


def floor_div(a, b) -> tirx.PrimExpr:
    """floordiv(a, b) for an index `a`, written so that TVM's iterator
    simplification keeps its value. That simplification (FlattenBuffer's, on every buffer index;
    TVM 0.27) rewrites floordiv(5 - c3, 2) as floordiv(c3, -2) + 2, off by one for odd c3, and
    isl writes such indices for reversed loops (a pool fused after an average pool read the
    wrong columns). So a positive constant `b` over an `a` that only decreases with its loop
    variables gives -floordiv(b - 1 - a, b), which the simplification gets right. Used for isl's
    divisions and for the compute IR's integer floordiv (a reshape's index over such a loop)."""
    if not _decreasing(a, b):
        return tirx.floordiv(a, b)
    return -tirx.floordiv(b - 1 - a, b)


def floor_mod(a, b) -> tirx.PrimExpr:
    """floormod(a, b), as (b - 1) - floormod(b - 1 - a, b) where `floor_div` rewrites (its doc)."""
    if not _decreasing(a, b):
        return tirx.floormod(a, b)
    return b - 1 - tirx.floormod(b - 1 - a, b)


def _decreasing(a, b) -> bool:
    """Is `a` linear, with every coefficient of its variables <= 0 and one < 0, and `b` a
    positive constant?"""
    if not isinstance(b, tirx.IntImm) or int(b.value) <= 0:
        return False
    free = list(tirx.analysis.undefined_vars(a))
    if not free:
        return False
    coeffs = detect_linear_equation(a, free)
    if len(coeffs) == 0:
        return False
    steps = [int(c.value) if isinstance(c, tirx.IntImm) else None for c in list(coeffs)[:-1]]
    return None not in steps and min(steps) < 0 and max(steps) <= 0


def fold_all(fn, items: list):
    """fn(fn(items[0], items[1]), ...)."""
    out = items[0]
    for x in items[1:]:
        out = fn(out, x)
    return out


def is_zero(e) -> bool:
    return isinstance(e, tirx.IntImm) and e.value == 0

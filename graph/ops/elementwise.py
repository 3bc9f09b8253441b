"""Elementwise ops: unary math, binary arithmetic with broadcasting, comparisons, where, cast."""

from __future__ import annotations

import ml_dtypes
import numpy as np
from scipy import special

from akg.errors import ShapeError
from akg.graph.ops.registry import ELEMWISE, Attr, defop
from akg.graph.types import FLOAT8_DTYPES, COMPLEX_PART, TensorType, broadcast_shapes, is_float, is_storage

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
_unary("abs", np.abs, lambda t: _numeric(t).with_dtype(COMPLEX_PART.get(t.dtype, t.dtype)))
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
    return np.true_divide(a, b) if a.dtype.kind in "fc" else np.floor_divide(a, b)


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


@defop("cast", kind=ELEMWISE, infer=lambda x, to, saturate=False: x.with_dtype(to),
       attrs=[Attr("to", "dtype"), Attr("saturate", "bool", False)])
def cast(x, to, saturate=False):
    """Convert dtype; float -> int truncates toward zero, anything -> bool is x != 0. Float ->
    uint32/uint64 wraps modulo 2^bits (as NumPy on x86 does for values from -2^63 to 2^64; the
    C cast is undefined outside the target's range, so kernels and this reference define it).
    To and from the storage types (bfloat16, float8) through float32, rounding to nearest even
    (ml_dtypes); past a float8 type's range NaN (inf for e5m2), or with `saturate` its largest
    finite value (ONNX Cast's saturate: infinities too; NaN stays NaN)."""
    if is_storage(to) or is_storage(x.dtype.name):
        wide = x.astype(np.float32)
        if saturate and to in FLOAT8_DTYPES:
            top = np.float32(ml_dtypes.finfo(to).max)
            wide = np.where(np.isnan(wide), wide, np.clip(wide, -top, top))
        return _float_to_unsigned(wide, to) if to in _WRAPPED_UNSIGNED else wide.astype(to)
    if x.dtype.kind == "f" and to in _WRAPPED_UNSIGNED:
        return _float_to_unsigned(x, to)
    return x.astype(to)


# float -> these unsigned types goes through int64 (uint8/16 already wrap through int32)
_WRAPPED_UNSIGNED = ("uint32", "uint64")


def _float_to_unsigned(x: np.ndarray, to: str) -> np.ndarray:
    """x truncated toward zero and wrapped modulo 2^bits, through int64; for uint64, values from
    2^63 on are offset by 2^63 first. NaN and values out of [-2^63, 2^64) are undefined (as
    in C and ONNX's Cast)."""
    with np.errstate(invalid="ignore", over="ignore"):
        low = x.astype(np.int64).view(np.uint64)
        if to == "uint64":
            high = (x - x.dtype.type(2.0**63)).astype(np.int64).view(np.uint64) + np.uint64(2**63)
            low = np.where(x >= x.dtype.type(2.0**63), high, low)
    return low.astype(to)


# --- compute definitions ----------------------------------------------------------------------

from akg.graph.compute.expr import Const, call, cast as cast_expr, compute, const, select  # noqa: E402
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
    # max(0, v), not max(v, 0): LLVM lowers TIR's max to `a > b ? a : b`, so a NaN stays NaN
    # (as the reference has it) only as the second operand; the same one vmaxps either way.
    # (C's fmaxf, which GPU code gets, returns the number: there relu(NaN) is 0.)
    return _map(ctx, lambda v: call("max", const(0, v.dtype), v), x)


@defcompute("relu6")
def _relu6_compute(ctx, x):
    return _map(ctx, lambda v: call("min", const(6, v.dtype), call("max", const(0, v.dtype), v)), x)  # NaN: as relu


@defcompute("reciprocal")
def _reciprocal_compute(ctx, x):
    return _map(ctx, lambda v: const(1, v.dtype) / v, x)


@defcompute("sign")
def _sign_compute(ctx, x):
    def sign(v):
        zero = const(0, v.dtype)
        rest = select(call("isnan", v), v, zero) if is_float(v.dtype) else zero  # sign(NaN) is NaN
        return select(call("gt", v, zero), const(1, v.dtype), select(call("lt", v, zero), const(-1, v.dtype), rest))
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


_COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge")


@defcompute(*_BINARY)
def _binary_compute(ctx, a, b):
    op = _BINARY[ctx.op]
    if op == "floormod" and not is_float(a.dtype):
        return _map(ctx, lambda x, y: _integer_divmod("floormod", x, y), a, b)
    if op in _COMPARISONS and a.dtype == "bool":  # as int8: LLVM got a float compare of i1
        return _map(ctx, lambda x, y: call(op, cast_expr("int8", x), cast_expr("int8", y)), a, b)
    return _map(ctx, lambda x, y: call(op, x, y), a, b)


@defcompute("div")
def _div_compute(ctx, a, b):
    if is_float(a.dtype):
        return _map(ctx, lambda x, y: call("div", x, y), a, b)
    return _map(ctx, lambda x, y: _integer_divmod("floordiv", x, y), a, b)


def _integer_divmod(op: str, x, y):
    """Integer floor division or modulo with the reference's (NumPy's) results where the
    hardware division traps: x // 0 = x % 0 = 0, and for signed types x // -1 = -x (wrapping:
    INT_MIN // -1 = INT_MIN) and x % -1 = 0. An x86 `idiv` raises SIGFPE on both, killing the
    process; the divisor is replaced by 1 in those lanes and the result selected. A constant
    divisor other than 0 and -1 needs none of it."""
    dtype = x.dtype
    signed = dtype.startswith("int")
    if isinstance(y, Const) and y.value != 0 and not (signed and y.value == -1):
        return call(op, x, y)
    zero = const(0, dtype)
    by_zero = call("eq", y, zero)
    trap = call("or", by_zero, call("eq", y, const(-1, dtype))) if signed else by_zero
    result = call(op, x, select(trap, const(1, dtype), y))
    if signed:
        result = select(call("eq", y, const(-1, dtype)), call("sub", zero, x) if op == "floordiv" else zero, result)
    return select(by_zero, zero, result)


@defcompute("where")
def _where_compute(ctx, c, a, b):
    return _map(ctx, select, c, a, b)


@defcompute("cast")
def _cast_compute(ctx, x, to, saturate=False):
    if is_storage(to) or is_storage(x.dtype):  # through float32, as the reference
        top = float(ml_dtypes.finfo(to).max) if saturate and to in FLOAT8_DTYPES else None

        def store(v):
            v = cast_expr("float32", v)
            if top is not None:
                v = select(call("isnan", v), v, call("min", call("max", v, const(-top, "float32")),
                                                        const(top, "float32")))
            if to == "bool":
                return _nonzero(v)
            return _float_to_unsigned_expr(v, to) if to in _UNSIGNED else cast_expr(to, v)
        return _map(ctx, store, x)
    if to == "bool":
        return _map(ctx, _nonzero, x)
    if is_float(x.dtype) and to in _UNSIGNED:
        return _map(ctx, lambda v: _float_to_unsigned_expr(v, to), x)
    return _map(ctx, lambda v: cast_expr(to, v), x)


_UNSIGNED = ("uint8", "uint16", *_WRAPPED_UNSIGNED)


def _nonzero(v):
    """v != 0 as a cast to bool: true for NaN (an ordered compare is false there)."""
    ne = call("ne", v, const(0, v.dtype))
    return call("or", ne, call("isnan", v)) if is_float(v.dtype) else ne


def _float_to_unsigned_expr(v, to):
    """The kernel form of `_float_to_unsigned` and of NumPy's float -> uint8/uint16 (which wrap
    through int32). LLVM's fptoui is poison below zero: where it vectorises a float -> uint16
    cast for AVX2 it saturates negative values to 0 (unsigned-saturating packs), so the kernel
    converts to a signed integer and truncates that."""
    if to in ("uint8", "uint16"):
        return cast_expr(to, cast_expr("int32", v))
    low = cast_expr(to, cast_expr("int64", v))
    if to != "uint64":
        return low
    top = const(2.0**63, v.dtype)
    high = call("add", cast_expr(to, cast_expr("int64", call("sub", v, top))), const(2**63, to))
    return select(call("ge", v, top), high, low)


# --- VJP rules ----------------------------------------------------------------------------------

from akg.graph.ops.registry import defvjp  # noqa: E402


@defvjp("neg")
def _vjp_neg(e, g, x):
    return (e.op("neg", g),)


@defvjp("abs")
def _vjp_abs(e, g, x):
    return (e.op("mul", g, e.op("sign", x)),)


@defvjp("exp")
def _vjp_exp(e, g, x):
    return (e.op("mul", g, e.out),)


@defvjp("log")
def _vjp_log(e, g, x):
    return (e.op("div", g, x),)


@defvjp("sqrt")
def _vjp_sqrt(e, g, x):
    """d sqrt(x) = 1 / (2 sqrt(x))."""
    return (e.op("div", g, e.op("mul", e.out, 2.0)),)


@defvjp("rsqrt")
def _vjp_rsqrt(e, g, x):
    """d x^-1/2 = -x^-3/2 / 2 = -out^3 / 2."""
    cube = e.op("mul", e.op("mul", e.out, e.out), e.out, hint="cube")
    return (e.op("mul", g, e.op("mul", cube, -0.5)),)


@defvjp("reciprocal")
def _vjp_reciprocal(e, g, x):
    return (e.op("neg", e.op("mul", g, e.op("mul", e.out, e.out, hint="sq"))),)


@defvjp("tanh")
def _vjp_tanh(e, g, x):
    return (e.op("mul", g, e.op("sub", 1.0, e.op("mul", e.out, e.out, hint="sq"))),)


@defvjp("sigmoid")
def _vjp_sigmoid(e, g, x):
    return (e.op("mul", g, e.op("mul", e.out, e.op("sub", 1.0, e.out))),)


@defvjp("relu")
def _vjp_relu(e, g, x):
    return (e.op("where", e.op("greater", x, 0.0, hint="active"), g, 0.0),)


@defvjp("relu6")
def _vjp_relu6(e, g, x):
    inside = e.op("logical_and", e.op("greater", x, 0.0), e.op("less", x, 6.0), hint="active")
    return (e.op("where", inside, g, 0.0),)


@defvjp("erf")
def _vjp_erf(e, g, x):
    """d erf(x) = 2 / sqrt(pi) exp(-x^2)."""
    bell = e.op("exp", e.op("neg", e.op("mul", x, x, hint="sq")), hint="bell")
    return (e.op("mul", g, e.op("mul", bell, float(2 / np.sqrt(np.pi)))),)


@defvjp("sin")
def _vjp_sin(e, g, x):
    return (e.op("mul", g, e.op("cos", x)),)


@defvjp("cos")
def _vjp_cos(e, g, x):
    return (e.op("neg", e.op("mul", g, e.op("sin", x))),)


@defvjp("gelu")
def _vjp_gelu(e, g, x, approximate):
    if approximate == "tanh":
        # y = x/2 (1 + t), t = tanh(k (x + c x^3)): y' = (1 + t)/2 + x/2 (1 - t^2) k (1 + 3c x^2)
        k, c = float(np.sqrt(2 / np.pi)), 0.044715
        sq = e.op("mul", x, x, hint="sq")
        inner = e.op("mul", e.op("add", x, e.op("mul", e.op("mul", sq, x), c)), k, hint="inner")
        t = e.op("tanh", inner)
        slope = e.op("mul", e.op("add", e.op("mul", sq, 3 * c), 1.0), k, hint="slope")
        dt = e.op("mul", e.op("sub", 1.0, e.op("mul", t, t)), slope, hint="dt")
        d = e.op("add", e.op("mul", e.op("add", t, 1.0), 0.5),
                 e.op("mul", e.op("mul", x, 0.5), dt), hint="d")
    else:
        # y = x Phi(x): y' = Phi(x) + x phi(x)
        cdf = e.op("mul", e.op("add", e.op("erf", e.op("mul", x, float(1 / np.sqrt(2)))), 1.0), 0.5, hint="cdf")
        pdf = e.op("mul", e.op("exp", e.op("mul", e.op("mul", x, x), -0.5)), float(1 / np.sqrt(2 * np.pi)),
                   hint="pdf")
        d = e.op("add", cdf, e.op("mul", x, pdf), hint="d")
    return (e.op("mul", g, d),)


@defvjp("add")
def _vjp_add(e, g, a, b):
    return e.unbroadcast(g, a.shape), e.unbroadcast(g, b.shape)


@defvjp("sub")
def _vjp_sub(e, g, a, b):
    return e.unbroadcast(g, a.shape), e.unbroadcast(e.op("neg", g), b.shape)


@defvjp("mul")
def _vjp_mul(e, g, a, b):
    return e.unbroadcast(e.op("mul", g, b), a.shape), e.unbroadcast(e.op("mul", g, a), b.shape)


@defvjp("div")
def _vjp_div(e, g, a, b):
    """d(a/b) = da / b - db a / b^2 = (da - db out) / b."""
    ga = e.op("div", g, b)
    return e.unbroadcast(ga, a.shape), e.unbroadcast(e.op("neg", e.op("mul", ga, e.out)), b.shape)


@defvjp("pow")
def _vjp_pow(e, g, a, b):
    """d a^b = b a^(b-1) da + a^b log(a) db (the second needs a > 0)."""
    ga = e.op("mul", g, e.op("mul", b, e.op("pow", a, e.op("sub", b, 1.0))))
    gb = e.op("mul", g, e.op("mul", e.out, e.op("log", a)))
    return e.unbroadcast(ga, a.shape), e.unbroadcast(gb, b.shape)


def _select_vjp(e, g, a, b, wins: str):
    """maximum / minimum: the winner takes the cotangent, ties share it equally."""
    first = e.op(wins, a, b, hint="first")
    tie = e.op("equal", a, b, hint="tie")
    half = e.op("mul", g, 0.5)
    ga = e.op("where", first, g, e.op("where", tie, half, 0.0))
    gb = e.op("where", first, 0.0, e.op("where", tie, half, g))
    return e.unbroadcast(ga, a.shape), e.unbroadcast(gb, b.shape)


@defvjp("maximum")
def _vjp_maximum(e, g, a, b):
    return _select_vjp(e, g, a, b, "greater")


@defvjp("minimum")
def _vjp_minimum(e, g, a, b):
    return _select_vjp(e, g, a, b, "less")


@defvjp("where")
def _vjp_where(e, g, cond, a, b):
    return (None, e.unbroadcast(e.op("where", cond, g, 0.0), a.shape),
            e.unbroadcast(e.op("where", cond, 0.0, g), b.shape))


@defvjp("cast")
def _vjp_cast(e, g, x, to, saturate=False):
    """Between float types the cotangent is cast back; integer and bool casts pass nothing."""
    if not (is_float(x.dtype) and is_float(to)):
        return (None,)
    return (e.op("cast", g, to=x.dtype),)


# --- sharding rules ---------------------------------------------------------------------------

from akg.graph.ops.registry import defsharding  # noqa: E402

# Linear in some inputs: the ways partial sums pass through, as the inputs that must all be
# partial over an axis for the output to be (mul: either factor, not both over one axis).
LINEAR_INPUTS: dict[str, tuple[tuple[int, ...], ...]] = {
    "add": ((0, 1),), "sub": ((0, 1),), "neg": ((0,),), "mul": ((0,), (1,)), "div": ((0,),),
    "where": ((1, 2),), "complex": ((0, 1),), "real": ((0,),), "imag": ((0,),),
}


def broadcast_roles(call, linear: tuple[tuple[int, ...], ...] = ()):
    """Roles of an op whose inputs broadcast to its output: one per output dim, splitting
    the inputs' dims that are not broadcast there (size 1 or missing: replicated), then one
    per way partial sums pass through (`linear`)."""
    from akg.graph.parallel.rules import Role, partial_role

    out = call.outs[0]
    roles = []
    for d in range(out.rank):
        ins = []
        for i, t in enumerate(call.ins):
            j = d - (out.rank - t.rank)
            if j >= 0 and t.shape[j] == out.shape[d]:
                ins.append((i, j))
        roles.append(Role(f"d{d}", ins=tuple(ins), outs=((0, d),)))
    for pattern in linear:
        name = "partial" if len(linear) == 1 else "partial_" + "".join("abc"[i] for i in pattern)
        roles.append(partial_role(name, pattern))
    return roles


def _linear_patterns(call) -> tuple[tuple[int, ...], ...]:
    """Partial sums pass through float ops only (integer division floors, casts to integers
    truncate)."""
    if not is_float(call.outs[0].dtype):
        return ()
    if call.op == "cast":
        return ((0,),) if is_float(call.ins[0].dtype) else ()
    return LINEAR_INPUTS.get(call.op, ())


@defsharding(*(name for name in ("neg", "abs", "exp", "log", "sqrt", "rsqrt", "reciprocal", "tanh",
                                  "sigmoid", "relu", "relu6", "erf", "sin", "cos", "floor", "ceil",
                                  "round", "sign", "logical_not", "isnan", "isinf", "gelu", "add",
                                  "sub", "mul", "div", "pow", "maximum", "minimum", "mod", "equal",
                                  "not_equal", "less", "less_equal", "greater", "greater_equal",
                                  "logical_and", "logical_or", "where", "cast")))
def _elementwise_sharding(call, mesh):
    """Any split of the output's dims, each input split alike where it is not broadcast;
    partial sums pass through the linear ops (add/sub: both inputs partial; mul: one factor;
    div: the numerator; neg, float casts, where's branches); nonlinear ops take none."""
    from akg.graph.parallel.rules import assign_roles

    return assign_roles(call, mesh, broadcast_roles(call, _linear_patterns(call)))

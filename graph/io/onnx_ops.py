"""ONNX op table: how each ONNX op becomes akg's registry ops (`ONNX_OPS`), and the context a
converter works in. Used by `akg.graph.io.onnx`. Attribute defaults are the ONNX spec's."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from akg.errors import UnsupportedError
from akg.graph.io.importer import OpContext, OpTable, brief
from akg.graph.ir import Value
from akg.graph.types import TensorType, broadcast_shapes, is_float

if TYPE_CHECKING:
    from akg.graph.io.onnx import OnnxImporter

_REQUIRED = object()


class _Subgraph:
    """A graph-valued attribute (If/Loop/Scan bodies): not modelled."""

    def __repr__(self) -> str:
        return "<graph>"


def attribute_values(node, read_tensor: Callable[[Any, str], np.ndarray]) -> dict[str, Any]:
    """A NodeProto's attributes as Python values: numbers, strings, lists, tensors as arrays."""
    from onnx import AttributeProto, helper

    out: dict[str, Any] = {}
    for a in node.attribute:
        if a.ref_attr_name:
            raise ValueError(f"attribute '{a.name}' refers to a function attribute (only in functions)")
        if a.type == AttributeProto.TENSOR:
            out[a.name] = read_tensor(a.t, f"attribute '{a.name}'")
        elif a.type == AttributeProto.TENSORS:
            out[a.name] = [read_tensor(t, f"attribute '{a.name}'") for t in a.tensors]
        elif a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS):
            out[a.name] = _Subgraph()
        else:
            value = helper.get_attribute_value(a)
            if isinstance(value, bytes):
                value = value.decode("utf-8", "replace")
            elif isinstance(value, list) and value and isinstance(value[0], bytes):
                value = [v.decode("utf-8", "replace") for v in value]
            out[a.name] = value
    return out


class DynamicShapeError(UnsupportedError):
    """An input akg needs at compile time (a shape, axes, pads) is computed at run time.
    `tensor` names it; `model_input` says whether it is a model input, which a caller may
    fix to a value (make it an initializer) to compile the model for that value."""

    def __init__(self, message: str, tensor: str, model_input: bool):
        super().__init__(message)
        self.tensor, self.model_input = tensor, model_input


class OnnxOpContext(OpContext):
    """What a converter sees: the node's attributes, its inputs (None for an optional input
    left out) and the types the model declares for its outputs; results are named after the
    node's first output."""

    mismatch = "the mapping gives {got} but the model declares {want}"

    def __init__(self, imp: OnnxImporter, op: str, attrs: dict[str, Any], args: list[Value | None],
                 declared: list[TensorType | None], name: str, where: str, inputs: list[str],
                 outputs: list[str]):
        super().__init__(imp, op, attrs, args, name, where)
        self.declared, self.inputs, self.outputs = declared, inputs, outputs

    # --- inputs -------------------------------------------------------------------------------

    def has(self, i: int) -> bool:
        return i < len(self.args) and self.args[i] is not None

    def v(self, i: int) -> Value:
        if not self.has(i):
            raise self.fail(f"missing input {i}")
        return self.args[i]

    def known(self, i: int, what: str) -> np.ndarray | None:
        """The data of input i, which must be known at compile time (a constant, or computed
        from constants only); None when the optional input is left out."""
        if not self.has(i):
            return None
        data = self.imp.known(self.args[i])
        if data is None:
            tensor = self.inputs[i]
            given = self.args[i] in self.imp.inputs
            fix = (" (it is a model input: make it an initializer to compile for one value)" if given else "")
            raise DynamicShapeError(f"{self.where}: input {i} '{tensor}' ({what}) is computed at run time "
                                    f"(a dynamic shape); akg compiles static shapes and needs it constant{fix}",
                                    tensor, given)
        return data

    def known_ints(self, i: int, what: str) -> list[int] | None:
        data = self.known(i, what)
        return None if data is None else [int(x) for x in np.asarray(data).reshape(-1)]

    @property
    def n_outputs(self) -> int:
        """How many outputs the node asks for (trailing optional ones left out don't count)."""
        names = list(self.outputs)
        while names and not names[-1]:
            names.pop()
        return len(names)

    def wants(self, i: int) -> bool:
        return i < len(self.outputs) and bool(self.outputs[i])

    # --- attributes ---------------------------------------------------------------------------

    def get(self, name: str, default: Any = _REQUIRED) -> Any:
        if name in self.attrs:
            return self.attrs[name]
        if default is _REQUIRED:
            raise self.fail(f"missing attribute '{name}'")
        return default

    def int_(self, name: str, default: Any = _REQUIRED) -> int:
        value = self.get(name, default)
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise self.fail(f"attribute '{name}' must be an integer, got {brief(value)}")
        return int(value)

    def float_(self, name: str, default: Any = _REQUIRED) -> float:
        value = self.get(name, default)
        if not isinstance(value, (int, float, np.integer, np.floating)) or isinstance(value, bool):
            raise self.fail(f"attribute '{name}' must be a number, got {brief(value)}")
        return float(value)

    def ints(self, name: str, default: Any = _REQUIRED) -> list[int] | None:
        value = self.get(name, default)
        if value is None:
            return None
        if not isinstance(value, (list, tuple)) or any(not isinstance(x, (int, np.integer)) for x in value):
            raise self.fail(f"attribute '{name}' must be integers, got {brief(value)}")
        return [int(x) for x in value]

    def str_(self, name: str, default: Any = _REQUIRED) -> str:
        value = self.get(name, default)
        if not isinstance(value, str):
            raise self.fail(f"attribute '{name}' must be a string, got {brief(value)}")
        return value

    # --- helpers ------------------------------------------------------------------------------

    def scalar(self, value: Any, like: Value | str, what: str) -> Value:
        dtype = like if isinstance(like, str) else like.dtype
        return self.const(np.asarray(value).astype(dtype), dtype, what)

    def make(self, op: str, *inputs: Value, what: str | None = None, **attrs: Any) -> Value:
        """Emit `op` on `inputs` (`what` names a helper value, None the node's result)."""
        return self.emit(op, list(inputs), what, **attrs)

    def axis(self, value: int, rank: int, name: str = "axis") -> int:
        if not -rank <= value < max(rank, 1):
            raise self.fail(f"attribute '{name}' {value} is out of range for rank {rank}")
        return value % rank if rank else 0

    # --- results ------------------------------------------------------------------------------

    def conform(self, result: Any) -> Any:
        """Check each result against the type the model declares for it; differences in size-1
        axes become a reshape, anything else is an error (the mapping would be wrong)."""
        results = list(result) if isinstance(result, tuple) else [result]
        for i, v in enumerate(results):
            want = self.declared[i] if i < len(self.declared) else None
            if want is not None and isinstance(v, Value):
                results[i] = self.match_declared(v, want)
        return tuple(results) if isinstance(result, tuple) else results[0]


ONNX_OPS = OpTable("ONNX op")
Ctx = OnnxOpContext


def _simple(onnx_op: str, akg_op: str) -> None:
    ONNX_OPS.add(onnx_op, akg_op, lambda c: c.make(akg_op, *(c.v(i) for i in range(len(c.args)))))


# --- elementwise ----------------------------------------------------------------------------------

for _onnx, _akg in {"Exp": "exp", "Log": "log", "Sqrt": "sqrt", "Reciprocal": "reciprocal",
                    "Floor": "floor", "Ceil": "ceil", "Round": "round", "Sin": "sin", "Cos": "cos",
                    "Tanh": "tanh", "Sigmoid": "sigmoid", "Erf": "erf", "Not": "logical_not",
                    "IsNaN": "isnan", "Add": "add", "Sub": "sub", "Mul": "mul",
                    "Equal": "equal", "Greater": "greater", "Less": "less",
                    "GreaterOrEqual": "greater_equal", "LessOrEqual": "less_equal", "And": "logical_and",
                    "Or": "logical_or", "Where": "where"}.items():
    _simple(_onnx, _akg)


def either_not_both(c: Ctx, p: Value, q: Value, what: str) -> Value:
    """p xor q for bool tensors, in logical ops (a bool `not_equal` does not compile on cpu)."""
    return c.make("logical_and", c.make("logical_or", p, q, what=f"{what}_any"),
                  c.make("logical_not", c.make("logical_and", p, q, what=f"{what}_all"), what=f"{what}_not_all"),
                  what=what)


ONNX_OPS.add("Xor", "logical_and, logical_or, logical_not", lambda c: c.make(
    "logical_and", c.make("logical_or", c.v(0), c.v(1), what="any"),
    c.make("logical_not", c.make("logical_and", c.v(0), c.v(1), what="all"), what="not_all")))


def _int_safe(c: Ctx, x: Value, float_op: str, int_fn: Callable[[Value], Value]) -> Value:
    """`float_op` for floating-point x; integer x through `int_fn` (the registry's op takes floats)."""
    return c.make(float_op, x) if is_float(x.dtype) else int_fn(x)


@ONNX_OPS.register_op("Abs", "abs")
def _abs(c: Ctx):
    x = c.v(0)
    zero = c.scalar(0, x, "zero")
    return _int_safe(c, x, "abs", lambda x: c.make("where", c.make("less", x, zero), c.make("sub", zero, x), x))


@ONNX_OPS.register_op("Neg", "neg")
def _neg(c: Ctx):
    x = c.v(0)
    return _int_safe(c, x, "neg", lambda x: c.make("sub", c.scalar(0, x, "zero"), x))


@ONNX_OPS.register_op("Sign", "sign")
def _sign(c: Ctx):
    x = c.v(0)
    zero = c.scalar(0, x, "zero")
    return _int_safe(c, x, "sign", lambda x: c.make("sub", c.make("cast", c.make("greater", x, zero), to=x.dtype),
                                                    c.make("cast", c.make("less", x, zero), to=x.dtype)))


@ONNX_OPS.register_op("Relu", "relu")
def _relu(c: Ctx):
    x = c.v(0)
    return _int_safe(c, x, "relu", lambda x: c.make("maximum", x, c.scalar(0, x, "zero")))


@ONNX_OPS.register_op("Div", "div (integers: truncated towards zero)")
def _div(c: Ctx):
    a, b = c.v(0), c.v(1)
    if is_float(a.dtype):
        return c.make("div", a, b)
    # ONNX integer division truncates; akg's div floors: correct the quotient where the signs differ
    q = c.make("div", a, b, what="floor")
    r = c.make("sub", a, c.make("mul", q, b, what="qb"), what="rem")
    zero = c.scalar(0, a, "zero")
    fix = c.make("logical_and", c.make("not_equal", r, zero),
                 either_not_both(c, c.make("less", a, zero), c.make("less", b, zero), "signs_differ"))
    return c.make("add", q, c.make("cast", fix, to=a.dtype))


@ONNX_OPS.register_op("Mod", "mod (fmod=1: the dividend's sign)")
def _mod(c: Ctx):
    a, b = c.v(0), c.v(1)
    r = c.make("mod", a, b, what="floor")
    if not c.int_("fmod", 0):  # the divisor's sign (ONNX asks fmod=1 for floats; NumPy's mod otherwise)
        return r
    zero = c.scalar(0, a, "zero")
    differ = c.make("logical_and", c.make("not_equal", r, zero),
                    either_not_both(c, c.make("less", a, zero), c.make("less", b, zero), "signs_differ"))
    return c.make("where", differ, c.make("sub", r, b), r)


@ONNX_OPS.register_op("Pow", "pow (integers: in float64)")
def _pow(c: Ctx):
    x, y = c.v(0), c.v(1)
    if y.dtype != x.dtype and is_float(x.dtype):
        y = c.make("cast", y, to=x.dtype, what="exponent")
    if not is_float(x.dtype):
        # integer x: the power in float64 (exact below 2^53), cast back as ONNX's reference does
        # (an integer exponent rounds first, so a pow a hair below an integer stays that integer)
        wide = c.make("pow", c.make("cast", x, to="float64", what="x64"), c.make("cast", c.v(1), to="float64",
                                                                                 what="y64"), what="pow64")
        if not is_float(c.v(1).dtype):
            wide = c.make("round", wide, what="rounded")
        return c.make("cast", wide, to=x.dtype)
    return c.make("pow", x, y)


def _variadic(akg_op: str, mean: bool = False):
    def convert(c: Ctx):
        values = [c.v(i) for i in range(len(c.args))]
        out = values[0]
        for k, v in enumerate(values[1:]):
            out = c.make(akg_op, out, v, what=f"acc{k}")
        if mean:
            out = c.make("div", out, c.scalar(len(values), out, "count"))
        elif len(values) == 1:
            out = c.make("reshape", out, shape=out.shape)
        return out
    return convert


ONNX_OPS.add("Max", "maximum", _variadic("maximum"))
ONNX_OPS.add("Min", "minimum", _variadic("minimum"))
ONNX_OPS.add("Sum", "add", _variadic("add"))
ONNX_OPS.add("Mean", "add, div", _variadic("add", mean=True))


@ONNX_OPS.register_op("Clip", "maximum, minimum")
def _clip(c: Ctx):
    x = c.v(0)
    if c.has(1):
        x = c.make("maximum", x, c.v(1), what="low")
    if c.has(2):
        x = c.make("minimum", x, c.v(2), what="high")
    return x if x is not c.args[0] else c.make("reshape", x, shape=x.shape)


@ONNX_OPS.register_op("IsInf", "isinf, greater, less")
def _isinf(c: Ctx):
    x = c.v(0)
    out = c.make("isinf", x, what="inf")
    zero = c.scalar(0, x, "zero")
    neg, pos = c.int_("detect_negative", 1), c.int_("detect_positive", 1)
    if neg and pos:
        return out
    return c.make("logical_and", out, c.make("greater" if pos else "less", x, zero))


# --- activations (expanded) ---------------------------------------------------------------------


def _where_negative(c: Ctx, x: Value, negative: Value, inclusive: bool = False) -> Value:
    zero = c.scalar(0, x, "zero")
    return c.make("where", c.make("less_equal" if inclusive else "less", x, zero, what="neg"), negative, x)


@ONNX_OPS.register_op("LeakyRelu", "where, mul")
def _leaky_relu(c: Ctx):
    x = c.v(0)
    return _where_negative(c, x, c.make("mul", x, c.scalar(c.float_("alpha", 0.01), x, "alpha")))


@ONNX_OPS.register_op("PRelu", "where, mul")
def _prelu(c: Ctx):
    x = c.v(0)
    return _where_negative(c, x, c.make("mul", x, c.v(1)))


def _expm1(c: Ctx, x: Value) -> Value:
    return c.make("sub", c.make("exp", x, what="exp"), c.scalar(1, x, "one"))


@ONNX_OPS.register_op("Elu", "where, exp")
def _elu(c: Ctx):
    x = c.v(0)
    return _where_negative(c, x, c.make("mul", _expm1(c, x), c.scalar(c.float_("alpha", 1.0), x, "alpha")))


@ONNX_OPS.register_op("Selu", "where, exp, mul")
def _selu(c: Ctx):
    x = c.v(0)
    alpha = c.float_("alpha", 1.67326319217681884765625)
    gamma = c.float_("gamma", 1.05070102214813232421875)
    inner = _where_negative(c, x, c.make("mul", _expm1(c, x), c.scalar(alpha, x, "alpha")), inclusive=True)
    return c.make("mul", inner, c.scalar(gamma, x, "gamma"))


@ONNX_OPS.register_op("Celu", "maximum, minimum, exp")
def _celu(c: Ctx):
    x = c.v(0)
    alpha = c.scalar(c.float_("alpha", 1.0), x, "alpha")
    zero = c.scalar(0, x, "zero")
    neg = c.make("mul", alpha, _expm1(c, c.make("div", x, alpha)))
    return c.make("add", c.make("maximum", x, zero), c.make("minimum", neg, zero))


def _hard_sigmoid(c: Ctx, x: Value, alpha: float, beta: float) -> Value:
    y = c.make("add", c.make("mul", x, c.scalar(alpha, x, "alpha")), c.scalar(beta, x, "beta"))
    return c.make("minimum", c.make("maximum", y, c.scalar(0, x, "zero")), c.scalar(1, x, "one"))


@ONNX_OPS.register_op("HardSigmoid", "maximum, minimum")
def _hardsigmoid(c: Ctx):
    return _hard_sigmoid(c, c.v(0), c.float_("alpha", 0.2), c.float_("beta", 0.5))


@ONNX_OPS.register_op("HardSwish", "mul, maximum, minimum")
def _hardswish(c: Ctx):
    x = c.v(0)
    return c.make("mul", x, _hard_sigmoid(c, x, 1 / 6, 0.5))


@ONNX_OPS.register_op("ThresholdedRelu", "where")
def _thresholded_relu(c: Ctx):
    x = c.v(0)
    return c.make("where", c.make("greater", x, c.scalar(c.float_("alpha", 1.0), x, "alpha")), x,
                c.scalar(0, x, "zero"))


@ONNX_OPS.register_op("Shrink", "where")
def _shrink(c: Ctx):
    x = c.v(0)
    bias, lambd = c.scalar(c.float_("bias", 0.0), x, "bias"), c.float_("lambd", 0.5)
    low = c.make("less", x, c.scalar(-lambd, x, "low"))
    high = c.make("greater", x, c.scalar(lambd, x, "high"))
    return c.make("where", low, c.make("add", x, bias), c.make("where", high, c.make("sub", x, bias),
                                                          c.scalar(0, x, "zero")))


def _softplus(c: Ctx, x: Value) -> Value:
    return c.make("log", c.make("add", c.make("exp", x, what="exp"), c.scalar(1, x, "one")), what="softplus")


ONNX_OPS.add("Softplus", "log, exp", lambda c: _softplus(c, c.v(0)))
ONNX_OPS.add("Mish", "tanh, log, exp", lambda c: c.make("mul", c.v(0), c.make("tanh", _softplus(c, c.v(0)))))


@ONNX_OPS.register_op("Softsign", "div, abs")
def _softsign(c: Ctx):
    x = c.v(0)
    return c.make("div", x, c.make("add", c.make("abs", x), c.scalar(1, x, "one")))


@ONNX_OPS.register_op("Swish", "mul, sigmoid")
def _swish(c: Ctx):
    x = c.v(0)
    return c.make("mul", x, c.make("sigmoid", c.make("mul", x, c.scalar(c.float_("alpha", 1.0), x, "alpha"))))


@ONNX_OPS.register_op("Gelu", "gelu")
def _gelu(c: Ctx):
    return c.make("gelu", c.v(0), approximate=c.str_("approximate", "none"))


@ONNX_OPS.register_op("Tan", "sin, cos")
def _tan(c: Ctx):
    x = c.v(0)
    return c.make("div", c.make("sin", x), c.make("cos", x))


def _exp_pair(c: Ctx, x: Value, sign: str) -> Value:
    e, en = c.make("exp", x, what="exp"), c.make("exp", c.make("neg", x), what="exp_neg")
    return c.make("mul", c.make(sign, e, en), c.scalar(0.5, x, "half"))


ONNX_OPS.add("Sinh", "exp", lambda c: _exp_pair(c, c.v(0), "sub"))
ONNX_OPS.add("Cosh", "exp", lambda c: _exp_pair(c, c.v(0), "add"))


@ONNX_OPS.register_op("Asinh Acosh", "log, sqrt")
def _asinh(c: Ctx):
    x = c.v(0)
    one = c.scalar(1, x, "one")
    sq = c.make("sqrt", c.make("add" if c.op == "Asinh" else "sub", c.make("mul", x, x), one))
    return c.make("log", c.make("add", x, sq))


@ONNX_OPS.register_op("Atanh", "log, div")
def _atanh(c: Ctx):
    x = c.v(0)
    one = c.scalar(1, x, "one")
    return c.make("mul", c.make("log", c.make("div", c.make("add", one, x), c.make("sub", one, x))), c.scalar(0.5, x, "half"))


# --- types and constants --------------------------------------------------------------------------


def _dtype_attr(c: Ctx, code: int) -> str:
    from akg.graph.io.onnx import dtype_of

    return dtype_of(code, c.where)


@ONNX_OPS.register_op("Cast", "cast")
def _cast(c: Ctx):
    return _cast_to(c, c.v(0), _dtype_attr(c, c.int_("to")))


@ONNX_OPS.register_op("CastLike", "cast")
def _cast_like(c: Ctx):
    return _cast_to(c, c.v(0), c.v(1).dtype)


def _cast_to(c: Ctx, x: Value, dtype: str) -> Value:
    if x.dtype == dtype:
        return c.make("reshape", x, shape=x.shape)
    if dtype.startswith("float8"):  # ONNX's saturate (default 1) clamps to the largest finite value
        return c.make("cast", x, to=dtype, saturate=bool(c.int_("saturate", 1)))
    return c.make("cast", x, to=dtype)


@ONNX_OPS.register_op("Identity", "(none)")
def _identity(c: Ctx):
    return c.v(0)


@ONNX_OPS.register_op("Constant", "(a constant)")
def _constant(c: Ctx):
    for name, kind in (("value", None), ("value_float", "float32"), ("value_floats", "float32"),
                       ("value_int", "int64"), ("value_ints", "int64")):
        if name in c.attrs:
            data = np.asarray(c.attrs[name], dtype=kind)
            from akg.graph.io.onnx import DTYPES

            if data.dtype.name not in DTYPES.values():
                raise c.unsupported(f"a constant of type {data.dtype} is not supported")
            return c.imp.const(data, c.name)
    raise c.unsupported(f"Constant with {', '.join(c.attrs) or 'no value'} is not supported (tensors and "
                        "numbers are; strings and sparse tensors are not)")


@ONNX_OPS.register_op("ConstantOfShape", "(a constant)")
def _constant_of_shape(c: Ctx):
    shape = c.known_ints(0, "shape")
    value = c.get("value", np.zeros(1, np.float32))
    return c.imp.const(np.broadcast_to(np.asarray(value).reshape(-1)[:1].reshape(()), shape), c.name)


@ONNX_OPS.register_op("Shape", "(a constant)")
def _shape(c: Ctx):
    dims = list(c.v(0).shape)
    rank = len(dims)
    start, end = c.int_("start", 0), c.get("end", rank)
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    return c.imp.const(np.asarray(dims[start:end], np.int64), c.name)


@ONNX_OPS.register_op("Size", "(a constant)")
def _size(c: Ctx):
    return c.imp.const(np.asarray(c.v(0).type.size, np.int64), c.name)


@ONNX_OPS.register_op("Range", "(a constant)")
def _range(c: Ctx):
    start, limit, delta = (c.known(i, what) for i, what in enumerate(("start", "limit", "delta")))
    return c.imp.const(np.arange(start, limit, delta).astype(np.asarray(start).dtype), c.name)


@ONNX_OPS.register_op("EyeLike", "(a constant)")
def _eye_like(c: Ctx):
    x = c.v(0)
    if len(x.shape) != 2:
        raise c.fail(f"needs a 2-D input, got {x.type}")
    dtype = _dtype_attr(c, c.int_("dtype")) if "dtype" in c.attrs else x.dtype
    return c.imp.const(np.eye(*x.shape, k=c.int_("k", 0), dtype=dtype), c.name)


# --- layout ---------------------------------------------------------------------------------------


@ONNX_OPS.register_op("Reshape", "reshape")
def _reshape(c: Ctx):
    x = c.v(0)
    shape = c.known_ints(1, "shape")
    allowzero = c.int_("allowzero", 0)
    out = [x.shape[i] if d == 0 and not allowzero else d for i, d in enumerate(shape)]
    if out.count(-1) > 1:
        raise c.fail(f"shape {shape} has more than one -1")
    if -1 in out:
        rest = math.prod(d for d in out if d != -1)
        if rest == 0 or x.type.size % rest:
            raise c.fail(f"cannot reshape {x.type} to {shape}")
        out[out.index(-1)] = x.type.size // rest
    return c.make("reshape", x, shape=out)


@ONNX_OPS.register_op("Flatten", "reshape")
def _flatten(c: Ctx):
    x = c.v(0)
    rank = len(x.shape)
    axis = c.int_("axis", 1)
    axis = axis + rank if axis < 0 else axis
    return c.make("reshape", x, shape=[math.prod(x.shape[:axis]), math.prod(x.shape[axis:])])


@ONNX_OPS.register_op("Transpose", "transpose")
def _transpose(c: Ctx):
    x = c.v(0)
    perm = c.ints("perm", None)
    return c.make("transpose", x, perm=perm if perm is not None else list(reversed(range(len(x.shape)))))


def _axes(c: Ctx, index: int) -> list[int] | None:
    """Axes from input `index` (newer opsets) or the `axes` attribute (older ones)."""
    if c.has(index):
        return c.known_ints(index, "axes")
    return c.ints("axes", None)


@ONNX_OPS.register_op("Squeeze", "reshape")
def _squeeze(c: Ctx):
    x = c.v(0)
    axes = _axes(c, 1)
    rank = len(x.shape)
    drop = {c.axis(a, rank, "axes") for a in axes} if axes is not None else {i for i, d in enumerate(x.shape) if d == 1}
    if any(x.shape[a] != 1 for a in drop):
        raise c.fail(f"cannot squeeze axes {sorted(drop)} of {x.type}")
    return c.make("reshape", x, shape=[d for i, d in enumerate(x.shape) if i not in drop])


@ONNX_OPS.register_op("Unsqueeze", "reshape")
def _unsqueeze(c: Ctx):
    x = c.v(0)
    axes = _axes(c, 1)
    if axes is None:
        raise c.fail("needs axes")
    rank = len(x.shape) + len(axes)
    new = {c.axis(a, rank, "axes") for a in axes}
    dims = iter(x.shape)
    return c.make("reshape", x, shape=[1 if i in new else next(dims) for i in range(rank)])


@ONNX_OPS.register_op("Concat", "concat")
def _concat(c: Ctx):
    values = [c.v(i) for i in range(len(c.args)) if c.has(i)]
    values = [v for v in values if v.type.size or len(values) == 1]  # empty pieces add nothing
    if len(values) == 1:
        return c.make("reshape", values[0], shape=values[0].shape)
    return c.make("concat", *values, axis=c.int_("axis"))


@ONNX_OPS.register_op("Split", "split")
def _split(c: Ctx):
    x = c.v(0)
    axis = c.axis(c.int_("axis", 0), len(x.shape))
    sizes = c.known_ints(1, "split") if c.has(1) else c.ints("split", None)
    if sizes is None:
        n = c.int_("num_outputs", len(c.outputs))
        chunk = -(-x.shape[axis] // n)
        sizes = [min(chunk, x.shape[axis] - k * chunk) for k in range(n)]
    if len(sizes) == 1:
        return c.make("reshape", x, shape=x.shape)
    return c.emit("split", [x], None, axis=axis, sizes=sizes)


@ONNX_OPS.register_op("Slice", "slice, strided_slice, gather (negative steps)")
def _slice(c: Ctx):
    x = c.v(0)
    rank = len(x.shape)
    starts, ends = c.known_ints(1, "starts"), c.known_ints(2, "ends")
    axes = c.known_ints(3, "axes") if c.has(3) else list(range(len(starts)))
    steps = c.known_ints(4, "steps") if c.has(4) else [1] * len(starts)
    begin, end, stride = [0] * rank, list(x.shape), [1] * rank
    backwards = []
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = c.axis(a, rank, "axes")
        if st == 0:
            raise c.fail("steps must not be 0")
        lo, hi, st = slice(s, e, st).indices(x.shape[a])
        if st < 0:
            backwards.append((a, list(range(lo, hi, st))))
        else:
            begin[a], end[a], stride[a] = lo, max(hi, lo), st
    out = x
    if begin != [0] * rank or end != list(x.shape) or stride != [1] * rank:
        if stride == [1] * rank:
            out = c.make("slice", x, begin=begin, end=end, what="slice" if backwards else None)
        else:
            out = c.make("strided_slice", x, begin=begin, end=end, strides=stride,
                       what="slice" if backwards else None)
    for k, (a, index) in enumerate(backwards):
        out = c.make("gather", out, c.const(np.asarray(index, np.int64), "int64", f"index{k}"), axis=a,
                   what=f"reverse{k}" if k < len(backwards) - 1 else None)
    return out if out is not x else c.make("reshape", x, shape=x.shape)


@ONNX_OPS.register_op("Expand", "broadcast_to")
def _expand(c: Ctx):
    x = c.v(0)
    shape = broadcast_shapes(x.shape, tuple(c.known_ints(1, "shape")))
    return c.make("broadcast_to", x, shape=shape) if shape != x.shape else c.make("reshape", x, shape=shape)


@ONNX_OPS.register_op("Tile", "reshape, broadcast_to")
def _tile(c: Ctx):
    x = c.v(0)
    reps = c.known_ints(1, "repeats")
    if len(reps) != len(x.shape):
        raise c.fail(f"repeats {reps} need one entry per axis of {x.type}")
    interleaved = [d for pair in zip([1] * len(reps), x.shape) for d in pair]
    wide = c.make("broadcast_to", c.make("reshape", x, shape=interleaved, what="spread"),
                shape=[d for pair in zip(reps, x.shape) for d in pair], what="repeat")
    return c.make("reshape", wide, shape=[r * d for r, d in zip(reps, x.shape)])


@ONNX_OPS.register_op("Pad", "pad; gather (edge, reflect, wrap)")
def _pad(c: Ctx):
    x = c.v(0)
    rank = len(x.shape)
    mode = c.str_("mode", "constant")
    if mode not in ("constant", "edge", "reflect", "wrap"):
        raise c.fail(f"mode '{mode}' is not one of constant, edge, reflect, wrap")
    pads = c.known_ints(1, "pads") if c.has(1) else c.ints("pads")
    value = c.known(2, "constant_value")
    axes = c.known_ints(3, "axes") if c.has(3) else list(range(rank))
    before, after = [0] * rank, [0] * rank
    for k, a in enumerate(axes):
        a = c.axis(a, rank, "axes")
        before[a], after[a] = pads[k], pads[k + len(axes)]
    if min(before + after) < 0:
        raise c.unsupported("negative pads (cropping) are not modelled")
    if mode != "constant":  # each padded axis a gather by the positions np.pad's mode reads
        out = x
        for a in range(rank):
            if before[a] or after[a]:
                if x.shape[a] == 0 or mode == "reflect" and x.shape[a] == 1 and before[a] + after[a]:
                    raise c.fail(f"cannot pad an axis of {x.shape[a]} in mode '{mode}'")
                index = np.pad(np.arange(x.shape[a], dtype=np.int64), (before[a], after[a]), mode=mode)
                out = c.make("gather", out, c.const(index, "int64", f"index{a}"), axis=a, what=f"axis{a}")
        return c.make("reshape", out, shape=out.shape)
    fill = 0.0 if value is None else float(np.asarray(value).reshape(-1)[0]) if np.asarray(value).size else 0.0
    return c.make("pad", x, before=before, after=after, value=fill)


@ONNX_OPS.register_op("Gather", "gather")
def _gather(c: Ctx):
    x, index = c.v(0), c.v(1)
    axis = c.axis(c.int_("axis", 0), len(x.shape))
    size = x.shape[axis]
    data = c.imp.known(index)
    if data is not None:
        index = c.const(np.where(data < 0, data + size, data), data.dtype, "index")
    else:
        zero = c.scalar(0, index, "zero")
        index = c.make("where", c.make("less", index, zero), c.make("add", index, c.scalar(size, index, "size")),
                     index, what="index")
    return c.make("gather", x, index, axis=axis)


@ONNX_OPS.register_op("DepthToSpace", "reshape, transpose")
def _depth_to_space(c: Ctx):
    x = c.v(0)
    b = c.int_("blocksize")
    n, ch, h, w = x.shape
    if c.str_("mode", "DCR") == "DCR":
        t = c.make("reshape", x, shape=[n, b, b, ch // (b * b), h, w], what="blocks")
        t = c.make("transpose", t, perm=[0, 3, 4, 1, 5, 2], what="moved")
    else:
        t = c.make("reshape", x, shape=[n, ch // (b * b), b, b, h, w], what="blocks")
        t = c.make("transpose", t, perm=[0, 1, 4, 2, 5, 3], what="moved")
    return c.make("reshape", t, shape=[n, ch // (b * b), h * b, w * b])


@ONNX_OPS.register_op("SpaceToDepth", "reshape, transpose")
def _space_to_depth(c: Ctx):
    x = c.v(0)
    b = c.int_("blocksize")
    n, ch, h, w = x.shape
    t = c.make("reshape", x, shape=[n, ch, h // b, b, w // b, b], what="blocks")
    crd = c.str_("mode", "DCR") == "CRD"  # channel, then the row and column within the block
    t = c.make("transpose", t, perm=[0, 1, 3, 5, 2, 4] if crd else [0, 3, 5, 1, 2, 4], what="moved")
    return c.make("reshape", t, shape=[n, ch * b * b, h // b, w // b])


@ONNX_OPS.register_op("Trilu", "where (a constant mask)")
def _trilu(c: Ctx):
    x = c.v(0)
    k = c.known_ints(1, "k")
    k = k[0] if k else 0
    rows, cols = x.shape[-2:]
    mask = np.triu(np.ones((rows, cols), bool), k) if c.int_("upper", 1) else np.tril(np.ones((rows, cols), bool), k)
    return c.make("where", c.const(mask, "bool", "mask"), x, c.scalar(0, x, "zero"))


@ONNX_OPS.register_op("OneHot", "one_hot")
def _one_hot(c: Ctx):
    index = c.v(0)
    depth = int(np.asarray(c.known(1, "depth")).reshape(-1)[0])
    values = np.asarray(c.known(2, "values")).reshape(-1)
    index = c.make("where", c.make("less", index, c.scalar(0, index, "zero")),
                   c.make("add", index, c.scalar(depth, index, "depth")), index, what="index")
    if is_float(index.dtype):  # a whole number picks its position, any other none (the reference)
        whole = c.make("cast", index, to="int64", what="whole")
        exact = c.make("equal", c.make("cast", whole, to=index.dtype, what="back"), index, what="exact")
        index = c.make("where", exact, whole, c.scalar(-1, "int64", "none"), what="index64")
    return c.make("one_hot", index, depth=depth, off_value=float(values[0]), on_value=float(values[1]),
                axis=c.int_("axis", -1), dtype=values.dtype.name)


def _element_index(c: Ctx, x: Value, index: Value) -> tuple[Value, int]:
    """GatherElements / ScatterElements indices as int64 with negative ones wrapped, and the axis."""
    rank = len(x.shape)
    axis = c.axis(c.int_("axis", 0), rank)
    if len(index.shape) != rank:
        raise c.fail(f"indices {index.type} need the rank of the data {x.type}")
    index = c.make("cast", index, to="int64", what="index64") if index.dtype != "int64" else index
    zero = c.scalar(0, index, "zero")
    index = c.make("where", c.make("less", index, zero, what="negative"),
                   c.make("add", index, c.scalar(x.shape[axis], index, "size"), what="wrapped"), index, what="index")
    return index, axis


@ONNX_OPS.register_op("GatherElements", "reshape, add, mul, gather (flat indices)")
def _gather_elements(c: Ctx):
    x = c.v(0)
    index, axis = _element_index(c, x, c.v(1))
    return c.gather_along(x, index, axis, index.shape)


def _scatter(c: Ctx, x: Value, flat: Value, flat_index: Value, updates: Value) -> Value:
    """x with `updates` written (reduction none) or added (add) at `flat_index` of `flat`
    (x reshaped so that axis 0 is what the indices address). Written: the addressed
    elements are zeroed first (a scattered count marks them); repeated indices, which ONNX
    leaves undefined for none, add up."""
    reduction = c.str_("reduction", "none")
    if reduction not in ("none", "add", "mul", "max", "min"):
        raise c.fail(f"reduction '{reduction}' is not one of none, add, mul, max, min")
    if reduction in ("mul", "max", "min"):
        return c.make("reshape", _scatter_dense(c, flat, flat_index, updates, reduction), shape=x.shape)
    if reduction == "none":
        ones = c.const(np.ones(updates.shape, np.float32), "float32", "ones")
        zeros = c.const(np.zeros(flat.shape, np.float32), "float32", "zeros")
        hit = c.make("greater", c.make("scatter_add", zeros, flat_index, ones, axis=0, what="count"),
                     c.scalar(0, "float32", "zero_f"), what="hit")
        flat = c.make("where", hit, c.scalar(0, flat, "zero_x"), flat, what="cleared")
    out = c.make("scatter_add", flat, flat_index, updates, axis=0, what="scattered")
    return c.make("reshape", out, shape=x.shape)


def _scatter_dense(c: Ctx, flat: Value, flat_index: Value, updates: Value, reduction: str) -> Value:
    """flat combined (mul, max, min) with every update aimed at each position, repeated indices
    included: a [positions, updates] match of the indices, the updates reduced along it with
    the reduction's identity elsewhere. Quadratic in size; limited to 2^24 match cells."""
    positions, count = flat.shape[0], flat_index.type.size
    inner = list(flat.shape[1:])
    if positions * count * max(math.prod(inner), 1) > 1 << 24:
        raise c.unsupported(f"reduction '{reduction}' over {count} updates of {positions} positions "
                            "(the dense form is quadratic; 2^24 cells are modelled)")
    index = c.make("reshape", flat_index, shape=[1, count], what="index_row")
    match = c.make("equal", c.const(np.arange(positions, dtype=np.int64).reshape(positions, 1), "int64",
                                    "positions"), index, what="match")  # [positions, count]
    hit = c.make("greater", c.make("sum", c.make("cast", match, to="int32", what="match32"), axes=[1],
                                   keepdims=False, what="hits"), c.scalar(0, "int32", "none"), what="hit")
    spread = [1] * len(inner)
    match = c.make("reshape", match, shape=[positions, count, *spread], what="match_wide")
    rows = c.make("reshape", updates, shape=[1, count, *inner], what="update_rows")
    if reduction == "mul":
        identity = 1
    elif is_float(flat.dtype):
        identity = -np.inf if reduction == "max" else np.inf
    else:
        info = np.iinfo(flat.dtype)
        identity = info.min if reduction == "max" else info.max
    aimed = c.make("where", match, rows, c.scalar(identity, flat, "identity"), what="aimed")
    reduced = c.make({"mul": "prod", "max": "max", "min": "min"}[reduction], aimed, axes=[1], keepdims=False,
                     what="reduced")
    combined = c.make({"mul": "mul", "max": "maximum", "min": "minimum"}[reduction], flat, reduced,
                      what="combined")
    hit = c.make("reshape", hit, shape=[positions, *spread], what="hit_wide")
    return c.make("where", hit, combined, flat, what="scattered")


@ONNX_OPS.register_op("ScatterElements", "scatter_add (flat indices), where; dense match for mul/max/min")
def _scatter_elements(c: Ctx):
    x, index, updates = c.v(0), c.v(1), c.v(2)
    flat = c.make("reshape", x, shape=[x.type.size], what="flat")
    index, axis = _element_index(c, x, index)
    return _scatter(c, x, flat, c.flat_index_along(index, axis, x.shape, index.shape), updates)


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


# Abramowitz & Stegun 4.4.49: atan(t) on [0, 1] as t * P(t^2), absolute error below 2e-8
_ATAN_COEFFS = (0.9999993329, -0.3332985605, 0.1994653599, -0.1390853351, 0.0964200441,
                -0.0559098861, 0.0218612288, -0.0040540580)


def atan(c: Ctx, x: Value) -> Value:
    """atan from the registry's arithmetic: |x| > 1 folds to pi/2 - atan(1/|x|), the sign is
    put back at the end (akg has no atan op)."""
    zero, one = c.scalar(0, x, "zero"), c.scalar(1, x, "one")
    ax = c.make("abs", x, what="abs")
    big = c.make("greater", ax, one, what="big")
    t = c.make("where", big, c.make("div", one, ax, what="inv"), ax, what="t")
    t2 = c.make("mul", t, t, what="t2")
    poly = c.scalar(_ATAN_COEFFS[-1], x, "a_last")
    for k, a in enumerate(reversed(_ATAN_COEFFS[:-1])):
        poly = c.make("add", c.make("mul", poly, t2, what=f"h{k}"), c.scalar(a, x, f"a{k}"), what=f"p{k}")
    small = c.make("mul", poly, t, what="small")
    folded = c.make("where", big, c.make("sub", c.scalar(math.pi / 2, x, "half_pi"), small, what="fold"), small,
                    what="folded")
    return c.make("where", c.make("less", x, zero, what="negative"), c.make("neg", folded, what="negated"), folded)


def _asin(c: Ctx, x: Value) -> Value:
    one = c.scalar(1, x, "one")
    cos = c.make("sqrt", c.make("sub", one, c.make("mul", x, x, what="sq"), what="one_minus"), what="cos")
    return atan(c, c.make("div", x, cos, what="tan"))


ONNX_OPS.add("Atan", "(polynomial) mul, add, div, where", lambda c: atan(c, c.v(0)))
ONNX_OPS.add("Asin", "(atan of x / sqrt(1 - x^2))", lambda c: _asin(c, c.v(0)))
ONNX_OPS.add("Acos", "(pi/2 - asin)", lambda c: c.make(
    "sub", c.scalar(math.pi / 2, c.v(0), "half_pi"), _asin(c, c.v(0))))


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


def _nd_index(c: Ctx, x: Value, index: Value) -> tuple[Value, Value]:
    """GatherND / ScatterND: x with its first k axes flattened into one, and the indices'
    last axis (k long, negative entries wrapped) as positions along it."""
    batch = c.int_("batch_dims", 0)
    if batch and c.op != "GatherND":
        raise c.fail("batch_dims is GatherND's")
    k = index.shape[-1]
    lead = x.shape[batch:batch + k]
    index = c.make("cast", index, to="int64", what="index64") if index.dtype != "int64" else index
    dims = c.const(np.asarray(lead, np.int64), "int64", "dims")
    index = c.make("where", c.make("less", index, c.scalar(0, index, "zero"), what="negative"),
                   c.make("add", index, dims, what="wrapped"), index, what="index")
    strides = np.asarray([math.prod(lead[m + 1:]) for m in range(k)], np.int64)
    flat_index = c.make("sum", c.make("mul", index, c.const(strides, "int64", "strides"), what="scaled"),
                        axes=[len(index.shape) - 1], keepdims=False, what="flat_index")
    if batch:  # each batch entry addresses its own block of x
        grid = np.indices(index.shape[:-1], dtype=np.int64)[:batch]
        block = sum(grid[m] * math.prod(x.shape[m + 1:batch]) for m in range(batch)) * math.prod(lead)
        flat_index = c.make("add", flat_index, c.const(np.asarray(block, np.int64), "int64", "block"),
                            what="batched_index")
    flat = c.make("reshape", x, shape=[math.prod(x.shape[:batch + k]), *x.shape[batch + k:]], what="flat")
    return flat, flat_index


@ONNX_OPS.register_op("GatherND", "mul, sum, gather (flat indices)")
def _gather_nd(c: Ctx):
    flat, flat_index = _nd_index(c, c.v(0), c.v(1))
    return c.make("gather", flat, flat_index, axis=0)


@ONNX_OPS.register_op("ScatterND", "mul, sum, scatter_add (flat indices), where; dense match for mul/max/min")
def _scatter_nd(c: Ctx):
    x = c.v(0)
    flat, flat_index = _nd_index(c, x, c.v(1))
    return _scatter(c, x, flat, flat_index, c.v(2))


# --- quantisation ---------------------------------------------------------------------------------

_INT_RANGES = {"uint8": (0, 255), "int8": (-128, 127), "int16": (-32768, 32767)}


def _per_axis(c: Ctx, v: Value, x: Value, what: str) -> Value:
    """A scale or zero point shaped to broadcast against x: a scalar as it is, a 1-D one along
    `axis` (per-axis quantisation), a blocked one (x's rank, `block_size` elements of x per
    entry along `axis`) repeated along it by a gather."""
    block = c.int_("block_size", 0)
    if block:
        axis = c.axis(c.int_("axis", 1), len(x.shape))
        if len(v.shape) != len(x.shape) or v.shape[axis] * block < x.shape[axis]:
            raise c.fail(f"a blocked {what} {v.type} does not cover {x.type} in blocks of {block}")
        index = np.arange(x.shape[axis], dtype=np.int64) // block
        return c.make("gather", v, c.const(index, "int64", f"{what}_blocks"), axis=axis, what=what)
    if len(v.shape) == 0 or v.type.size == 1 and len(v.shape) <= 1:
        return c.make("reshape", v, shape=[], what=what) if v.shape else v
    axis = c.axis(c.int_("axis", 1), len(x.shape))
    shape = [1] * len(x.shape)
    shape[axis] = v.shape[0]
    return c.make("reshape", v, shape=shape, what=what)


@ONNX_OPS.register_op("DequantizeLinear", "sub, mul, cast")
def _dequantize(c: Ctx):
    x, scale = c.v(0), c.v(1)
    if x.dtype not in ("uint8", "int8", "int16", "int32"):
        raise c.unsupported(f"dequantising {x.dtype} is not modelled (8-, 16- and 32-bit integers are)")
    out_dtype = _dtype_attr(c, c.int_("output_dtype")) if c.int_("output_dtype", 0) else scale.dtype
    wide = c.make("cast", x, to="float32", what="wide")
    if c.has(2):
        wide = c.make("sub", wide, c.make("cast", _per_axis(c, c.v(2), x, "zero_point"), to="float32", what="zp"),
                      what="centred")
    y = c.make("mul", wide, c.make("cast", _per_axis(c, scale, x, "scale"), to="float32", what="scale32"),
               what="scaled" if out_dtype != "float32" else None)
    return y if out_dtype == "float32" else c.make("cast", y, to=out_dtype)


@ONNX_OPS.register_op("QuantizeLinear", "div, round, add, clip, cast")
def _quantize(c: Ctx):
    x, scale = c.v(0), c.v(1)
    if c.has(2):
        out_dtype = c.v(2).dtype
    else:
        out_dtype = _dtype_attr(c, c.int_("output_dtype")) if c.int_("output_dtype", 0) else "uint8"
    if out_dtype not in _INT_RANGES:
        raise c.unsupported(f"quantising to {out_dtype} is not modelled (uint8, int8, int16 are)")
    low, high = _INT_RANGES[out_dtype]
    wide = c.make("cast", x, to="float32", what="wide") if x.dtype != "float32" else x
    scale32 = c.make("cast", _per_axis(c, scale, x, "scale"), to="float32", what="scale32")
    q = c.make("round", c.make("div", wide, scale32, what="ratio"), what="rounded")  # half to even
    if c.has(2):
        q = c.make("add", q, c.make("cast", _per_axis(c, c.v(2), x, "zero_point"), to="float32", what="zp"),
                   what="shifted")
    q = c.make("minimum", c.make("maximum", q, c.scalar(low, "float32", "low"), what="floored"),
               c.scalar(high, "float32", "high"), what="clipped")
    return c.make("cast", q, to=out_dtype)

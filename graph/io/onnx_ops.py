"""ONNX op table: how each ONNX op becomes akg's registry ops (`ONNX_OPS`), the context a
converter works in, and the elementwise, type, constant and quantisation converters; the other
families are in the `onnx_*` modules beside it. Used by `akg.graph.io.onnx`. Attribute defaults
are the ONNX spec's."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from akg.errors import UnsupportedError
from akg.graph.io.importer import OpContext, OpTable, brief
from akg.graph.ir import Value
from akg.graph.types import TensorType, is_float

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


class InlineFunctionBody(Exception):
    """Raised by the converter of an op that ONNX defines as a function of other ops, when the
    node is not the common case the converter maps to one akg op: the importer inlines ONNX's
    function body for it instead (as for ops without a converter)."""


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


@ONNX_OPS.register_op("Clip", "maximum, minimum (relu6 for float Clip(0, 6), as torch's ReLU6 exports)")
def _clip(c: Ctx):
    x = c.v(0)
    bounds = [c.imp.known(c.args[i]) if c.has(i) else None for i in (1, 2)]
    if x.dtype.startswith("float") and all(b is not None and b.size == 1 for b in bounds) and \
            [float(b.reshape(())) for b in bounds] == [0.0, 6.0]:
        return c.make("relu6", x)  # the op the other doors import ReLU6 as: the same kernels
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

"""MindIR primitive table: how each MindSpore primitive becomes akg ops (`MINDIR_OPS`),
and the context a converter works in. Used by `akg.graph.io.mindir`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from akg.graph.io.importer import OpContext, OpTable, brief
from akg.graph.ir import Value
from akg.graph.types import TensorType, is_float

if TYPE_CHECKING:
    from akg.graph.io.mindir import MindirImporter

_FORMATS = {0: "NCHW", 1: "NHWC"}


_PAD_MODES = {0: "pad", 1: "same", 2: "valid"}


class _Monad:
    """The side-effect token (UMONAD / IOMONAD) and UpdateState results."""

    def __repr__(self) -> str:
        return "U"


MONAD = _Monad()


@dataclass(frozen=True)
class _Const:
    """A Constant node's value: an ndarray (tensor constants) or a Python scalar, string,
    None or tuple (settings). `name` is the node's, for the graph constant it may become."""

    value: Any
    name: str


@dataclass(frozen=True)
class _Missing:
    """An output of a multi-output op that is not modelled (BatchNorm's batch statistics)."""

    op: str
    what: str


def _flatten(item: Any) -> list[Any]:
    if isinstance(item, tuple):
        return [leaf for x in item for leaf in _flatten(x)]
    return [item]


def _describe(item: Any) -> str:
    if isinstance(item, Value):
        return f"tensor {item.type}"
    if isinstance(item, _Const):
        v = item.value
        return f"constant {v.dtype}{list(v.shape)}" if isinstance(v, np.ndarray) else f"constant {brief(v)}"
    if isinstance(item, tuple):
        return f"tuple of {len(item)}"
    if isinstance(item, _Missing):
        return f"{item.what} of {item.op}"
    return "a side-effect token" if item is MONAD else type(item).__name__


_REQUIRED = object()


class MindirOpContext(OpContext):
    """What a converter sees: the primitive's attributes, the node's inputs (tensors,
    constants, tuples) and the type MindSpore declared for its result; results are named
    after the node."""

    mismatch = "the mapping gives {got} but MindSpore declares {want}"

    def __init__(self, imp: MindirImporter, op: str, attrs: dict[str, Any], args: list[Any],
                 declared: Any, name: str, where: str):
        super().__init__(imp, op, attrs, args, name, where)
        self.declared = declared

    def v(self, i: int, dtype: str | None = None) -> Value:
        if i >= len(self.args):
            raise self.fail(f"missing input {i}")
        return self.imp.tensor_of(self.args[i], f"{self.where}: input {i}", dtype)

    @property
    def out(self) -> TensorType | None:
        """The declared type of the result (item 0 of a tuple result)."""
        d = self.declared
        while isinstance(d, tuple) and d:
            d = d[0]
        return d if isinstance(d, TensorType) else None

    # --- settings: an extra constant input (PRIMITIVE_FUNCTION) or an attribute -------------

    def setting(self, index: int | None, *names: str, default: Any = _REQUIRED) -> Any:
        if index is not None and index < len(self.args):
            item = self.args[index]
            if isinstance(item, tuple) and all(isinstance(x, _Const) for x in item):
                return tuple(x.value for x in item)
            if not isinstance(item, _Const):
                raise self.unsupported(f"setting '{names[0]}' (input {index}) is computed at run "
                                       "time, not a constant")
            if item.value is not None or default is _REQUIRED:
                return item.value  # None given for an optional setting: its default
        for n in names:
            if n in self.attrs:
                return self.attrs[n]
        if default is _REQUIRED:
            raise self.fail(f"missing setting '{names[0]}'")
        return default

    def int_(self, index: int | None, *names: str, default: Any = _REQUIRED) -> int:
        value = _scalar(self.setting(index, *names, default=default))
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise self.fail(f"setting '{names[0]}' must be an integer, got {brief(value)}")
        return int(value)

    def ints(self, index: int | None, *names: str, default: Any = _REQUIRED) -> tuple[int, ...] | None:
        value = self.setting(index, *names, default=default)
        if value is None:
            return None
        if isinstance(value, np.ndarray):
            value = value.reshape(-1).tolist()
        value = _scalar(value)
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            return (int(value),)
        if isinstance(value, (tuple, list)) and all(
                isinstance(_scalar(x), (int, np.integer)) and not isinstance(_scalar(x), bool) for x in value):
            return tuple(int(_scalar(x)) for x in value)
        raise self.fail(f"setting '{names[0]}' must be integers, got {brief(value)}")

    def bool_(self, index: int | None, *names: str, default: Any = _REQUIRED) -> bool:
        value = _scalar(self.setting(index, *names, default=default))
        if not isinstance(value, (bool, np.bool_, int, np.integer)):
            raise self.fail(f"setting '{names[0]}' must be true or false, got {brief(value)}")
        return bool(value)

    def float_(self, index: int | None, *names: str, default: Any = _REQUIRED) -> float:
        value = _scalar(self.setting(index, *names, default=default))
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise self.fail(f"setting '{names[0]}' must be a number, got {brief(value)}")
        return float(value)

    def format(self, index: int | None) -> str:
        value = _scalar(self.setting(index, "format", "data_format", default="NCHW"))
        fmt = _FORMATS.get(value) if isinstance(value, int) else str(value).upper()
        if fmt not in ("NCHW", "NHWC"):
            raise self.unsupported(f"data format {brief(value)} is not modelled (NCHW and NHWC are)")
        return fmt

    # --- the result ---------------------------------------------------------------------------

    def conform(self, result: Any) -> Any:
        """Check a result against the declared type; differences in size-1 axes become a
        reshape, anything else is an error (the mapping would be wrong)."""
        want = self.out
        v = result[0] if isinstance(result, tuple) and result else result
        if want is None or not isinstance(v, Value):
            return result
        w = self.match_declared(v, want)
        if w is v:
            return result
        return (w, *result[1:]) if isinstance(result, tuple) else w


def _scalar(value: Any) -> Any:
    if isinstance(value, np.ndarray) and value.size == 1:
        return value.reshape(()).item()
    if isinstance(value, tuple) and len(value) == 1 and not isinstance(value[0], tuple):
        return _scalar(value[0])
    return value


# --- converters ---------------------------------------------------------------------------------


MINDIR_OPS = OpTable("MindSpore primitive")


def _operands(c: MindirOpContext, n: int, arithmetic: bool) -> list[Value]:
    """n tensor operands of one dtype: constants take it, tensors are cast to it (the declared
    result dtype of arithmetic, else the first floating-point operand's)."""
    tensors = [a for a in c.args[:n] if isinstance(a, Value)]
    out = c.out
    if arithmetic and out is not None and out.dtype != "bool":
        dtype = out.dtype
    else:
        floats = [t.dtype for t in tensors if is_float(t.dtype)]
        dtype = floats[0] if floats else (tensors[0].dtype if tensors else None)
    values = [c.v(i, None if isinstance(c.args[i], Value) else dtype) for i in range(n)]
    return [c.emit("cast", [v], f"in{i}", to=dtype) if dtype and v.dtype != dtype else v
            for i, v in enumerate(values)]


def _elementwise(op: str, arity: int, arithmetic: bool = True) -> Callable[[MindirOpContext], Value]:
    def convert(c: MindirOpContext) -> Value:
        c.expect(arity)
        return c.emit(op, _operands(c, arity, arithmetic))

    return convert


# (table, arity, arithmetic: operands take the declared result dtype)
_ELEMENTWISE = [
    ("ReLU:relu ReLU6:relu6 Sigmoid:sigmoid Tanh:tanh Exp:exp Log:log Sqrt:sqrt Rsqrt:rsqrt "
     "Reciprocal:reciprocal Neg:neg Abs:abs Erf:erf Sin:sin Cos:cos Floor:floor Ceil:ceil "
     "Round:round Sign:sign", 1, True),
    ("Add:add Sub:sub Mul:mul RealDiv:div Div:div Maximum:maximum Minimum:minimum Pow:pow "
     "FloorMod:mod", 2, True),
    ("LogicalNot:logical_not IsNan:isnan IsInf:isinf", 1, False),
    ("Equal:equal NotEqual:not_equal Greater:greater GreaterEqual:greater_equal Less:less "
     "LessEqual:less_equal LogicalAnd:logical_and LogicalOr:logical_or", 2, False),
]
for _table, _arity, _arith in _ELEMENTWISE:
    for _ms, _op in (pair.split(":") for pair in _table.split()):
        MINDIR_OPS.add(_ms, _op, _elementwise(_op, _arity, _arith))


@MINDIR_OPS.register_op("AddExt SubExt", "add / sub, the second operand scaled by alpha when alpha != 1")
def _add_ext(c: MindirOpContext) -> Value:
    c.expect(2, 3)
    a, b = _operands(c, 2, True)
    alpha = c.float_(2, "alpha", default=1.0)
    if alpha != 1:
        b = c.emit("mul", [b, c.const(alpha, b.dtype, "alpha")], "scaled")
    return c.emit("add" if c.op == "AddExt" else "sub", [a, b])


@MINDIR_OPS.register_op("GeLU", "gelu(approximate='tanh') (MindSpore's GeLU is the tanh form)")
def _gelu(c: MindirOpContext) -> Value:
    c.expect(1)
    return c.emit("gelu", [c.v(0)], approximate="tanh")


@MINDIR_OPS.register_op("Square", "mul(x, x)")
def _square(c: MindirOpContext) -> Value:
    c.expect(1)
    return c.emit("mul", [c.v(0), c.v(0)])


@MINDIR_OPS.register_op("SiLU", "mul(x, sigmoid(x))")
def _silu(c: MindirOpContext) -> Value:
    c.expect(1)
    x = c.v(0)
    return c.emit("mul", [x, c.emit("sigmoid", [x], "sigmoid")])


@MINDIR_OPS.register_op("HSigmoid HSwish", "relu6(x + 3) / 6 (times x for HSwish)")
def _hard(c: MindirOpContext) -> Value:
    c.expect(1)
    x = c.v(0)
    gate = c.emit("relu6", [c.emit("add", [x, c.const(3, x.dtype, "three")], "shifted")], "clipped")
    if c.op == "HSigmoid":
        return c.emit("div", [gate, c.const(6, x.dtype, "six")])
    return c.emit("mul", [x, c.emit("div", [gate, c.const(6, x.dtype, "six")], "gate")])


@MINDIR_OPS.register_op("SquaredDifference", "mul(d, d) with d = sub(x, y)")
def _squared_difference(c: MindirOpContext) -> Value:
    c.expect(2)
    d = c.emit("sub", _operands(c, 2, True), "diff")
    return c.emit("mul", [d, d])


@MINDIR_OPS.register_op("FloorDiv", "div (integers: floor division), then floor for floats")
def _floor_div(c: MindirOpContext) -> Value:
    c.expect(2)
    q = c.emit("div", _operands(c, 2, True), None if not is_float(c.v(0).dtype) else "quotient")
    return q if not is_float(q.dtype) else c.emit("floor", [q])


@MINDIR_OPS.register_op("Select", "where(cond, x, y)")
def _select(c: MindirOpContext) -> Value:
    c.expect(3)
    cond = c.v(0, "bool")
    if cond.dtype != "bool":
        cond = c.emit("not_equal", [cond, c.const(0, cond.dtype, "zero")], "cond")
    sub = c.with_args(c.args[1:])
    x, y = _operands(sub, 2, True)
    return c.emit("where", [cond, x, y])


@MINDIR_OPS.register_op("Cast", "cast(to = the dtype MindSpore declares for the result)")
def _cast(c: MindirOpContext) -> Value:
    c.expect(1, 2)
    if c.out is None:
        raise c.fail("the result type is not recorded in the file (node attribute 'shape')")
    x = c.v(0)
    return x if x.dtype == c.out.dtype else c.emit("cast", [x], to=c.out.dtype)


@MINDIR_OPS.register_op("AddN", "add chain ((x0 + x1) + x2 ...)")
def _add_n(c: MindirOpContext) -> Value:
    items = _flatten(tuple(c.args))
    if not items:
        raise c.fail("AddN needs at least one input")
    sub = c.with_args(items)
    values = _operands(sub, len(items), True)
    acc = values[0]
    for i, v in enumerate(values[1:], 1):
        acc = c.emit("add", [acc, v], None if i == len(values) - 1 else f"sum{i}")
    return acc


@MINDIR_OPS.register_op("Dropout", "identity (inference); the mask output is unsupported")
def _dropout(c: MindirOpContext) -> Any:
    c.expect(1, 4)
    return (c.v(0), _Missing(c.op, "the mask output"))


# --- linear algebra -----------------------------------------------------------------------------


@MINDIR_OPS.register_op("MatMul BatchMatMul", "matmul (2-D) / batch_matmul(transpose_a, transpose_b)")
def _matmul(c: MindirOpContext) -> Value:
    c.expect(2, 4)
    a, b = _operands(c, 2, True)
    ta = c.bool_(2, "transpose_a", "transpose_x1", default=False)
    tb = c.bool_(3, "transpose_b", "transpose_x2", default=False)
    op = "matmul" if a.type.rank == 2 and b.type.rank == 2 else "batch_matmul"
    return c.emit(op, [a, b], transpose_a=ta, transpose_b=tb)


@MINDIR_OPS.register_op("Dense", "dense(x, weight[, bias]): x @ weight.T + bias")
def _dense(c: MindirOpContext) -> Value:
    c.expect(2, 3)
    inputs = [c.v(0), c.v(1)]
    if len(c.args) == 3 and not (isinstance(c.args[2], _Const) and c.args[2].value is None):
        inputs.append(c.v(2, inputs[0].dtype))
    return c.emit("dense", inputs)


@MINDIR_OPS.register_op("BiasAdd", "add, the bias reshaped onto the channel axis (axis 1 for NCHW, last for NHWC)")
def _bias_add(c: MindirOpContext) -> Value:
    c.expect(2, 3)
    x, b = c.v(0), c.v(1)
    if b.type.rank != 1:
        raise c.fail(f"the bias must be 1-D, got {b.type}")
    if c.format(2) == "NCHW" and x.type.rank > 2:
        b = c.emit("reshape", [b], "bias", shape=(b.shape[0],) + (1,) * (x.type.rank - 2))
    return c.emit("add", [x, b])


# --- convolution and pooling --------------------------------------------------------------------


def _hw(c: MindirOpContext, value: tuple[int, ...] | None, fmt: str, what: str,
        default: tuple[int, int]) -> tuple[int, int]:
    if value is None:
        return default
    if len(value) == 1:
        return value[0], value[0]
    if len(value) == 2:
        return value[0], value[1]
    if len(value) == 4:
        return (value[2], value[3]) if fmt == "NCHW" else (value[1], value[2])
    raise c.fail(f"setting '{what}' must have 1, 2 or 4 entries, got {list(value)}")


def _pad_mode(c: MindirOpContext, index: int | None) -> str:
    value = _scalar(c.setting(index, "pad_mode", default="valid"))
    mode = _PAD_MODES.get(value) if isinstance(value, int) else str(value).lower()
    if mode not in ("pad", "same", "valid"):
        raise c.unsupported(f"pad_mode {brief(value)} is not modelled (pad, same and valid are)")
    return mode


def _same_pads(size: int, k: int, s: int, d: int = 1) -> tuple[int, int]:
    """TensorFlow's 'same' padding of one axis: (low, high), the odd cell at the high end."""
    out = -(-size // s)
    total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
    return total // 2, total - total // 2


@MINDIR_OPS.register_op("Conv2D", "conv2d(strides, padding from pad_list / pad_mode, dilation, groups); "
                     "NHWC data between transposes")
def _conv2d(c: MindirOpContext) -> Value:
    c.expect(2)
    if c.setting(None, "mode", default=1) != 1:
        raise c.unsupported(f"mode {brief(c.setting(None, 'mode'))} (only 1, cross-correlation, is)")
    fmt = c.format(None)
    x, w = _operands(c, 2, True)
    if x.type.rank != 4 or w.type.rank != 4:
        raise c.fail(f"needs 4-D data and weight, got {x.type} and {w.type}")
    if fmt == "NHWC":
        x = c.emit("transpose", [x], "x_nchw", perm=(0, 3, 1, 2))
        w = c.emit("transpose", [w], "w_oihw", perm=(0, 3, 1, 2))
    strides = _hw(c, c.ints(None, "stride", "strides", default=None), fmt, "stride", (1, 1))
    dilation = _hw(c, c.ints(None, "dilation", default=None), fmt, "dilation", (1, 1))
    groups = c.int_(None, "group", "groups", default=1)
    pads = c.ints(None, "pad_list", default=None)  # top, bottom, left, right
    mode = _pad_mode(c, None)
    if pads is None or len(pads) != 4:
        if mode == "pad":
            pads = c.ints(None, "pad", default=(0, 0, 0, 0))
            pads = pads * 4 if len(pads) == 1 else pads
        elif mode == "same":
            (h, wd), (kh, kw) = x.shape[2:], w.shape[2:]
            pads = (*_same_pads(h, kh, strides[0], dilation[0]), *_same_pads(wd, kw, strides[1], dilation[1]))
        else:
            pads = (0, 0, 0, 0)
    if len(pads) != 4:
        raise c.fail(f"padding must have 4 entries (top, bottom, left, right), got {list(pads)}")
    y = c.emit("conv2d", [x, w], "nchw" if fmt == "NHWC" else None, strides=strides,
               padding=(pads[0], pads[2], pads[1], pads[3]), dilation=dilation, groups=groups)
    return c.emit("transpose", [y], perm=(0, 2, 3, 1)) if fmt == "NHWC" else y


@MINDIR_OPS.register_op("MaxPool AvgPool", "max_pool2d / avg_pool2d(kernel, strides, 'same' padding; avg "
                              "divides by the cells inside the input); NHWC between transposes")
def _pool(c: MindirOpContext) -> Value:
    c.expect(1, 5)
    fmt = c.format(4)
    x = c.v(0)
    if x.type.rank != 4:
        raise c.fail(f"needs 4-D input, got {x.type}")
    if fmt == "NHWC":
        x = c.emit("transpose", [x], "x_nchw", perm=(0, 3, 1, 2))
    k = _hw(c, c.ints(1, "kernel_size"), fmt, "kernel_size", (1, 1))
    s = _hw(c, c.ints(2, "strides"), fmt, "strides", (1, 1))
    mode = _pad_mode(c, 3)
    if mode == "pad":
        raise c.unsupported("pad_mode 'pad' of pooling")
    pads = (0, 0, 0, 0)
    if mode == "same":
        (pt, pb), (pl, pr) = _same_pads(x.shape[2], k[0], s[0]), _same_pads(x.shape[3], k[1], s[1])
        pads = (pt, pl, pb, pr)
    nhwc = "nchw" if fmt == "NHWC" else None
    if c.op == "MaxPool":
        y = c.emit("max_pool2d", [x], nhwc, kernel=k, strides=s, padding=pads)
    else:
        y = c.emit("avg_pool2d", [x], nhwc, kernel=k, strides=s, padding=pads, count_include_pad=False)
    return c.emit("transpose", [y], perm=(0, 2, 3, 1)) if fmt == "NHWC" else y


# --- normalisation and softmax ------------------------------------------------------------------


@MINDIR_OPS.register_op("BatchNorm", "batch_norm(axis = channel axis, epsilon) with the moving statistics "
                        "(inference only); the batch-statistics outputs are unsupported")
def _batch_norm(c: MindirOpContext) -> Any:
    c.expect(5, 9)
    if c.bool_(5, "is_training", default=False):
        raise c.unsupported("training mode (is_training=True)")
    x = c.v(0)
    params = [c.v(i, x.dtype) for i in range(1, 5)]
    axis = 1 if c.format(8) == "NCHW" else x.type.rank - 1
    eps = c.float_(6, "epsilon", default=1e-5)
    y = c.emit("batch_norm", [x, *params], axis=axis, epsilon=eps)
    return (y, *(_Missing(c.op, f"output {i} (batch statistics)") for i in range(1, 5)))


@MINDIR_OPS.register_op("LayerNorm", "layer_norm(begin_norm_axis, epsilon); gamma and beta applied apart "
                        "when begin_params_axis differs; the mean / rstd outputs are unsupported")
def _layer_norm(c: MindirOpContext) -> Any:
    c.expect(3, 6)
    x = c.v(0)
    gamma, beta = c.v(1, x.dtype), c.v(2, x.dtype)
    rank = x.type.rank
    norm_axis = c.int_(3, "begin_norm_axis", default=-1) % max(rank, 1)
    params_axis = c.int_(4, "begin_params_axis", default=-1) % max(rank, 1)
    eps = c.float_(5, "epsilon", default=1e-7)
    if params_axis == norm_axis:
        y = c.emit("layer_norm", [x, gamma, beta], begin_norm_axis=norm_axis, epsilon=eps)
    else:
        shape = x.shape[norm_axis:]
        ones, zeros = c.const(np.ones(shape), x.dtype, "ones"), c.const(np.zeros(shape), x.dtype, "zeros")
        normed = c.emit("layer_norm", [x, ones, zeros], "normed", begin_norm_axis=norm_axis, epsilon=eps)
        y = c.emit("add", [c.emit("mul", [normed, gamma], "scaled"), beta])
    return (y, _Missing(c.op, "output 1 (mean)"), _Missing(c.op, "output 2 (rstd)"))


@MINDIR_OPS.register_op("Softmax LogSoftmax", "softmax / log_softmax(axis); one axis only")
def _softmax(c: MindirOpContext) -> Value:
    c.expect(1, 2)
    axes = c.ints(1, "axis", default=(-1,))
    if len(axes) != 1:
        raise c.unsupported(f"softmax over several axes {list(axes)}")
    return c.emit("softmax" if c.op == "Softmax" else "log_softmax", [c.v(0)], axis=axes[0])


# --- reductions ---------------------------------------------------------------------------------


def _reduction(op: str) -> Callable[[MindirOpContext], Value]:
    def convert(c: MindirOpContext) -> Value:
        c.expect(1, 4)
        x = c.v(0)
        axes = c.ints(1, "axis", default=())
        keep = c.bool_(2, "keep_dims", default=False)
        if not axes and len(c.args) > 3 and c.bool_(3, "skip_mode", default=False):
            return x  # ReduceSum(skip_mode=True) over no axes is the identity
        return c.emit(op, [x], axes=axes or None, keepdims=keep)  # (): every axis

    return convert


for _ms, _op in (("ReduceSum", "sum"), ("ReduceMean", "mean"), ("ReduceMax", "max"),
                 ("ReduceMin", "min"), ("ReduceProd", "prod")):
    MINDIR_OPS.add(_ms, f"{_op}(axes = axis (empty: all), keepdims)", _reduction(_op))


@MINDIR_OPS.register_op("Argmax Argmin", "argmax / argmin(axis), cast to the declared index dtype")
def _argmax(c: MindirOpContext) -> Value:
    c.expect(1, 3)
    axis = c.int_(1, "axis", default=-1)
    y = c.emit("argmax" if c.op == "Argmax" else "argmin", [c.v(0)], "index", axis=axis)
    want = c.out.dtype if c.out is not None else "int32"
    return y if y.dtype == want else c.emit("cast", [y], to=want)


# --- layout -------------------------------------------------------------------------------------


@MINDIR_OPS.register_op("Reshape", "reshape(shape) (-1 allowed)")
def _reshape(c: MindirOpContext) -> Value:
    c.expect(1, 2)
    return c.emit("reshape", [c.v(0)], shape=c.ints(1, "shape"))


@MINDIR_OPS.register_op("Flatten", "reshape to [N, product of the other axes]")
def _flatten_op(c: MindirOpContext) -> Value:
    c.expect(1)
    x = c.v(0)
    return c.emit("reshape", [x], shape=(x.shape[0] if x.shape else 1, math.prod(x.shape[1:])))


@MINDIR_OPS.register_op("FlattenExt", "reshape merging the axes start_dim..end_dim")
def _flatten_ext(c: MindirOpContext) -> Value:
    c.expect(1, 3)
    x = c.v(0)
    rank = max(x.type.rank, 1)
    start, end = c.int_(1, "start_dim", default=0) % rank, c.int_(2, "end_dim", default=-1) % rank
    shape = (*x.shape[:start], math.prod(x.shape[start:end + 1]), *x.shape[end + 1:])
    return c.emit("reshape", [x], shape=shape if x.shape else (1,))


@MINDIR_OPS.register_op("Transpose", "transpose(perm)")
def _transpose(c: MindirOpContext) -> Value:
    c.expect(1, 2)
    return c.emit("transpose", [c.v(0)], perm=c.ints(1, "perm", "input_perm"))


@MINDIR_OPS.register_op("ExpandDims", "expand_dims(axis)")
def _expand_dims(c: MindirOpContext) -> Value:
    c.expect(1, 2)
    return c.emit("expand_dims", [c.v(0)], axis=c.int_(1, "axis"))


@MINDIR_OPS.register_op("Squeeze", "squeeze(axes) (empty: every size-1 axis)")
def _squeeze(c: MindirOpContext) -> Value:
    c.expect(1, 2)
    return c.emit("squeeze", [c.v(0)], axes=c.ints(1, "axis", default=()) or None)


@MINDIR_OPS.register_op("Concat", "concat(axis) of a tuple of tensors")
def _concat(c: MindirOpContext) -> Value:
    c.expect(1, 2)
    items = _flatten(c.args[0]) if isinstance(c.args[0], tuple) else [c.args[0]]
    sub = c.with_args(items)
    return c.emit("concat", _operands(sub, len(items), True), axis=c.int_(1, "axis", default=0))


@MINDIR_OPS.register_op("Split", "split(axis, sections = output_num), a tuple")
def _split(c: MindirOpContext) -> Any:
    c.expect(1, 3)
    axis, parts = c.int_(1, "axis", default=0), c.int_(2, "output_num", default=1)
    out = c.emit("split", [c.v(0)], axis=axis, sections=parts)
    return out if isinstance(out, tuple) else (out,)


@MINDIR_OPS.register_op("Gather", "gather(axis); batch_dims must be 0")
def _gather(c: MindirOpContext) -> Value:
    c.expect(2, 4)
    if c.int_(3, "batch_dims", default=0) != 0:
        raise c.unsupported("batch_dims != 0")
    return c.emit("gather", [c.v(0), c.v(1)], axis=c.int_(2, "axis", default=0))


@MINDIR_OPS.register_op("Slice", "slice(begin, end = begin + size; size -1: to the end)")
def _slice(c: MindirOpContext) -> Value:
    c.expect(1, 3)
    x = c.v(0)
    begin, size = c.ints(1, "begin"), c.ints(2, "size")
    if len(begin) != x.type.rank or len(size) != x.type.rank:
        raise c.fail(f"begin {list(begin)} and size {list(size)} need one entry per axis of {x.type}")
    end = tuple(d if s == -1 else b + s for b, s, d in zip(begin, size, x.shape))
    return c.emit("slice", [x], begin=begin, end=end)


@MINDIR_OPS.register_op("StridedSlice", "strided_slice(begin, end, strides) with begin/end masks; shrink_axis "
                           "as a reshape (ellipsis and new-axis masks unsupported)")
def _strided_slice(c: MindirOpContext) -> Value:
    c.expect(1, 9)
    x = c.v(0)
    begin, end, strides = list(c.ints(1, "begin")), list(c.ints(2, "end")), list(c.ints(3, "strides"))
    masks = [c.int_(i, n, default=0) for i, n in
             enumerate(("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask"), 4)]
    if masks[2] or masks[3]:
        raise c.unsupported("ellipsis_mask and new_axis_mask")
    if not len(begin) == len(end) == len(strides) <= x.type.rank:
        raise c.fail(f"begin, end and strides must have one entry per sliced axis of {x.type}")
    for i in range(len(begin), x.type.rank):  # unlisted axes are taken whole
        begin.append(0), end.append(x.shape[i]), strides.append(1)
    for i, d in enumerate(x.shape):
        if masks[0] >> i & 1:
            begin[i] = 0 if strides[i] > 0 else -1
        if masks[1] >> i & 1:
            end[i] = d if strides[i] > 0 else -(d + 1)
        if masks[4] >> i & 1:
            end[i], strides[i] = (begin[i] + 1) or d, 1  # one element (begin -1: the last)
    y = c.emit("strided_slice", [x], "sliced" if masks[4] else None, begin=begin, end=end, strides=strides)
    if masks[4]:
        y = c.emit("reshape", [y], shape=[d for i, d in enumerate(y.shape) if not masks[4] >> i & 1])
    return y


@MINDIR_OPS.register_op("BroadcastTo", "broadcast_to(shape) (-1: keep the input's size)")
def _broadcast_to(c: MindirOpContext) -> Value:
    c.expect(1, 2)
    x = c.v(0)
    shape = list(c.ints(1, "shape"))
    off = len(shape) - x.type.rank
    shape = [x.shape[i - off] if d == -1 and i >= off else d for i, d in enumerate(shape)]
    return c.emit("broadcast_to", [x], shape=shape)


@MINDIR_OPS.register_op("Pad", "pad(before, after) from paddings ((before, after) per axis), zeros")
def _pad(c: MindirOpContext) -> Value:
    c.expect(1, 2)
    pairs = c.setting(1, "paddings")
    try:
        flat = [int(p) for p in np.asarray(pairs, dtype=np.int64).reshape(-1)]
    except (TypeError, ValueError):
        raise c.fail(f"paddings must be (before, after) pairs of integers, got {brief(pairs)}") from None
    if len(flat) != 2 * c.v(0).type.rank:
        raise c.fail(f"paddings must be one (before, after) pair per axis, got {brief(pairs)}")
    return c.emit("pad", [c.v(0)], before=flat[0::2], after=flat[1::2])


@MINDIR_OPS.register_op("OneHot", "one_hot(depth, on_value, off_value, axis)")
def _one_hot(c: MindirOpContext) -> Value:
    c.expect(4, 5)
    on, off = (_scalar(c.args[i].value) if isinstance(c.args[i], _Const) else None for i in (2, 3))
    if on is None or off is None:
        raise c.unsupported("on_value and off_value must be constants")
    dtype = c.out.dtype if c.out is not None else "float32"
    return c.emit("one_hot", [c.v(0)], depth=c.int_(1, "depth"), on_value=float(on),
                  off_value=float(off), axis=c.int_(4, "axis", default=-1), dtype=dtype)


@MINDIR_OPS.register_op("ZerosLike OnesLike", "a constant of the input's type")
def _fill_like(c: MindirOpContext) -> Value:
    c.expect(1)
    x = c.v(0)
    value = c.const(0 if c.op == "ZerosLike" else 1, x.dtype, "fill")
    return value if x.type.rank == 0 else c.emit("broadcast_to", [value], shape=x.shape)


@MINDIR_OPS.register_op("Shape", "the static shape, as a constant tuple")
def _shape(c: MindirOpContext) -> Any:
    c.expect(1)
    return _Const(tuple(c.v(0).shape), c.name)

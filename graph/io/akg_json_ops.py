"""The AKG composite-JSON op table (`AKG_OPS`): the file's tensor descriptors and attributes
as read, the context a converter works in (FRACTAL_NZ re-layout of DefaultFormat operands), and
one converter per AKG op onto akg's registry ops. Used by `akg.graph.io.akg_json`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from akg.graph.io.importer import ImportFail, OpContext, OpTable, brief, same_data
from akg.graph.ir import Value
from akg.graph.types import TensorType, canonical_dtype

if TYPE_CHECKING:
    from akg.graph.io.akg_json import AkgJsonImporter


FRACTAL_NZ = "FRACTAL_NZ"
DEFAULT_FORMAT = "DefaultFormat"

# AKG data_type names that differ from NumPy's
_DTYPE_ALIASES = {"float": "float32", "half": "float16", "int": "int32"}


AKG_OPS = OpTable("AKG op")  # filled below, next to each converter


@dataclass(frozen=True)
class _Desc:
    """One tensor description from the file."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    format: str | None
    has_value: bool = False
    value: Any = None

    @property
    def type(self) -> TensorType:
        return TensorType(self.shape, self.dtype)


@dataclass
class _Arg:
    """One resolved op input: its graph value, file description and storage format."""

    value: Value
    desc: _Desc
    format: str | None
    const: np.ndarray | None = None  # the data when the input is a constant

    @property
    def is_const(self) -> bool:
        return self.const is not None


# --- file-level parsing -------------------------------------------------------------------------


def _dtype(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ImportFail(f"{where}: data_type must be a string, got {brief(value)}")
    try:
        return canonical_dtype(_DTYPE_ALIASES.get(value, value))
    except ValueError:
        raise ImportFail(f"{where}: unsupported data_type '{value}'") from None


def _desc(d: Any, where: str) -> _Desc:
    if not isinstance(d, dict):
        raise ImportFail(f"{where}: expected a tensor description (object), got {type(d).__name__}")
    for key in ("tensor_name", "shape", "data_type"):
        if key not in d:
            raise ImportFail(f"{where}: missing key '{key}'")
    name, shape = d["tensor_name"], d["shape"]
    if not isinstance(name, str) or not name:
        raise ImportFail(f"{where}: tensor_name must be a non-empty string, got {brief(name)}")
    if not isinstance(shape, list) or any(
        isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in shape
    ):
        raise ImportFail(f"{where} ({name}): shape must be a list of non-negative integers, got {brief(shape)}")
    fmt = d.get("format")
    return _Desc(name, tuple(shape), _dtype(d["data_type"], f"{where} ({name})"),
                 fmt if isinstance(fmt, str) else None, "value" in d, d.get("value"))


def _desc_lists(value: Any, where: str) -> list[_Desc]:
    """`input_desc`: a list of lists of tensor descriptions (null: none), flattened."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ImportFail(f"{where}: expected a list, got {type(value).__name__}")
    out = []
    for i, group in enumerate(value):
        items = group if isinstance(group, list) else [group]
        out.extend(_desc(d, f"{where}[{i}]") for d in items)
    return out


def _attrs(op: dict, where: str) -> dict[str, Any]:
    raw = op.get("attr")
    if raw is None or raw == {}:  # no attributes (some files write an empty object)
        return {}
    if not isinstance(raw, list):
        raise ImportFail(f"{where}: 'attr' must be a list, got {type(raw).__name__}")
    out = {}
    for a in raw:
        if not isinstance(a, dict) or not isinstance(a.get("name"), str):
            raise ImportFail(f"{where}: each attr needs a 'name', got {brief(a)}")
        out[a["name"]] = a.get("value")
    return out


class AkgJsonOpContext(OpContext):
    """What a converter sees: the op's attributes, resolved inputs (`_Arg`s) and declared
    output `out`, whose tensor name names the results."""

    inputs_range = " or "  # counts are at most one apart: "takes 2 or 3 inputs"
    cast_bool_results = True

    def __init__(self, imp: AkgJsonImporter, op: str, attrs: dict[str, Any], args: list[_Arg],
                 out: _Desc, where: str):
        super().__init__(imp, op, attrs, args, out.name, where)
        self.out = out

    def v(self, i: int) -> Value:
        return self.args[i].value

    def int_list(self, *names: str, default: Any = None) -> tuple[int, ...] | None:
        value = self.attr(*names, default=default)
        if value is None:
            return None
        if isinstance(value, int) and not isinstance(value, bool):
            return (value,)
        if isinstance(value, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in value):
            return tuple(value)
        raise self.fail(f"attribute '{names[0]}' must be an integer or a list of integers, got {brief(value)}")

    def out_dtype(self, *names: str) -> str:
        """The dtype named by an attribute (dst_type), else the declared output dtype."""
        value = self.attr(*names)
        return _dtype(value, self.where) if value is not None else self.out.dtype

    def to_nz(self, arg: _Arg, nz: _Arg) -> Value:
        """Rewrite DefaultFormat `arg` ([..., m, n]) into the FRACTAL_NZ layout of `nz`."""
        frac = nz.value.shape
        if len(frac) < 4:
            raise self.fail(f"FRACTAL_NZ tensor '{nz.desc.name}' has rank {len(frac)} < 4")
        n1, m1, m0, n0 = frac[-4:]
        shape = arg.value.shape
        if len(shape) < 2:
            shape = (1,) * (2 - len(shape)) + shape
        *batch, m, n = shape
        if m not in (1, m1 * m0) or n not in (1, n1 * n0):
            raise self.unsupported(
                f"DefaultFormat {arg.value.type} ('{arg.desc.name}') does not broadcast against "
                f"the logical shape [..., {m1 * m0}, {n1 * n0}] of FRACTAL_NZ "
                f"'{nz.desc.name}' {nz.value.type}: a data-format transformation with padding "
                "would be needed")
        if m == 1 or n == 1:  # moving size-1 axes is a pure reshape
            target = (*batch, *((1,) if n == 1 else (n1,)), *((1, 1) if m == 1 else (m1, m0)),
                      *((1,) if n == 1 else (n0,)))
            return self.emit("reshape", [arg.value], "nz", shape=target)
        blocked = self.emit("reshape", [arg.value], "nz_blocks", shape=(*batch, m1, m0, n1, n0))
        r = len(batch)
        perm = (*range(r), r + 2, r, r + 1, r + 3)
        return self.emit("transpose", [blocked], "nz", perm=perm)

    def operands(self, *idx: int) -> list[Value]:
        """Input values for an elementwise op, DefaultFormat ones re-laid out for FRACTAL_NZ."""
        args = [self.args[i] for i in idx]
        nz = [a for a in args if a.format == FRACTAL_NZ and not a.is_const]
        values = [a.value for a in args]
        if nz:
            for j, a in enumerate(args):
                if (a.format != FRACTAL_NZ and not a.is_const and a.value.type.size > 1
                        and a.value.shape != nz[0].value.shape):
                    values[j] = self.to_nz(a, nz[0])
        return values

    def conform(self, v: Value) -> Value:
        """Make `v` match the declared output: cast bool results declared numeric, reshape away
        differences in size-1 axes; anything else is an error."""
        return self.match_declared(v, self.out.type)


# --- converters ---------------------------------------------------------------------------------


def _elementwise(op: str, arity: int) -> Callable[[AkgJsonOpContext], Value]:
    def convert(c: AkgJsonOpContext) -> Value:
        c.expect(arity)
        return c.emit(op, c.operands(*range(arity)))  # NumPy broadcasting (NZ operands aligned)

    return convert


_UNARY = ("Abs:abs Neg:neg Exp:exp Log:log Sqrt:sqrt Rsqrt:rsqrt Reciprocal:reciprocal Tanh:tanh "
          "Sin:sin Cos:cos Erf:erf Floor:floor Sign:sign IsInf:isinf IsNan:isnan "
          "LogicalNot:logical_not")
_BINARY = ("Add:add TensorAdd:add Sub:sub Mul:mul RealDiv:div Div:div Maximum:maximum "
           "Minimum:minimum Pow:pow Equal:equal NotEqual:not_equal Greater:greater "
           "GreaterEqual:greater_equal Less:less LessEqual:less_equal LogicalAnd:logical_and "
           "LogicalOr:logical_or")
for _table, _arity in ((_UNARY, 1), (_BINARY, 2)):
    for _akg, _op in (pair.split(":") for pair in _table.split()):
        AKG_OPS.add(_akg, _op, _elementwise(_op, _arity))


@AKG_OPS.register_op("Select", "where (cond != 0 first when cond is not bool)")
def _select(c: AkgJsonOpContext) -> Value:
    c.expect(3)
    cond, x, y = c.operands(0, 1, 2)
    if cond.dtype != "bool":
        cond = c.emit("not_equal", [cond, c.const(0, cond.dtype, "zero")], "cond")
    return c.emit("where", [cond, x, y])


@AKG_OPS.register_op("Cast", "cast(to=dst_type)")
def _cast(c: AkgJsonOpContext) -> Value:
    c.expect(1)
    return c.emit("cast", [c.v(0)], to=c.out_dtype("dst_type", "DstT"))


@AKG_OPS.register_op("Reshape", "reshape(shape=declared output shape)")
def _reshape(c: AkgJsonOpContext) -> Value:
    c.expect(1)
    if c.v(0).type.size != c.out.type.size:
        raise c.fail(f"cannot reshape {c.v(0).type} to {list(c.out.shape)}")
    return c.emit("reshape", [c.v(0)], shape=c.out.shape)


@AKG_OPS.register_op("BroadcastTo", "broadcast_to(shape) (reshape when only size-1 axes change)")
def _broadcast_to(c: AkgJsonOpContext) -> Value:
    c.expect(1)
    x, target = c.v(0), c.out.shape
    if same_data(x.shape, target):
        return c.emit("reshape", [x], shape=target)  # only size-1 axes differ: no data moves
    if x.type.rank > len(target):
        extra = x.type.rank - len(target)
        if any(d != 1 for d in x.shape[:extra]):
            raise c.fail(f"cannot broadcast {x.type} to {list(target)}")
        x = c.emit("reshape", [x], "rank", shape=x.shape[extra:])
    return c.emit("broadcast_to", [x], shape=target)


@AKG_OPS.register_op("Transpose", "transpose(perm)")
def _transpose(c: AkgJsonOpContext) -> Value:
    c.expect(1)
    perm = c.int_list("perm")
    if perm is None:
        raise c.fail("missing attribute 'perm'")
    return c.emit("transpose", [c.v(0)], perm=perm)


@AKG_OPS.register_op("ExpandDims", "expand_dims(axis)")
def _expand_dims(c: AkgJsonOpContext) -> Value:
    c.expect(1)
    axis = c.int_list("axis")
    if axis is None or len(axis) != 1:
        raise c.fail(f"attribute 'axis' must be one integer, got {brief(c.attr('axis'))}")
    return c.emit("expand_dims", [c.v(0)], axis=axis[0])


@AKG_OPS.register_op("Squeeze", "squeeze(axes)")
def _squeeze(c: AkgJsonOpContext) -> Value:
    c.expect(1)
    axes = c.int_list("axis")
    return c.emit("squeeze", [c.v(0)], axes=axes or None)


def _reduction(akg: str, op: str) -> None:
    def convert(c: AkgJsonOpContext) -> Value:
        c.expect(1)
        axes = c.int_list("axis")
        keep = c.attr("keep_dims", default=False)
        if not isinstance(keep, bool):
            raise c.fail(f"attribute 'keep_dims' must be true or false, got {brief(keep)}")
        return c.emit(op, [c.v(0)], axes=axes or None, keepdims=keep)  # [] / None: all axes

    AKG_OPS.add(akg, f"{op}(axes=axis ([] or none: all), keepdims=keep_dims)", convert)


for _akg, _op in [("ReduceSum", "sum"), ("ReduceMax", "max"), ("ReduceMin", "min"),
                  ("ReduceProd", "prod")]:
    _reduction(_akg, _op)


@AKG_OPS.register_op("MatMul BatchMatMul",
           "matmul / batch_matmul(transpose_a, transpose_b); fp16 operands cast to fp32 first, "
           "result cast to dst_type; optional bias added before that cast")
def _matmul(c: AkgJsonOpContext) -> Value:
    c.expect(2, 3)
    for side in ("left_format", "right_format"):
        if c.attr(side) == FRACTAL_NZ:
            raise c.unsupported("MatMul on FRACTAL_NZ operands (the Ascend cube layout) is not modelled")
    a, b = c.v(0), c.v(1)
    if a.dtype != b.dtype:
        raise c.fail(f"operands differ in dtype: {a.type} and {b.type}")
    ta = c.attr("transpose_a", "transpose_x1", default=False)
    tb = c.attr("transpose_b", "transpose_x2", default=False)
    if not isinstance(ta, bool) or not isinstance(tb, bool):
        raise c.fail(f"transpose flags must be true or false, got {brief(ta)}, {brief(tb)}")
    dst = c.out_dtype("dst_type")
    acc = "float32" if a.dtype == "float16" else a.dtype
    if acc != a.dtype:
        a = c.emit("cast", [a], "a_f32", to=acc)
        b = c.emit("cast", [b], "b_f32", to=acc)
    op = "matmul" if a.type.rank == 2 and b.type.rank == 2 else "batch_matmul"
    last = dst == acc and len(c.args) == 2
    y = c.emit(op, [a, b], None if last else "acc", transpose_a=ta, transpose_b=tb)
    if len(c.args) == 3:
        bias = c.v(2)
        if bias.dtype != acc:
            bias = c.emit("cast", [bias], "bias", to=acc)
        y = c.emit("add", [y, bias], None if dst == acc else "bias_add")
    if dst != acc:
        y = c.emit("cast", [y], to=dst)
    return y


@AKG_OPS.register_op("Conv2D", "conv2d(strides, padding, dilation, groups) between transposes for NHWC")
def _conv2d(c: AkgJsonOpContext) -> Value:
    c.expect(2)
    if c.attr("data_format") == "NC1HWC0":
        raise c.unsupported("the NC1HWC0 (blocked channel) convolution layout is not modelled")
    x, w = c.v(0), c.v(1)
    fmt = c.args[0].format
    nhwc = fmt == "NHWC"
    if not nhwc and fmt not in (None, DEFAULT_FORMAT, "NCHW"):
        raise c.unsupported(f"Conv2D input format '{fmt}' is not modelled")
    if x.type.rank != 4 or w.type.rank != 4:
        raise c.fail(f"needs 4-D data and weight, got {x.type} and {w.type}")

    def hw(name: str, default: tuple[int, int]) -> tuple[int, int]:
        v = c.int_list(name, default=list(default))
        if len(v) == 4:  # [1, 1, h, w] (NCHW-ordered, as MindSpore stores them)
            v = v[2:]
        if len(v) == 1:
            v = v * 2
        if len(v) != 2:
            raise c.fail(f"attribute '{name}' must have 1, 2 or 4 entries, got {list(v)}")
        return tuple(v)  # type: ignore[return-value]

    strides, dilation = hw("stride", (1, 1)), hw("dilation", (1, 1))
    pads = c.int_list("pad_list", default=[0, 0, 0, 0])  # top, bottom, left, right
    if len(pads) != 4:
        raise c.fail(f"attribute 'pad_list' must have 4 entries, got {list(pads)}")
    groups = c.attr("groups", "group", default=1)
    if nhwc:
        x = c.emit("transpose", [x], "x_nchw", perm=(0, 3, 1, 2))
        w = c.emit("transpose", [w], "w_oihw", perm=(0, 3, 1, 2))
    dst = c.out_dtype("dst_type")
    y = c.emit("conv2d", [x, w], "nchw" if nhwc or dst != x.dtype else None, strides=strides,
               padding=(pads[0], pads[2], pads[1], pads[3]), dilation=dilation, groups=groups)
    if nhwc:
        y = c.emit("transpose", [y], None if dst == y.dtype else "nhwc", perm=(0, 2, 3, 1))
    if dst != y.dtype:
        y = c.emit("cast", [y], to=dst)
    return y


@AKG_OPS.register_op("OneHot", "one_hot(depth, axis, on_value, off_value = the constant inputs, dtype)")
def _one_hot(c: AkgJsonOpContext) -> Value:
    c.expect(3)
    for i, what in ((1, "on_value"), (2, "off_value")):
        if not c.args[i].is_const or c.args[i].const.size != 1:
            raise c.unsupported(f"{what} must be a scalar constant (a 'value' in the file)")
    depth, axis = c.attr("depth"), c.attr("axis", default=-1)
    if not isinstance(depth, int) or not isinstance(axis, int):
        raise c.fail(f"attributes depth and axis must be integers, got {brief(depth)}, {brief(axis)}")
    on, off = (float(c.args[i].const.reshape(())) for i in (1, 2))
    return c.emit("one_hot", [c.v(0)], depth=depth, axis=axis, on_value=on, off_value=off,
                  dtype=c.out.dtype)


@AKG_OPS.register_op("AddN", "add chain ((x0 + x1) + x2 ...)")
def _add_n(c: AkgJsonOpContext) -> Value:
    if not c.args:
        raise c.fail("AddN needs at least one input")
    if len(c.args) == 1:
        return c.emit("reshape", [c.v(0)], shape=c.v(0).shape)
    acc = c.v(0)
    for i in range(1, len(c.args)):
        acc = c.emit("add", [acc, c.v(i)], None if i == len(c.args) - 1 else f"sum{i}")
    return acc


@AKG_OPS.register_op("Concat", "concat(axis)")
def _concat(c: AkgJsonOpContext) -> Value:
    axis = c.int_list("axis", default=0)
    if len(axis) != 1:
        raise c.fail(f"attribute 'axis' must be one integer, got {list(axis)}")
    return c.emit("concat", [a.value for a in c.args], axis=axis[0])


@AKG_OPS.register_op("PadAkg", "pad(before=head, after=tail, value=pad_val)")
def _pad(c: AkgJsonOpContext) -> Value:
    c.expect(1)
    head, tail = c.int_list("head"), c.int_list("tail")
    if head is None or tail is None:
        raise c.fail("needs attributes 'head' and 'tail'")
    value = c.attr("pad_val", default=0)
    return c.emit("pad", [c.v(0)], before=head, after=tail, value=value)


@AKG_OPS.register_op("UnPadAkg", "slice(begin=0, end=shape - tail)")
def _unpad(c: AkgJsonOpContext) -> Value:
    c.expect(1)
    x, tail = c.v(0), c.int_list("tail")
    if tail is None or len(tail) != x.type.rank:
        raise c.fail(f"attribute 'tail' needs one entry per axis of {x.type}, got {brief(tail)}")
    return c.emit("slice", [x], begin=(0,) * x.type.rank,
                  end=tuple(d - t for d, t in zip(x.shape, tail)))


@AKG_OPS.register_op("ElemAny", "max over all axes of cast(x > 0 (x itself when bool), dst_type), "
                      "reshaped to [1]")
def _elem_any(c: AkgJsonOpContext) -> Value:
    c.expect(1)
    x = c.v(0)
    hit = x if x.dtype == "bool" else c.emit("greater", [x, c.const(0, x.dtype, "zero")], "hit")
    dst = c.out_dtype("dst_type")
    flag_t = dst if dst != "bool" else "float32"
    flag = c.emit("cast", [hit], "flag", to=flag_t)
    top = c.emit("max", [flag], "any" if dst != "bool" else "any_f", axes=None, keepdims=False)
    if dst == "bool":
        top = c.emit("cast", [top], "any", to="bool")
    return c.emit("reshape", [top], shape=c.out.shape)


@AKG_OPS.register_op("Complex", "complex(re, im)")
def _complex(c: AkgJsonOpContext) -> Value:
    c.expect(2)
    return c.emit("complex", c.operands(0, 1))


@AKG_OPS.register_op("CReal", "real")
def _creal(c: AkgJsonOpContext) -> Value:
    c.expect(1)
    return c.emit("real", [c.v(0)])


@AKG_OPS.register_op("CImag", "imag")
def _cimag(c: AkgJsonOpContext) -> Value:
    c.expect(1)
    return c.emit("imag", [c.v(0)])


@AKG_OPS.register_op("Assign", "InplaceAssign(ref, value, value): output = value; later reads of ref "
                               "see value; value becomes output '<ref>.inplace'")
def _assign(c: AkgJsonOpContext) -> Value:
    c.expect(2)
    return _write(c, c.args[0], c.args[1], c.args[1])


@AKG_OPS.register_op("InplaceAssign", "no node: output = c; later reads of a see b; b becomes output "
                            "'<a>.inplace'")
def _inplace_assign(c: AkgJsonOpContext) -> Value:
    c.expect(2, 3)
    return _write(c, c.args[0], c.args[1], c.args[2] if len(c.args) == 3 else c.args[1])


def _write(c: AkgJsonOpContext, target: _Arg, val: _Arg, result: _Arg) -> Value:
    """Write `val` into `target`'s buffer (later reads of it see `val`, and it becomes the
    graph output `<target>.inplace`), and give `result`."""
    if target.is_const:
        raise c.fail("the assigned tensor (first input) is a constant")
    v = val.value
    if v.dtype != target.value.dtype:
        raise c.fail(f"assigns {v.type} to '{target.desc.name}' of type {target.value.type}")
    if v.shape != target.value.shape:
        v = (c.emit("reshape", [v], "assigned", shape=target.value.shape)
             if v.type.size == target.value.type.size
             else c.emit("broadcast_to", [v], "assigned", shape=target.value.shape))
    name = target.desc.name
    c.imp.inplace.pop(name, None)  # keep the order of the last write
    c.imp.inplace[name] = v
    c.imp.env[name] = (v, target.format)
    return result.value

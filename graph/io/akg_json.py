"""Importer for AKG "composite JSON" (`.info` / `.json`): the fused-kernel descriptions that
MindSpore's graph-kernel fusion hands to a kernel generator.

A file holds `input_desc`, `op_desc` (ops in order: `name`, `attr`, `input_desc`,
`output_desc`; an input with a `value` is a constant), `output_desc` and `process`. The Graph's
inputs and outputs are named by the file's `tensor_name`s, so an `.npz` keyed by them runs it.
`AKG_OPS` is the op table. Modelling choices:

* Shapes are physical. FRACTAL_NZ `[..., N1, M1, M0, N0]` (logical `[..., M1*M0, N1*N0]`) stays
  as stored; these files reduce and reshape it on physical axes. Where an elementwise op meets a
  FRACTAL_NZ and a DefaultFormat operand `[..., m, n]` (AKG's ReshapeTensor pass), the latter is
  re-laid out as NZ: a reshape when m or n is 1, reshape + transpose otherwise; one that would
  need padding is unsupported. Other formats (NCHW, NHWC, NC1HWC0) broadcast as NumPy does;
  Conv2D on NHWC tensors is wrapped in transposes around our NCHW conv2d.
* InplaceAssign(a, b, c) writes b into a's buffer and yields c: its output is c, later reads of
  `a` (in op order) see b, and b becomes an extra graph output `<a>.inplace` after the file's
  outputs (last write wins). Assign(ref, value), MindSpore's in-place write, is
  InplaceAssign(ref, value, value): its output (usually a file output too) is the value.
* complex64 tensors stay complex in the Graph (Complex / CReal / CImag and arithmetic on them);
  kernels see them as float32 pairs (akg.graph.complex). `fake_output`, `enable_atomic_add` and other scheduling hints are
  ignored: the value stored is the one computed.
* MatMul / BatchMatMul cast fp16 operands to fp32, multiply (our matmul needs equal dtypes) and
  cast to `dst_type`: fp32 accumulation, as AKG's vector matmul and fp32-accumulating MMA do
  (NumPy's fp16 matmul also accumulates in fp32, so the numbers are the same, only faster).
* Each op's result is checked against its `output_desc`: differences in size-1 axes (`[]` vs
  `[1]`) become a reshape, bool results declared numeric a cast; anything else is an error.
* UnsupportedOpError names the op and the file; malformed JSON, missing keys and inconsistent
  shapes give ImportFormatError with the file (and the op's index and output tensor).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from akg.errors import ImportFormatError
from akg.graph.io.importer import (
    Frontend, ImportFail, Importer, OpContext, OpTable, brief, graph_name_of, read_model_file,
    register_frontend, same_data, sanitize_name, unique_name,
)
from akg.graph.ir import Graph, Value
from akg.graph.types import TensorType, canonical_dtype

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


# --- the importer -------------------------------------------------------------------------------


class AkgJsonImporter(Importer):
    """One composite kernel description -> Graph. Values are named at the end (`finish`), once
    the outputs, which keep their tensor names, are known; until then `hint` holds the names."""

    format_name = "composite JSON"
    ops = AKG_OPS
    names_at_end = True

    def __init__(self, desc: Any, filename: str, graph_name: str):
        super().__init__(filename, graph_name)
        self.desc = desc
        self.env: dict[str, tuple[Value, str | None]] = {}  # tensor_name -> (value, format)
        self.primary: list[tuple[Value, str]] = []  # op results and the tensor_name they carry
        self.inplace: dict[str, Value] = {}  # assigned tensor_name -> value written
        self.defined: set[str] = set()  # tensor names defined so far (inputs, op results)
        self.current = -1  # the index of the op being converted

    # --- values -------------------------------------------------------------------------------

    def emit(self, op: str, inputs: list[Value], hint: str, **attrs: Any) -> Value:
        v = super().emit(op, inputs, hint, **attrs)
        if isinstance(v, tuple):
            raise ImportFail(f"internal: '{op}' gives {len(v)} outputs")
        return v

    def const_data(self, d: _Desc, where: str) -> np.ndarray:
        value = d.value
        try:
            array = np.asarray(value, dtype=np.float64 if isinstance(value, float) else None)
            if array.dtype == object or array.dtype.kind not in "biuf":
                raise ValueError
            with np.errstate(all="ignore"):
                converted = array.astype(d.dtype)
            if np.dtype(d.dtype).kind in "biu" and not np.array_equal(converted, array):
                raise ValueError  # NaN, a fraction or a value out of range for an integer type
            array = converted
        except (TypeError, ValueError, OverflowError):
            raise ImportFail(f"{where} ({d.name}): constant value {brief(value)} is not a number "
                        f"or list of numbers of type {d.dtype}") from None
        size = math.prod(d.shape)
        if array.size == size:
            return array.reshape(d.shape)
        if array.size == 1:  # a fill: made when the constant becomes a graph constant
            return np.broadcast_to(array.reshape(()), d.type.shape)
        raise ImportFail(f"{where} ({d.name}): constant with {array.size} values does not fill "
                    f"shape {list(d.shape)}")

    def resolve(self, d: _Desc, where: str) -> _Arg:
        if d.has_value:
            data = self.const_data(d, where)
            return _Arg(self.const(data, d.name), d, d.format, data)
        if d.name not in self.env:
            raise ImportFail(f"{where}: {_undefined(self.desc.get('op_desc'), self.current, d.name)}")
        v, fmt = self.env[d.name]
        if v.dtype != d.dtype:
            raise ImportFail(f"{where}: tensor '{d.name}' is {v.type} but is used as {d.dtype}")
        if math.prod(d.shape) != v.type.size:
            raise ImportFail(f"{where}: tensor '{d.name}' is {v.type} but is used with shape {list(d.shape)}")
        return _Arg(v, d, fmt)

    # --- the whole file -----------------------------------------------------------------------

    def run(self) -> Graph:
        d = self.desc
        if isinstance(d, list):
            raise ImportFail("not an AKG composite kernel: the file holds a JSON list, not a kernel object")
        if not isinstance(d, dict):
            raise ImportFail(f"not an AKG composite kernel: the file holds a JSON {type(d).__name__}")
        if "op_desc" not in d:
            if d.get("composite") is False or "op" in d and "input_desc" in d:
                raise ImportFail(f"not an AKG composite kernel: a single-op description "
                            f"(op '{d.get('name', d.get('op'))}', composite: "
                            f"{json.dumps(d.get('composite'))}) without 'op_desc'")
            keys = ", ".join(repr(k) for k in list(d)[:3]) + (", ..." if len(d) > 3 else "")
            raise ImportFail(f"not an AKG composite kernel: missing key 'op_desc' "
                        f"(top-level keys: {keys or 'none'})")
        if "output_desc" not in d:
            raise ImportFail("missing key 'output_desc'")
        ops = d["op_desc"]
        if not isinstance(ops, list):
            raise ImportFail(f"'op_desc' must be a list, got {type(ops).__name__}")

        for t in _desc_lists(d.get("input_desc"), "input_desc"):
            if t.name in self.env:
                raise ImportFail(f"input_desc: tensor '{t.name}' is declared twice")
            if sanitize_name(t.name) in self.names:
                raise ImportFail(f"input_desc: tensor names '{t.name}' clash once made valid value names")
            v = self.input(t.name, t.type)
            self.env[t.name] = (v, t.format)
            self.defined.add(t.name)

        for k, op in enumerate(ops):
            self.convert(k, op)

        outputs = _desc_lists(d["output_desc"], "output_desc")
        if not outputs:
            raise ImportFail("output_desc is empty: the kernel has no outputs")
        results = []
        for t in outputs:
            if t.name not in self.env:
                raise ImportFail(f"output_desc: tensor '{t.name}' is never computed")
            v, _ = self.env[t.name]
            if v.dtype != t.dtype or not same_data(v.shape, t.shape):
                raise ImportFail(f"output_desc: tensor '{t.name}' is {v.type} but is declared {t.type}")
            if v.shape != t.shape:
                v = self.emit("reshape", [v], f"{t.name}.out", shape=t.shape)
            results.append((t.name, v))
        results.extend((f"{a}.inplace", v) for a, v in self.inplace.items())
        return self.finish(results)

    def finish(self, results: list[tuple[str, Value]]) -> Graph:
        """Name every value: graph outputs get their tensor names, op results theirs, helper
        values `<tensor>.<what>`; a value that must carry two names is copied (reshape)."""
        fixed = {v.name for v in self.inputs}
        pinned: dict[int, str] = {}
        outputs: list[Value] = []
        for tensor, v in results:
            want = sanitize_name(tensor)
            if want in fixed or want in pinned.values():
                if v in self.inputs and v.name == want:
                    outputs.append(v)  # an input passed straight through
                    continue
                raise ImportFail(f"output_desc: tensor '{tensor}' is listed twice or clashes with an input")
            if id(v) not in self.hint or id(v) in pinned:  # an input, or already an output
                v = self.emit("reshape", [v], tensor, shape=v.shape)  # identity copy
            pinned[id(v)] = want
            outputs.append(v)
        used = fixed | set(pinned.values())
        final: dict[int, str] = dict(pinned)
        for v, tensor in self.primary:  # op results first: they keep their tensor names
            if id(v) not in final:
                final[id(v)] = unique_name(tensor, used)
        values = [*self.constant_values, *self.results]
        for v in values:
            if id(v) not in final:
                final[id(v)] = unique_name(self.hint[id(v)], used)
        for v in values:
            v.name = final[id(v)]  # Values are ours until the Graph is built
        return self.build(outputs)

    # --- one op -------------------------------------------------------------------------------

    def convert(self, k: int, op: Any) -> None:
        self.current = k
        where = f"op_desc[{k}]"
        if not isinstance(op, dict):
            raise ImportFail(f"{where}: expected an op object, got {type(op).__name__}")
        name = op.get("name")
        if not isinstance(name, str):
            raise ImportFail(f"{where}: missing op 'name'")
        where = f"op_desc[{k}] ({name})"
        for key in ("input_desc", "output_desc"):
            if key not in op:
                raise ImportFail(f"{where}: missing key '{key}'")
        outs = op["output_desc"]
        if not isinstance(outs, list) or not outs:
            raise ImportFail(f"{where}: 'output_desc' must be a non-empty list")
        out_descs = [_desc(o, f"{where}.output_desc[{i}]") for i, o in enumerate(outs)]
        converter = self.mapping(name, where)
        if len(out_descs) != 1:
            raise self.unsupported_error(name, f"{len(out_descs)} outputs; only single-output ops "
                                               f"are mapped ({where})")
        out = out_descs[0]
        where = f"{where} -> {out.name}"
        args = [self.resolve(t, where) for t in _desc_lists(op["input_desc"], f"{where}: input_desc")]
        v = self.apply(converter, AkgJsonOpContext(self, name, _attrs(op, where), args, out, where))
        if out.name in self.defined:
            raise ImportFail(f"{where}: tensor '{out.name}' is defined more than once")
        self.defined.add(out.name)
        self.env[out.name] = (v, out.format)
        self.primary.append((v, out.name))


def _op_tensors(op: Any) -> tuple[list[str], list[str]]:
    """(tensor names an op reads, tensor names it writes) from a raw op, skipping whatever is
    malformed (this only explains an error found elsewhere)."""
    def names(descs: Any, skip_values: bool) -> list[str]:
        out = []
        for group in descs if isinstance(descs, list) else []:
            for d in group if isinstance(group, list) else [group]:
                if isinstance(d, dict) and isinstance(d.get("tensor_name"), str) \
                        and not (skip_values and "value" in d):
                    out.append(d["tensor_name"])
        return out

    if not isinstance(op, dict):
        return [], []
    return names(op.get("input_desc"), True), names(op.get("output_desc"), False)


def _op_label(ops: list, k: int) -> str:
    name = ops[k].get("name") if isinstance(ops[k], dict) else None
    return f"op_desc[{k}] ({name})" if isinstance(name, str) else f"op_desc[{k}]"


def _undefined(ops: Any, k: int, tensor: str) -> str:
    """Why op k may not read `tensor`: the ops form a cycle through it (named op by op), a later
    op computes it, or nothing does."""
    ops = ops if isinstance(ops, list) else []
    reads, writer = [], {}
    for j, op in enumerate(ops):
        ins, outs = _op_tensors(op)
        reads.append(ins)
        for t in outs:
            writer.setdefault(t, j)
    j = writer.get(tensor)
    if j is None or not 0 <= k < len(ops):
        return (f"tensor '{tensor}' is used before it is defined (not a kernel input, nor the "
                "output of any op)")
    # breadth-first from the writer of `tensor` back through what it reads, looking for op k
    came_from: dict[int, tuple[int, str] | None] = {j: None}
    queue, found = [j], k == j
    while queue and not found:
        nxt = []
        for a in queue:
            for t in reads[a]:
                b = writer.get(t)
                if b is None or b in came_from:
                    continue
                came_from[b] = (a, t)
                if b == k:
                    found = True
                    break
                nxt.append(b)
            if found:
                break
        queue = nxt
    if not found:
        return (f"tensor '{tensor}' is used before it is defined: {_op_label(ops, j)} computes it "
                "later (ops must come in dependency order)")
    if k == j:
        return f"the ops form a cycle: {_op_label(ops, k)} reads '{tensor}', its own output"
    edges = []  # (reader, tensor, writer) from j's read back to op k's output
    b = k
    while came_from[b] is not None:
        reader, t = came_from[b]
        edges.append((reader, t, b))
        b = reader
    text = f"the ops form a cycle: {_op_label(ops, k)} reads '{tensor}' from {_op_label(ops, j)}"
    for _reader, t, writer in reversed(edges):  # each reader is the writer named just before
        text += f", which reads '{t}' from {_op_label(ops, writer)}"
    return text


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


# --- entry points -------------------------------------------------------------------------------


def parse_akg_json(desc: Any, name: str = "<akg_json>") -> Graph:
    """Turn a parsed composite-JSON description into a Graph; `name` is the file (for errors)."""
    graph_name = graph_name_of(name, "<akg_json>", "akg_kernel")
    if isinstance(desc, dict) and isinstance(desc.get("op"), str) and desc["op"]:
        graph_name = sanitize_name(desc["op"])
    return AkgJsonImporter(desc, name, graph_name).import_graph()


def loads_akg_json(text: str, name: str = "<akg_json>") -> Graph:
    """Turn the text of a composite-JSON file into a Graph; `name` is the file (for errors)."""
    try:
        desc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ImportFormatError(f"{name}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}") from None
    except RecursionError:  # the json module nests by recursion
        raise ImportFormatError(f"{name}: invalid JSON: {_nesting(text)}") from None
    except ValueError as e:  # an integer too long for Python to convert
        reason = "a number with more than 4300 digits" if "digits" in str(e) else str(e)
        raise ImportFormatError(f"{name}: invalid JSON: {reason}") from None
    return parse_akg_json(desc, name)


def _nesting(text: str) -> str:
    """Where a JSON text nests deepest: 'lists and objects nested 100000 deep at line 3 column 9'."""
    depth = deepest = 0
    at = 0
    in_string = escaped = False
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            continue
        if ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > deepest:
                deepest, at = depth, i
        elif ch in "]}":
            depth -= 1
    line = text.count("\n", 0, at) + 1
    col = at - (text.rfind("\n", 0, at) + 1) + 1
    return f"lists and objects nested {deepest} deep (at line {line} column {col}), deeper than akg reads"


def load_akg_json(path: str | Path) -> Graph:
    """Read an AKG composite-kernel `.info` / `.json` file into a Graph."""
    path = Path(path)
    return loads_akg_json(read_model_file(path, text=True), str(path))


register_frontend(Frontend(
    "akg_json", (".json", ".info"), load_akg_json, parse_akg_json,
    accepts=lambda obj: isinstance(obj, (dict, list)),
    takes="a parsed composite-JSON dict or list"))

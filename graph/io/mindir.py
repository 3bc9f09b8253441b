"""Importer for MindSpore MindIR (`.mindir`): the protobuf model files `mindspore.export`
writes, read with the generated bindings of MindSpore's `mind_ir.proto` (`_mind_ir_pb2`).

A file is a `ModelProto`: `graph.input` (the model inputs), `graph.parameter` (weights, raw
little-endian bytes), `graph.node` and `graph.output`. A node's `op_type` is `Constant` or
`REF::<Name>:<N>`, a key into `ModelProto.primitives`, which gives the primitive's type and
attributes. PRIMITIVE primitives (Conv2D, MaxPool, ...) carry their settings as attributes;
PRIMITIVE_FUNCTION ones (MatMul, BatchNorm, Reshape, ...) take them as extra Constant inputs
(`MatMul(x, w, transpose_a, transpose_b)`). `MINDIR_OPS` is the primitive table. Choices:

* Only what the graph outputs depend on is imported. Side-effect bookkeeping disappears:
  `Load(param, U)` is the parameter, `Depend(x, ...)` is x, `UpdateState` and the monads
  are dropped; `MakeTuple` / `TupleGetItem` build and pick tuples (multi-output ops such as
  BatchNorm and LayerNorm give a tuple whose item 0 is the result; the other items, batch
  statistics, are unsupported if used).
* Each node's result is checked against the type MindSpore recorded for it (the node's
  `shape` attribute): a mapping that disagrees is an error, never a silently wrong graph.
  Cast takes its target dtype from there.
* Graph inputs keep their names without the `<graph>:` prefix, weights are named by their
  `ref_key` (`fc1.weight`), node results by the node's name; all made valid value names.
  Outputs are `output_0`, `output_1`, ... (tuples flattened), as in MindSpore's own order.
* MindSpore's `GeLU` is the tanh approximation; `AvgPool` with `same` padding divides by the
  cells inside the input (TensorFlow's rule).
* Unsupported primitives raise UnsupportedOpError naming the primitive and the file;
  malformed or truncated files raise ImportFormatError naming the file (and the node).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from akg.errors import AkgError, ImportFormatError, InvalidGraphError, UnsupportedError, UnsupportedOpError
from akg.graph.ir import Graph, Node, Value
from akg.graph.ops import get_op
from akg.graph.types import TensorType, is_float

# TensorProto.DataType -> dtype; the others (uint16/32/64, bfloat16, complex, string) are unsupported
_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 5: "int16", 6: "int32", 7: "int64", 9: "bool",
           10: "float16", 11: "float64", 17: "float64"}
_DTYPE_NAMES = {0: "undefined", 4: "uint16", 8: "string", 12: "uint32", 13: "uint64",
                14: "complex64", 15: "complex128", 16: "bfloat16", 18: "qint4x2"}
# MindSpore's enums for settings passed as integers (mindapi Format and PadMode)
_FORMATS = {0: "NCHW", 1: "NHWC"}
_PAD_MODES = {0: "pad", 1: "same", 2: "valid"}


class _Fail(Exception):
    """Internal: a message about the file, turned into ImportFormatError with the file name."""


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


def _sanitize(name: str) -> str:
    """A valid value name close to `name` (invalid characters become '_')."""
    out = re.sub(r"[^A-Za-z0-9_.\-]", "_", name)
    if not out or not re.match(r"[A-Za-z0-9_]", out[0]):
        out = "_" + out
    return out


# --- protobuf values ----------------------------------------------------------------------------


def _tensor(t, where: str, base_dir: Path | None, little: bool) -> np.ndarray:
    """The data of a TensorProto (raw bytes, typed fields or an external file)."""
    dtype = _DTYPES.get(t.data_type)
    if dtype is None:
        kind = _DTYPE_NAMES.get(t.data_type, f"#{t.data_type}")
        raise UnsupportedError(f"{where}: tensors of type {kind} are not supported")
    shape = tuple(t.dims)
    if any(d < 0 for d in shape):
        raise UnsupportedError(f"{where}: dynamic shape {list(shape)}; only static shapes are supported")
    if t.compression_type:
        raise UnsupportedError(f"{where}: compressed weights are not supported")
    size = math.prod(shape)
    stored = np.dtype(dtype).newbyteorder("<" if little else ">")
    if t.HasField("raw_data"):
        raw = t.raw_data
    elif t.HasField("external_data"):
        raw = _external(t.external_data, where, base_dir)
    else:
        for field in ("float_data", "double_data", "int32_data", "int64_data", "uint64_data"):
            items = getattr(t, field)
            if len(items):
                data = np.asarray(items).astype(dtype)
                break
        else:
            if size:
                raise _Fail(f"{where}: tensor {list(shape)} holds no data")
            data = np.zeros(0, dtype)
        if data.size != size:
            raise _Fail(f"{where}: tensor {list(shape)} holds {data.size} values")
        return data.reshape(shape)
    if len(raw) != size * stored.itemsize:
        raise _Fail(f"{where}: tensor {dtype}{list(shape)} needs {size * stored.itemsize} bytes, "
                    f"holds {len(raw)}")
    return np.frombuffer(raw, dtype=stored).astype(dtype).reshape(shape)


def _external(ext, where: str, base_dir: Path | None) -> bytes:
    if base_dir is None:
        raise _Fail(f"{where}: the data lies in an external file, and there is no model folder")
    path = base_dir / ext.location
    try:
        with open(path, "rb") as f:
            f.seek(ext.offset)
            raw = f.read(ext.length) if ext.HasField("length") else f.read()
    except OSError as e:
        raise _Fail(f"{where}: cannot read external data {path}: {e.strerror}") from None
    if ext.HasField("length") and len(raw) != ext.length:
        raise _Fail(f"{where}: external data {path} is shorter than offset + length")
    return raw


def _tensor_type(t) -> TensorType | None:
    """The declared type of a TensorProto, or None when it is not one we model."""
    dtype = _DTYPES.get(t.data_type)
    if dtype is None or any(d < 0 for d in t.dims):
        return None
    return TensorType(tuple(t.dims), dtype)


class _Decoder:
    """AttributeProto -> Python values, for one file."""

    def __init__(self, pb, base_dir: Path | None, little: bool):
        self.pb, self.base_dir, self.little = pb, base_dir, little

    def value(self, a, where: str) -> Any:
        T = self.pb.AttributeProto
        k = a.type
        if k == T.TENSORS:
            arrays = tuple(self.tensor(t, where) for t in a.tensors)
            return arrays[0] if len(arrays) == 1 else arrays
        if k == T.TENSOR:
            return self.tensor(a.t, where)
        if k in (T.TUPLE, T.LIST):
            return tuple(self.value(v, where) for v in a.values)
        if k in (T.UMONAD, T.IOMONAD):
            return MONAD
        if k == T.NONE:
            return None
        # a scalar sits in its field (i, f, d, s) or, as an item of a tuple, in the repeated one
        if k == T.BOOL:
            return bool(_one(a, "i", "ints"))
        if k in (T.INT8, T.INT16, T.INT32, T.INT64, T.UINT8, T.UINT16, T.UINT32, T.UINT64):
            return int(_one(a, "i", "ints"))
        if k in (T.FLOAT, T.FLOAT16, T.BFLOAT16):
            return float(str(np.float32(_one(a, "f", "floats"))))  # 1e-05, not 9.99999974e-06
        if k == T.DOUBLE:
            return float(_one(a, "d", "doubles"))
        if k == T.STRING:
            return bytes(_one(a, "s", "strings")).decode("utf-8", "replace")
        # older files leave `type` unset: go by the field that is filled
        if len(a.ints):
            return tuple(a.ints)
        if len(a.floats):
            return tuple(a.floats)
        for field in ("i", "f", "d"):
            if a.HasField(field):
                return getattr(a, field)
        if a.HasField("s"):
            return a.s.decode("utf-8", "replace")
        if a.HasField("t"):
            return self.tensor(a.t, where)
        return _Opaque(T.AttributeType.Name(k) if k in T.AttributeType.values() else str(k))

    def tensor(self, t, where: str) -> np.ndarray:
        return _tensor(t, where, self.base_dir, self.little)

    def declared(self, a) -> Any:
        """A node's `shape` attribute -> TensorType, tuple of them, or None (unknown)."""
        T = self.pb.AttributeProto
        if a.type == T.TENSORS and len(a.tensors) == 1:
            return _tensor_type(a.tensors[0])
        if a.type in (T.TUPLE, T.LIST):
            return tuple(self.declared(v) for v in a.values)
        return None


def _one(a, field: str, repeated: str) -> Any:
    items = getattr(a, repeated)
    return items[0] if not a.HasField(field) and len(items) == 1 else getattr(a, field)


@dataclass(frozen=True)
class _Opaque:
    """An attribute of a kind the importer does not decode (a graph, a functor, ...)."""

    kind: str


# --- the importer -------------------------------------------------------------------------------


class _Importer:
    def __init__(self, model, pb, filename: str, base_dir: Path | None):
        self.file = filename
        self.model, self.pb = model, pb
        self.graph = model.graph
        little = not model.HasField("little_endian") or model.little_endian
        self.dec = _Decoder(pb, base_dir, little)
        self.prefix = self.graph.name + ":" if self.graph.name else ""
        self.prims = {}
        for p in model.primitives:
            self.prims.setdefault(p.name, p)
        self.producers = {}
        for node in self.graph.node:
            for out in (node.output or [node.name]):
                self.producers.setdefault(out, node)
        self.params = {p.name: p for p in self.graph.parameter}
        self.env: dict[str, Any] = {}
        self.inputs: list[Value] = []
        self.constants: dict[Value, np.ndarray] = {}
        self.nodes: list[Node] = []
        self.names: set[str] = set()
        self._materialized: dict[tuple, Value] = {}
        self._prim_cache: dict[str, tuple[str, dict[str, Any]]] = {}

    # --- names and values ---------------------------------------------------------------------

    def short(self, name: str) -> str:
        return name[len(self.prefix):] if self.prefix and name.startswith(self.prefix) else name

    def unique(self, base: str) -> str:
        base = _sanitize(base)
        cand, n = base, 0
        while cand in self.names:
            n += 1
            cand = f"{base}.{n}"
        self.names.add(cand)
        return cand

    def emit(self, op: str, inputs: list[Value], name: str, **attrs: Any) -> Value | tuple[Value, ...]:
        opdef = get_op(op)
        checked = opdef.check_attrs(attrs)
        types = opdef.infer_types([v.type for v in inputs], checked)
        outs = [Value(self.unique(name if len(types) == 1 else f"{name}.{i}"), t)
                for i, t in enumerate(types)]
        self.nodes.append(Node(op, inputs, checked, outs))
        return outs[0] if len(outs) == 1 else tuple(outs)

    def const(self, data: np.ndarray, name: str) -> Value:
        data = np.asarray(data)
        data = data if data.flags.c_contiguous else data.copy()  # keeps 0-d arrays 0-d
        key = (name, data.dtype.str, data.shape, data.tobytes() if data.size <= 64 else None)
        if key not in self._materialized:
            v = Value(self.unique(name), TensorType.of(data))
            self.constants[v] = data
            self._materialized[key] = v
        return self._materialized[key]

    def tensor_of(self, item: Any, where: str, dtype: str | None = None) -> Value:
        """A graph value for an op input: constants become graph constants (of `dtype`)."""
        if isinstance(item, Value):
            return item
        if isinstance(item, _Const) and not isinstance(item.value, (str, tuple, _Opaque)) \
                and item.value is not None:
            data = np.asarray(item.value)
            if dtype is not None:
                data = data.astype(dtype)
            elif data.dtype == np.float64 and not isinstance(item.value, np.ndarray):
                data = data.astype(np.float32)  # a Python float: MindSpore's default float
            return self.const(data, self.short(item.name))
        if isinstance(item, _Missing):
            raise _unsupported(self.file, item.op, f"{item.what} is not modelled ({where})")
        raise _Fail(f"{where}: expected a tensor, got {_describe(item)}")

    # --- the whole graph ----------------------------------------------------------------------

    def run(self, name: str) -> Graph:
        if not self.model.HasField("graph"):
            raise _Fail("not a MindIR model: no graph (an empty, truncated or foreign file)")
        if not self.graph.output:
            raise _Fail(f"graph '{self.graph.name}' has no outputs (a truncated file?)")
        for k, vi in enumerate(self.graph.input):
            where = f"graph input {k} ('{vi.name}')"
            if len(vi.tensor) != 1:
                raise UnsupportedError(f"{where} is not a tensor; only tensor inputs are supported")
            t = vi.tensor[0]
            if _DTYPES.get(t.data_type) is None:
                kind = _DTYPE_NAMES.get(t.data_type, f"#{t.data_type}")
                raise UnsupportedError(f"{where}: tensors of type {kind} are not supported")
            if any(d < 0 for d in t.dims):
                raise UnsupportedError(f"{where}: dynamic shape {list(t.dims)}; only static "
                                       "shapes are supported")
            v = Value(self.unique(self.short(vi.name)), TensorType(tuple(t.dims), _DTYPES[t.data_type]))
            self.inputs.append(v)
            self.env[vi.name] = v
        out_names = [f"output_{i}" for i in range(len(self.graph.output))]
        self.names.update(out_names)  # reserved: graph outputs get these names
        results: list[Value] = []
        for vi in self.graph.output:
            item = self.resolve(vi.name)
            for leaf in _flatten(item):
                results.append(self.tensor_of(leaf, f"graph output '{self.short(vi.name)}'"))
        return self.finish(name, results)

    def finish(self, name: str, results: list[Value]) -> Graph:
        """Name the outputs output_0, ...; an input, a constant or a value that is already an
        output is copied first (an identity reshape)."""
        outputs: list[Value] = []
        named: set[int] = set()
        produced = {id(v) for n in self.nodes for v in n.outputs}
        for i, v in enumerate(results):
            want = f"output_{i}"
            self.names.discard(want)  # reserved in run()
            if id(v) not in produced or id(v) in named:
                v = self.emit("reshape", [v], want, shape=v.shape)
            else:
                self.names.discard(v.name)
                v.name = want  # Values are ours until the Graph is built
                self.names.add(want)
            named.add(id(v))
            outputs.append(v)
        return Graph(name, self.inputs, outputs, self.nodes, self.constants)

    # --- resolving names (iterative depth-first, so deep graphs need no recursion) ----------

    def resolve(self, name: str) -> Any:
        stack, expanded = [name], set()
        while stack:
            n = stack[-1]
            if n in self.env:
                stack.pop()
                continue
            node = self.producers.get(n)
            if node is None:
                self.env[n] = self.leaf(n)
                stack.pop()
                continue
            deps = [d for d in self.needed(node) if d not in self.env]
            if deps:
                if n in expanded:
                    raise _Fail(f"the graph has a cycle through node '{self.short(n)}'")
                expanded.add(n)
                stack.extend(reversed(deps))
                continue
            self.env[n] = self.convert(node)
            expanded.discard(n)
            stack.pop()
        return self.env[name]

    def leaf(self, name: str) -> Any:
        """A name no node defines: a weight, else an error."""
        p = self.params.get(name)
        if p is None:
            raise _Fail(f"value '{name}' is used but never defined (not an input, weight or node)")
        where = f"weight '{self.short(name)}'"
        data = self.dec.tensor(p, where)
        return self.const(data, p.ref_key or self.short(name))

    def primitive(self, node) -> tuple[str, dict[str, Any]]:
        """(primitive type, its attributes) of a node."""
        op_type = node.op_type
        if op_type.startswith("REF::"):
            key = op_type[5:]
            if key not in self._prim_cache:
                prim = self.prims.get(key)
                if prim is None:
                    raise _Fail(f"node '{self.short(node.name)}': primitive '{key}' is not in the "
                                "model's primitive table (a truncated file?)")
                attrs = {a.name: self.dec.value(a, f"primitive '{key}'") for a in prim.attribute}
                self._prim_cache[key] = (prim.op_type or key.rsplit(":", 1)[0], attrs)
            return self._prim_cache[key]
        # files without a primitive table keep the attributes on the node
        attrs = {a.name: self.dec.value(a, f"node '{self.short(node.name)}'")
                 for a in node.attribute if a.name != "shape"}
        return op_type, attrs

    def needed(self, node) -> list[str]:
        if node.op_type == "Constant":
            return []
        op = self.primitive(node)[0]
        if op == "UpdateState":
            return []
        if op in ("Depend", "Load"):
            return list(node.input[:1])
        return list(node.input)

    # --- one node -----------------------------------------------------------------------------

    def convert(self, node) -> Any:
        short = self.short(node.name or (node.output[0] if node.output else "?"))
        if node.op_type == "Constant":
            for a in node.attribute:
                if a.name == "value":
                    return _Const(self.dec.value(a, f"constant '{short}'"), node.name or short)
            raise _Fail(f"constant '{short}' has no 'value'")
        op, attrs = self.primitive(node)
        where = f"node '{short}' ({op})"
        if op == "UpdateState":
            return MONAD
        args = [self.env[i] for i in self.needed(node)]
        if op in ("Load", "Depend", "Identity"):
            if not args:
                raise _Fail(f"{where}: no inputs")
            return args[0]
        if op in ("MakeTuple", "MakeList"):
            return tuple(args)
        if op in ("TupleGetItem", "ListGetItem"):
            if len(args) != 2 or not isinstance(args[0], tuple) or not isinstance(args[1], _Const):
                raise _Fail(f"{where}: expects (tuple, constant index), got "
                            f"({', '.join(_describe(a) for a in args)})")
            i = args[1].value
            if isinstance(i, np.ndarray) and i.ndim == 0:
                i = i.item()
            if not isinstance(i, int) or not -len(args[0]) <= i < len(args[0]):
                raise _Fail(f"{where}: index {i!r} out of range for a tuple of {len(args[0])}")
            return args[0][i]
        mapping = MINDIR_OPS.get(op)
        if mapping is None:
            raise _unsupported(self.file, op, f"no mapping from this MindSpore primitive to akg "
                                              f"ops ({where})")
        declared = None
        for a in node.attribute:
            if a.name == "shape":
                declared = self.dec.declared(a)
        ctx = _OpContext(self, op, attrs, args, declared, short, where)
        try:
            result = mapping.convert(ctx)
            return ctx.conform(result)
        except _Unsupported as e:
            raise _unsupported(self.file, op, f"{e} ({where})") from None
        except InvalidGraphError as e:  # shape / attribute errors of our ops
            raise _Fail(f"{where}: {e}") from None


class _Unsupported(Exception):
    """Internal: the current primitive is used in a way that is not modelled."""


def _unsupported(file: str, op: str, reason: str) -> UnsupportedOpError:
    err = UnsupportedOpError(op, reason=reason)
    err.args = (f"{file}: {err}",)  # the file first, as every importer error
    return err


def _flatten(item: Any) -> list[Any]:
    if isinstance(item, tuple):
        return [leaf for x in item for leaf in _flatten(x)]
    return [item]


def _describe(item: Any) -> str:
    if isinstance(item, Value):
        return f"tensor {item.type}"
    if isinstance(item, _Const):
        v = item.value
        return f"constant {v.dtype}{list(v.shape)}" if isinstance(v, np.ndarray) else f"constant {v!r}"
    if isinstance(item, tuple):
        return f"tuple of {len(item)}"
    if isinstance(item, _Missing):
        return f"{item.what} of {item.op}"
    return "a side-effect token" if item is MONAD else type(item).__name__


_REQUIRED = object()


class _OpContext:
    """What a converter sees: the primitive's attributes, the node's inputs (tensors,
    constants, tuples) and the type MindSpore declared for its result."""

    def __init__(self, imp: _Importer, op: str, attrs: dict[str, Any], args: list[Any],
                 declared: Any, name: str, where: str):
        self.imp, self.op, self.attrs, self.args = imp, op, attrs, args
        self.declared, self.name, self.where = declared, name, where

    def with_args(self, args: list[Any]) -> "_OpContext":
        """The same node seen with other inputs (the items of a tuple input, say)."""
        return _OpContext(self.imp, self.op, self.attrs, args, self.declared, self.name, self.where)

    def fail(self, message: str) -> _Fail:
        return _Fail(f"{self.where}: {message}")

    def expect(self, least: int, most: int | None = None) -> None:
        most = least if most is None else most
        if not least <= len(self.args) <= most:
            want = str(least) if least == most else f"{least} to {most}"
            raise self.fail(f"takes {want} inputs, got {len(self.args)}")

    def emit(self, op: str, inputs: list[Value], what: str | None = None, **attrs: Any):
        """Emit a node; `what` names a helper value `<node>.<what>`, None the node's result."""
        return self.imp.emit(op, inputs, self.name if what is None else f"{self.name}.{what}", **attrs)

    def const(self, data: Any, dtype: str, what: str) -> Value:
        return self.imp.const(np.asarray(data, dtype=dtype), f"{self.name}.{what}")

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
                raise _Unsupported(f"setting '{names[0]}' (input {index}) is computed at run time, "
                                   "not a constant")
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
            raise self.fail(f"setting '{names[0]}' must be an integer, got {value!r}")
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
        raise self.fail(f"setting '{names[0]}' must be integers, got {value!r}")

    def bool_(self, index: int | None, *names: str, default: Any = _REQUIRED) -> bool:
        value = _scalar(self.setting(index, *names, default=default))
        if not isinstance(value, (bool, np.bool_, int, np.integer)):
            raise self.fail(f"setting '{names[0]}' must be true or false, got {value!r}")
        return bool(value)

    def float_(self, index: int | None, *names: str, default: Any = _REQUIRED) -> float:
        value = _scalar(self.setting(index, *names, default=default))
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise self.fail(f"setting '{names[0]}' must be a number, got {value!r}")
        return float(value)

    def format(self, index: int | None) -> str:
        value = _scalar(self.setting(index, "format", "data_format", default="NCHW"))
        fmt = _FORMATS.get(value) if isinstance(value, int) else str(value).upper()
        if fmt not in ("NCHW", "NHWC"):
            raise _Unsupported(f"data format {value!r} is not modelled (NCHW and NHWC are)")
        return fmt

    # --- the result ---------------------------------------------------------------------------

    def conform(self, result: Any) -> Any:
        """Check a result against the declared type; differences in size-1 axes become a
        reshape, anything else is an error (the mapping would be wrong)."""
        want = self.out
        v = result[0] if isinstance(result, tuple) and result else result
        if want is None or not isinstance(v, Value):
            return result
        if v.dtype != want.dtype:
            raise self.fail(f"the mapping gives {v.type} but MindSpore declares {want}")
        if v.shape != want.shape:
            if [d for d in v.shape if d != 1] != [d for d in want.shape if d != 1]:
                raise self.fail(f"the mapping gives {v.type} but MindSpore declares {want}")
            v = self.emit("reshape", [v], "shape", shape=want.shape)
            return (v, *result[1:]) if isinstance(result, tuple) else v
        return result


def _scalar(value: Any) -> Any:
    if isinstance(value, np.ndarray) and value.size == 1:
        return value.reshape(()).item()
    if isinstance(value, tuple) and len(value) == 1 and not isinstance(value[0], tuple):
        return _scalar(value[0])
    return value


# --- converters ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class OpMapping:
    """How one MindSpore primitive becomes akg ops: `ops` summarises it for docs and reports."""

    ops: str
    convert: Callable[[_OpContext], Any]


MINDIR_OPS: dict[str, OpMapping] = {}


def _register(names: str, ops: str):
    def wrap(fn: Callable[[_OpContext], Any]):
        for n in names.split():
            MINDIR_OPS[n] = OpMapping(ops, fn)
        return fn

    return wrap


def _operands(c: _OpContext, n: int, arithmetic: bool) -> list[Value]:
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


def _elementwise(op: str, arity: int, arithmetic: bool = True) -> Callable[[_OpContext], Value]:
    def convert(c: _OpContext) -> Value:
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
        MINDIR_OPS[_ms] = OpMapping(_op, _elementwise(_op, _arity, _arith))


@_register("AddExt SubExt", "add / sub, the second operand scaled by alpha when alpha != 1")
def _add_ext(c: _OpContext) -> Value:
    c.expect(2, 3)
    a, b = _operands(c, 2, True)
    alpha = c.float_(2, "alpha", default=1.0)
    if alpha != 1:
        b = c.emit("mul", [b, c.const(alpha, b.dtype, "alpha")], "scaled")
    return c.emit("add" if c.op == "AddExt" else "sub", [a, b])


@_register("GeLU", "gelu(approximate='tanh') (MindSpore's GeLU is the tanh form)")
def _gelu(c: _OpContext) -> Value:
    c.expect(1)
    return c.emit("gelu", [c.v(0)], approximate="tanh")


@_register("Square", "mul(x, x)")
def _square(c: _OpContext) -> Value:
    c.expect(1)
    return c.emit("mul", [c.v(0), c.v(0)])


@_register("SiLU", "mul(x, sigmoid(x))")
def _silu(c: _OpContext) -> Value:
    c.expect(1)
    x = c.v(0)
    return c.emit("mul", [x, c.emit("sigmoid", [x], "sigmoid")])


@_register("HSigmoid HSwish", "relu6(x + 3) / 6 (times x for HSwish)")
def _hard(c: _OpContext) -> Value:
    c.expect(1)
    x = c.v(0)
    gate = c.emit("relu6", [c.emit("add", [x, c.const(3, x.dtype, "three")], "shifted")], "clipped")
    if c.op == "HSigmoid":
        return c.emit("div", [gate, c.const(6, x.dtype, "six")])
    return c.emit("mul", [x, c.emit("div", [gate, c.const(6, x.dtype, "six")], "gate")])


@_register("SquaredDifference", "mul(d, d) with d = sub(x, y)")
def _squared_difference(c: _OpContext) -> Value:
    c.expect(2)
    d = c.emit("sub", _operands(c, 2, True), "diff")
    return c.emit("mul", [d, d])


@_register("FloorDiv", "div (integers: floor division), then floor for floats")
def _floor_div(c: _OpContext) -> Value:
    c.expect(2)
    q = c.emit("div", _operands(c, 2, True), None if not is_float(c.v(0).dtype) else "quotient")
    return q if not is_float(q.dtype) else c.emit("floor", [q])


@_register("Select", "where(cond, x, y)")
def _select(c: _OpContext) -> Value:
    c.expect(3)
    cond = c.v(0, "bool")
    if cond.dtype != "bool":
        cond = c.emit("not_equal", [cond, c.const(0, cond.dtype, "zero")], "cond")
    sub = c.with_args(c.args[1:])
    x, y = _operands(sub, 2, True)
    return c.emit("where", [cond, x, y])


@_register("Cast", "cast(to = the dtype MindSpore declares for the result)")
def _cast(c: _OpContext) -> Value:
    c.expect(1, 2)
    if c.out is None:
        raise c.fail("the result type is not recorded in the file (node attribute 'shape')")
    x = c.v(0)
    return x if x.dtype == c.out.dtype else c.emit("cast", [x], to=c.out.dtype)


@_register("AddN", "add chain ((x0 + x1) + x2 ...)")
def _add_n(c: _OpContext) -> Value:
    items = _flatten(tuple(c.args))
    if not items:
        raise c.fail("AddN needs at least one input")
    sub = c.with_args(items)
    values = _operands(sub, len(items), True)
    acc = values[0]
    for i, v in enumerate(values[1:], 1):
        acc = c.emit("add", [acc, v], None if i == len(values) - 1 else f"sum{i}")
    return acc


@_register("Dropout", "identity (inference); the mask output is unsupported")
def _dropout(c: _OpContext) -> Any:
    c.expect(1, 4)
    return (c.v(0), _Missing(c.op, "the mask output"))


# --- linear algebra -----------------------------------------------------------------------------


@_register("MatMul BatchMatMul", "matmul (2-D) / batch_matmul(transpose_a, transpose_b)")
def _matmul(c: _OpContext) -> Value:
    c.expect(2, 4)
    a, b = _operands(c, 2, True)
    ta = c.bool_(2, "transpose_a", "transpose_x1", default=False)
    tb = c.bool_(3, "transpose_b", "transpose_x2", default=False)
    op = "matmul" if a.type.rank == 2 and b.type.rank == 2 else "batch_matmul"
    return c.emit(op, [a, b], transpose_a=ta, transpose_b=tb)


@_register("Dense", "dense(x, weight[, bias]): x @ weight.T + bias")
def _dense(c: _OpContext) -> Value:
    c.expect(2, 3)
    inputs = [c.v(0), c.v(1)]
    if len(c.args) == 3 and not (isinstance(c.args[2], _Const) and c.args[2].value is None):
        inputs.append(c.v(2, inputs[0].dtype))
    return c.emit("dense", inputs)


@_register("BiasAdd", "add, the bias reshaped onto the channel axis (axis 1 for NCHW, last for NHWC)")
def _bias_add(c: _OpContext) -> Value:
    c.expect(2, 3)
    x, b = c.v(0), c.v(1)
    if b.type.rank != 1:
        raise c.fail(f"the bias must be 1-D, got {b.type}")
    if c.format(2) == "NCHW" and x.type.rank > 2:
        b = c.emit("reshape", [b], "bias", shape=(b.shape[0],) + (1,) * (x.type.rank - 2))
    return c.emit("add", [x, b])


# --- convolution and pooling --------------------------------------------------------------------


def _hw(c: _OpContext, value: tuple[int, ...] | None, fmt: str, what: str,
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


def _pad_mode(c: _OpContext, index: int | None) -> str:
    value = _scalar(c.setting(index, "pad_mode", default="valid"))
    mode = _PAD_MODES.get(value) if isinstance(value, int) else str(value).lower()
    if mode not in ("pad", "same", "valid"):
        raise _Unsupported(f"pad_mode {value!r} is not modelled (pad, same and valid are)")
    return mode


def _same_pads(size: int, k: int, s: int, d: int = 1) -> tuple[int, int]:
    """TensorFlow's 'same' padding of one axis: (low, high), the odd cell at the high end."""
    out = -(-size // s)
    total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
    return total // 2, total - total // 2


@_register("Conv2D", "conv2d(strides, padding from pad_list / pad_mode, dilation, groups); "
                     "NHWC data between transposes")
def _conv2d(c: _OpContext) -> Value:
    c.expect(2)
    if c.setting(None, "mode", default=1) != 1:
        raise _Unsupported(f"mode {c.setting(None, 'mode')!r} (only 1, cross-correlation, is)")
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


@_register("MaxPool AvgPool", "max_pool2d / avg_pool2d(kernel, strides, 'same' padding; avg "
                              "divides by the cells inside the input); NHWC between transposes")
def _pool(c: _OpContext) -> Value:
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
        raise _Unsupported("pad_mode 'pad' of pooling")
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


@_register("BatchNorm", "batch_norm(axis = channel axis, epsilon) with the moving statistics "
                        "(inference only); the batch-statistics outputs are unsupported")
def _batch_norm(c: _OpContext) -> Any:
    c.expect(5, 9)
    if c.bool_(5, "is_training", default=False):
        raise _Unsupported("training mode (is_training=True)")
    x = c.v(0)
    params = [c.v(i, x.dtype) for i in range(1, 5)]
    axis = 1 if c.format(8) == "NCHW" else x.type.rank - 1
    eps = c.float_(6, "epsilon", default=1e-5)
    y = c.emit("batch_norm", [x, *params], axis=axis, epsilon=eps)
    return (y, *(_Missing(c.op, f"output {i} (batch statistics)") for i in range(1, 5)))


@_register("LayerNorm", "layer_norm(begin_norm_axis, epsilon); gamma and beta applied apart "
                        "when begin_params_axis differs; the mean / rstd outputs are unsupported")
def _layer_norm(c: _OpContext) -> Any:
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


@_register("Softmax LogSoftmax", "softmax / log_softmax(axis); one axis only")
def _softmax(c: _OpContext) -> Value:
    c.expect(1, 2)
    axes = c.ints(1, "axis", default=(-1,))
    if len(axes) != 1:
        raise _Unsupported(f"softmax over several axes {list(axes)}")
    return c.emit("softmax" if c.op == "Softmax" else "log_softmax", [c.v(0)], axis=axes[0])


# --- reductions ---------------------------------------------------------------------------------


def _reduction(op: str) -> Callable[[_OpContext], Value]:
    def convert(c: _OpContext) -> Value:
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
    MINDIR_OPS[_ms] = OpMapping(f"{_op}(axes = axis (empty: all), keepdims)", _reduction(_op))


@_register("Argmax Argmin", "argmax / argmin(axis), cast to the declared index dtype")
def _argmax(c: _OpContext) -> Value:
    c.expect(1, 3)
    axis = c.int_(1, "axis", default=-1)
    y = c.emit("argmax" if c.op == "Argmax" else "argmin", [c.v(0)], "index", axis=axis)
    want = c.out.dtype if c.out is not None else "int32"
    return y if y.dtype == want else c.emit("cast", [y], to=want)


# --- layout -------------------------------------------------------------------------------------


@_register("Reshape", "reshape(shape) (-1 allowed)")
def _reshape(c: _OpContext) -> Value:
    c.expect(1, 2)
    return c.emit("reshape", [c.v(0)], shape=c.ints(1, "shape"))


@_register("Flatten", "reshape to [N, product of the other axes]")
def _flatten_op(c: _OpContext) -> Value:
    c.expect(1)
    x = c.v(0)
    return c.emit("reshape", [x], shape=(x.shape[0] if x.shape else 1, math.prod(x.shape[1:])))


@_register("FlattenExt", "reshape merging the axes start_dim..end_dim")
def _flatten_ext(c: _OpContext) -> Value:
    c.expect(1, 3)
    x = c.v(0)
    rank = max(x.type.rank, 1)
    start, end = c.int_(1, "start_dim", default=0) % rank, c.int_(2, "end_dim", default=-1) % rank
    shape = (*x.shape[:start], math.prod(x.shape[start:end + 1]), *x.shape[end + 1:])
    return c.emit("reshape", [x], shape=shape if x.shape else (1,))


@_register("Transpose", "transpose(perm)")
def _transpose(c: _OpContext) -> Value:
    c.expect(1, 2)
    return c.emit("transpose", [c.v(0)], perm=c.ints(1, "perm", "input_perm"))


@_register("ExpandDims", "expand_dims(axis)")
def _expand_dims(c: _OpContext) -> Value:
    c.expect(1, 2)
    return c.emit("expand_dims", [c.v(0)], axis=c.int_(1, "axis"))


@_register("Squeeze", "squeeze(axes) (empty: every size-1 axis)")
def _squeeze(c: _OpContext) -> Value:
    c.expect(1, 2)
    return c.emit("squeeze", [c.v(0)], axes=c.ints(1, "axis", default=()) or None)


@_register("Concat", "concat(axis) of a tuple of tensors")
def _concat(c: _OpContext) -> Value:
    c.expect(1, 2)
    items = _flatten(c.args[0]) if isinstance(c.args[0], tuple) else [c.args[0]]
    sub = c.with_args(items)
    return c.emit("concat", _operands(sub, len(items), True), axis=c.int_(1, "axis", default=0))


@_register("Split", "split(axis, sections = output_num), a tuple")
def _split(c: _OpContext) -> Any:
    c.expect(1, 3)
    axis, parts = c.int_(1, "axis", default=0), c.int_(2, "output_num", default=1)
    out = c.emit("split", [c.v(0)], axis=axis, sections=parts)
    return out if isinstance(out, tuple) else (out,)


@_register("Gather", "gather(axis); batch_dims must be 0")
def _gather(c: _OpContext) -> Value:
    c.expect(2, 4)
    if c.int_(3, "batch_dims", default=0) != 0:
        raise _Unsupported("batch_dims != 0")
    return c.emit("gather", [c.v(0), c.v(1)], axis=c.int_(2, "axis", default=0))


@_register("Slice", "slice(begin, end = begin + size; size -1: to the end)")
def _slice(c: _OpContext) -> Value:
    c.expect(1, 3)
    x = c.v(0)
    begin, size = c.ints(1, "begin"), c.ints(2, "size")
    if len(begin) != x.type.rank or len(size) != x.type.rank:
        raise c.fail(f"begin {list(begin)} and size {list(size)} need one entry per axis of {x.type}")
    end = tuple(d if s == -1 else b + s for b, s, d in zip(begin, size, x.shape))
    return c.emit("slice", [x], begin=begin, end=end)


@_register("StridedSlice", "strided_slice(begin, end, strides) with begin/end masks; shrink_axis "
                           "as a reshape (ellipsis and new-axis masks unsupported)")
def _strided_slice(c: _OpContext) -> Value:
    c.expect(1, 9)
    x = c.v(0)
    begin, end, strides = list(c.ints(1, "begin")), list(c.ints(2, "end")), list(c.ints(3, "strides"))
    masks = [c.int_(i, n, default=0) for i, n in
             enumerate(("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask"), 4)]
    if masks[2] or masks[3]:
        raise _Unsupported("ellipsis_mask and new_axis_mask")
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


@_register("BroadcastTo", "broadcast_to(shape) (-1: keep the input's size)")
def _broadcast_to(c: _OpContext) -> Value:
    c.expect(1, 2)
    x = c.v(0)
    shape = list(c.ints(1, "shape"))
    off = len(shape) - x.type.rank
    shape = [x.shape[i - off] if d == -1 and i >= off else d for i, d in enumerate(shape)]
    return c.emit("broadcast_to", [x], shape=shape)


@_register("Pad", "pad(before, after) from paddings ((before, after) per axis), zeros")
def _pad(c: _OpContext) -> Value:
    c.expect(1, 2)
    pairs = c.setting(1, "paddings")
    try:
        flat = [int(p) for p in np.asarray(pairs, dtype=np.int64).reshape(-1)]
    except (TypeError, ValueError):
        raise c.fail(f"paddings must be (before, after) pairs of integers, got {pairs!r}") from None
    if len(flat) != 2 * c.v(0).type.rank:
        raise c.fail(f"paddings must be one (before, after) pair per axis, got {pairs!r}")
    return c.emit("pad", [c.v(0)], before=flat[0::2], after=flat[1::2])


@_register("OneHot", "one_hot(depth, on_value, off_value, axis)")
def _one_hot(c: _OpContext) -> Value:
    c.expect(4, 5)
    on, off = (_scalar(c.args[i].value) if isinstance(c.args[i], _Const) else None for i in (2, 3))
    if on is None or off is None:
        raise _Unsupported("on_value and off_value must be constants")
    dtype = c.out.dtype if c.out is not None else "float32"
    return c.emit("one_hot", [c.v(0)], depth=c.int_(1, "depth"), on_value=float(on),
                  off_value=float(off), axis=c.int_(4, "axis", default=-1), dtype=dtype)


@_register("ZerosLike OnesLike", "a constant of the input's type")
def _fill_like(c: _OpContext) -> Value:
    c.expect(1)
    x = c.v(0)
    fill = np.zeros if c.op == "ZerosLike" else np.ones
    return c.const(fill(x.shape), x.dtype, "fill")


@_register("Shape", "the static shape, as a constant tuple")
def _shape(c: _OpContext) -> Any:
    c.expect(1)
    return _Const(tuple(c.v(0).shape), c.name)


# --- entry points -------------------------------------------------------------------------------


def _bindings():
    try:
        from akg.graph.io import _mind_ir_pb2
    except ImportError as e:  # protobuf missing or too old for the generated module
        raise UnsupportedError(f"reading MindIR needs the 'protobuf' package (4.25.1 or newer): {e}") from None
    return _mind_ir_pb2


def parse_mindir(data: bytes, name: str = "<mindir>", base_dir: str | Path | None = None) -> Graph:
    """Turn the bytes of a `.mindir` file into a Graph; `name` is the file (for errors and the
    graph's name), `base_dir` the folder external weight files are relative to."""
    pb = _bindings()
    from google.protobuf.message import DecodeError

    model = pb.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as e:
        raise ImportFormatError(f"{name}: not a MindIR model, or a truncated one: the protobuf "
                                f"does not parse ({e})") from None
    graph_name = _sanitize(Path(name).stem if name != "<mindir>" else "mindir")
    try:
        return _Importer(model, pb, name, Path(base_dir) if base_dir is not None else None).run(graph_name)
    except _Fail as e:
        raise ImportFormatError(f"{name}: {e}") from None
    except InvalidGraphError as e:  # a graph rule broken outside any one node
        raise ImportFormatError(f"{name}: {e}") from None
    except AkgError as e:
        if not str(e).startswith(name):
            e.args = (f"{name}: {e}",)
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, UnicodeDecodeError,
            RecursionError, OverflowError) as e:
        raise ImportFormatError(f"{name}: malformed MindIR ({type(e).__name__}: {e})") from None


def load_mindir(path: str | Path) -> Graph:
    """Read a MindSpore `.mindir` model into a Graph."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ImportFormatError(f"{path}: cannot read file: {e.strerror}") from None
    return parse_mindir(data, str(path), path.parent)

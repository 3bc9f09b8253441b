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
* Training graphs (a TrainOneStepCell export): ops that write parameters in place
  (`mindir_train.WRITTEN_INPUTS`: Assign, SGD, ApplyMomentum, ...) make the parameters they
  write graph inputs named after them, and add the outputs `new.<parameter>` (their value after
  the last write) after the file's own, as `akg grad` names a training step's next state. The
  side-effect states are then followed: `Load(p, U)` and a write's own reference inputs read `p`
  as the writes before state U left it. `load_mindir_step` also gives the file's values of those
  parameters. Any other op that writes memory (`side_effect_mem`) is unsupported, never dropped.
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
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from akg.errors import ImportFormatError, UnsupportedError
from akg.graph.io.importer import (Frontend, ImportFail, Importer, brief, graph_name_of, read_model_file,
                                   register_frontend)
from akg.graph.io.mindir_ops import MINDIR_OPS, MONAD, MindirOpContext, _Const, _describe, _flatten, _Missing
from akg.graph.io.mindir_train import WRITTEN_INPUTS, Writes
from akg.graph.train import NEW
from akg.graph.ir import Graph, Value
from akg.graph.types import TensorType

# TensorProto.DataType -> dtype; the others (uint16/32/64, bfloat16, complex, string) are unsupported
_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 5: "int16", 6: "int32", 7: "int64", 9: "bool",
           10: "float16", 11: "float64", 17: "float64"}
_DTYPE_NAMES = {0: "undefined", 4: "uint16", 8: "string", 12: "uint32", 13: "uint64",
                14: "complex64", 15: "complex128", 16: "bfloat16", 18: "qint4x2"}


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
                raise ImportFail(f"{where}: tensor {list(shape)} holds no data")
            data = np.zeros(0, dtype)
        if data.size != size:
            raise ImportFail(f"{where}: tensor {list(shape)} holds {data.size} values")
        return data.reshape(shape)
    if len(raw) != size * stored.itemsize:
        raise ImportFail(f"{where}: tensor {dtype}{list(shape)} needs {size * stored.itemsize} bytes, "
                    f"holds {len(raw)}")
    return np.frombuffer(raw, dtype=stored).astype(dtype).reshape(shape)


def _external(ext, where: str, base_dir: Path | None) -> bytes:
    if base_dir is None:
        raise ImportFail(f"{where}: the data lies in an external file, and there is no model folder")
    path = base_dir / ext.location
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if ext.offset < 0 or ext.offset > size or (ext.HasField("length") and not
                                                       0 <= ext.length <= size - ext.offset):
                raise ImportFail(f"{where}: external data {path} is shorter than offset + length")
            f.seek(ext.offset)
            raw = f.read(ext.length) if ext.HasField("length") else f.read()
    except OSError as e:
        raise ImportFail(f"{where}: cannot read external data {path}: {e.strerror}") from None
    if ext.HasField("length") and len(raw) != ext.length:
        raise ImportFail(f"{where}: external data {path} is shorter than offset + length")
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


@dataclass(frozen=True)
class _State:
    """A side-effect state of a training graph: the parameters written before it (full name ->
    their value there); the others still hold their value from the file (the inputs)."""

    values: dict[str, Value]


@dataclass(frozen=True)
class _Written:
    """The result of a write op: its own output, the parameters it wrote and the state after it."""

    result: Any
    writes: dict[str, Value]
    state: _State


_START = _State({})


# --- the importer -------------------------------------------------------------------------------


class MindirImporter(Importer):
    """One ModelProto -> Graph: only what the outputs depend on, resolved from them."""

    format_name = "MindIR"
    ops = MINDIR_OPS
    const_compare_limit = 64  # larger constants (weights) are told apart by name

    def __init__(self, model, pb, filename: str, base_dir: Path | None, graph_name: str):
        super().__init__(filename, graph_name)
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
        self._prim_cache: dict[str, tuple[str, dict[str, Any]]] = {}
        self.written: dict[str, Value] = {}  # parameters some op writes: full name -> its input
        self.initial: dict[str, np.ndarray] = {}  # their values in the file, by input name
        self._known: dict[int, np.ndarray] = {}  # id(constant made from a weight) -> its data

    # --- names and values ---------------------------------------------------------------------

    def short(self, name: str) -> str:
        return name[len(self.prefix):] if self.prefix and name.startswith(self.prefix) else name

    def tensor_of(self, item: Any, where: str, dtype: str | None = None) -> Value:
        """A graph value for an op input: constants become graph constants (of `dtype`)."""
        if isinstance(item, _Written):
            item = item.result
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
            raise self.unsupported_error(item.op, f"{item.what} is not modelled ({where})")
        raise ImportFail(f"{where}: expected a tensor, got {_describe(item)}")

    def known(self, item: Any) -> np.ndarray | None:
        """The data of an op input known at import time (a constant, or a weight that no op
        writes), else None."""
        if isinstance(item, _Const) and not isinstance(item.value, (str, tuple, _Opaque)) \
                and item.value is not None:
            return np.asarray(item.value)
        return self._known.get(id(item)) if isinstance(item, Value) else None

    # --- the whole graph ----------------------------------------------------------------------

    def run(self) -> Graph:
        if not self.model.HasField("graph"):
            raise ImportFail("not a MindIR model: no graph (an empty, truncated or foreign file)")
        if not self.graph.output:
            raise ImportFail(f"graph '{self.graph.name}' has no outputs (a truncated file?)")
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
            v = self.input(self.short(vi.name), TensorType(tuple(t.dims), _DTYPES[t.data_type]))
            self.env[vi.name] = v
        writes = self.scan_writes()
        out_names = [f"output_{i}" for i in range(len(self.graph.output))]
        self.names.update(out_names)  # reserved: graph outputs get these names
        self.names.update(NEW + v.name for v in self.written.values())
        results: list[Value] = []
        for vi in self.graph.output:
            item = self.resolve(vi.name)
            for leaf in _flatten(item):
                results.append(self.tensor_of(leaf, f"graph output '{self.short(vi.name)}'"))
        names = [f"output_{i}" for i in range(len(results))]
        final: dict[str, Value] = {}
        for node in writes:  # in file order: the last write of a parameter is its new value
            final.update(self.resolve(node.output[0] if node.output else node.name).writes)
        for name, v in self.written.items():
            results.append(final.get(name, v))
            names.append(NEW + v.name)
        return self.finish(results, names)

    def scan_writes(self) -> list:
        """The nodes that write parameters (WRITTEN_INPUTS), in file order; each parameter they
        write becomes a graph input named after it (in the file's parameter order), whose value
        in the file is kept in `initial`. A file without them is imported as before."""
        nodes, names = [], set()
        for node in self.graph.node:
            if not node.op_type.startswith("REF::") or node.op_type[5:] not in self.prims:
                continue
            op, attrs = self.primitive(node)
            where = f"node '{self.short(node.name)}' ({op})"
            if op not in WRITTEN_INPUTS:
                if attrs.get("side_effect_mem") is True:  # a write we would otherwise drop unseen
                    raise self.unsupported_error(op, f"it writes parameters in place; of such ops only "
                                                     f"{', '.join(sorted(WRITTEN_INPUTS))} are modelled ({where})")
                continue
            for i in WRITTEN_INPUTS[op]:
                if i >= len(node.input):
                    raise ImportFail(f"{where}: missing input {i}, the parameter it writes")
                if node.input[i] not in self.params:
                    raise ImportFail(f"{where}: writes input {i} '{self.short(node.input[i])}', which "
                                     "is not a parameter (a weight of the file)")
                names.add(node.input[i])
            nodes.append(node)
        for p in self.graph.parameter:
            if p.name in names and p.name not in self.written:
                where = f"weight '{self.short(p.name)}'"
                data = self.dec.tensor(p, where)
                v = self.input(p.ref_key or self.short(p.name), TensorType.of(data))
                self.written[p.name] = self.env[p.name] = v
                self.initial[v.name] = data
        return nodes

    def finish(self, results: list[Value], names: list[str]) -> Graph:
        """Name the outputs (output_0, ..., then new.<parameter>); an input, a constant or a
        value that is already an output is copied first (an identity reshape)."""
        outputs: list[Value] = []
        named: set[int] = set()
        produced = {id(v) for v in self.results}
        for v, want in zip(results, names):
            self.names.discard(want)  # reserved in run()
            if id(v) not in produced or id(v) in named:
                v = self.emit("reshape", [v], want, shape=v.shape)
            else:
                self.names.discard(v.name)
                v.name = want  # Values are ours until the Graph is built
                self.names.add(want)
            named.add(id(v))
            outputs.append(v)
        return self.build(outputs)

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
                    raise ImportFail(f"the graph has a cycle through node '{self.short(n)}'")
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
            raise ImportFail(f"value '{name}' is used but never defined (not an input, weight or node)")
        where = f"weight '{self.short(name)}'"
        data = self.dec.tensor(p, where)
        v = self.const(data, p.ref_key or self.short(name))
        self._known[id(v)] = data
        return v

    def primitive(self, node) -> tuple[str, dict[str, Any]]:
        """(primitive type, its attributes) of a node."""
        op_type = node.op_type
        if op_type.startswith("REF::"):
            key = op_type[5:]
            if key not in self._prim_cache:
                prim = self.prims.get(key)
                if prim is None:
                    raise ImportFail(f"node '{self.short(node.name)}': primitive '{key}' is not in the "
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
        if self.written:  # a training graph: states are followed, to read parameters right
            return list(node.input[:1]) if op == "Depend" else list(node.input)
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
            raise ImportFail(f"constant '{short}' has no 'value'")
        op, attrs = self.primitive(node)
        where = f"node '{short}' ({op})"
        if op == "UpdateState" and not self.written:
            return MONAD
        args = [self.env[i] for i in self.needed(node)]
        if self.written:
            if op == "UpdateState":
                return self.update_state(args, where)
            if op == "Load":
                if not args:
                    raise ImportFail(f"{where}: no inputs")
                state = _state_of(args[-1]) if len(args) > 1 else _START
                return state.values.get(node.input[0], args[0])
            state, inputs, args = self.at_state(node, args)
        if op in ("Load", "Depend", "Identity"):
            if not args:
                raise ImportFail(f"{where}: no inputs")
            return args[0]
        if op in ("MakeTuple", "MakeList"):
            return tuple(args)
        if op in ("TupleGetItem", "ListGetItem"):
            if len(args) != 2 or not isinstance(args[0], tuple) or not isinstance(args[1], _Const):
                raise ImportFail(f"{where}: expects (tuple, constant index), got "
                            f"({', '.join(_describe(a) for a in args)})")
            i = args[1].value
            if isinstance(i, np.ndarray) and i.ndim == 0:
                i = i.item()
            if not isinstance(i, int) or not -len(args[0]) <= i < len(args[0]):
                raise ImportFail(f"{where}: index {brief(i)} out of range for a tuple of {len(args[0])}")
            return args[0][i]
        mapping = self.mapping(op, where)
        declared = None
        for a in node.attribute:
            if a.name == "shape":
                declared = self.dec.declared(a)
        result = self.apply(mapping, MindirOpContext(self, op, attrs, args, declared, short, where))
        if isinstance(result, Writes):
            if not self.written:
                raise ImportFail(f"{where}: writes a parameter outside a training graph")
            writes = {}
            for i, v in result.values.items():
                if inputs[i] not in self.written:
                    raise ImportFail(f"{where}: writes input {i} '{self.short(inputs[i])}', which is not "
                                     "a parameter (a weight of the file)")
                writes[inputs[i]] = v
            return _Written(result.result, writes, _State({**state.values, **writes}))
        return result

    # --- side effects of training graphs ------------------------------------------------------

    def update_state(self, args: list[Any], where: str) -> _State:
        """UpdateState(U, x, ...): the state U, then the writes of every x that is a write."""
        if not args:
            raise ImportFail(f"{where}: no inputs")
        values = dict(_state_of(args[0]).values)
        for item in _flatten(tuple(args[1:])):
            if isinstance(item, _Written) or _is_state(item):
                values.update(_state_of(item).values)
        return _State(values)

    def at_state(self, node, args: list[Any]) -> tuple[_State, list[str], list[Any]]:
        """A node's inputs with its state inputs taken out and the written parameters it takes
        by name read at that state: (the state, the input names kept, their values)."""
        states = [a for a in args if _is_state(a)]
        state = _state_of(states[-1]) if states else _START
        names, values = [], []
        for name, a in zip(node.input, args):
            if _is_state(a):
                continue
            names.append(name)
            values.append(state.values.get(name, a) if name in self.written else a)
        return state, names, values


def _is_state(item: Any) -> bool:
    """A side-effect state: the monad constant (the start) or an UpdateState."""
    return isinstance(item, _State) or item is MONAD or (isinstance(item, _Const) and item.value is MONAD)


def _state_of(item: Any) -> _State:
    if isinstance(item, _State):
        return item
    if isinstance(item, _Written):
        return item.state
    if _is_state(item):
        return _START
    raise ImportFail(f"expected a side-effect state, got {_describe(item)}")


# --- entry points -------------------------------------------------------------------------------


def _bindings():
    try:
        from akg.graph.io import _mind_ir_pb2
    except ImportError as e:  # protobuf missing or too old for the generated module
        raise UnsupportedError(f"reading MindIR needs the 'protobuf' package (4.25.1 or newer): {e}") from None
    return _mind_ir_pb2


def _is_model_proto(obj: Any) -> bool:
    """A parsed MindIR ModelProto (ours, or another copy of the bindings of mind_ir.proto)."""
    return getattr(getattr(obj, "DESCRIPTOR", None), "full_name", None) == "mind_ir.ModelProto"


def _non_text_field(model) -> str | None:
    """The path of a string field that holds bytes rather than UTF-8 text (protobuf hands those
    back as bytes), or None; walked with a stack, not recursion."""
    from google.protobuf.descriptor import FieldDescriptor

    stack = [(model, "model")]
    while stack:
        message, path = stack.pop()
        for field, value in message.ListFields():
            where = f"{path}.{field.name}"
            repeated = (field.is_repeated if hasattr(field, "is_repeated")  # protobuf >= 6
                        else field.label == FieldDescriptor.LABEL_REPEATED)
            items = list(value) if repeated else [value]
            if field.type == FieldDescriptor.TYPE_STRING:
                for i, item in enumerate(items):
                    if not isinstance(item, str):
                        return f"{where}[{i}]" if repeated else where
            elif field.type == FieldDescriptor.TYPE_MESSAGE:
                stack.extend((item, f"{where}[{i}]" if repeated else where) for i, item in enumerate(items))
    return None


def parse_mindir(data: bytes | Any, name: str = "<mindir>", base_dir: str | Path | None = None) -> Graph:
    """Turn the bytes of a `.mindir` file (or a parsed ModelProto) into a Graph; `name` is the
    file (for errors and the graph's name), `base_dir` the folder external weight files are
    relative to."""
    return _importer(data, name, base_dir).import_graph()


def _importer(data: bytes | Any, name: str, base_dir: str | Path | None) -> MindirImporter:
    pb = _bindings()
    from google.protobuf.message import DecodeError

    if isinstance(data, pb.ModelProto):
        model = data
    else:
        if _is_model_proto(data):  # a ModelProto of other bindings: through its bytes
            data = data.SerializeToString()
        model = pb.ModelProto()
        try:
            model.ParseFromString(data)
        except (DecodeError, RuntimeError, ValueError) as e:
            raise ImportFormatError(f"{name}: not a MindIR model, or a truncated one: the protobuf "
                                    f"does not parse ({e})") from None
    bad = _non_text_field(model)
    if bad is not None:
        raise ImportFormatError(f"{name}: malformed MindIR: {bad} holds bytes that are not UTF-8 text "
                                "(a damaged file?)")
    graph_name = graph_name_of(name, "<mindir>", "mindir")
    base = Path(base_dir) if base_dir is not None else None
    return MindirImporter(model, pb, name, base, graph_name)


def load_mindir(path: str | Path) -> Graph:
    """Read a MindSpore `.mindir` model into a Graph."""
    path = Path(path)
    return parse_mindir(read_model_file(path, text=False), str(path), path.parent)


def load_mindir_step(path: str | Path) -> tuple[Graph, dict[str, np.ndarray]]:
    """Read a MindSpore training graph (a `TrainOneStepCell` export, say) as one training step,
    with its initial state: (the Graph, the file's values of the parameters it writes, keyed
    by their input names). Feed the state with the data inputs; the outputs are the file's
    (output_0: the loss) then `new.<parameter>`, the next state. A file that writes nothing
    gives its Graph and an empty state."""
    path = Path(path)
    imp = _importer(read_model_file(path, text=False), str(path), path.parent)
    graph = imp.import_graph()
    return graph, dict(imp.initial)


register_frontend(Frontend(
    "mindir", (".mindir",), load_mindir, parse_mindir,
    accepts=lambda obj: isinstance(obj, (bytes, bytearray, memoryview)) or _is_model_proto(obj),
    takes="the bytes of a .mindir file or a parsed ModelProto"))

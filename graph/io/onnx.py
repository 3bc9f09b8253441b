"""Importer for ONNX models (`.onnx`, or an `onnx.ModelProto`), read with the `onnx` package.

A model is a `GraphProto`: `input` (the model inputs, and in old exports the initializers too),
`initializer` (weights), `node` (topologically sorted) and `output`. `ONNX_OPS`
(`akg.graph.io.onnx_ops`) says how each ONNX op becomes akg's registry ops. Choices:

* Opsets 13 to the newest the installed `onnx` knows, of the default domain (`ai.onnx`); an
  older model is first upgraded to opset 13 by onnx's own `version_converter`. A
  node of another domain (`ai.onnx.ml`, `com.microsoft`, a model's local functions) is
  unsupported, naming the node. Attributes missing from a node take the default the ONNX
  spec gives (the converters state them).
* Initializers are constants. A node whose inputs are all constants is evaluated at import
  with the op's NumPy reference (`OpDef.evaluate`): the shape subgraphs PyTorch exports
  (`Shape -> Gather -> Unsqueeze -> Concat -> Reshape`) fold away, and inputs that must be
  known at compile time (Reshape's shape, Slice's starts, a reduction's axes) are constants by
  the time their consumer needs them. Such an input computed from a model input is a dynamic
  shape, which is unsupported, naming the node and the input.
* Shapes are static: a model input with a symbolic or unknown dimension is unsupported,
  naming the input. Tensor types are those akg has (float16/32/64, int8-64, uint8, bool,
  complex64); others (bfloat16, float8, uint16-64, int4, strings) are unsupported.
* Each node's results are checked against the types the model declares for them
  (`value_info`, the graph outputs): size-1 axes are reshaped, any other difference is an
  error (a wrong mapping), never a silently wrong graph.
* Each tensor name is defined once (ONNX's single assignment): a name written twice (by two
  nodes, or by a node over an input or initializer) is an error naming both writers. External
  data (`data_location` EXTERNAL) is read only from files inside the model's folder.
* Values keep the ONNX tensor names (made valid value names); helper values are named after
  the node's first output (`y.mean`). Only what the outputs depend on is kept.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from akg.errors import ImportFormatError, UnsupportedError, one_line
from akg.graph.io.importer import (Frontend, ImportFail, Importer, graph_name_of, read_model_file,
                                   register_frontend, sanitize_name, unique_name)
from akg.graph.io import (onnx_activations, onnx_image, onnx_int, onnx_layout,  # noqa: F401 - register their ops
                          onnx_linalg, onnx_nn, onnx_reduce, onnx_rnn, onnx_select,  # noqa: F401 - in ONNX_OPS
                          onnx_signal)  # noqa: F401
from akg.graph.io.onnx_ops import ONNX_OPS, InlineFunctionBody, OnnxOpContext, attribute_values
from akg.graph.ir import Graph, Value
from akg.graph.ops import get_op
from akg.graph.simplify import dce
from akg.graph.types import TensorType

MIN_OPSET = 13
FOLD_LIMIT = 1 << 22  # results larger than this (elements) are left to the graph, not folded
NOT_FOLDED = frozenset({"dropout"})  # ops whose result is not a function of their inputs

# TensorProto.DataType -> akg dtype
DTYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 9: "bool",
          10: "float16", 11: "float64", 12: "uint32", 13: "uint64", 14: "complex64", 16: "bfloat16",
          17: "float8_e4m3fn", 18: "float8_e4m3fnuz", 19: "float8_e5m2", 20: "float8_e5m2fnuz"}


ONNX_TYPES = {dtype: code for code, dtype in DTYPES.items()}


def inline_function(function, node, prefix: str) -> list:
    """`function`'s nodes as they read for one call `node`: formal inputs and outputs renamed to
    the node's tensors (an optional one left out to ''), internal tensors to `prefix + name`,
    and attributes that refer to the function's (`ref_attr_name`) replaced by the node's."""
    import onnx

    names = {formal: (node.input[i] if i < len(node.input) else "") for i, formal in enumerate(function.input)}
    names.update({formal: node.output[i] for i, formal in enumerate(function.output)
                  if i < len(node.output) and node.output[i]})
    attrs = {a.name: a for a in node.attribute}

    def rename(name: str) -> str:
        return names.get(name, prefix + name if name else "")

    body = []
    for inner in function.node:
        out = onnx.NodeProto()
        out.CopyFrom(inner)
        del out.input[:], out.output[:], out.attribute[:]
        out.input.extend(rename(n) for n in inner.input)
        out.output.extend(rename(n) for n in inner.output)
        for a in inner.attribute:
            if a.ref_attr_name:
                if a.ref_attr_name in attrs:  # an attribute the call leaves unset is left out
                    ref = onnx.AttributeProto()
                    ref.CopyFrom(attrs[a.ref_attr_name])
                    ref.name = a.name
                    out.attribute.append(ref)
            else:
                out.attribute.append(a)
        body.append(out)
    return body


def node_where(k: int, node) -> str:
    """How errors name the `k`th node: `node 3 'conv1' (Conv)` (its name, else its first output)."""
    label = node.name or next((o for o in node.output if o), node.op_type)
    return f"node {k} '{label}' ({node.op_type})"


def check_single_assignment(graph) -> None:
    """ImportFail unless every tensor name of the graph is defined once (ONNX's static single
    assignment, which onnx's checker enforces): two nodes writing one output, or a node writing
    a graph input's or an initializer's name, would leave one of the writers silently unused.
    An initializer may be listed among the inputs too (models of IR version < 4 do)."""
    defined: dict[str, str] = {}
    for t in graph.initializer:
        if t.name in defined:
            raise ImportFail(f"initializer '{t.name}' is given twice")
        defined[t.name] = "an initializer"
    for vi in graph.input:
        if vi.name in defined:
            if defined[vi.name] == "an initializer":
                continue
            raise ImportFail(f"graph input '{vi.name}' is declared twice")
        defined[vi.name] = "a graph input"
    for k, node in enumerate(graph.node):
        where = node_where(k, node)
        for name in node.output:
            if not name:
                continue  # an optional output left out
            first = defined.get(name)
            if first is None:
                defined[name] = where
            elif first.startswith("node "):
                raise ImportFail(f"value '{name}' is written by two nodes, {first} and {where}; an ONNX "
                                 "graph defines each value once")
            else:
                raise ImportFail(f"{where} writes '{name}', which is already {first}; an ONNX graph defines "
                                 "each value once")


def dtype_of(elem_type: int, where: str) -> str:
    """The akg dtype of an ONNX element type; unsupported for the types akg does not have."""
    if elem_type in DTYPES:
        return DTYPES[elem_type]
    import onnx

    try:
        name = onnx.TensorProto.DataType.Name(elem_type)
    except ValueError:
        name = f"#{elem_type}"
    raise ImportFail(f"{where}: tensors of type {name} are not supported (akg has "
                     f"{', '.join(sorted(set(DTYPES.values())))})", unsupported=True)


def declared_type(value_info, where: str) -> TensorType | None:
    """The TensorType a ValueInfoProto declares, None when it declares no full static shape."""
    t = value_info.type
    if t.WhichOneof("value") != "tensor_type":
        return None
    tt = t.tensor_type
    if not tt.HasField("shape") or not tt.elem_type or tt.elem_type not in DTYPES:
        return None
    dims = [d.dim_value if d.WhichOneof("value") == "dim_value" else None for d in tt.shape.dim]
    if any(d is None for d in dims):
        return None
    return TensorType(dims, DTYPES[tt.elem_type])


class OnnxImporter(Importer):
    """One ONNX ModelProto -> Graph. Values are named at the end (`finish`), so that every
    ONNX tensor keeps its name however the mapping made it."""

    format_name = "ONNX model"
    ops = ONNX_OPS
    names_at_end = True

    def __init__(self, model: Any, file: str, graph_name: str, base_dir: Path | None):
        super().__init__(file, graph_name)
        self.model = model
        self.base_dir = base_dir  # the folder external data lies in (None: an in-memory model)
        self.env: dict[str, Value] = {}  # ONNX tensor name -> value
        self.data: dict[int, np.ndarray] = {}  # id(constant value) -> its data
        self.declared: dict[str, TensorType] = {}
        self.opset = 0

    # --- constants and folding ----------------------------------------------------------------

    def const(self, data: Any, name: str) -> Value:
        v = super().const(data, name)
        self.data[id(v)] = np.asarray(data)
        return v

    def known(self, v: Value) -> np.ndarray | None:
        """The data of a constant value (an initializer, a Constant node, a folded result)."""
        return self.data.get(id(v))

    def emit(self, op: str, inputs: list[Value], name: str, **attrs: Any) -> Value | tuple[Value, ...]:
        """A node of `op`, or, when all its inputs are constants, its result evaluated now."""
        arrays = [self.known(v) for v in inputs]
        if op in NOT_FOLDED or not inputs or any(a is None for a in arrays):
            return super().emit(op, inputs, name, **attrs)
        opdef = get_op(op)
        checked = opdef.check_attrs(attrs)
        types = opdef.infer_types([v.type for v in inputs], checked)
        if sum(t.size for t in types) > FOLD_LIMIT:
            return super().emit(op, inputs, name, **attrs)
        results = opdef.evaluate(arrays, checked)
        outs = tuple(self.const(np.asarray(r, dtype=t.dtype).reshape(t.shape), name if len(types) == 1
                                else f"{name}.{i}") for i, (r, t) in enumerate(zip(results, types)))
        return outs[0] if len(outs) == 1 else outs

    # --- the model ----------------------------------------------------------------------------

    def run(self) -> Graph:
        import onnx

        model = self.model
        self.opset = self._check_opsets(model, onnx.defs.onnx_opset_version())
        check_single_assignment(model.graph)
        if 0 < self.opset < MIN_OPSET:
            model = self._upgrade(model)
            self.opset = MIN_OPSET
        graph = model.graph
        for t in graph.initializer:
            where = f"initializer '{t.name}'"
            dtype_of(t.data_type, where)
            self.env[t.name] = self.const(self._array(t, where), t.name)
        for vi in (*graph.value_info, *graph.output):
            t = declared_type(vi, vi.name)
            if t is not None:
                self.declared[vi.name] = t
        for vi in graph.input:
            if vi.name in self.env:
                continue  # an initializer listed as an input (IR version < 4): a weight
            self.env[vi.name] = self.input(vi.name, self._input_type(vi))
        for k, node in enumerate(graph.node):
            self.convert(k, node)
        outputs = []
        for o in graph.output:
            if o.name not in self.env:
                raise ImportFail(f"graph output '{o.name}' is not produced by any node")
            outputs.append(self.env[o.name])
        return self.finish(graph, outputs)

    def _array(self, t, where: str) -> np.ndarray:
        from onnx import TensorProto, checker, numpy_helper

        if t.data_location == TensorProto.EXTERNAL:
            self._check_external(t, where)
        try:
            return np.asarray(numpy_helper.to_array(t, base_dir=str(self.base_dir or "")))
        except (OSError, ValueError, TypeError, checker.ValidationError) as e:
            raise ImportFail(f"{where}: cannot read the tensor's data ({one_line(e)})") from None

    def _check_external(self, t, where: str) -> None:
        """ImportFail unless a tensor's external data file is a file inside the model's folder
        (a location that leaves the folder, by '..', an absolute path or a symbolic link, is
        refused: a model file must not make akg read whatever file it names)."""
        if self.base_dir is None:
            raise ImportFail(f"{where}: the data lies in an external file, and there is no model folder")
        location = next((e.value for e in t.external_data if e.key == "location"), "")
        if not location:
            raise ImportFail(f"{where}: the data lies in an external file, but the tensor names none "
                             "(no 'location' in its external_data)")
        folder = self.base_dir.resolve()
        try:
            path = (folder / location).resolve()
        except (OSError, ValueError) as e:  # a NUL byte, a symbolic link loop
            raise ImportFail(f"{where}: bad external data location {location!r} ({e})") from None
        if not path.is_relative_to(folder):
            raise ImportFail(f"{where}: its external data file '{location}' lies outside the model's folder "
                             f"{folder}; akg reads external data only from inside that folder")
        if not path.is_file():
            raise ImportFail(f"{where}: its external data file '{location}' is missing (no file {path})")

    def _check_opsets(self, model, newest: int) -> int:
        default = None
        for o in model.opset_import:
            if o.domain in ("", "ai.onnx"):
                default = o.version
        if default is None:
            if not model.opset_import:
                raise ImportFail("the model declares no opset (opset_import is empty)")
            return 0  # nodes of other domains only: each is refused where it is used
        if default > newest:
            raise ImportFail(f"opset {default} is newer than the installed onnx package knows ({newest}); "
                             "upgrade onnx", unsupported=True)
        return default

    def _upgrade(self, model):
        """A model of an opset older than MIN_OPSET, rewritten to MIN_OPSET by ONNX's own
        version converter (the op table reads opsets from MIN_OPSET on)."""
        from onnx import version_converter

        try:
            return version_converter.convert_version(model, MIN_OPSET)
        except Exception as e:  # the converter's C++ errors come as RuntimeError/ValueError
            raise ImportFail(f"opset {self.opset} is older than akg reads ({MIN_OPSET} on), and onnx's "
                             f"version converter cannot upgrade it: {' '.join(str(e).split())[:200]}",
                             unsupported=True) from None

    def _input_type(self, vi) -> TensorType:
        where = f"input '{vi.name}'"
        t = vi.type
        if t.WhichOneof("value") != "tensor_type":
            kind = t.WhichOneof("value") or "no type"
            raise ImportFail(f"{where}: a {kind} input is not supported (tensors are)", unsupported=True)
        tt = t.tensor_type
        dtype = dtype_of(tt.elem_type, where)
        if not tt.HasField("shape"):
            raise ImportFail(f"{where}: no shape declared (dynamic rank); akg compiles static shapes only",
                             unsupported=True)
        dims = []
        for d in tt.shape.dim:
            if d.WhichOneof("value") != "dim_value":
                sym = f"'{d.dim_param}'" if d.dim_param else "unknown"
                raise ImportFail(f"{where}: dimension {len(dims)} is {sym} (a dynamic shape); akg compiles "
                                 "static shapes only: fix it with onnx.tools.update_model_dims or "
                                 "export with fixed sizes", unsupported=True)
            dims.append(d.dim_value)
        return TensorType(dims, dtype)

    # --- one node -----------------------------------------------------------------------------

    def convert(self, k: int, node) -> None:
        op = node.op_type
        out_name = next((o for o in node.output if o), node.name or op)
        where = node_where(k, node)
        if node.domain not in ("", "ai.onnx"):
            raise self.unsupported_error(f"{node.domain}.{op}", f"ops of domain '{node.domain}' are not "
                                                               f"supported ({where})")
        args = []
        for i, name in enumerate(node.input):
            if not name:
                args.append(None)  # an optional input left out
            elif name in self.env:
                args.append(self.env[name])
            else:
                raise ImportFail(f"{where}: input {i} '{name}' is not defined before the node")
        declared = [self.declared.get(o) if o else None for o in node.output]
        if op not in self.ops:
            body = self.function_body(node, args)
            if body is not None:  # an op ONNX defines as a function of other ops: its body, inlined
                for inner in body:
                    self.convert(k, inner)
                return
        mapping = self.mapping(op, where)
        ctx = OnnxOpContext(self, op, attribute_values(node, self._array), args, declared,
                            sanitize_name(out_name), where, list(node.input), list(node.output))
        try:
            result = self.apply(mapping, ctx)
        except InlineFunctionBody:
            body = self.function_body(node, args)
            if body is None:
                raise self.unsupported_error(op, f"this form has no mapping and no function body ({where})") from None
            for inner in body:
                self.convert(k, inner)
            return
        results = result if isinstance(result, tuple) else (result,)
        for i, name in enumerate(node.output):
            if not name:
                continue
            if i >= len(results) or results[i] is None:
                raise self.unsupported_error(op, f"output {i} '{name}' is not modelled ({where})")
            self.env[name] = results[i]

    def function_body(self, node, args: list[Value | None]) -> list | None:
        """The nodes of the function ONNX defines `node`'s op as (for the model's opset), with
        the node's inputs, outputs and attributes (or the spec's defaults) substituted and
        internal tensors given names of their own; None when the op has no function body."""
        import onnx

        try:
            schema = onnx.defs.get_schema(node.op_type, self.opset, node.domain)
        except onnx.defs.SchemaError:
            return None
        plain = [v for v in schema.function_opset_versions if v <= self.opset]
        typed = [v for v in schema.context_dependent_function_opset_versions if v <= self.opset]
        if not plain and not typed:
            return None
        full = onnx.NodeProto()
        full.CopyFrom(node)
        given = {a.name for a in node.attribute}
        for name, attr in schema.attributes.items():
            if name not in given and attr.default_value.name:
                full.attribute.append(attr.default_value)
        if typed and (not plain or max(typed) >= max(plain)):
            types = [onnx.TypeProto() if v is None else
                     onnx.helper.make_tensor_type_proto(ONNX_TYPES[v.dtype], v.shape) for v in args]
            raw = schema.get_context_dependent_function_with_opset_version(
                max(typed), full.SerializeToString(), [t.SerializeToString() for t in types])
        else:
            raw = schema.get_function_with_opset_version(max(plain))
        function = onnx.FunctionProto()
        function.ParseFromString(raw)
        return inline_function(function, full, f"{node.output[0] or node.op_type}/{node.op_type}/")

    # --- naming -------------------------------------------------------------------------------

    def finish(self, graph, outputs: list[Value]) -> Graph:
        """Name every value (ONNX tensors keep their names; helpers their hints), build the
        graph and keep what the outputs depend on."""
        used = {v.name for v in self.inputs}
        final: dict[int, str] = {}
        for name, v in self.env.items():  # in definition order: a tensor's first name wins
            if id(v) in self.hint and id(v) not in final:
                final[id(v)] = unique_name(name, used)
        for v in (*self.constant_values, *self.results):
            if id(v) not in final:
                final[id(v)] = unique_name(self.hint[id(v)], used)
            v.name = final[id(v)]  # Values are ours until the Graph is built
        return dce(self.build(outputs))


# --- entry points -------------------------------------------------------------------------------


def _onnx():
    try:
        import onnx
    except ImportError as e:
        raise UnsupportedError(f"reading ONNX needs the 'onnx' package (pip install 'akg[onnx]'): {e}") from None
    return onnx


def _is_onnx_model(obj: Any) -> bool:
    """An `onnx.ModelProto` (told by its protobuf type, without importing onnx)."""
    return getattr(getattr(obj, "DESCRIPTOR", None), "full_name", None) == "onnx.ModelProto"


def parse_onnx(model: Any, name: str = "<onnx>", base_dir: str | Path | None = None) -> Graph:
    """Turn an `onnx.ModelProto` (or the bytes of a `.onnx` file) into a Graph; `name` is the
    file (for errors and the graph's name), `base_dir` the folder external data lies in."""
    onnx = _onnx()
    if not _is_onnx_model(model):
        try:
            model = onnx.load_model_from_string(bytes(model))
        except Exception as e:  # protobuf's DecodeError and friends
            raise ImportFormatError(f"{name}: not an ONNX model, or a truncated one: the protobuf does "
                                    f"not parse ({e})") from None
    graph_name = graph_name_of(name, "<onnx>", model.graph.name or "onnx")
    base = Path(base_dir) if base_dir is not None else None
    return OnnxImporter(model, name, graph_name, base).import_graph()


def load_onnx(path: str | Path) -> Graph:
    """Read an `.onnx` model into a Graph (external data is read from the model's folder)."""
    path = Path(path)
    return parse_onnx(read_model_file(path, text=False), str(path), path.parent)


register_frontend(Frontend(
    "onnx", (".onnx",), load_onnx, parse_onnx,
    accepts=_is_onnx_model,
    takes="an onnx.ModelProto"))

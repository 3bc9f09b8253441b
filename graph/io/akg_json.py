"""Importer for AKG "composite JSON" (`.info` / `.json`): the fused-kernel descriptions that
MindSpore's graph-kernel fusion hands to a kernel generator.

A file holds `input_desc`, `op_desc` (ops in order: `name`, `attr`, `input_desc`,
`output_desc`; an input with a `value` is a constant), `output_desc` and `process`. The Graph's
inputs and outputs are named by the file's `tensor_name`s, so an `.npz` keyed by them runs it.
`AKG_OPS` (`akg.graph.io.akg_json_ops`) is the op table. Modelling choices:

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
from pathlib import Path
from typing import Any

import numpy as np

from akg.errors import ImportFormatError
from akg.graph.io.akg_json_ops import AKG_OPS, AkgJsonOpContext, _Arg, _Desc, _attrs, _desc, _desc_lists
from akg.graph.io.importer import (
    Frontend, ImportFail, Importer, brief, graph_name_of, read_model_file, register_frontend, same_data,
    sanitize_name, unique_name,
)
from akg.graph.ir import Graph, Value


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

"""The importer framework (graph stage: a model in another format -> Graph): what every
format's importer shares, the op tables' type, and `FRONTENDS`, the formats `load_model` knows.

A format's module subclasses `Importer` (the file, value naming, building through
`GraphBuilder`, failures turned into typed errors naming the file and op) and `OpContext`
(what one op's converter sees), fills an `OpTable` with `@TABLE.register_op(...)` next to each
converter, and registers a `Frontend` (suffixes, `load(path)`, `convert(obj)`, `accepts(obj)`).
Inside an importer every failure is an `ImportFail`; `Importer.import_graph` turns it into
`ImportFormatError` (or `UnsupportedOpError` for an op used in a way that is not modelled).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import numpy as np

from akg.errors import (AkgError, ImportFormatError, InvalidGraphError, TooLargeError, UnsupportedError,
                        UnsupportedOpError)
from akg.graph.builder import GraphBuilder
from akg.graph.ir import Graph, Value
from akg.graph.memory import require_values
from akg.graph.ops.registry import brief  # noqa: F401 - importers' messages use it
from akg.graph.types import TensorType
from akg.registry import Registry


class ImportFail(Exception):
    """Raised inside an importer: a message about the input (naming the op or tensor, not the
    file). `unsupported`: the op is used in a way that is not modelled."""

    def __init__(self, message: str, *, unsupported: bool = False):
        super().__init__(message)
        self.unsupported = unsupported


# Python errors that structural checks missed: still reported as a malformed file, located
MALFORMED = (KeyError, TypeError, ValueError, IndexError, AttributeError, UnicodeDecodeError,
             RecursionError, OverflowError)


def sanitize_name(name: str) -> str:
    """A valid value name close to `name` (invalid characters become '_')."""
    out = re.sub(r"[^A-Za-z0-9_.\-]", "_", name)
    if not out or not re.match(r"[A-Za-z0-9_]", out[0]):
        out = "_" + out
    return out


def unique_name(base: str, used: set[str]) -> str:
    """`base` made a valid value name not in `used` (`base.1`, `base.2`, ... when taken), which
    is then added to `used`."""
    base = sanitize_name(base)
    cand, n = base, 0
    while cand in used:
        n += 1
        cand = f"{base}.{n}"
    used.add(cand)
    return cand


def graph_name_of(file: str, default_file: str, fallback: str) -> str:
    """A graph's name from the file it comes from (`fallback` for an in-memory model, whose
    `file` is the format's `default_file`, such as "<mindir>")."""
    return sanitize_name(Path(file).stem if file != default_file else fallback)


def read_model_file(path: Path, *, text: bool) -> str | bytes:
    """The contents of a model file (str when `text`); ImportFormatError naming the file when
    it cannot be read."""
    try:
        return path.read_text() if text else path.read_bytes()
    except OSError as e:
        raise ImportFormatError(f"{path}: cannot read file: {e.strerror}") from None
    except UnicodeDecodeError:
        raise ImportFormatError(f"{path}: not a text file (bad UTF-8)") from None


def same_data(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Shapes that differ at most in size-1 axes ([] vs [1], [n] vs [n, 1]): a free reshape."""
    return [d for d in a if d != 1] == [d for d in b if d != 1]


# --- op tables ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class OpMapping:
    """How the source op `name` becomes akg ops: `ops` summarises the result for docs and
    reports, `convert(ctx)` emits it."""

    name: str
    ops: str
    convert: Callable[[Any], Any]


class OpTable(Registry[OpMapping]):
    """A format's op table: source op name -> OpMapping, filled by `register_op` decorators."""

    def __init__(self, source: str):
        super().__init__(f"mapping from the {source}")
        self.source = source  # "AKG op", "MindSpore primitive": for messages

    def register_op(self, names: str, ops: str) -> Callable[[Callable], Callable]:
        """Decorator: the converter of the (space-separated) source ops `names`."""
        return self.decorator(*names.split(), make=lambda name, fn: OpMapping(name, ops, fn))

    def add(self, name: str, ops: str, convert: Callable[[Any], Any]) -> None:
        """Register a generated converter (one of a family made in a loop)."""
        self.register(name, OpMapping(name, ops, convert))


# --- the importer -------------------------------------------------------------------------------


class Importer:
    """What every importer shares. A subclass sets `format_name` and `ops`, implements `run()`
    (build the graph with `input`, `emit`, `const`, `build`) and converts each op through
    `apply`. Values are named when made (`unique` names), or, with `names_at_end`, given a hint
    in `self.hint` and renamed by the subclass before `build` (Values are ours until then)."""

    format_name = "model"  # for "malformed <format>" messages
    ops: OpTable
    names_at_end = False
    const_compare_limit: int | None = None  # constants larger than this are told apart by name

    def __init__(self, file: str, graph_name: str):
        self.file = file
        self.builder = GraphBuilder(graph_name)
        self.names: set[str] = set()  # value names taken
        self.hint: dict[int, str] = {}  # id(value) -> its name-to-be (names_at_end)
        self.inputs: list[Value] = []
        self.constant_values: list[Value] = []
        self.results: list[Value] = []  # the outputs of the nodes, in order
        self._const_cache: dict[tuple, Value] = {}

    def run(self) -> Graph:
        raise NotImplementedError

    def import_graph(self) -> Graph:
        """`run()`, every failure turned into a typed error whose message starts with the file."""
        try:
            return self.run()
        except ImportFail as e:
            if e.unsupported:
                raise UnsupportedError(f"{self.file}: {e}") from None
            raise ImportFormatError(f"{self.file}: {e}") from None
        except InvalidGraphError as e:  # a graph rule broken outside any one op
            raise ImportFormatError(f"{self.file}: {e}") from None
        except AkgError as e:
            if not str(e).startswith(self.file):
                e.args = (f"{self.file}: {e}",)
            raise
        except MALFORMED as e:
            raise ImportFormatError(f"{self.file}: malformed {self.format_name} "
                                    f"({type(e).__name__}: {e})") from None
        except MemoryError:  # what the memory checks did not foresee
            raise TooLargeError(f"{self.file}: out of memory while importing the {self.format_name}") from None

    def unsupported_error(self, op: str, reason: str) -> UnsupportedOpError:
        err = UnsupportedOpError(op, reason=reason)
        err.args = (f"{self.file}: {err}",)  # the file first, as every importer error
        return err

    # --- values -------------------------------------------------------------------------------

    def unique(self, base: str) -> str:
        return unique_name(base, self.names)

    def _name(self, values: tuple[Value, ...], name: str) -> None:
        for i, v in enumerate(values):
            n = name if len(values) == 1 else f"{name}.{i}"
            if self.names_at_end:
                self.hint[id(v)] = n
            else:
                v.name = self.unique(n)

    def input(self, name: str, type: TensorType) -> Value:
        v = self.builder.input(None, type.shape, type.dtype)
        v.name = self.unique(name)
        self.inputs.append(v)
        return v

    def emit(self, op: str, inputs: list[Value], name: str, **attrs: Any) -> Value | tuple[Value, ...]:
        """A node of `op` (attributes checked, output types inferred by the builder); its
        outputs are named `name` (`name.0`, `name.1`, ... for several)."""
        out = self.builder.op(op, *inputs, name=None, **attrs)
        outs = out if isinstance(out, tuple) else (out,)
        self.results.extend(outs)
        self._name(outs, name)
        return out

    def const(self, data: Any, name: str) -> Value:
        """A graph constant named `name`; the same name and data give the same constant."""
        data = np.asarray(data)
        if not data.flags.c_contiguous:  # a broadcast fill, say: made only if it fits
            require_values([TensorType(data.shape, data.dtype.name)], f"constant '{name}' {TensorType.of(data)}")
            data = data.copy()  # keeps 0-d arrays 0-d
        limit = self.const_compare_limit
        key = (name, data.dtype.str, data.shape,
               data.tobytes() if limit is None or data.size <= limit else None)
        if key not in self._const_cache:
            v = self.builder.const(data)
            self.constant_values.append(v)
            self._name((v,), name)
            self._const_cache[key] = v
        return self._const_cache[key]

    def build(self, outputs: list[Value]) -> Graph:
        self.builder.output(*outputs)
        return self.builder.build()

    # --- one op -------------------------------------------------------------------------------

    def mapping(self, op: str, where: str) -> OpMapping:
        if op not in self.ops:
            raise self.unsupported_error(op, f"no mapping from this {self.ops.source} to akg ops "
                                             f"({where})")
        return self.ops.get(op)

    def apply(self, mapping: OpMapping, ctx: OpContext) -> Any:
        """Run one op's converter and check its result against the declared type; errors of
        our ops and unmodelled uses are located at the op."""
        try:
            return ctx.conform(mapping.convert(ctx))
        except ImportFail as e:
            if e.unsupported:
                raise self.unsupported_error(ctx.op, f"{e} ({ctx.where})") from None
            raise
        except InvalidGraphError as e:  # shape / attribute errors of our ops
            raise ImportFail(f"{ctx.where}: {e}") from None


class OpContext:
    """What a converter sees of one op: its source type `op`, attributes, inputs `args`, where
    it is (`where`, for messages) and `name`, which its results and helper values are named by.
    A subclass adds the format's typed attribute access and its declared result (`conform`)."""

    inputs_range = " to "  # "takes 2 to 4 inputs"
    mismatch = "the op gives {got} but the file declares {want}"
    cast_bool_results = False  # a bool result declared numeric is cast, not an error

    def __init__(self, imp: Importer, op: str, attrs: Mapping[str, Any], args: list[Any],
                 name: str, where: str):
        self.imp, self.op, self.attrs, self.args, self.name, self.where = imp, op, attrs, args, name, where

    def with_args(self, args: list[Any]) -> OpContext:
        """The same op seen with other inputs (the items of a tuple input, say)."""
        other = copy.copy(self)
        other.args = args
        return other

    def fail(self, message: str) -> ImportFail:
        return ImportFail(f"{self.where}: {message}")

    def unsupported(self, reason: str) -> ImportFail:
        return ImportFail(reason, unsupported=True)

    def expect(self, least: int, most: int | None = None) -> None:
        most = least if most is None else most
        if not least <= len(self.args) <= most:
            want = str(least) if least == most else f"{least}{self.inputs_range}{most}"
            raise self.fail(f"takes {want} inputs, got {len(self.args)}")

    def emit(self, op: str, inputs: list[Value], what: str | None = None, **attrs: Any) -> Any:
        """Emit a node; `what` names a helper value `<name>.<what>`, None the op's result."""
        return self.imp.emit(op, inputs, self.name if what is None else f"{self.name}.{what}", **attrs)

    def const(self, data: Any, dtype: str, what: str) -> Value:
        return self.imp.const(np.asarray(data, dtype=dtype), f"{self.name}.{what}")

    def flat_index_along(self, index: Value, axis: int, src_shape: tuple[int, ...],
                         out_shape: tuple[int, ...]) -> Value:
        """For each element i of `out_shape`: the position, in a tensor of `src_shape` flattened,
        of i with its `axis` coordinate replaced by index[i] (an int64 `index` that broadcasts
        to `out_shape`, of the same rank as both shapes)."""
        rank = len(out_shape)
        strides = [int(np.prod(src_shape[k + 1:], dtype=np.int64)) for k in range(rank)]
        grid = np.indices(out_shape, dtype=np.int64)
        offset = sum((grid[k] * strides[k] for k in range(rank) if k != axis), np.zeros(out_shape, np.int64))
        along = self.emit("mul", [index, self.const(strides[axis], "int64", "stride")], "along")
        return self.emit("add", [along, self.const(offset, "int64", "offsets")], "flat_index")

    def gather_along(self, src: Value, index: Value, axis: int, out_shape: tuple[int, ...],
                     what: str | None = None) -> Value:
        """out[i] = src[i with its `axis` coordinate replaced by index[i]], i over `out_shape`
        (torch.gather, ONNX GatherElements): one gather from `src` flattened."""
        flat = self.emit("reshape", [src], "flat", shape=[int(np.prod(src.shape, dtype=np.int64))])
        return self.emit("gather", [flat, self.flat_index_along(index, axis, src.shape, out_shape)], what, axis=0)

    def attr(self, *names: str, default: Any = None) -> Any:
        """The first of the attributes `names` that is set (not None), else `default`."""
        for n in names:
            if n in self.attrs and self.attrs[n] is not None:
                return self.attrs[n]
        return default

    def conform(self, result: Any) -> Any:
        return result

    def match_declared(self, v: Value, want: TensorType) -> Value:
        """`v` made to match the declared type `want`: differences in size-1 axes become a
        reshape (a bool result a cast, with `cast_bool_results`); anything else is an error."""
        if v.dtype != want.dtype:
            if not (self.cast_bool_results and v.dtype == "bool"):
                raise self.fail(self.mismatch.format(got=v.type, want=want))
            v = self.emit("cast", [v], "cast", to=want.dtype)
        if v.shape != want.shape:
            if not same_data(v.shape, want.shape):
                raise self.fail(self.mismatch.format(got=v.type, want=want))
            v = self.emit("reshape", [v], "shape", shape=want.shape)
        return v


# --- frontends ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Frontend:
    """A model format `load_model` knows: files with `suffixes` (`load(path)`), and in-memory
    objects that `accepts(obj)` says it takes (`convert(obj)`; `takes` describes them)."""

    name: str
    suffixes: tuple[str, ...]
    load: Callable[[Path], Graph]
    convert: Callable[[Any], Graph]
    accepts: Callable[[Any], bool]
    takes: str


FRONTENDS: Registry[Frontend] = Registry("model frontend")


def register_frontend(frontend: Frontend) -> Frontend:
    for s in frontend.suffixes:
        other = frontend_for_suffix(s)
        if other is not None:
            raise ValueError(f"suffix '{s}' of frontend '{frontend.name}' is taken by '{other.name}'")
    return FRONTENDS.register(frontend.name, frontend)


def frontend_for_suffix(suffix: str) -> Frontend | None:
    suffix = suffix.lower()
    return next((f for _, f in FRONTENDS.items() if suffix in f.suffixes), None)


def frontend_for(obj: Any) -> Frontend:
    """The frontend that takes the in-memory model `obj`; ImportFormatError listing them if none."""
    for _, f in FRONTENDS.items():
        if f.accepts(obj):
            return f
    known = "; ".join(f"{name} ({f.takes})" for name, f in FRONTENDS.items())
    raise ImportFormatError(f"cannot import a {type(obj).__name__}: no frontend takes it "
                            f"(known: {known or 'none'})")


class SuffixTable(Mapping[str, Callable[[Path], Graph]]):
    """suffix -> loader, read live from FRONTENDS."""

    def _table(self) -> dict[str, Callable[[Path], Graph]]:
        return {s: f.load for _, f in FRONTENDS.items() for s in f.suffixes}

    def __getitem__(self, suffix: str) -> Callable[[Path], Graph]:
        return self._table()[suffix]

    def __iter__(self) -> Iterator[str]:
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())

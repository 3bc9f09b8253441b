"""The `.mir` text format: parse (with file:line:col errors) and emit (round-trips exactly).

Grammar and an example: docs/mir.md.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from akg.errors import AkgError, MirParseError, ShapeError, TooLargeError, WeightsError
from akg.graph.io.importer import Frontend, register_frontend
from akg.graph.ir import Graph, Node, Value, set_text_printer
from akg.graph.memory import require_values
from akg.graph.types import MAX_ELEMENTS, TensorType, canonical_dtype, is_storage, short_dtype

# --- lexer --------------------------------------------------------------------------------------

_TOKEN = re.compile(
    r"""
    (?P<ws>[ \t\r\n]+|\#[^\n]*)
  | (?P<value>%[A-Za-z0-9_][A-Za-z0-9_.\-]*)
  | (?P<graph>@[A-Za-z0-9_][A-Za-z0-9_.\-]*)
  | (?P<number>[-+]?(?:inf|nan|(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?)(?![A-Za-z0-9_]))
  | (?P<string>"(?:[^"\\\n]|\\.)*")
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<punct>->|[()\[\]{}=,:])
    """,
    re.VERBOSE,
)


@dataclass(frozen=True)
class Token:
    kind: str  # value, graph, number, string, ident, punct, eof
    text: str
    line: int
    col: int


def tokenize(text: str, filename: str) -> list[Token]:
    tokens, pos, line, line_start = [], 0, 1, 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise MirParseError(f"unexpected character {text[pos]!r}", filename, line, pos - line_start + 1)
        kind = m.lastgroup
        if kind != "ws":
            tokens.append(Token(kind, m.group(), line, pos - line_start + 1))
        newlines = m.group().count("\n")
        if newlines:
            line += newlines
            line_start = m.start() + m.group().rindex("\n") + 1
        pos = m.end()
    tokens.append(Token("eof", "", line, pos - line_start + 1))
    return tokens


# --- parser -------------------------------------------------------------------------------------


@dataclass
class _Statement:
    token: Token  # where it starts, for error messages
    names: list[Token]
    op: Token | None = None  # None for constants / weights
    args: list[Token] | None = None
    attrs: dict[str, Any] | None = None
    types: list[TensorType] | None = None
    const: Any = None
    weight_key: str | None = None


class _Parser:
    def __init__(self, text: str, filename: str):
        self.filename = filename
        self.tokens = tokenize(text, filename)
        self.i = 0

    # token helpers
    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def error(self, message: str, tok: Token | None = None) -> MirParseError:
        tok = tok or self.tok
        return MirParseError(message, self.filename, tok.line, tok.col)

    def describe(self, tok: Token) -> str:
        return "end of file" if tok.kind == "eof" else repr(tok.text)

    def next(self) -> Token:
        tok = self.tok
        self.i += 1
        return tok

    def at(self, text: str) -> bool:
        return self.tok.text == text and self.tok.kind in ("punct", "ident")

    def expect(self, text: str, context: str) -> Token:
        if not self.at(text):
            raise self.error(f"expected '{text}' {context}, found {self.describe(self.tok)}")
        return self.next()

    def expect_kind(self, kind: str, what: str) -> Token:
        if self.tok.kind != kind:
            raise self.error(f"expected {what}, found {self.describe(self.tok)}")
        return self.next()

    # grammar
    def parse(self):
        self.expect("graph", "to start the model")
        name = self.expect_kind("graph", "a graph name such as @main").text[1:]
        self.expect("(", "after the graph name")
        inputs: list[tuple[Token, TensorType]] = []
        while not self.at(")"):
            tok = self.expect_kind("value", "an input such as %x")
            self.expect(":", f"after input {tok.text}")
            inputs.append((tok, self.type()))
            if not self.at(")"):
                self.expect(",", "between inputs")
        self.next()
        weights_file = None
        if self.at("weights"):
            self.next()
            weights_file = (self.tok, _unquote(self.expect_kind("string", "a weights file name").text))
        self.expect("{", "to open the graph body")
        statements, outputs = [], None
        while not self.at("return"):
            if self.tok.kind == "eof" or self.at("}"):
                raise self.error("expected a statement or 'return', found " + self.describe(self.tok))
            statements.append(self.statement())
        self.next()
        outputs = [self.expect_kind("value", "a value to return")]
        while self.at(","):
            self.next()
            outputs.append(self.expect_kind("value", "a value to return"))
        self.expect("}", "after the return statement")
        if self.tok.kind != "eof":
            raise self.error(f"unexpected {self.describe(self.tok)} after the graph")
        return name, inputs, weights_file, statements, outputs

    def type(self) -> TensorType:
        tok = self.expect_kind("ident", "a type such as f32[2,3]")
        try:
            dtype = canonical_dtype(tok.text)
        except ValueError as e:
            raise self.error(str(e), tok) from None
        self.expect("[", f"after dtype {tok.text}")
        dims = []
        while not self.at("]"):
            d = self.expect_kind("number", "a dimension")
            if not re.fullmatch(r"\+?\d+", d.text):
                raise self.error(f"dimension must be a non-negative integer, got {d.text}", d)
            digits = d.text.lstrip("+").lstrip("0")
            if len(digits) > 19 or int(digits or "0") > MAX_ELEMENTS:
                raise self.error(f"dimension {d.text if len(d.text) <= 30 else d.text[:20] + '...'} "
                                 "is larger than an array can index (2^63-1)", d)
            dims.append(int(digits or "0"))
            if not self.at("]"):
                self.expect(",", "between dimensions")
        self.next()
        try:
            return TensorType(dims, dtype)
        except ShapeError as e:
            raise self.error(str(e), tok) from None

    def statement(self) -> _Statement:
        first = self.expect_kind("value", "a statement starting with %name")
        if self.at(":"):  # %w: f32[..] = const <literal> | weight "key"
            self.next()
            t = self.type()
            self.expect("=", f"after the type of {first.text}")
            st = _Statement(first, [first], types=[t])
            kw = self.expect_kind("ident", "'const' or 'weight'")
            if kw.text == "const":
                st.const = (self.tok, self.literal())
            elif kw.text == "weight":
                st.weight_key = first.text[1:]
                if self.tok.kind == "string":
                    st.weight_key = _unquote(self.next().text)
            else:
                raise self.error(f"expected 'const' or 'weight', found {kw.text!r}", kw)
            return st
        names = [first]
        while self.at(","):
            self.next()
            names.append(self.expect_kind("value", "another result name"))
        self.expect("=", "after the result name(s)")
        op = self.expect_kind("ident", "an op name")
        self.expect("(", f"after op name '{op.text}'")
        args = []
        while not self.at(")"):
            args.append(self.expect_kind("value", f"an operand of '{op.text}' such as %x"))
            if not self.at(")"):
                self.expect(",", "between operands")
        self.next()
        attrs: dict[str, Any] = {}
        if self.at("{"):
            self.next()
            while not self.at("}"):
                key = self.expect_kind("ident", "an attribute name")
                self.expect("=", f"after attribute name '{key.text}'")
                if key.text in attrs:
                    raise self.error(f"attribute '{key.text}' is given twice", key)
                attrs[key.text] = self.literal()
                if not self.at("}"):
                    self.expect(",", "between attributes")
            self.next()
        self.expect(":", f"and the result type(s) after '{op.text}(...)'")
        types = [self.type()]
        while self.at(","):
            self.next()
            types.append(self.type())
        if len(types) != len(names):
            raise self.error(f"{len(names)} result name(s) but {len(types)} type(s)", first)
        return _Statement(first, names, op, args, attrs, types)

    def literal(self) -> Any:
        """A number, string, true/false/none or a [list] of literals, nested to any depth
        (an explicit stack, not recursion)."""
        stack: list[tuple[Token, list]] = []  # open lists: '[' token, items so far
        while True:
            tok = self.tok
            if tok.kind == "eof" and stack:
                raise self.unclosed(stack[-1][0])
            if self.at("["):
                self.next()
                stack.append((tok, []))
                if not self.at("]"):
                    continue
                value: Any = stack.pop()[1]
                self.next()
            else:
                value = self.scalar()
            while stack:  # the value is an item of the innermost open list
                stack[-1][1].append(value)
                if self.at(","):
                    self.next()
                    if not self.at("]"):  # a trailing comma is allowed: [1, 2,]
                        break
                elif not self.at("]"):
                    if self.tok.kind == "eof":
                        raise self.unclosed(stack[-1][0])
                    raise self.error(f"expected ',' between list items or ']', found {self.describe(self.tok)}")
                self.next()
                value = stack.pop()[1]
            else:
                return value

    def unclosed(self, bracket: Token) -> MirParseError:
        return self.error("this '[' is not closed before the end of the file", bracket)

    def scalar(self) -> Any:
        tok = self.tok
        if tok.kind == "number":
            self.next()
            try:
                return _number(tok.text)
            except ValueError as e:
                raise self.error(str(e), tok) from None
        if tok.kind == "string":
            self.next()
            return _unquote(tok.text)
        if tok.kind == "ident" and tok.text in ("true", "false", "none"):
            self.next()
            return {"true": True, "false": False, "none": None}[tok.text]
        raise self.error(f"expected a value (number, string, true/false, none or [list]), found {self.describe(tok)}")


_MAX_DIGITS = 4000  # Python refuses to turn longer digit strings into ints


def _number(text: str) -> int | float:
    if re.fullmatch(r"[-+]?\d+", text):
        if len(text) > _MAX_DIGITS:
            raise ValueError(f"integer with {len(text)} digits is too long")
        return int(text)
    return float(text)


def _unquote(text: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n"}.get(m.group(1), m.group(1)), text[1:-1])


def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _literal_shape(value: Any, t: TensorType) -> tuple[int, ...]:
    """The shape of a nested-list literal, level by level (no recursion, so any depth is
    fine); ValueError for ragged lists or nesting deeper than the type's rank."""
    shape: list[int] = []
    level = [value]
    while isinstance(level[0], list):
        n = len(level[0])
        if any(not isinstance(x, list) or len(x) != n for x in level):
            raise ValueError(f"ragged list literal: the items at depth {len(shape) + 1} are not "
                             "all lists of one length")
        if len(shape) >= max(t.rank, 1):
            raise ValueError(f"literal is nested deeper than the rank {t.rank} of {t}")
        shape.append(n)
        level = [y for x in level for y in x]
        if not level:
            break
    if any(isinstance(x, list) for x in level):
        raise ValueError(f"ragged list literal: lists and values mixed at depth {len(shape) + 1}")
    return tuple(shape)


def _const_array(value: Any, t: TensorType) -> np.ndarray:
    """A literal (scalar fill or nested list of the declared shape) as an array of type t;
    TooLargeError before allocating one that does not fit in memory."""
    shape = _literal_shape(value, t)
    if shape != () and shape != t.shape:
        raise ValueError(f"literal has shape {list(shape)}, the type says {list(t.shape)}")
    require_values([t], f"constant {t}")
    array = np.asarray(value, dtype=object)
    if array.shape != shape:  # cannot happen for a regular nesting: numpy saw it otherwise
        raise ValueError(f"literal has shape {list(array.shape)}, the type says {list(t.shape)}")
    kinds = {type(x) for x in array.flat}
    kind = "f" if is_storage(t.dtype) else np.dtype(t.dtype).kind  # ml_dtypes' floats are kind "V"
    allowed = {"f": {int, float}, "b": {bool}}.get(kind, {int})
    if not kinds <= allowed:
        names = ", ".join(sorted(k.__name__ for k in kinds - allowed))
        raise ValueError(f"{names} values do not fit {short_dtype(t.dtype)}")
    if np.dtype(t.dtype).kind in "iu":
        info = np.iinfo(t.dtype)
        if not all(info.min <= x <= info.max for x in array.flat):
            raise ValueError(f"values out of range for {short_dtype(t.dtype)}")
    with np.errstate(over="ignore"):  # a float literal beyond the dtype's range is inf
        out = np.asarray(array.tolist(), dtype=t.dtype)
    return np.broadcast_to(out, t.shape).copy()


def parse_mir(text: str, filename: str = "<string>", *,
              weights: Mapping[str, np.ndarray] | None = None,
              base_dir: str | Path | None = None) -> Graph:
    """Parse `.mir` text into a Graph.

    Weights come from `weights` when given, otherwise from the file named in the graph's
    `weights "..."` clause, relative to `base_dir` (the .mir file's folder).
    """
    p = _Parser(text, filename)
    name, inputs, weights_file, statements, outputs = p.parse()
    where: dict[str, Token] = {}

    def located(e: AkgError, tok: Token) -> AkgError:
        e.args = (f"{filename}:{tok.line}:{tok.col}: {e}",)
        return e

    values: dict[str, Value] = {}

    def define(tok: Token, t: TensorType) -> Value:
        key = tok.text[1:]
        if key in values:
            raise p.error(f"value {tok.text} is defined more than once", tok)
        where[key] = tok
        v = values[key] = Value(key, t)
        return v

    graph_inputs = [define(tok, t) for tok, t in inputs]
    constants: dict[Value, np.ndarray] = {}
    weight_stmts = [st for st in statements if st.weight_key is not None]
    loaded = _load_weights(weights, weights_file, base_dir, filename, weight_stmts, p)
    for st in statements:
        if st.op is not None:
            continue
        v = define(st.token, st.types[0])
        if st.weight_key is not None:
            if st.weight_key not in loaded:
                raise WeightsError(
                    f"{filename}:{st.token.line}:{st.token.col}: weight '{st.weight_key}' is not in "
                    f"the weights file ({len(loaded)} tensors)"
                )
            array = np.asarray(loaded[st.weight_key])
            if TensorType.of(array) != v.type:
                raise WeightsError(
                    f"{filename}:{st.token.line}:{st.token.col}: weight '{st.weight_key}' is "
                    f"{TensorType.of(array)} in the weights file, declared {v.type}"
                )
        else:
            lit_tok, lit = st.const
            try:
                array = _const_array(lit, v.type)
            except TooLargeError as e:
                raise located(e, st.token) from None
            except (ValueError, TypeError, OverflowError) as e:
                raise p.error(f"bad constant for {st.token.text}: {e}", lit_tok) from None
        constants[v] = array
    for st in statements:
        if st.op is not None:
            for tok, t in zip(st.names, st.types):
                define(tok, t)
    nodes = []
    for st in statements:
        if st.op is None:
            continue
        args = []
        for tok in st.args:
            if tok.text[1:] not in values:
                raise p.error(f"value {tok.text} is used but never defined", tok)
            args.append(values[tok.text[1:]])
        try:
            nodes.append(Node(st.op.text, args, st.attrs, [values[t.text[1:]] for t in st.names]))
        except AkgError as e:
            raise located(e, st.op) from None
    for tok in outputs:
        if tok.text[1:] not in values:
            raise p.error(f"returned value {tok.text} is never defined", tok)
    try:
        return Graph(name, graph_inputs, [values[t.text[1:]] for t in outputs], nodes, constants)
    except AkgError as e:
        tok = where.get(getattr(e, "value_name", ""), statements[0].token if statements else p.tokens[0])
        raise located(e, tok) from None


def _load_weights(weights, weights_file, base_dir, filename, weight_stmts, p: _Parser):
    if weights is not None or not weight_stmts:
        return weights or {}
    first = weight_stmts[0].token
    if weights_file is None:
        raise WeightsError(
            f"{filename}:{first.line}:{first.col}: {first.text} is a weight but the graph names "
            f"no weights file (add `weights \"file.npz\"` after the inputs)"
        )
    tok, fname = weights_file
    path = Path(base_dir or ".") / fname
    if not path.is_file():
        raise WeightsError(
            f"{filename}:{tok.line}:{tok.col}: weights file '{path}' not found"
            + (" (generate the examples' weights with `python scripts/make_examples.py`)"
               if "examples" in str(path) else "")
        )
    try:
        with np.load(path, allow_pickle=False) as npz:
            return {k: npz[k] for k in npz.files}
    except Exception as e:  # zip/npy errors come in many types
        raise WeightsError(f"{filename}:{tok.line}:{tok.col}: cannot read weights file '{path}': {e}") from None


def load_mir(path: str | Path, weights: Mapping[str, np.ndarray] | None = None) -> Graph:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise MirParseError(f"cannot read file: {e.strerror}", str(path), 0, 0) from None
    except UnicodeDecodeError:
        raise MirParseError("not a text file (bad UTF-8)", str(path), 0, 0) from None
    return parse_mir(text, str(path), weights=weights, base_dir=path.parent)


# --- emitter ------------------------------------------------------------------------------------


def _literal(value: Any) -> str:
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if value is None:
        return "none"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        v = float(value)
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(value, str):
        return _quote(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} in .mir")


def _uniform(a: np.ndarray) -> bool:
    """More than one element, all the same (NaN counts as equal to NaN)."""
    return a.size > 1 and np.array_equal(a, np.full_like(a, a.flat[0]), equal_nan=a.dtype.kind == "f")


def _array_literal(a: np.ndarray) -> str:
    return _literal(a.flat[0].item() if _uniform(a) else a.tolist())


def emit_mir(graph: Graph, *, inline_limit: int | None = 16,
             weights_file: str | None = None) -> tuple[str, dict[str, np.ndarray]]:
    """Text of `graph` and the constants too large to inline (size > inline_limit and not a
    single repeated value), to be saved as `weights_file` (default `<graph name>.npz`)."""
    weights: dict[str, np.ndarray] = {}
    body = []
    for v, a in graph.constants.items():
        if inline_limit is not None and a.size > inline_limit and not _uniform(a):
            weights[v.name] = a
            body.append(f"  %{v.name}: {v.type} = weight {_quote(v.name)}")
        else:
            body.append(f"  %{v.name}: {v.type} = const {_array_literal(a)}")
    for n in graph.nodes:
        outs = ", ".join(f"%{v.name}" for v in n.outputs)
        ins = ", ".join(f"%{v.name}" for v in n.inputs)
        attrs = ", ".join(f"{k}={_literal(val)}" for k, val in n.attrs.items()
                          if val != _default(n, k))
        attrs = f" {{{attrs}}}" if attrs else ""
        types = ", ".join(str(v.type) for v in n.outputs)
        body.append(f"  {outs} = {n.op}({ins}){attrs} : {types}")
    body.append("  return " + ", ".join(f"%{v.name}" for v in graph.outputs))
    params = ", ".join(f"%{v.name}: {v.type}" for v in graph.inputs)
    header = f"graph @{graph.name}({params})"
    if weights:
        header += f" weights {_quote(weights_file or graph.name + '.npz')}"
    return "\n".join([header + " {", *body, "}"]) + "\n", weights


def _default(node: Node, key: str) -> Any:
    from akg.graph.ops.registry import REQUIRED

    attr = next(a for a in node.opdef.attrs if a.name == key)
    if attr.default is REQUIRED:
        return REQUIRED
    return attr.default if attr.default is None else attr.coerce(node.op, attr.default)


def save_mir(graph: Graph, path: str | Path, *, inline_limit: int | None = 16) -> Path:
    """Write `path` and, when some constants are large, the `.npz` beside it."""
    path = Path(path)
    npz = path.with_suffix(".npz")
    text, weights = emit_mir(graph, inline_limit=inline_limit, weights_file=npz.name)
    path.write_text(text)
    if weights:
        np.savez(npz, **weights)
    return path


def _graph_text(graph: Graph) -> str:
    return emit_mir(graph, inline_limit=None)[0]


set_text_printer(_graph_text)  # str(graph) is its .mir text, every constant inline

_MIR_TEXT = re.compile(r"^[ \t]*graph[ \t]*@", re.MULTILINE)

register_frontend(Frontend(
    "mir", (".mir",), load_mir, parse_mir,
    accepts=lambda obj: isinstance(obj, str) and _MIR_TEXT.search(obj) is not None,
    takes="a str of .mir text"))

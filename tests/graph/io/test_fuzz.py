"""Fuzzing the `.mir` parser, the composite JSON importer and the MindIR importer with mutated
real files (examples/*.mir and the shared corpus): truncation, byte flips, token swaps, deep
nesting, huge and negative dimensions, NaN attributes, rewired ops. Every input must give a
valid graph or a typed error (an AkgError), never another exception.

The default suite runs N_DEFAULT mutated inputs per format (derandomized: a fixed seed; well under a minute
on two cores); `pytest -m slow` runs N_SLOW with fresh random seeds. The counts are printed
at the end of the session ("fuzzed parsers and importers"). Inputs that once broke a parser are
kept as regression tests in test_input_defects.py.
"""

from __future__ import annotations

import copy
import json
import math
import re
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from akg.errors import AkgError
from akg.graph.io import emit_mir, load_mindir, parse_akg_json, parse_mindir, parse_mir
from akg.graph.io import _mind_ir_pb2 as pb
from akg.graph.io.akg_json import loads_akg_json
from akg.graph.ir import Graph

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")

N_DEFAULT = {"mir": 3000, "json": 3000, "mindir": 2500}
N_SLOW = {"mir": 30000, "json": 40000, "mindir": 30000}

# Mutated shapes may ask for constants of gigabytes: allowed up to physical memory, they would
# be made (slowly); with a small limit they are TooLargeErrors, one more typed outcome.
FUZZ_MEMORY_LIMIT = "64M"


@pytest.fixture(autouse=True)
def _small_memory_limit(monkeypatch):
    monkeypatch.setenv("AKG_MEMORY_LIMIT", FUZZ_MEMORY_LIMIT)


# --- outcomes ---------------------------------------------------------------------------------


def outcome(parse, *args) -> Graph | None:
    """The graph `parse(*args)` gives, or None for a typed error; anything else fails the test."""
    try:
        graph = parse(*args)
    except AkgError as e:
        assert str(e), f"{type(e).__name__} without a message"
        return None
    assert isinstance(graph, Graph), type(graph)
    return graph


def run_fuzz(fmt: str, n: int, derandomize: bool, tally, strategy, check) -> None:
    """Run `check(example)` on n examples of `strategy`; add the counts to the session tally."""
    counts = {"inputs": 0, "graphs": 0, "errors": 0}
    t0 = time.perf_counter()

    @settings(max_examples=n, deadline=None, derandomize=derandomize, suppress_health_check=list(HealthCheck),
              database=None if derandomize else settings().database, print_blob=True)
    @given(strategy)
    def fuzz(example):
        graph = check(example)
        counts["inputs"] += 1
        counts["graphs" if graph is not None else "errors"] += 1

    fuzz()
    seconds = time.perf_counter() - t0
    total = tally.setdefault(fmt, {"inputs": 0, "graphs": 0, "errors": 0, "seconds": 0.0})
    for k, v in counts.items():
        total[k] += v
    total["seconds"] += seconds
    print(f"fuzzed {counts['inputs']} mutated {fmt} inputs in {seconds:.1f}s: "
          f"{counts['graphs']} valid graphs, {counts['errors']} typed errors")
    assert counts["inputs"] >= n * 0.9, f"only {counts['inputs']} of {n} {fmt} inputs ran"


# --- mutations shared by the text formats ---------------------------------------------------------

INTERESTING_INTS = [-(2**63), -(2**31), -2, -1, 0, 1, 2, 3, 2**31 - 1, 2**31, 10**12, 2**63 - 1, 2**63, 2**64, 10**30]
INTERESTING_FLOATS = [math.nan, math.inf, -math.inf, -0.0, 1e-308, 1e308, 0.5]
FLIP_CHARS = list("[]{}()%@,:=\"#\n\\-+.09eE") + ["\x00", "é", "\u2028", " ", "nan", "inf", "->"]


@st.composite
def truncation(draw, text):
    return text[:draw(st.integers(0, max(len(text) - 1, 0)))]


@st.composite
def char_flips(draw, text):
    chars = list(text)
    for _ in range(draw(st.integers(1, 4))):
        if not chars:
            break
        i = draw(st.integers(0, len(chars) - 1))
        chars[i] = draw(st.sampled_from(FLIP_CHARS) | st.characters(codec="utf-8"))
    return "".join(chars)


def token_mutation(token_re: re.Pattern):
    @st.composite
    def mutate(draw, text):
        spans = [m.span() for m in token_re.finditer(text)]
        if len(spans) < 2:
            return text
        pieces, last = [], 0
        for a, b in spans:
            pieces += [text[last:a], text[a:b]]
            last = b
        pieces.append(text[last:])
        toks = list(range(1, len(pieces), 2))  # indices of token pieces
        for _ in range(draw(st.integers(1, 3))):
            kind = draw(st.sampled_from(["swap", "delete", "duplicate"]))
            i, j = draw(st.sampled_from(toks)), draw(st.sampled_from(toks))
            if kind == "swap":
                pieces[i], pieces[j] = pieces[j], pieces[i]
            elif kind == "delete":
                pieces[i] = ""
            else:
                pieces[i] = pieces[i] + " " + pieces[j]
        return "".join(pieces)

    return mutate


def number_text(draw) -> str:
    return draw(st.sampled_from([str(i) for i in INTERESTING_INTS] + ["nan", "inf", "-inf", "1e999", "1.5",
                                                                    "-0", "9" * 40, "0x10", "+3"]))


# --- .mir -----------------------------------------------------------------------------------------

MIR_TOKEN = re.compile(r'%[\w.\-]+|@[\w.\-]+|"(?:[^"\\\n]|\\.)*"|->|[-+]?[\w.]+|\S')
_TYPE_DIMS = re.compile(r"\b(?:[fiu]\d{1,2}|bool)\[([^\]]*)\]")
_ATTR_VALUE = re.compile(r"(?<=\w=)(\[[^\]]*\]|\"[^\"]*\"|[^,}\s]+)")
_CONST_LITERAL = re.compile(r"(?<== const ).*")

RICH_MIR = """\
# every literal form, attributes of each kind, several results
graph @rich(%x: f32[2,3], %i: i32[4], %b: bool[2,3], %img: f32[1,2,5,5]) {
  %c: f32[2,3] = const [[1.0, -2.5, nan], [inf, -inf, 1e-3]]
  %s: f32[] = const nan
  %k: i64[2] = const [7, -8]
  %t: bool[] = const true
  %table: f32[5,3] = const 0.25
  %kern: f32[4,2,3,3] = const 0.125
  %y = add(%x, %c) : f32[2,3]
  %z = mul(%y, %s) : f32[2,3]
  %w = where(%b, %z, %x) : f32[2,3]
  %r = sum(%w) {axes=[1], keepdims=true} : f32[2,1]
  %p = transpose(%w) {perm=[1, 0]} : f32[3,2]
  %g = gather(%table, %i) {axis=0} : f32[4,3]
  %q = cast(%g) {to="f16"} : f16[4,3]
  %u, %v = split(%x) {axis=1, sizes=[1, 2]} : f32[2,1], f32[2,2]
  %e = gelu(%v) {approximate="tanh"} : f32[2,2]
  %pd = pad(%e) {before=[1, 0], after=[0, 2], value=-1.5} : f32[3,4]
  %sl = strided_slice(%pd) {begin=[0, 0], end=[3, 4], strides=[2, 1]} : f32[2,4]
  %oh = one_hot(%i) {depth=6, on_value=2.0} : f32[4,6]
  %cv = conv2d(%img, %kern) {strides=[2, 2], padding=[1, 1, 1, 1]} : f32[1,4,3,3]
  %mp = max_pool2d(%cv) {kernel=[2, 2], strides=[1, 1]} : f32[1,4,2,2]
  return %r, %p, %q, %u, %sl, %oh, %mp, %k, %t
}
"""


def _mir_seeds() -> list[tuple[str, str, dict]]:
    """(name, text, weights): the examples, a hand-written file with every literal form, and
    corpus models written as .mir (their ops and attributes)."""
    seeds = []
    for path in sorted((ROOT / "examples").glob("*.mir")):
        npz = path.with_suffix(".npz")
        weights = dict(np.load(npz)) if npz.exists() else {}
        seeds.append((path.name, path.read_text(), weights))
    seeds.append(("rich.mir", RICH_MIR, {}))
    return seeds


@pytest.fixture(scope="module")
def mir_seeds(examples_dir, corpus):
    seeds = _mir_seeds()
    for path in sorted((corpus / "mindir").glob("*.mindir")):
        text, weights = emit_mir(load_mindir(path), inline_limit=16)
        seeds.append((path.stem + ".mir", text, weights))
    for path in _json_seed_files(corpus)[:12]:
        try:
            text, weights = emit_mir(loads_akg_json(path.read_text(), str(path)), inline_limit=16)
        except AkgError:
            continue
        seeds.append((path.stem + ".mir", text, weights))
    return seeds


@st.composite
def mir_dims(draw, text):
    spans = [m.span(1) for m in _TYPE_DIMS.finditer(text)]
    if not spans:
        return text
    a, b = draw(st.sampled_from(spans))
    dims = text[a:b].split(",") if text[a:b] else []
    value = number_text(draw)
    if dims and draw(st.booleans()):
        dims[draw(st.integers(0, len(dims) - 1))] = value
    else:
        dims.insert(draw(st.integers(0, len(dims))), value)
    return text[:a] + ",".join(dims) + text[b:]


@st.composite
def mir_attr_values(draw, text):
    spans = [m.span() for m in _ATTR_VALUE.finditer(text)] + [m.span() for m in _CONST_LITERAL.finditer(text)]
    if not spans:
        return text
    a, b = draw(st.sampled_from(spans))
    value = draw(st.sampled_from(["nan", "inf", "-inf", "[nan]", "[nan, inf]", "[]", "[[]]", "none", "true",
                                  '"x"', '""', "1e999", "-1", "9" * 30, "[" + "9" * 25 + "]",
                                  "[1, [2]]", "[-1, -1]", "0"]) | st.just(number_text(draw)))
    return text[:a] + value + text[b:]


@st.composite
def mir_nesting(draw, text):
    spans = [m.span() for m in _ATTR_VALUE.finditer(text)] + [m.span() for m in _CONST_LITERAL.finditer(text)]
    if not spans:
        return text
    a, b = draw(st.sampled_from(spans))
    depth = draw(st.sampled_from([2, 40, 64, 65, 1000, 20000]))
    closing = depth if draw(st.booleans()) else draw(st.integers(0, depth))
    return text[:a] + "[" * depth + text[a:b] + "]" * closing + text[b:]


@st.composite
def mir_lines(draw, text):
    lines = text.split("\n")
    i, j = draw(st.integers(0, len(lines) - 1)), draw(st.integers(0, len(lines) - 1))
    kind = draw(st.sampled_from(["swap", "delete", "duplicate"]))
    if kind == "swap":
        lines[i], lines[j] = lines[j], lines[i]
    elif kind == "delete":
        del lines[i]
    else:
        lines.insert(i, lines[j])
    return "\n".join(lines)


def mutated(seeds, mutators):
    """A strategy of (seed index, mutated text): 1 to 3 mutations of one seed."""

    @st.composite
    def strategy(draw):
        k = draw(st.integers(0, len(seeds) - 1))
        text = seeds[k][1]
        for _ in range(draw(st.integers(1, 3))):
            text = draw(draw(st.sampled_from(mutators))(text))
        return k, text

    return strategy()


MIR_MUTATORS = [truncation, char_flips, token_mutation(MIR_TOKEN), mir_dims, mir_attr_values, mir_nesting,
                mir_lines]


def check_mir(seeds):
    def check(example):
        k, text = example
        name, _, weights = seeds[k]
        graph = outcome(lambda: parse_mir(text, name, weights=weights))
        if graph is not None:  # a valid graph writes .mir that reads back
            again, w = emit_mir(graph, inline_limit=16)
            back = parse_mir(again, name, weights=w)
            assert back.structure() == graph.structure() or _has_nan_attr(graph)
        return graph

    return check


def _has_nan_attr(graph: Graph) -> bool:
    values = [v for n in graph.nodes for v in n.attrs.values()]
    flat = [x for v in values for x in (v if isinstance(v, tuple) else (v,))]
    return any(isinstance(x, float) and math.isnan(x) for x in flat)


def test_fuzz_mir(mir_seeds, fuzz_tally):
    run_fuzz(".mir", N_DEFAULT["mir"], True, fuzz_tally, mutated(mir_seeds, MIR_MUTATORS), check_mir(mir_seeds))


@pytest.mark.slow
def test_fuzz_mir_long(mir_seeds, fuzz_tally):
    run_fuzz(".mir", N_SLOW["mir"], False, fuzz_tally, mutated(mir_seeds, MIR_MUTATORS), check_mir(mir_seeds))


# --- composite JSON -------------------------------------------------------------------------------

JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null|\S')


def _json_seed_files(corpus: Path) -> list[Path]:
    """A spread of corpus kernels: every op family, small files first (mutations stay cheap)."""
    root = corpus / "akg-composite"
    files = sorted(p for p in root.rglob("*") if p.suffix in (".info", ".json") and p.is_file())
    by_ops: dict[str, Path] = {}
    for p in sorted(files, key=lambda p: (p.stat().st_size, str(p))):
        try:
            ops = tuple(sorted({o.get("name") for o in json.loads(p.read_text()).get("op_desc") or []
                                if isinstance(o, dict) and isinstance(o.get("name"), str)}))
        except (ValueError, AttributeError):
            continue
        if p.stat().st_size < 40_000:
            by_ops.setdefault(ops, p)
    return list(by_ops.values())[:60]


@pytest.fixture(scope="module")
def json_seeds(corpus):
    return [(p.name, p.read_text(), json.loads(p.read_text())) for p in _json_seed_files(corpus)]


def _paths(obj) -> list[tuple]:
    """Every path into a JSON object (iteratively), the root excluded."""
    out, stack = [], [((), obj)]
    while stack:
        path, node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, child in items:
            out.append((*path, key))
            stack.append(((*path, key), child))
    return out


def _get(obj, path):
    for key in path:
        obj = obj[key]
    return obj


INTERESTING_JSON = [None, True, False, "", "x", "float32", "FRACTAL_NZ", [], {}, [[]], [None], {"tensor_name": 1},
                    *INTERESTING_INTS, *INTERESTING_FLOATS]


@st.composite
def json_object_mutation(draw, obj):
    obj = copy.deepcopy(obj)
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(obj)
        if not paths:
            break
        kind = draw(st.sampled_from(["replace", "delete", "shape", "attr", "ops", "rewire", "nest"]))
        if kind == "replace":
            path = draw(st.sampled_from(paths))
            _get(obj, path[:-1])[path[-1]] = copy.deepcopy(draw(st.sampled_from(INTERESTING_JSON)))
        elif kind == "delete":
            path = draw(st.sampled_from(paths))
            parent = _get(obj, path[:-1])
            del parent[path[-1]]
        elif kind == "shape":
            shapes = [p for p in paths if p[-1] == "shape" and isinstance(_get(obj, p), list)]
            if shapes:
                shape = _get(obj, draw(st.sampled_from(shapes)))
                value = draw(st.sampled_from(INTERESTING_INTS + [math.nan, 1.5, "4", None]))
                if shape and draw(st.booleans()):
                    shape[draw(st.integers(0, len(shape) - 1))] = value
                else:
                    shape.append(value)
        elif kind == "attr":
            values = [p for p in paths if p[-1] == "value" and "attr" in p]
            values += [p for p in paths if p[-1] == "value" and "input_desc" in p]
            if values:
                path = draw(st.sampled_from(values))
                _get(obj, path[:-1])[path[-1]] = draw(st.sampled_from(
                    [math.nan, math.inf, -math.inf, [math.nan], [math.nan, 1.0], 10**30, -(2**63), [], [[1], 2],
                     "nan", None, True, [2**64]]))
        elif kind == "ops" and isinstance(obj, dict) and isinstance(obj.get("op_desc"), list) and obj["op_desc"]:
            ops = obj["op_desc"]
            i, j = draw(st.integers(0, len(ops) - 1)), draw(st.integers(0, len(ops) - 1))
            action = draw(st.sampled_from(["swap", "duplicate", "delete"]))
            if action == "swap":
                ops[i], ops[j] = ops[j], ops[i]
            elif action == "duplicate":
                ops.insert(i, copy.deepcopy(ops[j]))
            else:
                del ops[i]
        elif kind == "rewire":
            names = [p for p in paths if p[-1] == "tensor_name" and "op_desc" in p]
            if names:
                a, b = draw(st.sampled_from(names)), draw(st.sampled_from(names))
                _get(obj, a[:-1])["tensor_name"] = _get(obj, b)  # may make a cycle
        else:
            path = draw(st.sampled_from(paths))
            value = _get(obj, path)
            for _ in range(draw(st.sampled_from([2, 30, 200]))):
                value = [value]
            _get(obj, path[:-1])[path[-1]] = value
    return obj


@st.composite
def json_text_nesting(draw, text):
    i = draw(st.integers(0, len(text)))
    depth = draw(st.sampled_from([50, 999, 1000, 5000, 100000]))
    return text[:i] + "[" * depth + text[i:] + ("]" * depth if draw(st.booleans()) else "")


@st.composite
def json_number_text(draw, text):
    spans = [m.span() for m in re.finditer(r"-?\d+(?:\.\d+)?", text)]
    if not spans:
        return text
    a, b = draw(st.sampled_from(spans))
    return text[:a] + draw(st.sampled_from(["NaN", "Infinity", "-Infinity", "1" * 5000, "-1", "1e999",
                                            str(2**64), "0.0"])) + text[b:]


JSON_TEXT_MUTATORS = [truncation, char_flips, token_mutation(JSON_TOKEN), json_text_nesting, json_number_text]


@st.composite
def json_examples(draw, seeds):
    k = draw(st.integers(0, len(seeds) - 1))
    name, text, obj = seeds[k]
    if draw(st.booleans()):
        return name, "object", draw(json_object_mutation(obj))
    for _ in range(draw(st.integers(1, 3))):
        text = draw(draw(st.sampled_from(JSON_TEXT_MUTATORS))(text))
    return name, "text", text


def check_json(example):
    name, kind, data = example
    if kind == "object":
        graph = outcome(parse_akg_json, data, name)
        text_graph = outcome(loads_akg_json, json.dumps(data), name)  # the same through its text
        assert (graph is None) == (text_graph is None)
        return graph
    return outcome(loads_akg_json, data, name)


def test_fuzz_composite_json(json_seeds, fuzz_tally):
    run_fuzz("composite JSON", N_DEFAULT["json"], True, fuzz_tally, json_examples(json_seeds), check_json)


@pytest.mark.slow
def test_fuzz_composite_json_long(json_seeds, fuzz_tally):
    run_fuzz("composite JSON", N_SLOW["json"], False, fuzz_tally, json_examples(json_seeds), check_json)


# --- MindIR ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mindir_seeds(corpus):
    return [(p.name, p.read_bytes()) for p in sorted((corpus / "mindir").glob("*.mindir"))]


@st.composite
def byte_mutation(draw, data: bytes):
    b = bytearray(data)
    kind = draw(st.sampled_from(["truncate", "flip", "insert", "delete"]))
    if not b:
        return bytes(b)
    i = draw(st.integers(0, len(b) - 1))
    if kind == "truncate":
        del b[i:]
    elif kind == "flip":
        for _ in range(draw(st.integers(1, 8))):
            b[draw(st.integers(0, len(b) - 1))] = draw(st.integers(0, 255))
    elif kind == "insert":
        b[i:i] = draw(st.binary(min_size=1, max_size=16))
    else:
        del b[i:i + draw(st.integers(1, 64))]
    return bytes(b)


def _attributes(model) -> list:
    attrs = [a for p in model.primitives for a in p.attribute]
    attrs += [a for n in model.graph.node for a in n.attribute]
    out, stack = [], list(attrs)
    while stack:
        a = stack.pop()
        out.append(a)
        stack.extend(a.values)
    return out


def _tensors(model) -> list:
    g = model.graph
    return [*g.parameter, *(t for vi in g.input for t in vi.tensor), *(t for vi in g.output for t in vi.tensor)]


@st.composite
def proto_mutation(draw, data: bytes):
    model = pb.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception:  # noqa: BLE001 - bytes mutated before: nothing to edit
        return data
    g = model.graph
    for _ in range(draw(st.integers(1, 3))):
        try:
            _edit_proto(draw, model, g)
        except (UnicodeDecodeError, ValueError, TypeError):  # bytes mutated before: a field unreadable
            continue
    try:
        return model.SerializeToString()
    except Exception:  # noqa: BLE001 - a mutation protobuf itself refuses: keep the seed
        return data


def _edit_proto(draw, model, g) -> None:
    """One random edit of a parsed model, in place."""
    kind = draw(st.sampled_from(["dims", "dtype", "raw", "attr", "attr_type", "rewire", "drop_node",
                                 "op_type", "nest", "outputs"]))
    tensors = _tensors(model)
    if kind == "dims" and tensors:
        t = draw(st.sampled_from(tensors))
        value = draw(st.sampled_from([v for v in INTERESTING_INTS if -(2**63) <= v < 2**63]))
        if len(t.dims) and draw(st.booleans()):
            t.dims[draw(st.integers(0, len(t.dims) - 1))] = value
        else:
            t.dims.append(value)
    elif kind == "dtype" and tensors:
        draw(st.sampled_from(tensors)).data_type = draw(st.integers(0, 20))
    elif kind == "raw" and g.parameter:
        t = draw(st.sampled_from(list(g.parameter)))
        raw = t.raw_data
        t.raw_data = raw[:draw(st.integers(0, len(raw)))] if draw(st.booleans()) else raw + b"\0" * 4
    elif kind in ("attr", "attr_type"):
        attrs = _attributes(model)
        if attrs:
            a = draw(st.sampled_from(attrs))
            if kind == "attr_type":
                a.type = draw(st.integers(0, 40))
            else:
                field = draw(st.sampled_from(["f", "d", "i", "ints", "floats", "s"]))
                if field in ("f", "d"):
                    setattr(a, field, draw(st.sampled_from(INTERESTING_FLOATS)))
                elif field == "i":
                    a.i = draw(st.sampled_from([v for v in INTERESTING_INTS if -(2**63) <= v < 2**63]))
                elif field == "ints":
                    a.ints.append(draw(st.sampled_from([v for v in INTERESTING_INTS if -(2**63) <= v < 2**63])))
                elif field == "floats":
                    a.floats.append(draw(st.sampled_from(INTERESTING_FLOATS)))
                else:
                    a.s = draw(st.sampled_from([b"", b"\xff\xfe", b"nan", b"NCHW" * 100]))
    elif kind == "rewire" and g.node:
        node = draw(st.sampled_from(list(g.node)))
        names = [o for n in g.node for o in n.output] + [vi.name for vi in g.input] + ["nowhere"]
        if len(node.input) and draw(st.booleans()):
            node.input[draw(st.integers(0, len(node.input) - 1))] = draw(st.sampled_from(names))
        else:
            node.input.append(draw(st.sampled_from(names)))
    elif kind == "drop_node" and g.node:
        del g.node[draw(st.integers(0, len(g.node) - 1))]
    elif kind == "op_type" and g.node:
        node = draw(st.sampled_from(list(g.node)))
        node.op_type = draw(st.sampled_from(["Constant", "REF::nothing:0", "", "REF::", "Add",
                                             *(n.op_type for n in g.node)]))
    elif kind == "nest" and model.primitives:
        a = draw(st.sampled_from(list(model.primitives))).attribute.add()
        a.name = "nested"
        depth = draw(st.sampled_from([5, 60, 99, 150]))
        for _ in range(depth):
            a.type = pb.AttributeProto.TUPLE
            a = a.values.add()
        a.type = pb.AttributeProto.FLOAT
        a.f = math.nan
    elif kind == "outputs" and g.output:
        vi = draw(st.sampled_from(list(g.output)))
        vi.name = draw(st.sampled_from([n.name for n in g.node] + [p.name for p in g.parameter] + ["nowhere"]))


@st.composite
def mindir_examples(draw, seeds):
    k = draw(st.integers(0, len(seeds) - 1))
    name, data = seeds[k]
    for _ in range(draw(st.integers(1, 2))):
        data = draw(draw(st.sampled_from([byte_mutation, proto_mutation, proto_mutation]))(data))
    return name, data


def check_mindir(example):
    name, data = example
    return outcome(parse_mindir, data, name)


def test_fuzz_mindir(mindir_seeds, fuzz_tally):
    run_fuzz("MindIR", N_DEFAULT["mindir"], True, fuzz_tally, mindir_examples(mindir_seeds), check_mindir)


@pytest.mark.slow
def test_fuzz_mindir_long(mindir_seeds, fuzz_tally):
    run_fuzz("MindIR", N_SLOW["mindir"], False, fuzz_tally, mindir_examples(mindir_seeds), check_mindir)

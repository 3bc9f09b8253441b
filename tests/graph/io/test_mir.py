"""`.mir` format: exact round trips (property-tested), weights files, and located errors."""

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from akg.errors import (AttrError, InvalidGraphError, MirParseError, ShapeError, UnknownOpError,
                        WeightsError)
from akg.graph import GraphBuilder, evaluate
from akg.graph.io import emit_mir, load_mir, parse_mir, save_mir
from akg.graph.io.mir import tokenize

ROOT = Path(__file__).resolve().parents[3]

# --- round trip ---------------------------------------------------------------------------------

_UNARY = ["neg", "abs", "exp", "tanh", "sigmoid", "relu", "gelu", "erf", "floor", "sqrt"]
_BINARY = ["add", "sub", "mul", "div", "maximum", "minimum", "pow"]
_NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.\-]{0,8}", fullmatch=True)
_FLOATS = st.floats(allow_nan=True, allow_infinity=True, width=32)


@st.composite
def graphs(draw):
    """Random valid graphs over a mix of op families, constants of every dtype, odd names."""
    b = GraphBuilder(draw(_NAMES))
    used: set[str] = set()

    def name():
        n = draw(_NAMES.filter(lambda s: s not in used))
        used.add(n)
        return n if draw(st.booleans()) else None

    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank)))
    dtype = draw(st.sampled_from(["float16", "float32", "float64"]))
    pool = [b.input(name() or "in0", shape, dtype)]
    for i in range(draw(st.integers(0, 3))):
        values = draw(st.lists(_FLOATS, min_size=int(np.prod(shape)), max_size=int(np.prod(shape))))
        with np.errstate(over="ignore"):  # large f32 values become inf in f16, which is fine
            data = np.array(values, dtype=dtype).reshape(shape)
        if draw(st.booleans()):
            data[...] = data.flat[0]  # uniform constants print as one scalar
        pool.append(b.const(data, name=name()))
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["unary", "binary", "reduce", "transpose", "cast", "split", "int_const"]))
        x = draw(st.sampled_from(pool))
        if kind == "unary":
            op = draw(st.sampled_from(_UNARY))
            attrs = {"approximate": draw(st.sampled_from(["none", "tanh"]))} if op == "gelu" else {}
            pool.append(b.op(op, x, name=name(), **attrs))
        elif kind == "binary":
            y = draw(st.sampled_from([v for v in pool if v.shape == x.shape]))
            pool.append(b.op(draw(st.sampled_from(_BINARY)), x, y, name=name()))
        elif kind == "reduce" and x.type.rank:
            axes = draw(st.none() | st.lists(st.integers(0, x.type.rank - 1), unique=True))
            out = b.op(draw(st.sampled_from(["sum", "max", "mean"])), x, axes=axes,
                       keepdims=True, name=name())
            pool.append(b.broadcast_to(out, shape=list(x.shape)) if out.shape != x.shape else out)
        elif kind == "transpose":
            perm = draw(st.permutations(list(range(x.type.rank))))
            t = b.transpose(x, perm=perm, name=name())
            pool.append(b.transpose(t, perm=list(np.argsort(perm))))
        elif kind == "cast":
            c = b.cast(x, to=draw(st.sampled_from(["int32", "int8", "bool", "float16"])), name=name())
            pool.append(b.cast(c, to=dtype))
        elif kind == "split" and x.shape[0] % 2 == 0:
            p, q = b.split(x, axis=0, sections=2)
            pool.append(b.concat(q, p, axis=0, name=name()))
        elif kind == "int_const":
            values = draw(st.lists(st.integers(-(2**31), 2**31 - 1), min_size=1, max_size=20))
            b.output(b.const(np.array(values, np.int32), name=name()))
            b.output(b.const(np.array(draw(st.lists(st.booleans(), min_size=1, max_size=5))), name=name()))
    b.output(pool[-1])
    return b.build()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph=graphs(), inline_limit=st.sampled_from([None, 0, 4, 16]))
def test_printer_output_parses_back_to_an_equal_graph(graph, inline_limit):
    text, weights = emit_mir(graph, inline_limit=inline_limit)
    again = parse_mir(text, weights=weights)
    assert again == graph
    assert emit_mir(again, inline_limit=inline_limit)[0] == text


def test_save_and_load_with_a_weights_file(tmp_path):
    b = GraphBuilder("net")
    x = b.input("x", (2, 40))
    w = b.const(np.random.default_rng(0).standard_normal((40, 3)).astype(np.float32), name="w")
    small = b.const(np.array([1.5, -2.0, 3.25], np.float32), name="small")
    b.output(b.add(b.matmul(x, w), small, name="y"))
    g = b.build()
    path = save_mir(g, tmp_path / "net.mir")
    text = path.read_text()
    assert 'weights "net.npz"' in text and '%w: f32[40,3] = weight "w"' in text
    assert "%small: f32[3] = const [1.5, -2.0, 3.25]" in text
    assert (tmp_path / "net.npz").exists()
    loaded = load_mir(path)
    assert loaded == g
    xs = np.ones((2, 40), np.float32)
    np.testing.assert_array_equal(evaluate(loaded, [xs])[0], evaluate(g, [xs])[0])


def test_docs_example_parses_and_runs(tmp_path):
    doc = (ROOT / "docs" / "mir.md").read_text()
    example = re.search(r"## Example\n\n```\n(.*?)```", doc, re.S).group(1)
    rng = np.random.default_rng(0)
    weights = {"fc1.weight": rng.standard_normal((8, 16)).astype(np.float32),
               "fc2.weight": rng.standard_normal((16, 3)).astype(np.float32)}
    g = parse_mir(example, "mir.md", weights=weights)
    assert [v.name for v in g.outputs] == ["logits", "loss"]
    logits, loss = evaluate(g, {"x": np.ones((4, 8), np.float32), "labels": np.array([0, 1, 2, 0], np.int32)})
    assert logits.shape == (4, 3) and loss.shape == () and np.isfinite(loss)


def test_statements_may_come_in_any_order_and_literals_parse():
    g = parse_mir("""
        graph @g(%x: f32[2]) {
          %z = add(%y, %c) : f32[2]
          %y = exp(%x) : f32[2]
          %c: f32[2] = const [inf, -1.5e-3]
          %i: i64[2,2] = const [[1, -2], [3, 4]]
          %e: f32[0] = const []
          return %z, %i
        }""")
    assert [n.op for n in g.nodes] == ["exp", "add"]
    assert g.constants[g.value("c")][0] == np.inf
    assert g.constants[g.value("i")].dtype == np.int64


# --- errors -------------------------------------------------------------------------------------

GOOD_HEAD = "graph @g(%x: f32[2,3]) {\n"


@pytest.mark.parametrize(
    "body, error, where, message",
    [
        ("  %y = relu(%x : f32[2,3]\n  return %y\n}\n", MirParseError, "2:16", "expected ',' between operands, found ':'"),
        ("  %y = relu(%x) f32[2,3]\n  return %y\n}\n", MirParseError, "2:17", "expected ':'"),
        ("  %y = relu(%x) : f32[2,3]\n", MirParseError, "3:1", "expected a statement or 'return', found end of file"),
        ("  %y = relu(%x) : q8[2,3]\n  return %y\n}\n", MirParseError, "2:19", "unknown dtype 'q8'"),
        ("  %y = relu(%x) : f32[2,3]\n  return %y\n} extra\n", MirParseError, "4:3", "unexpected 'extra'"),
        ("  %y = relu(%x) $ : f32[2,3]\n", MirParseError, "2:17", "unexpected character '\\$'"),
        ("  %y = frob(%x) : f32[2,3]\n  return %y\n}\n", UnknownOpError, "2:8", "unknown op 'frob'"),
        ("  %y = softmax(%x) {axis=1.5} : f32[2,3]\n  return %y\n}\n", AttrError, "2:8",
         "op 'softmax': attribute 'axis' expects an integer, got 1.5"),
        ("  %y = relu(%x) {alpha=1} : f32[2,3]\n  return %y\n}\n", AttrError, "2:8", "has no attribute 'alpha'"),
        ("  %y = relu(%x) : f32[3,2]\n  return %y\n}\n", ShapeError, "2:3",
         r"declared f32\[3,2\] but the op gives f32\[2,3\]"),
        ("  %y = matmul(%x, %x) : f32[2,2]\n  return %y\n}\n", ShapeError, "2:3", "op 'matmul': contraction sizes differ"),
        ("  %y = add(%x, %nope) : f32[2,3]\n  return %y\n}\n", MirParseError, "2:16", "%nope is used but never defined"),
        ("  %y = relu(%x) : f32[2,3]\n  return %q\n}\n", MirParseError, "3:10", "returned value %q is never defined"),
        ("  %y = relu(%z) : f32[2,3]\n  %z = relu(%y) : f32[2,3]\n  return %y\n}\n", InvalidGraphError, "2:3",
         "cycle through %y, %z"),
        ("  %y = relu(%x) : f32[2,3]\n  %y = exp(%x) : f32[2,3]\n  return %y\n}\n", MirParseError, "3:3",
         "%y is defined more than once"),
        ("  %c: i32[2] = const [1.5, 2]\n  return %c\n}\n", MirParseError, "2:22", "float values do not fit i32"),
        ("  %c: f32[3] = const [1, 2]\n  return %c\n}\n", MirParseError, "2:22", r"literal has shape \[2\], the type says \[3\]"),
        ("  %w: f32[3] = weight\n  return %w\n}\n", WeightsError, "2:3", "names no weights file"),
    ],
)
def test_malformed_input_gives_typed_located_errors(body, error, where, message):
    with pytest.raises(error) as info:
        parse_mir(GOOD_HEAD + body, "model.mir")
    assert re.match(rf"model\.mir:{where}: ", str(info.value)), str(info.value)
    assert re.search(message, str(info.value)), str(info.value)


def test_missing_and_mismatched_weights_files(tmp_path):
    src = 'graph @g() weights "w.npz" {\n  %w: f32[3] = weight "k"\n  return %w\n}\n'
    (tmp_path / "m.mir").write_text(src)
    with pytest.raises(WeightsError, match=r"m\.mir:1:20: weights file '.*w\.npz' not found"):
        load_mir(tmp_path / "m.mir")
    np.savez(tmp_path / "w.npz", other=np.zeros(3, np.float32))
    with pytest.raises(WeightsError, match=r"m\.mir:2:3: weight 'k' is not in the weights file"):
        load_mir(tmp_path / "m.mir")
    np.savez(tmp_path / "w.npz", k=np.zeros(4, np.float32))
    with pytest.raises(WeightsError, match=r"weight 'k' is f32\[4\] in the weights file, declared f32\[3\]"):
        load_mir(tmp_path / "m.mir")
    (tmp_path / "w.npz").write_text("not a zip")
    with pytest.raises(WeightsError, match="cannot read weights file"):
        load_mir(tmp_path / "m.mir")
    np.savez(tmp_path / "w.npz", k=np.arange(3, dtype=np.float32))
    g = load_mir(tmp_path / "m.mir")
    assert g.constants[g.outputs[0]][2] == 2


def test_unreadable_files(tmp_path):
    with pytest.raises(MirParseError, match="cannot read file"):
        load_mir(tmp_path / "absent.mir")
    (tmp_path / "bin.mir").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(MirParseError, match="not a text file"):
        load_mir(tmp_path / "bin.mir")


def test_tokens_carry_line_and_column():
    toks = tokenize("graph @g(\n  %x: f32[1]) # c\n", "f")
    x = next(t for t in toks if t.text == "%x")
    assert (x.line, x.col) == (2, 3)
    assert toks[-1].kind == "eof"

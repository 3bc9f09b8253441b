"""Graph IR: construction, validation errors, topological order, equality, immutability."""

import numpy as np
import pytest

from akg.errors import AttrError, InvalidGraphError, ShapeError, UnknownOpError
from akg.graph import Graph, GraphBuilder, Node, TensorType, Value


def _t(*shape, dtype="float32"):
    return TensorType(shape, dtype)


def test_nodes_are_sorted_topologically_and_stably():
    x = Value("x", _t(2))
    a, b, c = Value("a", _t(2)), Value("b", _t(2)), Value("c", _t(2))
    n_c = Node("add", [a, b], {}, [c])
    n_b = Node("exp", [x], {}, [b])
    n_a = Node("neg", [x], {}, [a])
    g = Graph("g", [x], [c], [n_c, n_b, n_a])
    assert [n.op for n in g.nodes] == ["exp", "neg", "add"]
    assert g.producer(c) is n_c and g.producer(x) is None
    assert [n.op for n in g.users()[x]] == ["exp", "neg"]


def test_cycle_is_an_error_naming_the_values():
    x = Value("x", _t(2))
    a, b = Value("a", _t(2)), Value("b", _t(2))
    with pytest.raises(InvalidGraphError, match=r"cycle through %a, %b"):
        Graph("g", [x], [b], [Node("neg", [b], {}, [a]), Node("exp", [a], {}, [b])])


def test_undefined_value_is_an_error():
    x, ghost, y = Value("x", _t(2)), Value("ghost", _t(2)), Value("y", _t(2))
    with pytest.raises(InvalidGraphError, match=r"%ghost is used by 'add'.*never defined"):
        Graph("g", [x], [y], [Node("add", [x, ghost], {}, [y])])


def test_undefined_output_and_empty_outputs():
    x = Value("x", _t(2))
    with pytest.raises(InvalidGraphError, match="output %nope is not defined"):
        Graph("g", [x], [Value("nope", _t(2))], [])
    with pytest.raises(InvalidGraphError, match="no outputs"):
        Graph("g", [x], [], [])


def test_duplicate_names_are_an_error():
    x, x2 = Value("x", _t(2)), Value("x", _t(2))
    with pytest.raises(InvalidGraphError, match="%x is defined more than once"):
        Graph("g", [x], [x2], [Node("neg", [x], {}, [x2])])


def test_declared_type_must_match_inference():
    x = Value("x", _t(2, 3))
    y = Value("y", _t(3, 2))
    with pytest.raises(ShapeError, match=r"declared f32\[3,2\] but the op gives f32\[2,3\]"):
        Graph("g", [x], [y], [Node("relu", [x], {}, [y])])


def test_wrong_number_of_bound_outputs():
    x = Value("x", _t(4))
    y = Value("y", _t(2))
    with pytest.raises(InvalidGraphError, match="produces 2 outputs, 1 are bound"):
        Graph("g", [x], [y], [Node("split", [x], {"sections": 2}, [y])])


def test_node_checks_op_and_attrs():
    x, y = Value("x", _t(2)), Value("y", _t(2))
    with pytest.raises(UnknownOpError, match="unknown op 'relux'.*'relu'"):
        Node("relux", [x], {}, [y])
    with pytest.raises(AttrError, match="op 'softmax': attribute 'axis' expects an integer"):
        Node("softmax", [x], {"axis": "last"}, [y])


def test_constant_type_must_match_data():
    w = Value("w", _t(2))
    with pytest.raises(ShapeError, match=r"declared f32\[2\] but holds f64\[2\]"):
        Graph("g", [], [w], [], {w: np.zeros(2)})


def test_bad_names_and_types():
    with pytest.raises(InvalidGraphError, match="bad value name"):
        Value("has space", _t(1))
    with pytest.raises(ShapeError, match="bad dimension -1"):
        TensorType((2, -1), "float32")
    with pytest.raises(ShapeError, match="unknown dtype 'f17'"):
        TensorType((2,), "f17")


def test_graph_is_immutable_and_constants_are_copied():
    data = np.ones(3, np.float32)
    b = GraphBuilder()
    w = b.const(data, name="w")
    b.output(b.neg(w))
    g = b.build()
    data[0] = 5  # the graph keeps its own copy
    assert g.constants[w][0] == 1
    with pytest.raises(ValueError):
        g.constants[w][0] = 2
    with pytest.raises(TypeError):
        g.constants[w] = data  # type: ignore[index]


def test_structural_equality_includes_constant_data():
    def build(v):
        b = GraphBuilder("g")
        x = b.input("x", (3,))
        b.output(b.add(x, b.const(np.array([1, 2, v], np.float32), name="c")))
        return b.build()

    assert build(3.0) == build(3.0)
    assert build(3.0) != build(4.0)
    assert build(np.nan) == build(np.nan)
    assert hash(build(3.0)) == hash(build(3.0))


def test_value_lookup_by_name():
    b = GraphBuilder()
    x = b.input("x", (2,))
    b.output(b.exp(x, name="e"))
    g = b.build()
    assert g.value("e").type == _t(2)
    with pytest.raises(InvalidGraphError, match="no value %missing"):
        g.value("missing")


def test_str_is_the_mir_text_with_every_constant_inline():
    from akg.graph.io import emit_mir

    b = GraphBuilder("g")
    x = b.input("x", [20])
    b.output(b.add(x, b.const(np.arange(20, dtype=np.float32), name="w")))
    g = b.build()
    text = str(g)
    assert text == emit_mir(g, inline_limit=None)[0]
    assert text.startswith("graph @g(%x: f32[20]) {\n  %w: f32[20] = const [0.0, 1.0, ")


def test_the_ir_does_not_import_the_formats():
    """graph/io depends on graph/ir, never the reverse (the .mir printer is registered)."""
    import ast
    from pathlib import Path

    import akg.graph.ir as ir

    tree = ast.parse(Path(ir.__file__).read_text())
    imported = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert imported and not [m for m in imported if m and m.startswith("akg.graph.io")]

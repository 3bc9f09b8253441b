"""GraphBuilder: inferred types, automatic names, scalars, multi-output ops."""

import numpy as np
import pytest

from akg.errors import InvalidGraphError, ShapeError
from akg.graph import GraphBuilder, TensorType


def test_infers_types_and_names_fresh_values():
    b = GraphBuilder("g")
    x = b.input("x", (2, 3))
    w = b.const(np.ones((3, 4), np.float32))
    y = b.matmul(x, w)
    assert y.type == TensorType((2, 4), "float32")
    assert (w.name, y.name) == ("0", "1")
    b.output(y)
    g = b.build()
    assert [n.op for n in g.nodes] == ["matmul"]


def test_python_scalars_become_constants_of_the_operand_dtype():
    b = GraphBuilder()
    x = b.input("x", (2,), "float16")
    y = b.mul(x, 0.5)
    b.output(y)
    g = b.build()
    (c,) = g.constants
    assert c.type == TensorType((), "float16") and float(g.constants[c]) == 0.5


def test_multi_output_ops_return_tuples_and_take_names():
    b = GraphBuilder()
    x = b.input("x", (6,))
    p, q = b.split(x, sizes=[2, 4], name=["p", "q"])
    assert (p.name, p.shape, q.name, q.shape) == ("p", (2,), "q", (4,))
    with pytest.raises(InvalidGraphError, match="2 outputs, 1 names"):
        b.split(x, sections=2, name=["only"])


def test_errors_surface_at_the_call():
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    with pytest.raises(ShapeError, match="op 'matmul': contraction sizes differ"):
        b.matmul(x, x)
    with pytest.raises(InvalidGraphError, match="%x is defined more than once"):
        b.input("x", (1,))
    with pytest.raises(AttributeError):
        b.not_an_op(x)


def test_rewriting_keeps_names_and_gives_helpers_unique_ones():
    b = GraphBuilder("g")
    x = b.input("x", (4,))
    w = b.const(np.ones(4, np.float32), name="x1")  # the name a naive helper would take
    y = b.add(x, w, name="y")
    b.output(y)
    g = b.build()

    r = GraphBuilder.rewriting(g)
    env = r.copy_io(g)
    assert [v.name for v in env.values()] == ["x", "x1"]
    helper = r.op("neg", env[g.inputs[0]], name=r.unique("x"))  # "x" and "x1" are taken
    assert helper.name == "x2"
    (y2,) = r.copy_node(g.nodes[0], [helper, env[w]])
    r.output(y2)
    new = r.build()
    assert [v.name for v in new.inputs] == ["x"] and y2.name == "y" and y2.type == y.type
    assert r.unique("y") == "y1"

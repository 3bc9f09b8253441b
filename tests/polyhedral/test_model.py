"""Polyhedral model: statements, domains, exact and over-approximated accesses, dependences."""

import islpy as isl

from akg.graph import GraphBuilder
from akg.graph.compute.lower import lower_graph
from akg.polyhedral.deps import compute_dependences
from akg.polyhedral.model import affine, build_model, linear_coefficients
from akg.graph.compute.expr import Var, Const, call


def _model(build):
    b = GraphBuilder("g")
    build(b)
    return build_model(lower_graph(b.build()))


def test_reduction_becomes_init_and_update_statements():
    m = _model(lambda b: b.output(b.matmul(b.input("a", (4, 6)), b.input("w", (6, 5)))))
    names = {s.name: s for s in m.statements}
    assert set(names) == {"S0_init", "S0"}
    assert names["S0"].domain.is_equal(isl.Set("{ S0[i0, i1, i2] : 0 <= i0 < 4 and 0 <= i1 < 5 and 0 <= i2 < 6 }",
                                                context=m.ctx))
    reads = {str(a.relation) for a in names["S0"].reads}
    assert any("A0[o0 = i0, o1 = i2]" in r for r in reads)  # a[i, k]
    assert any("A1[o0 = i2, o1 = i1]" in r for r in reads)  # w[k, j]


def test_data_dependent_index_is_over_approximated():
    m = _model(lambda b: b.output(b.gather(b.input("t", (10, 4)), b.input("i", (3,), "int32"))))
    (s,) = m.statements
    table = next(a for a in s.reads if a.tensor.name == "t")
    assert not table.exact
    # any row of the table may be read, the column is exact
    assert table.relation.is_equal(isl.Map(
        "{ S0[i0, i1] -> A0[o0, o1 = i1] : 0 <= i0 < 3 and 0 <= i1 < 4 and 0 <= o0 < 10 }", context=m.ctx))


def test_flow_dependences_are_exact():
    def body(b):
        x = b.input("x", (8, 16))
        b.output(b.div(x, b.sum(x, axes=[1], keepdims=True)))
    m = _model(body)
    deps = compute_dependences(m)
    # the consumer of row i depends only on the last update of row i
    want = isl.UnionMap("{ S0[i0, 0, 15] -> S1[i0, i1] : 0 <= i0 < 8 and 0 <= i1 < 16 }", context=m.ctx)
    assert want.is_subset(deps.flow)
    assert deps.flow.intersect_range(isl.UnionSet("{ S1[i0, i1] }", context=m.ctx)).is_equal(want)


def test_affine_conversion():
    i, j = Var("i", 8), Var("j", 8)
    names = {i: "i", j: "j"}
    assert affine(call("add", call("mul", i, Const(4, "int32")), j), names) == "((i * 4) + j)"
    assert affine(call("floordiv", i, Const(3, "int32")), names) == "floor((i) / 3)"
    assert affine(call("mul", i, j), names) is None
    assert linear_coefficients(call("sub", call("mul", i, Const(3, "int32")), j)) == {i: 3, j: -1}

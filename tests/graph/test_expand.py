"""Expansion: every composite op's expander, checked against the composite op's own
reference; the expanded graphs hold basic ops only and keep value names."""

import numpy as np
import pytest

from akg.graph import GraphBuilder, evaluate, random_inputs
from akg.graph.expand import expand
from akg.graph.ops import COMPOSITE, COMPUTES, EXPANDERS, OPS, get_op


def _cases(dtype):
    f = dtype
    return {
        "softmax": lambda b: b.softmax(b.input("x", (4, 33), f), axis=1),
        "log_softmax": lambda b: b.log_softmax(b.input("x", (5, 7), f), axis=0),
        "layer_norm": lambda b: b.layer_norm(b.input("x", (3, 4, 8), f), b.input("g", (4, 8), f),
                                             b.input("bt", (4, 8), f), begin_norm_axis=1, epsilon=1e-3),
        "batch_norm": lambda b: b.batch_norm(b.input("x", (2, 3, 4, 5), f), b.input("g", (3,), f),
                                             b.input("bt", (3,), f), b.input("m", (3,), f),
                                             b.add(b.abs(b.input("v", (3,), f)), 0.5)),
        "dense": lambda b: b.dense(b.input("x", (2, 3, 6), f), b.input("w", (4, 6), f), b.input("bias", (4,), f)),
        "dropout": lambda b: b.dropout(b.input("x", (3, 3), f), rate=0.3),
        "cross_entropy": lambda b: b.cross_entropy(b.input("x", (6, 5), f), b.input("l", (6,), "int32")),
        "nll_loss": lambda b: b.nll_loss(b.input("x", (6, 5), f), b.input("l", (6,), "int32"), reduction="sum"),
        "variance": lambda b: b.variance(b.input("x", (6, 5), f), axes=[0], keepdims=True),
    }


def test_every_composite_op_has_an_expander_and_a_case():
    composites = {name for name in OPS if get_op(name).kind == COMPOSITE}
    assert composites <= set(EXPANDERS)
    assert composites == set(_cases("float32")), sorted(composites ^ set(_cases("float32")))


@pytest.mark.parametrize("dtype, tol", [("float32", 1e-5), ("float16", 2e-3), ("float64", 1e-12)])
@pytest.mark.parametrize("op", sorted(_cases("float32")))
def test_expansion_matches_the_composite_reference(op, dtype, tol):
    b = GraphBuilder(op)
    b.output(_cases(dtype)[op](b))
    graph = b.build()
    expanded = expand(graph)
    assert all(get_op(n.op).kind != COMPOSITE for n in expanded.nodes)
    assert all(n.op in COMPUTES for n in expanded.nodes)
    assert [v.name for v in expanded.outputs] == [v.name for v in graph.outputs]
    inputs = random_inputs(graph, 1)
    want, got = evaluate(graph, inputs), evaluate(expanded, inputs)
    for w, g in zip(want, got):
        scale = max(1.0, float(np.abs(w.astype(np.float64)).max()))
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=tol, atol=tol * scale)


def test_softmax_is_numerically_careful():
    b = GraphBuilder("s")
    b.output(b.softmax(b.input("x", (2, 4))))
    expanded = expand(b.build())
    assert [n.op for n in expanded.nodes][:2] == ["max", "sub"]  # subtract the max before exp
    (y,) = evaluate(expanded, {"x": np.array([[1000, 1001, 1002, 1003], [-5, 0, 5, 10]], np.float32)})
    assert np.isfinite(y).all() and np.allclose(y.sum(1), 1)


def test_fp16_layer_norm_statistics_are_computed_in_fp32():
    b = GraphBuilder("ln")
    b.output(b.layer_norm(b.input("x", (2, 512), "float16"), b.input("g", (512,), "float16"),
                          b.input("bt", (512,), "float16")))
    expanded = expand(b.build())
    assert any(n.op == "cast" and n.attrs["to"] == "float32" for n in expanded.nodes)


def test_graphs_without_composites_are_returned_as_they_are():
    b = GraphBuilder("g")
    b.output(b.relu(b.input("x", (3,))))
    g = b.build()
    assert expand(g) is g


@pytest.mark.parametrize("op", ["cross_entropy", "nll_loss"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_expanded_losses_leave_ignored_labels_out(op, reduction):
    b = GraphBuilder(op)
    b.output(b.op(op, b.input("x", (4, 5), "float32"), b.input("l", (4,), "int64"),
                  reduction=reduction, ignore_index=-100))
    graph = b.build()
    x = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
    inputs = {"x": x if op == "cross_entropy" else -np.abs(x), "l": np.array([3, -100, 0, -100], np.int64)}
    np.testing.assert_allclose(evaluate(expand(graph), inputs)[0], evaluate(graph, inputs)[0], rtol=1e-6)

"""Winograd's three ops (graph/ops/winograd.py): chained, they are conv2d; shapes and errors."""

import numpy as np
import pytest

from akg.errors import ShapeError
from akg.graph import GraphBuilder
from akg.graph.interpreter import evaluate
from akg.graph.ops.conv import conv2d
from akg.graph.ops.winograd import tiles_of, weight_transform, winograd_input, winograd_output, winograd_product


def _chain(x, w, pads, cols=0):
    """conv2d(x, w) through the three references, in float64."""
    pt, pl, pb, pr = pads
    n, _, h, wd = x.shape
    out_hw = (h + pt + pb - 2, wd + pl + pr - 2)
    v = winograd_input(x, (pt, pl), out_hw, cols)
    m = winograd_product(weight_transform(w), v)
    return winograd_output(m, n, out_hw, cols)


@pytest.mark.parametrize("shape, pads, cols", [
    ((1, 3, 8, 8), (1, 1, 1, 1), 0),
    ((2, 4, 7, 9), (1, 1, 1, 1), 0),  # odd sizes: the last tiles are cropped
    ((2, 2, 6, 5), (0, 0, 0, 0), 0),
    ((1, 3, 6, 6), (1, 0, 0, 1), 0),  # asymmetric padding
    ((1, 2, 8, 8), (1, 1, 1, 1), 16),  # tile rows padded to a vector of 16 columns
])
def test_the_three_references_are_conv2d(shape, pads, cols):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape)
    w = rng.standard_normal((5, shape[1], 3, 3))
    want = conv2d(x, w, (1, 1), pads, (1, 1), 1)
    got = _chain(x, w, pads, cols)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_float32_matches_the_float64_conv_to_float32_rounding():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 64, 12, 12)).astype(np.float32)
    w = rng.standard_normal((64, 64, 3, 3)).astype(np.float32)
    want = conv2d(x.astype(np.float64), w.astype(np.float64), (1, 1), (1, 1, 1, 1), (1, 1), 1)
    got = _chain(x, w, (1, 1, 1, 1))
    assert got.dtype == np.float32
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


def test_shapes_follow_the_tiles():
    assert tiles_of(56, 56) == (28, 28)
    assert tiles_of(7, 9) == (4, 5)
    assert tiles_of(28, 28, 16) == (14, 16)
    b = GraphBuilder()
    x = b.input("x", (2, 8, 28, 28))
    v = b.op("winograd_input", x, out_hw=[28, 28], cols=16)
    assert v.shape == (4, 4, 8, 2 * 14, 16)
    m = b.op("winograd_product", b.input("u", (4, 4, 6, 8)), v)
    assert m.shape == (4, 4, 6, 28, 16)
    assert b.op("winograd_output", m, batch=2, out_hw=[28, 28], cols=16).shape == (2, 6, 28, 28)


def test_mismatched_operands_are_shape_errors():
    b = GraphBuilder()
    with pytest.raises(ShapeError, match="winograd_product.*U\\[4,4,K,C\\]"):
        b.op("winograd_product", b.input("u", (4, 4, 6, 8)), b.input("v", (4, 4, 7, 2, 3)))
    with pytest.raises(ShapeError, match="winograd_output"):
        b.op("winograd_output", b.input("m", (4, 4, 6, 5, 3)), batch=2, out_hw=[6, 6])  # 5 rows for 2 images
    with pytest.raises(ShapeError, match="winograd_input"):
        b.op("winograd_input", b.input("i", (2, 3, 4, 4), "int32"), out_hw=[4, 4])


def test_the_interpreter_runs_the_chain():
    rng = np.random.default_rng(2)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b = GraphBuilder()
    x = b.input("x", (1, 3, 10, 10))
    v = b.op("winograd_input", x, out_hw=[10, 10])
    y = b.op("winograd_output", b.op("winograd_product", b.const(weight_transform(w)), v), batch=1, out_hw=[10, 10])
    b.output(y)
    xs = rng.standard_normal((1, 3, 10, 10)).astype(np.float32)
    (got,) = evaluate(b.build(), {"x": xs})
    want = conv2d(xs.astype(np.float64), w.astype(np.float64), (1, 1), (1, 1, 1, 1), (1, 1), 1)
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


@pytest.mark.parametrize("op, attrs, message", [
    ("winograd_input", {"out_hw": [0, 8]}, "'out_hw' must be 2 sizes > 0, got \\(0, 8\\)"),
    ("winograd_input", {"out_hw": [8]}, "'out_hw' must be 2 sizes > 0"),
    ("winograd_input", {"out_hw": [8, 8], "cols": -1}, "'cols' must not be negative"),
    ("winograd_input", {"out_hw": [8, 8], "padding": [1]}, "'padding' must be 2 pads >= 0"),
    ("winograd_output", {"out_hw": [8, 8], "batch": 0}, "'batch' must be positive"),
])
def test_bad_attributes_are_attribute_errors(op, attrs, message):
    from akg.errors import AttrError

    b = GraphBuilder()
    x = b.input("x", (1, 3, 8, 8)) if op == "winograd_input" else b.input("m", (4, 4, 2, 4, 4))
    with pytest.raises(AttrError, match=f"op '{op}': attribute {message}"):
        b.op(op, x, **attrs)

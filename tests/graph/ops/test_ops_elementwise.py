"""Elementwise ops: dtype rules, broadcasting, and references checked against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from akg.errors import AttrError, ShapeError
from akg.graph import GraphBuilder, evaluate
from akg.graph.ops import ELEMWISE, OPS, get_op
from akg.graph.types import TensorType

NAN, INF = float("nan"), float("inf")


def T(shape, dtype="float32") -> TensorType:
    return TensorType(shape, dtype)


def infer(op, *types, **attrs):
    d = get_op(op)
    out = d.infer_types(list(types), d.check_attrs(attrs))
    return out[0] if len(out) == 1 else out


def ref(op, *arrays, **attrs):
    d = get_op(op)
    with np.errstate(all="ignore"):
        out = d.evaluate([np.asarray(a) for a in arrays], d.check_attrs(attrs))
    return out[0] if len(out) == 1 else out


def f32(values):
    return np.array(values, dtype=np.float32)


UNARY_FLOAT = ["exp", "log", "sqrt", "rsqrt", "reciprocal", "tanh", "sigmoid", "erf", "sin",
               "cos", "floor", "ceil", "round", "gelu"]
UNARY_NUMERIC = ["neg", "abs", "relu", "relu6", "sign"]
BINARY_NUMERIC = ["add", "sub", "mul", "div", "maximum", "minimum", "mod"]
COMPARISONS = ["equal", "not_equal", "less", "less_equal", "greater", "greater_equal"]
FAMILY = set(UNARY_FLOAT + UNARY_NUMERIC + BINARY_NUMERIC + COMPARISONS + [
    "pow", "logical_not", "logical_and", "logical_or", "isnan", "isinf", "where", "cast"])


def test_family_is_fully_covered():
    registered = {n for n, d in OPS.items() if d.infer.__module__ == "akg.graph.ops.elementwise"}
    assert registered == FAMILY
    assert all(get_op(n).kind == ELEMWISE for n in FAMILY)


def test_differentiability_flags():
    for op in ["floor", "ceil", "round", "sign", "mod", "equal", "less", "logical_and",
               "logical_not", "isnan", "isinf"]:
        assert not get_op(op).differentiable, op
    for op in ["add", "mul", "exp", "gelu", "where", "cast", "relu", "sigmoid", "pow"]:
        assert get_op(op).differentiable, op


# --- inference ------------------------------------------------------------------------------


@pytest.mark.parametrize("op", UNARY_FLOAT)
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_float_unary_keeps_type(op, dtype):
    assert infer(op, T((2, 0, 3), dtype)) == T((2, 0, 3), dtype)
    assert infer(op, T((), dtype)) == T((), dtype)


@pytest.mark.parametrize("op", UNARY_FLOAT)
@pytest.mark.parametrize("dtype", ["int32", "bool", "uint8"])
def test_float_unary_rejects_non_float(op, dtype):
    with pytest.raises(ShapeError, match=f"^op '{op}': needs a floating-point input, got"):
        infer(op, T((2,), dtype))


@pytest.mark.parametrize("op", UNARY_NUMERIC)
def test_numeric_unary(op):
    for dtype in ["int8", "int32", "int64", "uint8", "float16", "float32"]:
        assert infer(op, T((3, 1), dtype)) == T((3, 1), dtype)
    with pytest.raises(ShapeError, match=f"^op '{op}': needs a numeric \\(non-bool\\) input, got bool\\[3\\]"):
        infer(op, T((3,), "bool"))


def test_logical_not_needs_bool():
    assert infer("logical_not", T((4,), "bool")) == T((4,), "bool")
    with pytest.raises(ShapeError, match="^op 'logical_not': needs a bool input"):
        infer("logical_not", T((4,), "int32"))


@pytest.mark.parametrize("op", ["isnan", "isinf"])
def test_isnan_isinf_give_bool(op):
    assert infer(op, T((2, 3), "float16")) == T((2, 3), "bool")
    with pytest.raises(ShapeError, match=f"^op '{op}': needs a floating-point input"):
        infer(op, T((2,), "int32"))


@pytest.mark.parametrize("op", BINARY_NUMERIC)
def test_binary_numeric_broadcast(op):
    assert infer(op, T((2, 1, 4)), T((3, 1))) == T((2, 3, 4))
    assert infer(op, T((), "int32"), T((5,), "int32")) == T((5,), "int32")
    assert infer(op, T((0, 1), "int8"), T((1, 7), "int8")) == T((0, 7), "int8")
    with pytest.raises(ShapeError, match=f"^op '{op}': shapes \\[2, 3\\] and \\[4\\] cannot be broadcast together"):
        infer(op, T((2, 3)), T((4,)))
    with pytest.raises(ShapeError, match=f"^op '{op}': inputs must share one dtype \\(insert a cast\\), got f32\\[2\\], f16\\[2\\]"):
        infer(op, T((2,)), T((2,), "float16"))
    with pytest.raises(ShapeError, match=f"^op '{op}': needs a numeric \\(non-bool\\) input"):
        infer(op, T((2,), "bool"), T((2,), "bool"))


def test_pow_is_float_only():
    assert infer("pow", T((2, 1), "float16"), T((3,), "float16")) == T((2, 3), "float16")
    with pytest.raises(ShapeError, match="^op 'pow': needs a floating-point input"):
        infer("pow", T((2,), "int32"), T((2,), "int32"))


@pytest.mark.parametrize("op", COMPARISONS)
def test_comparisons_give_bool(op):
    assert infer(op, T((2, 1)), T((4,))) == T((2, 4), "bool")
    assert infer(op, T((3,), "int8"), T((), "int8")) == T((3,), "bool")
    assert infer(op, T((3,), "bool"), T((3,), "bool")) == T((3,), "bool")
    with pytest.raises(ShapeError, match=f"^op '{op}': inputs must share one dtype"):
        infer(op, T((3,), "int32"), T((3,), "float32"))
    with pytest.raises(ShapeError, match=f"^op '{op}': shapes"):
        infer(op, T((3,)), T((2,)))


@pytest.mark.parametrize("op", ["logical_and", "logical_or"])
def test_logical_binary(op):
    assert infer(op, T((2, 1), "bool"), T((3,), "bool")) == T((2, 3), "bool")
    with pytest.raises(ShapeError, match=f"^op '{op}': needs a bool input"):
        infer(op, T((2,), "int32"), T((2,), "int32"))
    with pytest.raises(ShapeError, match=f"^op '{op}': inputs must share one dtype"):
        infer(op, T((2,), "bool"), T((2,), "int32"))


def test_where_inference():
    assert infer("where", T((2, 1, 1), "bool"), T((3, 1)), T((4,))) == T((2, 3, 4))
    assert infer("where", T((), "bool"), T((), "int32"), T((5,), "int32")) == T((5,), "int32")
    with pytest.raises(ShapeError, match="^op 'where': needs a bool input, got f32\\[2\\]"):
        infer("where", T((2,)), T((2,)), T((2,)))
    with pytest.raises(ShapeError, match="^op 'where': inputs must share one dtype"):
        infer("where", T((2,), "bool"), T((2,)), T((2,), "int32"))
    with pytest.raises(ShapeError, match="^op 'where': shapes .* cannot be broadcast"):
        infer("where", T((3,), "bool"), T((2,)), T((2,)))


def test_cast_inference():
    assert infer("cast", T((2, 3)), to="int8") == T((2, 3), "int8")
    assert infer("cast", T((), "bool"), to="f16") == T((), "float16")
    with pytest.raises(AttrError, match="op 'cast': attribute 'to'"):
        infer("cast", T((2,)), to="complex128")


def test_gelu_attribute():
    assert get_op("gelu").check_attrs({})["approximate"] == "none"
    with pytest.raises(AttrError, match="op 'gelu': attribute 'approximate' must be one of"):
        infer("gelu", T((2,)), approximate="sigmoid")


small_shapes = hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=4)


@settings(max_examples=50, deadline=None)
@given(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=5, max_side=4),
       st.sampled_from(["add", "mul", "maximum", "less", "mod"]))
def test_broadcast_matches_numpy(shapes, op):
    a, b = shapes.input_shapes
    out = infer(op, T(a), T(b))
    assert out.shape == np.broadcast_shapes(a, b) == shapes.result_shape


@settings(max_examples=50, deadline=None)
@given(small_shapes, small_shapes)
def test_broadcast_errors_iff_numpy_errors(a, b):
    try:
        want = np.broadcast_shapes(a, b)
    except ValueError:
        with pytest.raises(ShapeError, match="^op 'sub': shapes"):
            infer("sub", T(a), T(b))
    else:
        assert infer("sub", T(a), T(b)).shape == want


@settings(max_examples=50, deadline=None)
@given(hnp.mutually_broadcastable_shapes(num_shapes=3, min_dims=0, max_dims=4, max_side=3))
def test_where_broadcast_matches_numpy(shapes):
    c, a, b = shapes.input_shapes
    out = infer("where", T(c, "bool"), T(a), T(b))
    assert out.shape == shapes.result_shape
    r = ref("where", np.ones(c, bool), np.ones(a, np.float32), np.zeros(b, np.float32))
    assert r.shape == out.shape and r.dtype == np.float32
    assert np.all(r == 1)


# --- references: hand-computed values ---------------------------------------------------------

E = math.e
PI = math.pi

UNARY_CASES = [
    ("neg", f32([1.5, -2.0, 0.0]), [-1.5, 2.0, 0.0]),
    ("neg", np.array([3, -4, 0], np.int32), [-3, 4, 0]),
    ("abs", f32([-1.5, 2.0, -0.0]), [1.5, 2.0, 0.0]),
    ("abs", np.array([-3, 3], np.int8), [3, 3]),
    ("exp", f32([0.0, 1.0, -1.0, -INF]), [1.0, E, 1 / E, 0.0]),
    ("log", f32([1.0, E, 0.5, 0.0]), [0.0, 1.0, -0.6931472, -INF]),
    ("sqrt", f32([0.0, 4.0, 2.25, 1e-4]), [0.0, 2.0, 1.5, 1e-2]),
    ("rsqrt", f32([4.0, 0.25, 1.0, 0.0]), [0.5, 2.0, 1.0, INF]),
    ("reciprocal", f32([2.0, -0.5, 4.0, 0.0]), [0.5, -2.0, 0.25, INF]),
    ("tanh", f32([0.0, 1.0, -2.0, 50.0]), [0.0, 0.7615942, -0.9640276, 1.0]),
    ("sigmoid", f32([0.0, 2.0, -2.0, -200.0, 200.0]), [0.5, 0.8807971, 0.1192029, 0.0, 1.0]),
    ("relu", f32([-1.0, 0.0, 2.5]), [0.0, 0.0, 2.5]),
    ("relu", np.array([-3, 0, 5], np.int8), [0, 0, 5]),
    ("relu6", f32([-1.0, 3.0, 6.0, 7.5]), [0.0, 3.0, 6.0, 6.0]),
    ("relu6", np.array([-3, 3, 9], np.int32), [0, 3, 6]),
    ("erf", f32([0.0, 1.0, -0.5, 10.0]), [0.0, 0.8427008, -0.5204999, 1.0]),
    ("sin", f32([0.0, PI / 2, PI / 6, -PI / 2]), [0.0, 1.0, 0.5, -1.0]),
    ("cos", f32([0.0, PI, PI / 3]), [1.0, -1.0, 0.5]),
    ("floor", f32([1.5, -1.5, 2.0, -0.2]), [1.0, -2.0, 2.0, -1.0]),
    ("ceil", f32([1.5, -1.5, 2.0, 0.2]), [2.0, -1.0, 2.0, 1.0]),
    # round half to even
    ("round", f32([0.5, 1.5, 2.5, -0.5, -1.7, 3.2]), [0.0, 2.0, 2.0, 0.0, -2.0, 3.0]),
    ("sign", f32([-3.5, 0.0, 2.0]), [-1.0, 0.0, 1.0]),
    ("sign", np.array([-5, 0, 7], np.int32), [-1, 0, 1]),
    ("logical_not", np.array([True, False]), [False, True]),
    ("isnan", f32([NAN, 1.0, INF, -INF]), [True, False, False, False]),
    ("isinf", f32([NAN, -INF, INF, 1.0]), [False, True, True, False]),
]


@pytest.mark.parametrize("op, x, want", UNARY_CASES, ids=[c[0] for c in UNARY_CASES])
def test_unary_values(op, x, want):
    got = ref(op, x)
    assert got.shape == x.shape
    assert got.dtype == infer(op, TensorType.of(x)).dtype
    np.testing.assert_allclose(got.astype(np.float64), np.array(want, np.float64), rtol=2e-6, atol=1e-7)


def test_every_unary_op_has_a_value_case():
    unary = {op for op in FAMILY if get_op(op).arity == 1} - {"gelu", "cast"}
    assert unary <= {c[0] for c in UNARY_CASES}


def test_unary_nan_propagates():
    for op in ["neg", "abs", "exp", "sqrt", "tanh", "sigmoid", "relu", "erf", "sin", "floor", "round"]:
        assert np.isnan(ref(op, f32([NAN]))[0]), op


def test_unary_float16_keeps_dtype():
    for op in ["exp", "rsqrt", "reciprocal", "sigmoid", "erf", "gelu", "relu6"]:
        r = ref(op, np.array([1.0, 2.0], np.float16))
        assert r.dtype == np.float16, op
    np.testing.assert_allclose(ref("sigmoid", np.array([0.0], np.float16)), [0.5])


def test_gelu_exact_values():
    x = f32([0.0, 1.0, -1.0, 2.0, 0.5])
    want = [0.0, 0.8413447, -0.1586553, 1.9544997, 0.3457312]
    np.testing.assert_allclose(ref("gelu", x), want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(ref("gelu", x, approximate="none"), want, rtol=1e-6, atol=1e-7)


def test_gelu_tanh_values():
    x = f32([0.0, 1.0, -1.0, 2.0, 0.5])
    want = [0.0, 0.8411920, -0.1588080, 1.9545977, 0.3457140]
    np.testing.assert_allclose(ref("gelu", x, approximate="tanh"), want, rtol=1e-6, atol=1e-7)
    # the two forms really differ
    assert not np.allclose(ref("gelu", x, approximate="tanh"), ref("gelu", x), rtol=0, atol=1e-5)


def test_gelu_limits():
    x = f32([-30.0, 30.0])
    np.testing.assert_allclose(ref("gelu", x), [0.0, 30.0], atol=1e-6)
    np.testing.assert_allclose(ref("gelu", x, approximate="tanh"), [0.0, 30.0], atol=1e-6)


BINARY_CASES = [
    ("add", f32([[1, 2, 3], [4, 5, 6]]), f32([10, 20, 30]), [[11, 22, 33], [14, 25, 36]]),
    ("add", np.array([127], np.int8), np.array([1], np.int8), [-128]),  # wraps
    ("sub", f32([5, 3]), f32([[1], [2]]), [[4, 2], [3, 1]]),
    ("mul", f32([[1, 2], [3, 4]]), f32([[2], [3]]), [[2, 4], [9, 12]]),
    ("div", f32([1, -3, 5, 1]), f32([2, 2, -4, 0]), [0.5, -1.5, -1.25, INF]),
    # integer division floors (rounds toward -inf), as TVM's floordiv
    ("div", np.array([7, -7, 7, -7, 6], np.int32), np.array([2, 2, -2, -2, 3], np.int32), [3, -4, -4, 3, 2]),
    ("pow", f32([2, 4, 9, 5, 2]), f32([3, 0.5, 0.5, 0, -1]), [8, 2, 3, 1, 0.5]),
    ("maximum", f32([1, 5, -2]), f32([3, 4, -2]), [3, 5, -2]),
    ("maximum", np.array([[1], [4]], np.int32), np.array([2, 3], np.int32), [[2, 3], [4, 4]]),
    ("minimum", f32([1, 5, -2]), f32([3, 4, -2]), [1, 4, -2]),
    # floor mod: the result has the divisor's sign
    ("mod", np.array([7, -7, 7, -7], np.int32), np.array([3, 3, -3, -3], np.int32), [1, 2, -2, -1]),
    ("mod", f32([5.5, -5.5, 5.5]), f32([2, 2, -2]), [1.5, 0.5, -0.5]),
    ("equal", f32([1, 2, 3]), f32([1, 0, 3]), [True, False, True]),
    ("not_equal", f32([1, 2, 3]), f32([1, 0, 3]), [False, True, False]),
    ("less", np.array([1, 2, 3], np.int32), np.array([2], np.int32), [True, False, False]),
    ("less_equal", np.array([1, 2, 3], np.int32), np.array([2], np.int32), [True, True, False]),
    ("greater", f32([[1], [3]]), f32([2, 3]), [[False, False], [True, False]]),
    ("greater_equal", f32([[1], [3]]), f32([2, 3]), [[False, False], [True, True]]),
    ("logical_and", np.array([True, True, False, False]), np.array([True, False, True, False]),
     [True, False, False, False]),
    ("logical_or", np.array([True, True, False, False]), np.array([True, False, True, False]),
     [True, True, True, False]),
    ("logical_or", np.array([[True], [False]]), np.array(False), [[True], [False]]),
]


@pytest.mark.parametrize("op, a, b, want", BINARY_CASES, ids=[c[0] for c in BINARY_CASES])
def test_binary_values(op, a, b, want):
    got = ref(op, a, b)
    t = infer(op, TensorType.of(a), TensorType.of(b))
    assert got.shape == t.shape
    assert got.dtype == np.dtype(t.dtype)
    np.testing.assert_array_equal(got, np.array(want).astype(t.dtype))


def test_every_binary_op_has_a_value_case():
    binary = {op for op in FAMILY if get_op(op).arity == 2}
    assert binary == {c[0] for c in BINARY_CASES}


def test_comparisons_with_nan():
    a, b = f32([NAN, 1.0]), f32([NAN, NAN])
    np.testing.assert_array_equal(ref("equal", a, b), [False, False])
    np.testing.assert_array_equal(ref("not_equal", a, b), [True, True])
    np.testing.assert_array_equal(ref("less", a, b), [False, False])


def test_maximum_minimum_propagate_nan():
    assert np.isnan(ref("maximum", f32([NAN]), f32([1.0]))[0])
    assert np.isnan(ref("minimum", f32([1.0]), f32([NAN]))[0])


def test_where_values():
    cond = np.array([[True], [False]])
    a = f32([1, 2, 3])
    b = np.float32(-1.0)
    np.testing.assert_array_equal(ref("where", cond, a, np.asarray(b)), [[1, 2, 3], [-1, -1, -1]])
    cond = np.array([True, False, True])
    np.testing.assert_array_equal(
        ref("where", cond, np.array([1, 2, 3], np.int32), np.array([7, 8, 9], np.int32)), [1, 8, 3])


def test_cast_values():
    # float -> int truncates toward zero
    np.testing.assert_array_equal(ref("cast", f32([-1.7, 1.7, 2.5, -0.5]), to="int32"), [-1, 1, 2, 0])
    assert ref("cast", f32([1.0]), to="int32").dtype == np.int32
    # anything -> bool is x != 0
    np.testing.assert_array_equal(ref("cast", f32([0.0, 0.5, -2.0, -0.0]), to="bool"), [False, True, True, False])
    np.testing.assert_array_equal(ref("cast", np.array([0, 3], np.int32), to="bool"), [False, True])
    # bool -> number is 0 / 1
    got = ref("cast", np.array([True, False]), to="float16")
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, [1.0, 0.0])
    np.testing.assert_array_equal(ref("cast", np.array([1, -2], np.int32), to="float32"), [1.0, -2.0])
    got = ref("cast", f32([1.0009765625]), to="f16")
    assert got.dtype == np.float16 and got[0] == np.float16(1.0009765625)


# --- end to end through the builder and the interpreter -------------------------------------


def test_builder_graph_end_to_end():
    b = GraphBuilder()
    x = b.input("x", [2, 3])
    y = b.input("y", [3])
    s = b.add(x, y)
    g = b.gelu(s, approximate="tanh")
    m = b.greater(s, 0.0)  # Python scalar becomes an f32 constant
    r = b.where(m, g, b.neg(s))
    b.output(r, m)
    graph = b.build()
    assert r.type == T((2, 3)) and m.type == T((2, 3), "bool")
    xv = f32([[1, -2, 0], [0.5, 1, -3]])
    yv = f32([0, 1, 1])
    out, mask = evaluate(graph, {"x": xv, "y": yv})
    # s = [[1, -1, 1], [0.5, 2, -2]]
    np.testing.assert_array_equal(mask, [[True, False, True], [True, True, False]])
    np.testing.assert_allclose(out, [[0.8411920, 1.0, 0.8411920], [0.3457140, 1.9545977, 2.0]], rtol=1e-6)


def test_builder_scalar_constant_takes_tensor_dtype():
    b = GraphBuilder()
    x = b.input("x", [3], "int32")
    y = b.mod(x, 3)
    b.output(b.div(y, 2))
    (out,) = evaluate(b.build(), [np.array([-1, 4, 5], np.int32)])
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, [1, 0, 1])  # mod -> [2, 1, 2], floordiv 2


def test_builder_shape_error_names_op():
    b = GraphBuilder()
    x = b.input("x", [2, 3])
    y = b.input("y", [2])
    with pytest.raises(ShapeError, match="^op 'mul': shapes \\[2, 3\\] and \\[2\\]"):
        b.mul(x, y)
    i = b.input("i", [2, 3], "int32")
    with pytest.raises(ShapeError, match="^op 'exp': needs a floating-point"):
        b.exp(i)

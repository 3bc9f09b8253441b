"""Reductions (sum mean max min prod) and arg-reductions (argmax argmin)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from akg.errors import AttrError, ShapeError
from akg.graph import GraphBuilder, evaluate
from akg.graph.ops import OPS, REDUCE, get_op
from akg.graph.types import TensorType

REDUCTIONS = ["sum", "mean", "max", "min", "prod"]
ARG = ["argmax", "argmin"]
FAMILY = set(REDUCTIONS + ARG)


def T(shape, dtype="float32") -> TensorType:
    return TensorType(shape, dtype)


def infer(op, *types, **attrs):
    d = get_op(op)
    (out,) = d.infer_types(list(types), d.check_attrs(attrs))
    return out


def ref(op, x, **attrs):
    d = get_op(op)
    (out,) = d.evaluate([np.asarray(x)], d.check_attrs(attrs))
    return np.asarray(out)


def test_family_is_fully_covered():
    registered = {n for n, d in OPS.items() if d.infer.__module__ == "akg.graph.ops.reduce"}
    assert registered == FAMILY
    assert all(get_op(n).kind == REDUCE for n in FAMILY)
    assert not get_op("argmax").differentiable and not get_op("argmin").differentiable
    assert get_op("sum").differentiable


X = np.array([[1, 5, 3], [4, 2, 6]], np.float32)

VALUE_CASES = [
    ("sum", {}, 21),
    ("sum", {"axes": [0]}, [5, 7, 9]),
    ("sum", {"axes": [1]}, [9, 12]),
    ("sum", {"axes": [-1], "keepdims": True}, [[9], [12]]),
    ("sum", {"axes": [1, 0]}, 21),
    ("sum", {"keepdims": True}, [[21]]),
    ("sum", {"axes": []}, X),
    ("mean", {}, 3.5),
    ("mean", {"axes": [0]}, [2.5, 3.5, 4.5]),
    ("mean", {"axes": [1], "keepdims": True}, [[3], [4]]),
    ("max", {}, 6),
    ("max", {"axes": [0]}, [4, 5, 6]),
    ("max", {"axes": [1]}, [5, 6]),
    ("max", {"axes": [0], "keepdims": True}, [[4, 5, 6]]),
    ("min", {}, 1),
    ("min", {"axes": [0]}, [1, 2, 3]),
    ("min", {"axes": [-1]}, [1, 2]),
    ("prod", {}, 720),
    ("prod", {"axes": [0]}, [4, 10, 18]),
    ("prod", {"axes": [1], "keepdims": True}, [[15], [48]]),
]


@pytest.mark.parametrize("op, attrs, want", VALUE_CASES)
def test_reduction_values(op, attrs, want):
    got = ref(op, X, **attrs)
    t = infer(op, T(X.shape), **attrs)
    want = np.asarray(want, np.float32)
    assert got.shape == t.shape == want.shape
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_integer_reductions_keep_dtype():
    x = np.array([[1, -5, 3], [4, 2, -6]], np.int32)
    for op, want in [("sum", [5, -3, -3]), ("max", [4, 2, 3]), ("min", [1, -5, -6]), ("prod", [4, -10, -18])]:
        got = ref(op, x, axes=[0])
        assert got.dtype == np.int32, op
        np.testing.assert_array_equal(got, want)
    assert infer("sum", T((2, 3), "int8"), axes=[1]) == T((2,), "int8")
    assert infer("prod", T((2, 3), "uint8")) == T((), "uint8")


def test_float16_mean():
    x = np.array([1.0, 2.0, 4.0, 5.0], np.float16)
    got = ref("mean", x)
    assert got.dtype == np.float16 and got == 3.0


def test_empty_axis_reductions():
    empty = np.zeros((2, 0), np.float32)
    np.testing.assert_array_equal(ref("sum", empty, axes=[1]), [0, 0])
    np.testing.assert_array_equal(ref("prod", empty, axes=[1]), [1, 1])
    assert ref("sum", empty, axes=[0]).shape == (0,)
    # max/min over an axis that is not empty, of an array with an empty other axis
    assert infer("max", T((0, 3)), axes=[1]) == T((0,))
    assert ref("max", np.zeros((0, 3), np.float32), axes=[1]).shape == (0,)


@pytest.mark.parametrize("op", ["max", "min"])
def test_max_min_over_empty_axis_is_an_error(op):
    with pytest.raises(ShapeError, match=f"^op '{op}': cannot take this reduction over an empty axis of f32\\[2,0\\]"):
        infer(op, T((2, 0)), axes=[1])
    with pytest.raises(ShapeError, match=f"^op '{op}': "):
        infer(op, T((0,)))


@pytest.mark.parametrize("op", REDUCTIONS)
def test_reduction_errors(op):
    with pytest.raises(ShapeError, match=f"^op '{op}': axes 2 is out of range for rank 2"):
        infer(op, T((2, 3)), axes=[2])
    with pytest.raises(ShapeError, match=f"^op '{op}': axes -3 is out of range"):
        infer(op, T((2, 3)), axes=[-3])
    with pytest.raises(ShapeError, match=f"^op '{op}': axes \\[1, -1\\] repeat an axis"):
        infer(op, T((2, 3)), axes=[1, -1])
    with pytest.raises(ShapeError, match=f"^op '{op}': cannot reduce bool\\[2\\]"):
        infer(op, T((2,), "bool"))
    with pytest.raises(AttrError, match=f"op '{op}': attribute 'keepdims' expects true or false"):
        infer(op, T((2, 3)), keepdims=0)
    with pytest.raises(AttrError, match=f"op '{op}' has no attribute 'axis'"):
        infer(op, T((2, 3)), axis=0)


def test_mean_needs_float():
    with pytest.raises(ShapeError, match=r"^op 'mean': cannot reduce i32\[2\] \(floating-point input needed\)"):
        infer("mean", T((2,), "int32"))


@pytest.mark.parametrize("op", REDUCTIONS)
def test_scalar_reductions(op):
    x = np.array(2.5, np.float32)
    assert infer(op, T(())) == T(())
    np.testing.assert_array_equal(ref(op, x), 2.5)
    np.testing.assert_array_equal(ref(op, x, axes=[]), 2.5)
    with pytest.raises(ShapeError, match=f"^op '{op}': cannot reduce the scalar f32\\[\\] over axes \\[0\\]"):
        infer(op, T(()), axes=[0])


# --- argmax / argmin ------------------------------------------------------------------------


def test_arg_values():
    np.testing.assert_array_equal(ref("argmax", X), [1, 2])  # default axis -1
    np.testing.assert_array_equal(ref("argmax", X, axis=0), [1, 0, 1])
    np.testing.assert_array_equal(ref("argmax", X, axis=1, keepdims=True), [[1], [2]])
    np.testing.assert_array_equal(ref("argmin", X), [0, 1])
    np.testing.assert_array_equal(ref("argmin", X, axis=-2), [0, 1, 0])
    np.testing.assert_array_equal(ref("argmin", X, axis=0, keepdims=True), [[0, 1, 0]])
    assert ref("argmax", X).dtype == np.int32
    assert ref("argmin", np.array([3, 1, 2], np.int8)) == 1


def test_arg_ties_pick_the_first():
    x = np.array([[3, 1, 3], [0, 0, -1]], np.float32)
    np.testing.assert_array_equal(ref("argmax", x), [0, 0])
    np.testing.assert_array_equal(ref("argmin", x), [1, 2])
    np.testing.assert_array_equal(ref("argmin", np.array([2, 1, 1, 1], np.int32)), 1)


@pytest.mark.parametrize("op", ARG)
def test_arg_inference(op):
    assert infer(op, T((2, 3, 4))) == T((2, 3), "int32")
    assert infer(op, T((2, 3, 4), "int8"), axis=1) == T((2, 4), "int32")
    assert infer(op, T((2, 3, 4)), axis=0, keepdims=True) == T((1, 3, 4), "int32")
    with pytest.raises(ShapeError, match=f"^op '{op}': axis 3 is out of range for rank 3"):
        infer(op, T((2, 3, 4)), axis=3)
    with pytest.raises(ShapeError, match=f"^op '{op}': cannot take this reduction over an empty axis"):
        infer(op, T((2, 0)))
    with pytest.raises(ShapeError, match=f"^op '{op}': cannot reduce bool"):
        infer(op, T((2,), "bool"))
    with pytest.raises(ShapeError, match=f"^op '{op}': "):
        infer(op, T(()))
    with pytest.raises(ShapeError, match=f"^op '{op}': "):
        infer(op, T(()), axis=0)
    with pytest.raises(AttrError, match=f"op '{op}' has no attribute 'axes'"):
        infer(op, T((2,)), axes=[0])


# --- properties -----------------------------------------------------------------------------


@st.composite
def array_and_axes(draw):
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=4))
    rank = len(shape)
    axes = draw(st.none() | st.lists(st.integers(0, rank - 1), unique=True, max_size=rank))
    if axes is not None:
        axes = [a - rank if draw(st.booleans()) else a for a in axes]  # mix in negative axes
    x = draw(hnp.arrays(np.int32, shape, elements=st.integers(-20, 20)))
    return x, axes, draw(st.booleans())


@settings(max_examples=50, deadline=None)
@given(array_and_axes(), st.sampled_from(["sum", "max", "min", "prod"]))
def test_reduction_matches_numpy(data, op):
    x, axes, keepdims = data
    np_axis = None if axes is None else tuple(axes)
    want = getattr(np, op)(x, axis=np_axis, keepdims=keepdims).astype(np.int32)
    assert infer(op, TensorType.of(x), axes=axes, keepdims=keepdims).shape == want.shape
    np.testing.assert_array_equal(ref(op, x, axes=axes, keepdims=keepdims), want)


@settings(max_examples=50, deadline=None)
@given(array_and_axes())
def test_mean_matches_numpy(data):
    x, axes, keepdims = data
    x = x.astype(np.float64)
    np_axis = None if axes is None else tuple(axes)
    want = np.mean(x, axis=np_axis, keepdims=keepdims)
    assert infer("mean", TensorType.of(x), axes=axes, keepdims=keepdims) == T(want.shape, "float64")
    np.testing.assert_allclose(ref("mean", x, axes=axes, keepdims=keepdims), want, rtol=1e-12)


@settings(max_examples=50, deadline=None)
@given(hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=4), st.data())
def test_arg_matches_numpy(shape, data):
    x = data.draw(hnp.arrays(np.float32, shape, elements=st.integers(-3, 3).map(float)))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    keepdims = data.draw(st.booleans())
    for op in ARG:
        want = getattr(np, op)(x, axis=axis, keepdims=keepdims)
        t = infer(op, TensorType.of(x), axis=axis, keepdims=keepdims)
        assert t.shape == want.shape and t.dtype == "int32"
        np.testing.assert_array_equal(ref(op, x, axis=axis, keepdims=keepdims), want)


def test_reductions_end_to_end():
    b = GraphBuilder()
    x = b.input("x", [2, 3])
    total = b.sum(x, axes=[1], keepdims=True)  # [[9], [12]]
    centred = b.sub(x, b.mean(x, axes=[1], keepdims=True))  # x - [[3], [4]]
    best = b.argmax(centred, axis=1)
    b.output(total, b.max(centred), best)
    tot, mx, arg = evaluate(b.build(), [X])
    np.testing.assert_array_equal(tot, [[9], [12]])
    assert mx == 2.0 and mx.shape == ()
    np.testing.assert_array_equal(arg, [1, 2])
    assert arg.dtype == np.int32

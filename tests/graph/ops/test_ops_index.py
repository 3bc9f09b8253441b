"""Data-dependent indexing: gather, scatter_add and one_hot."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from akg.errors import AttrError, InputDataError, ShapeError
from akg.graph import GraphBuilder, evaluate, random_inputs
from akg.graph.ops import INDEX, OPS, get_op
from akg.graph.types import TensorType

FAMILY = {"gather", "scatter_add", "one_hot"}


def T(shape, dtype="float32") -> TensorType:
    return TensorType(shape, dtype)


def infer(op, *types, **attrs):
    d = get_op(op)
    (out,) = d.infer_types(list(types), d.check_attrs(attrs))
    return out


def ref(op, *arrays, **attrs):
    d = get_op(op)
    arrays = [np.asarray(a) for a in arrays]
    attrs = d.check_attrs(attrs)
    (out,) = d.evaluate(arrays, attrs)
    (t,) = d.infer_types([TensorType.of(a) for a in arrays], attrs)
    assert out.shape == t.shape and out.dtype == np.dtype(t.dtype)
    return out


def i32(v):
    return np.array(v, np.int32)


def f32(v):
    return np.array(v, np.float32)


def test_family_is_fully_covered():
    registered = {n for n, d in OPS.items() if d.infer.__module__ == "akg.graph.ops.index"}
    assert registered == FAMILY
    assert all(get_op(n).kind == INDEX for n in FAMILY)
    assert not get_op("one_hot").differentiable and get_op("gather").differentiable
    assert get_op("scatter_add").differentiable


# --- gather ---------------------------------------------------------------------------------

DATA = np.array([[1, 2], [3, 4], [5, 6]], np.float32)


def test_gather_values():
    np.testing.assert_array_equal(ref("gather", DATA, i32([2, 0, 2])), [[5, 6], [1, 2], [5, 6]])
    np.testing.assert_array_equal(ref("gather", DATA, i32([[0], [1]])), [[[1, 2]], [[3, 4]]])
    np.testing.assert_array_equal(ref("gather", DATA, i32([1, 1, 0]), axis=1), [[2, 2, 1], [4, 4, 3], [6, 6, 5]])
    np.testing.assert_array_equal(ref("gather", DATA, i32([1]), axis=-1), [[2], [4], [6]])
    np.testing.assert_array_equal(ref("gather", DATA, i32(1)), [3, 4])  # a scalar index drops the axis
    np.testing.assert_array_equal(ref("gather", DATA, np.zeros((0,), np.int32)), np.zeros((0, 2)))
    for dtype in [np.int8, np.int64, np.uint8]:
        np.testing.assert_array_equal(ref("gather", DATA, np.array([2], dtype)), [[5, 6]])
    got = ref("gather", np.array([10, 20, 30], np.int32), i32([[2, 1], [0, 0]]))
    np.testing.assert_array_equal(got, [[30, 20], [10, 10]])
    assert got.dtype == np.int32


def test_gather_middle_axis():
    data = np.arange(2 * 3 * 2, dtype=np.float32).reshape(2, 3, 2)
    got = ref("gather", data, i32([[2, 0]]), axis=1)
    assert got.shape == (2, 1, 2, 2)
    np.testing.assert_array_equal(got[1, 0], [[10, 11], [6, 7]])


@pytest.mark.parametrize("bad", [-1, 3, 7])
def test_gather_out_of_range(bad):
    with pytest.raises(IndexError, match=r"gather index out of range \[0, 3\)"):
        ref("gather", DATA, i32([0, bad]))


def test_gather_out_of_range_through_interpreter():
    b = GraphBuilder()
    d = b.input("d", [3, 2])
    i = b.input("i", [2], "int32")
    b.output(b.gather(d, i))
    graph = b.build()
    with pytest.raises(InputDataError, match=r"op 'gather' producing %\w+: gather index out of range"):
        evaluate(graph, {"d": DATA, "i": i32([0, 3])})
    (out,) = evaluate(graph, {"d": DATA, "i": i32([1, 0])})
    np.testing.assert_array_equal(out, [[3, 4], [1, 2]])
    # random inputs respect the index bound
    inputs = random_inputs(graph, seed=3)
    assert inputs["i"].min() >= 0 and inputs["i"].max() < 3
    evaluate(graph, inputs)


def test_gather_inference_and_errors():
    assert infer("gather", T((10, 4)), T((2, 3), "int32")) == T((2, 3, 4))
    assert infer("gather", T((10, 4), "int8"), T((5,), "int64"), axis=1) == T((10, 5), "int8")
    assert infer("gather", T((10, 4)), T((), "int32"), axis=-1) == T((10,))
    with pytest.raises(ShapeError, match=r"^op 'gather': indices must be integers, got f32\[2\]"):
        infer("gather", T((10, 4)), T((2,)))
    with pytest.raises(ShapeError, match="^op 'gather': indices must be integers"):
        infer("gather", T((10, 4)), T((2,), "bool"))
    with pytest.raises(ShapeError, match="^op 'gather': axis 2 is out of range for rank 2"):
        infer("gather", T((10, 4)), T((2,), "int32"), axis=2)
    with pytest.raises(ShapeError, match="^op 'gather': cannot gather from the scalar"):
        infer("gather", T(()), T((2,), "int32"))


def test_gather_index_bounds():
    hook = get_op("gather").index_bounds
    assert hook(T((10, 4)), T((2,), "int32"), axis=0) == {1: 10}
    assert hook(T((10, 4)), T((2,), "int32"), axis=-1) == {1: 4}


@settings(max_examples=50, deadline=None)
@given(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4),
       hnp.array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=3), st.data())
def test_gather_matches_take(data_shape, index_shape, data):
    axis = data.draw(st.integers(-len(data_shape), len(data_shape) - 1))
    size = data_shape[axis]
    x = np.arange(int(np.prod(data_shape)), dtype=np.int32).reshape(data_shape)
    idx = data.draw(hnp.arrays(np.int64, index_shape, elements=st.integers(0, size - 1)))
    want = np.take(x, idx, axis=axis)
    assert infer("gather", TensorType.of(x), TensorType.of(idx), axis=axis).shape == want.shape
    np.testing.assert_array_equal(ref("gather", x, idx, axis=axis), want)



# --- scatter_add ----------------------------------------------------------------------------


def test_scatter_add_values():
    zeros = np.zeros((3, 2), np.float32)
    # rows 2, 0, 2 receive [1, 2], [3, 4], [5, 6]: row 2 accumulates both
    got = ref("scatter_add", zeros, i32([2, 0, 2]), f32([[1, 2], [3, 4], [5, 6]]))
    np.testing.assert_array_equal(got, [[3, 4], [0, 0], [6, 8]])
    got = ref("scatter_add", DATA, i32([1, 1]), f32([[10, 20], [30, 40], [50, 60]]), axis=1)
    # axis 1: column 1 of each row gets updates[r, 0] + updates[r, 1]
    np.testing.assert_array_equal(got, [[1, 2 + 10 + 20], [3, 4 + 30 + 40], [5, 6 + 50 + 60]])
    got = ref("scatter_add", DATA, i32([[0], [2]]), f32([[[1, 1]], [[2, 2]]]))  # 2-D indices
    np.testing.assert_array_equal(got, [[2, 3], [3, 4], [7, 8]])
    got = ref("scatter_add", DATA, i32(1), f32([100, 200]))  # a scalar index
    np.testing.assert_array_equal(got, [[1, 2], [103, 204], [5, 6]])
    np.testing.assert_array_equal(ref("scatter_add", DATA, np.zeros((0,), np.int64), np.zeros((0, 2), np.float32)),
                                  DATA)


def test_scatter_add_is_the_transpose_of_gather():
    """<gather(d, i), u> == <d, scatter_add(0, i, u)> for every d, u."""
    rng = np.random.default_rng(0)
    d = rng.standard_normal((4, 5, 3))
    idx = rng.integers(0, 5, (2, 3))
    u = rng.standard_normal((4, 2, 3, 3))
    lhs = (ref("gather", d, idx, axis=1) * u).sum()
    rhs = (d * ref("scatter_add", np.zeros_like(d), idx, u, axis=1)).sum()
    assert lhs == pytest.approx(rhs)


@pytest.mark.parametrize("bad", [-1, 3])
def test_scatter_add_out_of_range(bad):
    with pytest.raises(IndexError, match=r"scatter_add index out of range \[0, 3\)"):
        ref("scatter_add", DATA, i32([bad]), f32([[1, 1]]))


def test_scatter_add_inference_and_errors():
    assert infer("scatter_add", T((10, 4)), T((2, 3), "int32"), T((2, 3, 4))) == T((10, 4))
    assert infer("scatter_add", T((10, 4)), T((), "int64"), T((10,)), axis=1) == T((10, 4))
    with pytest.raises(ShapeError, match=r"^op 'scatter_add': updates must be f32\[2,4\] \(the gather of "):
        infer("scatter_add", T((10, 4)), T((2,), "int32"), T((4, 2)))
    with pytest.raises(ShapeError, match=r"updates must be f32\[2,4\]"):
        infer("scatter_add", T((10, 4)), T((2,), "int32"), T((2, 4), "float64"))
    with pytest.raises(ShapeError, match="^op 'scatter_add': indices must be integers"):
        infer("scatter_add", T((10, 4)), T((2,)), T((2, 4)))
    assert get_op("scatter_add").index_bounds(T((10, 4)), T((2,), "int32"), T((10, 2)), axis=1) == {1: 4}


# --- one_hot --------------------------------------------------------------------------------


def test_one_hot_values():
    got = ref("one_hot", i32([0, 2, 1]), depth=3)
    np.testing.assert_array_equal(got, [[1, 0, 0], [0, 0, 1], [0, 1, 0]])
    assert got.dtype == np.float32
    got = ref("one_hot", i32([0, 2, 1]), depth=3, axis=0)
    np.testing.assert_array_equal(got, [[1, 0, 0], [0, 0, 1], [0, 1, 0]])  # transposed (symmetric here)
    got = ref("one_hot", i32([0, 0, 1]), depth=2, axis=0)
    np.testing.assert_array_equal(got, [[1, 1, 0], [0, 0, 1]])
    got = ref("one_hot", i32([1, 0]), depth=3, on_value=5, off_value=-1, dtype="int32")
    np.testing.assert_array_equal(got, [[-1, 5, -1], [5, -1, -1]])
    assert got.dtype == np.int32
    got = ref("one_hot", i32(2), depth=4)
    np.testing.assert_array_equal(got, [0, 0, 1, 0])
    got = ref("one_hot", i32([1]), depth=2, dtype="bool")
    np.testing.assert_array_equal(got, [[False, True]])


def test_one_hot_out_of_range_indices_are_all_off():
    got = ref("one_hot", np.array([-1, 3, 100, 2], np.int64), depth=3, off_value=0.5)
    np.testing.assert_array_equal(got, [[0.5] * 3, [0.5] * 3, [0.5] * 3, [0.5, 0.5, 1]])


def test_one_hot_2d_axes():
    idx = i32([[0, 1], [2, 0]])
    got = ref("one_hot", idx, depth=3, axis=1)
    assert got.shape == (2, 3, 2)
    # out[i, d, j] = (idx[i, j] == d)
    np.testing.assert_array_equal(got[0], [[1, 0], [0, 1], [0, 0]])
    np.testing.assert_array_equal(got[1], [[0, 1], [0, 0], [1, 0]])
    got = ref("one_hot", idx, depth=3, axis=-1)
    np.testing.assert_array_equal(got, [[[1, 0, 0], [0, 1, 0]], [[0, 0, 1], [1, 0, 0]]])
    np.testing.assert_array_equal(ref("one_hot", idx, depth=3, axis=0), np.moveaxis(got, -1, 0))


def test_one_hot_inference_and_errors():
    assert infer("one_hot", T((2, 5), "int32"), depth=7) == T((2, 5, 7))
    assert infer("one_hot", T((2, 5), "int64"), depth=7, axis=0) == T((7, 2, 5))
    assert infer("one_hot", T((2, 5), "uint8"), depth=7, axis=-2, dtype="f16") == T((2, 7, 5), "float16")
    assert infer("one_hot", T((), "int8"), depth=3) == T((3,))
    with pytest.raises(ShapeError, match=r"^op 'one_hot': indices must be integers, got f32\[2\]"):
        infer("one_hot", T((2,)), depth=3)
    with pytest.raises(ShapeError, match="^op 'one_hot': axis 2 is out of range for rank 2"):
        infer("one_hot", T((2,), "int32"), depth=3, axis=2)
    with pytest.raises(AttrError, match="op 'one_hot': attribute 'depth' must be positive, got 0"):
        infer("one_hot", T((2,), "int32"), depth=0)
    with pytest.raises(AttrError, match="op 'one_hot' needs attribute 'depth'"):
        infer("one_hot", T((2,), "int32"))
    with pytest.raises(AttrError, match="op 'one_hot': attribute 'dtype'"):
        infer("one_hot", T((2,), "int32"), depth=3, dtype="int4")
    assert get_op("one_hot").index_bounds(T((2,), "int32"), depth=9, axis=-1) == {0: 9}


@settings(max_examples=50, deadline=None)
@given(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3), st.integers(1, 5), st.data())
def test_one_hot_property(shape, depth, data):
    idx = data.draw(hnp.arrays(np.int32, shape, elements=st.integers(-1, depth)))
    axis = data.draw(st.integers(-len(shape) - 1, len(shape)))
    got = ref("one_hot", idx, depth=depth, axis=axis)
    last = np.moveaxis(got, axis, -1)
    assert last.shape == (*shape, depth)
    # each position holds at most one 1, exactly one when the index is in range
    np.testing.assert_array_equal(last.sum(axis=-1), ((idx >= 0) & (idx < depth)).astype(np.float32))
    in_range = (idx >= 0) & (idx < depth)
    np.testing.assert_array_equal(np.argmax(last, axis=-1)[in_range], idx[in_range])


def test_embedding_end_to_end():
    b = GraphBuilder()
    table = b.const(np.array([[0, 0], [1, 10], [2, 20]], np.float32), name="table")
    tokens = b.input("tokens", [2, 2], "int32")
    emb = b.gather(table, tokens)  # [2, 2, 2]
    hot = b.one_hot(tokens, depth=3, dtype="float32")  # [2, 2, 3]
    back = b.batch_matmul(hot, b.broadcast_to(table, shape=[2, 3, 2]))  # one_hot @ table == gather
    b.output(emb, back)
    emb_v, back_v = evaluate(b.build(), {"tokens": i32([[2, 0], [1, 1]])})
    np.testing.assert_array_equal(emb_v, [[[2, 20], [0, 0]], [[1, 10], [1, 10]]])
    np.testing.assert_array_equal(back_v, emb_v)

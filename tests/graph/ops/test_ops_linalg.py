"""Matrix products: matmul, batch_matmul, dense."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from akg.errors import InvalidGraphError, ShapeError
from akg.graph import GraphBuilder, evaluate
from akg.graph.ops import COMPOSITE, LINALG, OPS, get_op
from akg.graph.types import TensorType

FAMILY = {"matmul", "batch_matmul", "dense"}


def T(shape, dtype="float32") -> TensorType:
    return TensorType(shape, dtype)


def infer(op, *types, **attrs):
    d = get_op(op)
    (out,) = d.infer_types(list(types), d.check_attrs(attrs))
    return out


def ref(op, *arrays, **attrs):
    d = get_op(op)
    (out,) = d.evaluate([np.asarray(a) for a in arrays], d.check_attrs(attrs))
    return out


def test_family_is_fully_covered():
    registered = {n for n, d in OPS.items() if d.infer.__module__ == "akg.graph.ops.linalg"}
    assert registered == FAMILY
    assert get_op("matmul").kind == LINALG and get_op("batch_matmul").kind == LINALG
    assert get_op("dense").kind == COMPOSITE


A = np.array([[1, 2], [3, 4]], np.float32)
B = np.array([[5, 6], [7, 8]], np.float32)


@pytest.mark.parametrize(
    "ta, tb, want",
    [
        (False, False, [[19, 22], [43, 50]]),
        (True, False, [[26, 30], [38, 44]]),
        (False, True, [[17, 23], [39, 53]]),
        (True, True, [[23, 31], [34, 46]]),
    ],
)
def test_matmul_values(ta, tb, want):
    got = ref("matmul", A, B, transpose_a=ta, transpose_b=tb)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, want)


def test_matmul_rectangular_and_int():
    a = np.array([[1, 0, 2], [0, 1, -1]], np.int32)
    b = np.array([[1], [2], [3]], np.int32)
    got = ref("matmul", a, b)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, [[7], [-1]])
    # a^T is [3, 2], b' = [[1, 2]] transposed is [2, 1]
    np.testing.assert_array_equal(ref("matmul", a, np.array([[1, 2]], np.int32), transpose_a=True,
                                      transpose_b=True), [[1], [2], [0]])


def test_matmul_inference():
    assert infer("matmul", T((2, 3)), T((3, 4))) == T((2, 4))
    assert infer("matmul", T((3, 2)), T((3, 4)), transpose_a=True) == T((2, 4))
    assert infer("matmul", T((2, 3)), T((4, 3)), transpose_b=True) == T((2, 4))
    assert infer("matmul", T((3, 2), "int8"), T((4, 3), "int8"), transpose_a=True, transpose_b=True) == T((2, 4), "int8")
    assert infer("matmul", T((0, 3)), T((3, 5))) == T((0, 5))
    assert infer("matmul", T((2, 0)), T((0, 5))) == T((2, 5))


def test_matmul_with_zero_contraction_is_zero():
    np.testing.assert_array_equal(ref("matmul", np.zeros((2, 0), np.float32), np.zeros((0, 3), np.float32)),
                                  np.zeros((2, 3)))


@pytest.mark.parametrize(
    "a, b, attrs, fragment",
    [
        (T((2, 3)), T((4, 5)), {}, "contraction sizes differ: f32[2,3] @ f32[4,5] (k=3 vs 4)"),
        (T((2, 3)), T((2, 3)), {"transpose_b": False}, "contraction sizes differ"),
        (T((2, 3)), T((3, 4)), {"transpose_a": True}, "contraction sizes differ"),
        (T((2, 2, 3)), T((3, 4)), {}, "needs 2-D operands (use batch_matmul for more)"),
        (T((3,)), T((3, 4)), {}, "needs 2-D operands"),
        (T((2, 3)), T((3, 4), "float16"), {}, "operands must share one numeric dtype"),
        (T((2, 3), "bool"), T((3, 4), "bool"), {}, "operands must share one numeric dtype"),
    ],
)
def test_matmul_errors(a, b, attrs, fragment):
    with pytest.raises(ShapeError) as info:
        infer("matmul", a, b, **attrs)
    assert str(info.value).startswith("op 'matmul': ")
    assert fragment in str(info.value)


def test_batch_matmul_values():
    eye = np.eye(2, dtype=np.float32)
    a = np.stack([A, eye])  # [2, 2, 2]
    got = ref("batch_matmul", a, B)
    np.testing.assert_array_equal(got, [[[19, 22], [43, 50]], B])
    got = ref("batch_matmul", a, np.stack([B, 2 * B]), transpose_b=True)
    np.testing.assert_array_equal(got, [[[17, 23], [39, 53]], 2 * B.T])
    got = ref("batch_matmul", B, a, transpose_a=True)  # B^T @ a[i]
    np.testing.assert_array_equal(got, [[[26, 38], [30, 44]], B.T])


def test_batch_matmul_broadcasts_batch_axes():
    a = np.arange(2 * 1 * 2 * 3, dtype=np.float32).reshape(2, 1, 2, 3)
    b = np.arange(3 * 3 * 1, dtype=np.float32).reshape(3, 3, 1)
    got = ref("batch_matmul", a, b)
    assert got.shape == (2, 3, 2, 1)
    assert infer("batch_matmul", T((2, 1, 2, 3)), T((3, 3, 1))) == T((2, 3, 2, 1))
    # out[i, j] = a[i, 0] @ b[j]; a[1, 0] = [[6, 7, 8], [9, 10, 11]], b[2] = [[6], [7], [8]]
    np.testing.assert_array_equal(got[1, 2], [[6 * 6 + 7 * 7 + 8 * 8], [9 * 6 + 10 * 7 + 11 * 8]])


def test_batch_matmul_inference():
    assert infer("batch_matmul", T((5, 2, 3)), T((5, 3, 4))) == T((5, 2, 4))
    assert infer("batch_matmul", T((5, 3, 2)), T((5, 4, 3)), transpose_a=True, transpose_b=True) == T((5, 2, 4))
    assert infer("batch_matmul", T((2, 3)), T((7, 3, 4))) == T((7, 2, 4))
    assert infer("batch_matmul", T((7, 1, 2, 3), "int32"), T((6, 3, 4), "int32")) == T((7, 6, 2, 4), "int32")


@pytest.mark.parametrize(
    "a, b, fragment",
    [
        (T((2, 3)), T((3, 4)), "needs operands of rank >= 2, one of them >= 3"),
        (T((3,)), T((2, 3, 4)), "needs operands of rank >= 2"),
        (T((2, 2, 3)), T((2, 4, 5)), "contraction sizes differ"),
        (T((2, 2, 3)), T((3, 3, 4)), "shapes [2] and [3] cannot be broadcast together"),
        (T((2, 2, 3)), T((2, 3, 4), "float64"), "operands must share one numeric dtype"),
    ],
)
def test_batch_matmul_errors(a, b, fragment):
    with pytest.raises(ShapeError) as info:
        infer("batch_matmul", a, b)
    assert str(info.value).startswith("op 'batch_matmul': ")
    assert fragment in str(info.value)


@settings(max_examples=50, deadline=None)
@given(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=3),
       st.integers(1, 3), st.integers(1, 3), st.integers(1, 3), st.booleans(), st.booleans())
def test_batch_matmul_shape_matches_numpy(batch, m, k, n, ta, tb):
    ba, bb = batch.input_shapes
    if len(ba) == 0 and len(bb) == 0:
        ba = (1,)
    a_shape = (*ba, k, m) if ta else (*ba, m, k)
    b_shape = (*bb, n, k) if tb else (*bb, k, n)
    a = np.ones(a_shape, np.float32)
    b = np.ones(b_shape, np.float32)
    want = np.matmul(np.swapaxes(a, -1, -2) if ta else a, np.swapaxes(b, -1, -2) if tb else b)
    t = infer("batch_matmul", T(a_shape), T(b_shape), transpose_a=ta, transpose_b=tb)
    assert t.shape == want.shape
    got = ref("batch_matmul", a, b, transpose_a=ta, transpose_b=tb)
    assert got.shape == want.shape
    assert np.all(got == k)


# --- dense ----------------------------------------------------------------------------------


def test_dense_values():
    x = np.array([[1, 2, 3]], np.float32)
    w = np.array([[1, 0, 0], [0, 1, 1]], np.float32)  # [out=2, in=3]
    np.testing.assert_array_equal(ref("dense", x, w), [[1, 5]])
    np.testing.assert_array_equal(ref("dense", x, w, np.array([10, 20], np.float32)), [[11, 25]])
    x3 = np.array([[[1, 2, 3], [0, 0, 1]], [[-1, 0, 0], [2, 2, 2]]], np.float32)
    got = ref("dense", x3, w, np.array([0, 1], np.float32))
    np.testing.assert_array_equal(got, [[[1, 6], [0, 2]], [[-1, 1], [2, 5]]])
    np.testing.assert_array_equal(ref("dense", np.array([1, 2, 3], np.float32), w), [1, 5])


def test_dense_inference():
    assert infer("dense", T((4, 3)), T((5, 3))) == T((4, 5))
    assert infer("dense", T((2, 4, 3)), T((5, 3)), T((5,))) == T((2, 4, 5))
    assert infer("dense", T((3,), "float16"), T((5, 3), "float16")) == T((5,), "float16")


@pytest.mark.parametrize(
    "types, fragment",
    [
        ([T((4, 3), "int32"), T((5, 3), "int32")], "needs floating-point input, got i32[4,3]"),
        ([T((4, 3)), T((5, 3), "float16")], "operands must share one numeric dtype"),
        ([T((4, 3)), T((3, 5))], "needs x[..., in] and weight[out, in], got f32[4,3] and f32[3,5]"),
        ([T((4, 3)), T((5, 3, 1))], "needs x[..., in] and weight[out, in]"),
        ([T(()), T((5, 3))], "needs x[..., in] and weight[out, in]"),
        ([T((4, 3)), T((5, 3)), T((3,))], "bias must be f32[5], got f32[3]"),
        ([T((4, 3)), T((5, 3)), T((1, 5))], "bias must be f32[5]"),
        ([T((4, 3)), T((5, 3)), T((5,), "float16")], "bias must be f32[5], got f16[5]"),
    ],
)
def test_dense_errors(types, fragment):
    with pytest.raises(ShapeError) as info:
        infer("dense", *types)
    assert str(info.value).startswith("op 'dense': ")
    assert fragment in str(info.value)


def test_dense_arity():
    with pytest.raises(InvalidGraphError, match=r"op 'dense' takes 2\.\.3 inputs, got 4"):
        infer("dense", T((4, 3)), T((5, 3)), T((5,)), T((5,)))


def test_dense_flops_count_bias():
    d = get_op("dense")
    attrs = d.check_attrs({})
    ins = [T((4, 3)), T((5, 3))]
    outs = d.infer_types(ins, attrs)
    assert d.count_flops(ins, outs, attrs) == 2 * 20 * 3
    assert d.count_flops([*ins, T((5,))], outs, attrs) == 2 * 20 * 3 + 20


def test_linalg_end_to_end():
    b = GraphBuilder()
    x = b.input("x", [1, 2])
    w = b.const(np.array([[1, 2], [3, 4], [5, 6]], np.float32), name="w")
    bias = b.const(np.array([0.5, 0.5, 0.5], np.float32), name="bias")
    h = b.dense(x, w, bias)  # [1, 3]
    y = b.matmul(h, w)  # [1, 3] @ [3, 2]
    b.output(h, y)
    hv, yv = evaluate(b.build(), {"x": np.array([[1, -1]], np.float32)})
    np.testing.assert_array_equal(hv, [[-0.5, -0.5, -0.5]])
    np.testing.assert_array_equal(yv, [[-4.5, -6.0]])

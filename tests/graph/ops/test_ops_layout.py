"""Layout ops: broadcast_to, reshape, transpose, squeeze, expand_dims, slice, strided_slice,
concat, split, pad, dilate."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from akg.errors import AttrError, ShapeError
from akg.graph import GraphBuilder, evaluate
from akg.graph.ops import LAYOUT, OPS, get_op
from akg.graph.types import TensorType

FAMILY = {"broadcast_to", "reshape", "transpose", "squeeze", "expand_dims", "slice",
          "strided_slice", "concat", "split", "pad", "dilate"}


def T(shape, dtype="float32") -> TensorType:
    return TensorType(shape, dtype)


def infer(op, *types, **attrs):
    d = get_op(op)
    out = d.infer_types(list(types), d.check_attrs(attrs))
    return out[0] if len(out) == 1 else out


def ref(op, *arrays, **attrs):
    d = get_op(op)
    out = d.evaluate([np.asarray(a) for a in arrays], d.check_attrs(attrs))
    return out[0] if len(out) == 1 else out


def check(op, x, want, **attrs):
    """Reference equals `want` (also in dtype and shape) and agrees with inference."""
    got = ref(op, x, **attrs)
    t = infer(op, TensorType.of(np.asarray(x)), **attrs)
    want = np.asarray(want, dtype=np.asarray(x).dtype)
    assert got.shape == t.shape == want.shape
    assert got.dtype == np.dtype(t.dtype) == want.dtype
    np.testing.assert_array_equal(got, want)
    return got


def test_family_is_fully_covered():
    registered = {n for n, d in OPS.items() if d.infer.__module__ == "akg.graph.ops.layout"}
    assert registered == FAMILY
    assert all(get_op(n).kind == LAYOUT for n in FAMILY)


def test_layout_ops_cost_no_flops():
    d = get_op("transpose")
    attrs = d.check_attrs({})
    assert d.count_flops([T((4, 5))], d.infer_types([T((4, 5))], attrs), attrs) == 0


# --- broadcast_to ---------------------------------------------------------------------------


def test_broadcast_to_values():
    x = np.array([[1], [2]], np.int32)
    check("broadcast_to", x, [[[1, 1, 1], [2, 2, 2]]] * 2, shape=[2, 2, 3])
    check("broadcast_to", np.array(5.0, np.float32), [[5.0, 5.0]], shape=[1, 2])
    check("broadcast_to", np.array([1.0, 2.0], np.float32), [1.0, 2.0], shape=[2])


def test_broadcast_to_result_is_writable_copy():
    x = np.array([1.0], np.float32)
    y = ref("broadcast_to", x, shape=[3])
    y[0] = 9
    assert x[0] == 1.0


@pytest.mark.parametrize("shape, target", [((3,), [1]), ((2, 3), [3]), ((2, 3), [3, 3]), ((3,), [0])])
def test_broadcast_to_errors(shape, target):
    with pytest.raises(ShapeError, match="^op 'broadcast_to': "):
        infer("broadcast_to", T(shape), shape=target)


def test_broadcast_to_zero_sized():
    assert infer("broadcast_to", T((1,)), shape=[0]) == T((0,))
    assert infer("broadcast_to", T((0, 1)), shape=[2, 0, 4]) == T((2, 0, 4))


@settings(max_examples=50, deadline=None)
@given(hnp.mutually_broadcastable_shapes(num_shapes=1, min_dims=0, max_dims=4, max_side=4))
def test_broadcast_to_property(shapes):
    (src,) = shapes.input_shapes
    target = shapes.result_shape
    assert infer("broadcast_to", T(src, "int32"), shape=list(target)) == T(target, "int32")
    x = np.arange(int(np.prod(src)), dtype=np.int32).reshape(src)
    np.testing.assert_array_equal(ref("broadcast_to", x, shape=list(target)), np.broadcast_to(x, target))


# --- reshape --------------------------------------------------------------------------------


def test_reshape_values():
    x = np.arange(6, dtype=np.float32)
    check("reshape", x, [[0, 1], [2, 3], [4, 5]], shape=[-1, 2])
    check("reshape", x, [[0, 1], [2, 3], [4, 5]], shape=[3, -1])
    check("reshape", x, [[[0, 1, 2]], [[3, 4, 5]]], shape=[2, 1, -1])
    check("reshape", x.reshape(2, 3), [0, 1, 2, 3, 4, 5], shape=[-1])
    check("reshape", np.array(7, np.int32), [[7]], shape=[1, 1])
    check("reshape", np.array([[7]], np.int32), 7, shape=[])


def test_reshape_inference():
    assert infer("reshape", T((2, 3, 4)), shape=[4, -1]) == T((4, 6))
    assert infer("reshape", T((0, 3)), shape=[-1, 3]) == T((0, 3))
    assert infer("reshape", T((0, 3)), shape=[3, 0]) == T((3, 0))
    assert infer("reshape", T((2, 3), "int8"), shape=[6]) == T((6,), "int8")


@pytest.mark.parametrize(
    "shape, target, fragment",
    [
        ((2, 3), [4, 2], "cannot reshape 6 elements into [4, 2]"),
        ((2, 3), [4, -1], "cannot reshape 6 elements into [4, -1]"),
        ((2, 3), [-1, -1], "at most one -1"),
        ((2, 3), [-2, -3], "no other negatives"),
        ((0, 3), [0, -1], "cannot reshape 0 elements into [0, -1]"),
    ],
)
def test_reshape_errors(shape, target, fragment):
    with pytest.raises(ShapeError) as info:
        infer("reshape", T(shape), shape=target)
    assert str(info.value).startswith("op 'reshape': ")
    assert fragment in str(info.value)


@settings(max_examples=50, deadline=None)
@given(hnp.array_shapes(min_dims=0, max_dims=4, min_side=1, max_side=4), st.data())
def test_reshape_round_trip(shape, data):
    x = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    flat = ref("reshape", x, shape=[-1])
    assert infer("reshape", T(shape), shape=[-1]) == T((x.size,))
    np.testing.assert_array_equal(flat, np.arange(x.size))
    # put a -1 at a random position of the original shape
    target = list(shape)
    if target:
        i = data.draw(st.integers(0, len(target) - 1))
        target[i] = -1
    assert infer("reshape", T((x.size,)), shape=target) == T(shape)
    np.testing.assert_array_equal(ref("reshape", flat, shape=target), x)


# --- transpose ------------------------------------------------------------------------------


def test_transpose_values():
    x = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    check("transpose", x, [[1, 4], [2, 5], [3, 6]])  # default reverses the axes
    check("transpose", x, [[1, 4], [2, 5], [3, 6]], perm=[1, 0])
    check("transpose", x, x, perm=[0, 1])
    check("transpose", x, [[1, 4], [2, 5], [3, 6]], perm=[-1, 0])
    y = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    got = check("transpose", y, np.moveaxis(y, 0, -1), perm=[1, 2, 0])
    assert got.shape == (3, 4, 2)
    assert got[1, 3, 1] == y[1, 1, 3] == 12 + 4 + 3
    check("transpose", np.array(3.0, np.float32), 3.0)


def test_transpose_inference_and_errors():
    assert infer("transpose", T((2, 3, 4))) == T((4, 3, 2))
    assert infer("transpose", T((2, 3, 4)), perm=[2, 0, 1]) == T((4, 2, 3))
    with pytest.raises(ShapeError, match=r"^op 'transpose': perm \[0, 0\] is not a permutation of 2 axes"):
        infer("transpose", T((2, 3)), perm=[0, 0])
    with pytest.raises(ShapeError, match=r"^op 'transpose': perm \[0\] is not a permutation"):
        infer("transpose", T((2, 3)), perm=[0])
    with pytest.raises(ShapeError, match="^op 'transpose': perm entry 2 is out of range for rank 2"):
        infer("transpose", T((2, 3)), perm=[0, 1, 2])


@settings(max_examples=50, deadline=None)
@given(hnp.array_shapes(min_dims=0, max_dims=5, min_side=1, max_side=3), st.data())
def test_transpose_property(shape, data):
    perm = data.draw(st.permutations(range(len(shape))))
    x = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    t = infer("transpose", T(shape), perm=perm)
    assert t.shape == np.transpose(x, perm).shape
    y = ref("transpose", x, perm=perm)
    np.testing.assert_array_equal(y, np.transpose(x, perm))
    inverse = list(np.argsort(perm))
    np.testing.assert_array_equal(ref("transpose", y, perm=inverse), x)


# --- squeeze / expand_dims ------------------------------------------------------------------


def test_squeeze_values_and_inference():
    x = np.array([[[1], [2], [3]]], np.float32)  # [1, 3, 1]
    check("squeeze", x, [1, 2, 3])
    check("squeeze", x, [[1, 2, 3]], axes=[-1])
    check("squeeze", x, [[1], [2], [3]], axes=[0])
    check("squeeze", x, [1, 2, 3], axes=[2, 0])
    check("squeeze", x, x, axes=[])
    check("squeeze", np.ones((1, 1), np.int32), 1)
    assert infer("squeeze", T((2, 3))) == T((2, 3))
    assert infer("squeeze", T((1, 0, 1))) == T((0,))


def test_squeeze_errors():
    with pytest.raises(ShapeError, match=r"^op 'squeeze': cannot squeeze axes \[1\] of f32\[1,3,1\]"):
        infer("squeeze", T((1, 3, 1)), axes=[1])
    with pytest.raises(ShapeError, match="^op 'squeeze': axes .* repeat an axis"):
        infer("squeeze", T((1, 3, 1)), axes=[0, -3])
    with pytest.raises(ShapeError, match="^op 'squeeze': axes 3 is out of range for rank 3"):
        infer("squeeze", T((1, 3, 1)), axes=[3])


def test_expand_dims_values_and_inference():
    x = np.array([[1, 2, 3], [4, 5, 6]], np.int32)
    check("expand_dims", x, [[[1, 2, 3], [4, 5, 6]]], axis=0)
    check("expand_dims", x, [[[1, 2, 3]], [[4, 5, 6]]], axis=1)
    check("expand_dims", x, [[[1], [2], [3]], [[4], [5], [6]]], axis=2)
    check("expand_dims", x, [[[1], [2], [3]], [[4], [5], [6]]], axis=-1)
    check("expand_dims", x, [[[1, 2, 3], [4, 5, 6]]], axis=-3)
    check("expand_dims", np.array(4.0, np.float32), [4.0], axis=0)
    assert infer("expand_dims", T((2, 3)), axis=-2) == T((2, 1, 3))


def test_expand_dims_errors():
    with pytest.raises(ShapeError, match="^op 'expand_dims': axis 3 is out of range for rank 3"):
        infer("expand_dims", T((2, 3)), axis=3)
    with pytest.raises(ShapeError, match="^op 'expand_dims': axis -4 is out of range"):
        infer("expand_dims", T((2, 3)), axis=-4)
    with pytest.raises(AttrError, match="op 'expand_dims' needs attribute 'axis'"):
        infer("expand_dims", T((2, 3)))


def test_expand_dims_inference_does_not_allocate():
    big = T((10**7, 10**7))  # 400 TB: inference must stay symbolic
    assert infer("expand_dims", big, axis=1) == T((10**7, 1, 10**7))


# --- slice / strided_slice ------------------------------------------------------------------


def test_slice_values():
    x = np.arange(20, dtype=np.int32).reshape(4, 5)
    check("slice", x, [[7, 8, 9], [12, 13, 14]], begin=[1, -3], end=[3, 100])
    check("slice", x, [[0, 1], [5, 6]], begin=[0, 0], end=[2, 2])
    check("slice", x, [[15, 16, 17]], begin=[-1, -100], end=[4, -2])
    check("slice", x, np.zeros((0, 5), np.int32), begin=[3, 0], end=[1, 5])  # empty
    check("slice", np.arange(5, dtype=np.float32), [1, 2, 3], begin=1, end=-1)


def test_strided_slice_values():
    x = np.arange(5, dtype=np.int32)
    check("strided_slice", x, [4, 3, 2, 1, 0], begin=[4], end=[-6], strides=[-1])
    check("strided_slice", x, [4, 3, 2, 1, 0], begin=[100], end=[-100], strides=[-1])
    check("strided_slice", x, [4, 2], begin=[-1], end=[0], strides=[-2])
    check("strided_slice", x, [3, 1], begin=[3], end=[0], strides=[-2])
    check("strided_slice", x, [0, 3], begin=[0], end=[5], strides=[3])
    check("strided_slice", x, np.zeros(0, np.int32), begin=[1], end=[3], strides=[-1])
    y = np.arange(12, dtype=np.float32).reshape(3, 4)
    check("strided_slice", y, [[8, 11], [0, 3]], begin=[2, 0], end=[-4, 4], strides=[-2, 3])
    check("strided_slice", y, [[7, 6, 5, 4]], begin=[1, 3], end=[2, -5], strides=[1, -1])


@pytest.mark.parametrize(
    "op, attrs, fragment",
    [
        ("slice", {"begin": [0], "end": [1, 1]}, "begin/end/strides need one entry per axis of f32[4,5]"),
        ("slice", {"begin": [0, 0, 0], "end": [1, 1, 1]}, "one entry per axis"),
        ("strided_slice", {"begin": [0, 0], "end": [1, 1], "strides": [1]}, "one entry per axis"),
        ("strided_slice", {"begin": [0, 0], "end": [1, 1], "strides": [1, 0]}, "strides must not be 0"),
    ],
)
def test_slice_errors(op, attrs, fragment):
    with pytest.raises(ShapeError) as info:
        infer(op, T((4, 5)), **attrs)
    assert str(info.value).startswith(f"op '{op}': ")
    assert fragment in str(info.value)


def test_strided_slice_needs_strides():
    with pytest.raises(AttrError, match="op 'strided_slice' needs attribute 'strides'"):
        infer("strided_slice", T((4,)), begin=[0], end=[1])


@settings(max_examples=50, deadline=None)
@given(hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=6), st.data())
def test_strided_slice_matches_python_slicing(shape, data):
    ints = st.integers(-8, 8)
    begin = [data.draw(ints) for _ in shape]
    end = [data.draw(ints) for _ in shape]
    strides = [data.draw(st.integers(-3, 3).filter(bool)) for _ in shape]
    x = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    want = x[tuple(slice(b, e, s) for b, e, s in zip(begin, end, strides))]
    assert infer("strided_slice", T(shape), begin=begin, end=end, strides=strides).shape == want.shape
    np.testing.assert_array_equal(ref("strided_slice", x, begin=begin, end=end, strides=strides), want)


# --- concat / split -------------------------------------------------------------------------


def test_concat_values():
    a = np.array([[1, 2]], np.float32)
    b = np.array([[3, 4], [5, 6]], np.float32)
    got = ref("concat", a, b, axis=0)
    np.testing.assert_array_equal(got, [[1, 2], [3, 4], [5, 6]])
    assert infer("concat", T((1, 2)), T((2, 2)), axis=0) == T((3, 2))
    got = ref("concat", b, np.array([[7], [8]], np.float32), a.reshape(2, 1), axis=-1)
    np.testing.assert_array_equal(got, [[3, 4, 7, 1], [5, 6, 8, 2]])
    assert infer("concat", T((2, 2)), T((2, 1)), T((2, 1)), axis=-1) == T((2, 4))
    np.testing.assert_array_equal(ref("concat", a), a)
    assert infer("concat", T((0, 2)), T((3, 2))) == T((3, 2))


@pytest.mark.parametrize(
    "types, axis, fragment",
    [
        ([T((2, 3)), T((2, 3), "int32")], 0, "cannot concatenate f32[2,3] and i32[2,3] along axis 0"),
        ([T((2, 3)), T((2, 3, 1))], 0, "cannot concatenate"),
        ([T((2, 3)), T((3, 3))], 1, "cannot concatenate f32[2,3] and f32[3,3] along axis 1"),
        ([T((2, 3)), T((2, 3))], 2, "axis 2 is out of range for rank 2"),
        ([T(()), T(())], 0, "cannot concatenate scalars"),
    ],
)
def test_concat_errors(types, axis, fragment):
    with pytest.raises(ShapeError) as info:
        infer("concat", *types, axis=axis)
    assert str(info.value).startswith("op 'concat': ")
    assert fragment in str(info.value)


def test_split_values():
    x = np.arange(6, dtype=np.int32)
    parts = ref("split", x, sections=3)
    assert isinstance(parts, tuple) and len(parts) == 3
    for p, want in zip(parts, [[0, 1], [2, 3], [4, 5]]):
        np.testing.assert_array_equal(p, want)
    parts = ref("split", x, sizes=[1, 0, 5])
    assert [p.tolist() for p in parts] == [[0], [], [1, 2, 3, 4, 5]]
    y = np.arange(8, dtype=np.float32).reshape(2, 4)
    a, b = ref("split", y, axis=-1, sizes=[3, 1])
    np.testing.assert_array_equal(a, [[0, 1, 2], [4, 5, 6]])
    np.testing.assert_array_equal(b, [[3], [7]])
    (whole,) = get_op("split").evaluate([y], get_op("split").check_attrs({"sections": 1}))
    np.testing.assert_array_equal(whole, y)


def test_split_inference():
    assert infer("split", T((6, 2)), sections=3) == (T((2, 2)),) * 3
    assert infer("split", T((6, 2)), sizes=[1, 2, 3]) == (T((1, 2)), T((2, 2)), T((3, 2)))
    assert infer("split", T((2, 5), "int8"), axis=1, sizes=[5]) == T((2, 5), "int8")
    assert infer("split", T((2, 4)), axis=-1, sections=2) == (T((2, 2)), T((2, 2)))


@pytest.mark.parametrize(
    "attrs, error, fragment",
    [
        ({"sections": 4}, ShapeError, "axis 0 of size 6 does not split into 4 equal parts"),
        ({"sections": 0}, ShapeError, "does not split into 0 equal parts"),
        ({"sizes": [1, 2]}, ShapeError, "sizes [1, 2] do not add up to axis 0 of size 6"),
        ({"sizes": [2, 2, 2], "axis": 1}, ShapeError, "do not add up to axis 1 of size 2"),
        ({"sections": 2, "axis": 2}, ShapeError, "axis 2 is out of range"),
        ({}, AttrError, "needs exactly one of 'sections' or 'sizes'"),
        ({"sections": 2, "sizes": [3, 3]}, AttrError, "needs exactly one of 'sections' or 'sizes'"),
        ({"sizes": [7, -1]}, AttrError, "attribute 'sizes' must not be negative"),
        ({"sizes": []}, AttrError, "attribute 'sizes' must not be empty"),
    ],
)
def test_split_errors(attrs, error, fragment):
    with pytest.raises(error) as info:
        infer("split", T((6, 2)), **attrs)
    assert "op 'split'" in str(info.value)
    assert fragment in str(info.value)


def test_split_of_scalar_is_a_shape_error():
    with pytest.raises(ShapeError, match="^op 'split': cannot split a scalar"):
        infer("split", T(()), sections=1)


def test_split_through_builder():
    b = GraphBuilder()
    x = b.input("x", [4, 3])
    top, bottom = b.split(x, sizes=[1, 3])
    b.output(b.concat(bottom, top, axis=0))
    xv = np.arange(12, dtype=np.float32).reshape(4, 3)
    (out,) = evaluate(b.build(), [xv])
    np.testing.assert_array_equal(out, [[3, 4, 5], [6, 7, 8], [9, 10, 11], [0, 1, 2]])


# --- pad ------------------------------------------------------------------------------------


def test_pad_values():
    x = np.array([[1, 2], [3, 4]], np.float32)
    check("pad", x, [[9, 9, 9, 9], [1, 2, 9, 9], [3, 4, 9, 9]], before=[1, 0], after=[0, 2], value=9)
    check("pad", x, [[0, 0, 0], [0, 1, 2], [0, 3, 4]], before=[1, 1], after=[0, 0])  # default 0
    check("pad", x, x, before=[0, 0], after=[0, 0])
    check("pad", np.array([1, 2], np.int32), [7, 1, 2, 7, 7], before=[1], after=[2], value=7)
    check("pad", np.array([True]), [False, True], before=[1], after=[0])
    check("pad", np.array([1.0], np.float16), [-0.5, 1.0], before=[1], after=[0], value=-0.5)


def test_pad_value_is_cast_to_the_input_dtype():
    # a fractional pad value on an integer tensor is converted like a cast (toward zero)
    np.testing.assert_array_equal(
        ref("pad", np.array([5], np.int32), before=[1], after=[1], value=-1.5), [-1, 5, -1])


def test_pad_inference_and_errors():
    assert infer("pad", T((2, 3), "int8"), before=[1, 2], after=[3, 4]) == T((6, 9), "int8")
    assert infer("pad", T((0,)), before=[1], after=[0]) == T((1,))
    with pytest.raises(ShapeError, match="^op 'pad': pad needs before/after for each of the 2 axes"):
        infer("pad", T((2, 3)), before=[1], after=[1, 1])
    with pytest.raises(ShapeError, match="^op 'pad': "):
        infer("pad", T((2, 3)), before=[1, 1], after=[1, 1, 1])
    with pytest.raises(AttrError, match="op 'pad': attribute 'after' must not be negative"):
        infer("pad", T((2, 3)), before=[1, 1], after=[1, -1])
    with pytest.raises(AttrError, match="op 'pad' needs attribute 'before'"):
        infer("pad", T((2, 3)), after=[1, 1])



def test_dilate_values():
    x = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    check("dilate", x, [[1, 0, 2, 0, 3], [0, 0, 0, 0, 0], [4, 0, 5, 0, 6]], strides=[2, 2])
    check("dilate", x, [[1, 0, 0, 2, 0, 0, 3], [4, 0, 0, 5, 0, 0, 6]], strides=[1, 3])
    check("dilate", x, x, strides=[1, 1])
    check("dilate", np.array([7], np.int32), [7], strides=[4])  # one element: nothing to insert
    check("dilate", np.zeros((0, 2), np.float32), np.zeros((0, 3)), strides=[3, 2])


def test_dilate_undoes_strided_slice():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    d = ref("dilate", x, strides=[3, 2])
    np.testing.assert_array_equal(ref("strided_slice", d, begin=[0, 0], end=[7, 7], strides=[3, 2]), x)
    assert d.sum() == x.sum()


def test_dilate_inference_and_errors():
    assert infer("dilate", T((1, 3, 4, 5)), strides=[1, 1, 2, 3]) == T((1, 3, 7, 13))
    with pytest.raises(ShapeError, match=r"^op 'dilate': strides need one entry per axis of f32\[2,3\]"):
        infer("dilate", T((2, 3)), strides=[2])
    with pytest.raises(AttrError, match="op 'dilate': attribute 'strides' must be positive"):
        get_op("dilate").check_attrs({"strides": [1, 0]})


def test_layout_chain_end_to_end():
    b = GraphBuilder()
    x = b.input("x", [2, 3], "int32")
    y = b.transpose(x)  # [3, 2]
    y = b.reshape(y, shape=[-1])  # [6]
    y = b.strided_slice(y, begin=[-1], end=[-7], strides=[-2])  # [3]
    y = b.pad(y, before=[1], after=[0], value=-1.0)  # [4]
    y = b.expand_dims(y, axis=0)
    y = b.broadcast_to(y, shape=[2, 4])
    b.output(y)
    (out,) = evaluate(b.build(), {"x": np.array([[1, 2, 3], [4, 5, 6]], np.int32)})
    # transpose -> [[1,4],[2,5],[3,6]] -> [1,4,2,5,3,6] -> [6,5,4] -> [-1,6,5,4]
    np.testing.assert_array_equal(out, [[-1, 6, 5, 4]] * 2)
    assert out.dtype == np.int32

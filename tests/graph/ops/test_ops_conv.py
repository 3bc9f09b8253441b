"""Convolution and pooling: conv2d, max_pool2d, avg_pool2d, global_avg_pool2d (NCHW)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from akg.errors import AttrError, ShapeError
from akg.graph import GraphBuilder, evaluate
from akg.graph.ops import CONV, OPS, POOL, get_op
from akg.graph.types import TensorType

FAMILY = {"conv2d", "max_pool2d", "avg_pool2d", "global_avg_pool2d"}


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


def test_family_is_fully_covered():
    registered = {n for n, d in OPS.items() if d.infer.__module__ == "akg.graph.ops.conv"}
    assert registered == FAMILY
    assert get_op("conv2d").kind == CONV
    assert all(get_op(n).kind == POOL for n in FAMILY - {"conv2d"})


X33 = np.arange(1, 10, dtype=np.float32).reshape(1, 1, 3, 3)  # [[1,2,3],[4,5,6],[7,8,9]]
W22 = np.array([[1, 2], [3, 4]], np.float32).reshape(1, 1, 2, 2)


# --- conv2d: hand-computed values --------------------------------------------------------------


@pytest.mark.parametrize(
    "attrs, want",
    [
        ({}, [[37, 47], [67, 77]]),
        ({"strides": [2]}, [[37]]),
        ({"strides": [1, 2]}, [[37], [67]]),
        ({"padding": [1]}, [[4, 11, 18, 9], [18, 37, 47, 21], [36, 67, 77, 33], [14, 23, 26, 9]]),
        ({"padding": [1, 1], "strides": [2, 2]}, [[4, 18], [36, 77]]),
        ({"padding": [1, 0, 0, 1]}, [[11, 18, 9], [37, 47, 21], [67, 77, 33]]),  # top, left, bottom, right
        ({"padding": [0, 1]}, [[18, 37, 47, 21], [36, 67, 77, 33]]),  # ph=0, pw=1
        ({"dilation": [2]}, [[1 * 1 + 3 * 2 + 7 * 3 + 9 * 4]]),
        ({"dilation": [2, 1]}, [[1 + 2 * 2 + 7 * 3 + 8 * 4, 2 + 3 * 2 + 8 * 3 + 9 * 4]]),
        # padded 5x5, taps at (0,0) (0,2) (2,0) (2,2) of windows starting at (0|2, 0|2): only the
        # centre 5 is ever touched, by a different tap each time
        ({"dilation": [2], "padding": [1], "strides": [2]}, [[5 * 4, 5 * 3], [5 * 2, 5 * 1]]),
    ],
)
def test_conv2d_single_channel(attrs, want):
    got = ref("conv2d", X33, W22, **attrs)
    np.testing.assert_array_equal(got, np.array(want, np.float32)[None, None])


X2 = np.array([[[1, 2], [3, 4]], [[5, 6], [7, 8]]], np.float32)[None]  # [1, 2, 2, 2]


def test_conv2d_sums_over_input_channels():
    w = np.array([1, 1], np.float32).reshape(1, 2, 1, 1)
    np.testing.assert_array_equal(ref("conv2d", X2, w), [[[[6, 8], [10, 12]]]])
    w = np.array([[1, -1], [2, 0]], np.float32).reshape(2, 2, 1, 1)  # 2 filters
    np.testing.assert_array_equal(ref("conv2d", X2, w), [[[[-4, -4], [-4, -4]], [[2, 4], [6, 8]]]])


def test_conv2d_depthwise_groups():
    w = np.array([2, -1], np.float32).reshape(2, 1, 1, 1)
    got = ref("conv2d", X2, w, groups=2)
    np.testing.assert_array_equal(got, [[[[2, 4], [6, 8]], [[-5, -6], [-7, -8]]]])


def test_conv2d_groups_with_channel_multiplier():
    # groups=2, 4 filters: filters 0,1 see channel 0, filters 2,3 see channel 1
    w = np.array([1, 2, 3, 4], np.float32).reshape(4, 1, 1, 1)
    got = ref("conv2d", X2, w, groups=2)
    ch0, ch1 = X2[0]
    np.testing.assert_array_equal(got[0], [ch0, 2 * ch0, 3 * ch1, 4 * ch1])


def test_conv2d_grouped_2x2_kernel():
    # x: 4 channels, groups=2, each filter sums its group's 2 channels with a 2x2 kernel of ones
    x = np.arange(4 * 2 * 2, dtype=np.float32).reshape(1, 4, 2, 2)
    w = np.ones((2, 2, 2, 2), np.float32)
    got = ref("conv2d", x, w, groups=2)
    assert got.shape == (1, 2, 1, 1)
    assert got[0, 0, 0, 0] == sum(range(0, 8))
    assert got[0, 1, 0, 0] == sum(range(8, 16))


def test_conv2d_batch():
    x = np.concatenate([X33, -X33])
    got = ref("conv2d", x, W22)
    np.testing.assert_array_equal(got, [[[[37, 47], [67, 77]]], [[[-37, -47], [-67, -77]]]])


def test_conv2d_float16_accumulates_in_float32():
    x = np.array([2048, 1, 1], np.float16).reshape(1, 1, 1, 3)
    w = np.ones((1, 1, 1, 3), np.float16)
    got = ref("conv2d", x, w)
    assert got.dtype == np.float16
    assert got[0, 0, 0, 0] == 2050  # fp16 accumulation would give 2048


def test_conv2d_inference():
    assert infer("conv2d", T((2, 3, 32, 32)), T((8, 3, 3, 3))) == T((2, 8, 30, 30))
    assert infer("conv2d", T((2, 3, 32, 32)), T((8, 3, 3, 3)), padding=[1]) == T((2, 8, 32, 32))
    assert infer("conv2d", T((2, 3, 32, 32)), T((8, 3, 3, 3)), padding=[1], strides=[2]) == T((2, 8, 16, 16))
    assert infer("conv2d", T((1, 4, 9, 7)), T((6, 2, 3, 3)), groups=2, dilation=[2, 3]) == T((1, 6, 5, 1))
    assert infer("conv2d", T((1, 1, 5, 5)), T((1, 1, 2, 2)), padding=[0, 1, 2, 3]) == T((1, 1, 6, 8))
    assert infer("conv2d", T((1, 8, 5, 5), "float16"), T((8, 1, 3, 3), "float16"), groups=8) == T((1, 8, 3, 3), "float16")


@pytest.mark.parametrize(
    "x, w, attrs, fragment",
    [
        (T((3, 5, 5)), T((1, 3, 2, 2)), {}, "needs x[N,C,H,W] and weight[O,C/groups,KH,KW]"),
        (T((1, 3, 5, 5)), T((1, 3, 2)), {}, "needs x[N,C,H,W]"),
        (T((1, 3, 5, 5), "int32"), T((1, 3, 2, 2), "int32"), {}, "needs floating-point operands of one dtype"),
        (T((1, 3, 5, 5)), T((1, 3, 2, 2), "float16"), {}, "needs floating-point operands of one dtype"),
        (T((1, 3, 5, 5)), T((1, 2, 2, 2)), {}, "3 input channels, 1 filters and groups=1 do not fit weight f32[1,2,2,2]"),
        (T((1, 4, 5, 5)), T((3, 2, 2, 2)), {"groups": 2}, "do not fit"),
        (T((1, 3, 5, 5)), T((3, 1, 2, 2)), {"groups": 2}, "do not fit"),
        (T((1, 3, 2, 2)), T((1, 3, 3, 3)), {}, "window of extent 3 does not fit an axis of 2 (+0+0 padding)"),
        (T((1, 3, 5, 5)), T((1, 3, 3, 3)), {"dilation": [3]}, "window of extent 7 does not fit"),
        (T((1, 3, 5, 5)), T((1, 3, 2, 2)), {"strides": [1, 1, 1]}, "strides needs 1 or 2 values, got [1, 1, 1]"),
        (T((1, 3, 5, 5)), T((1, 3, 2, 2)), {"dilation": [1, 1, 1]}, "dilation needs 1 or 2 values"),
        (T((1, 3, 5, 5)), T((1, 3, 2, 2)), {"padding": [1, 1, 1]}, "padding needs 1, 2 or 4 values, got [1, 1, 1]"),
    ],
)
def test_conv2d_shape_errors(x, w, attrs, fragment):
    with pytest.raises(ShapeError) as info:
        infer("conv2d", x, w, **attrs)
    assert str(info.value).startswith("op 'conv2d': ")
    assert fragment in str(info.value)


def test_conv2d_attribute_errors():
    with pytest.raises(AttrError, match="op 'conv2d': attribute 'strides' must be positive"):
        infer("conv2d", T((1, 1, 3, 3)), T((1, 1, 2, 2)), strides=[1, 0])
    with pytest.raises(AttrError, match="op 'conv2d': attribute 'groups' must be positive"):
        infer("conv2d", T((1, 1, 3, 3)), T((1, 1, 2, 2)), groups=-1)
    with pytest.raises(AttrError, match="op 'conv2d': attribute 'padding' must not be negative"):
        infer("conv2d", T((1, 1, 3, 3)), T((1, 1, 2, 2)), padding=[0, -1])


def _naive_conv2d(x, w, s, p, d, g):
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    xp = np.pad(x, [(0, 0), (0, 0), (p[0], p[2]), (p[1], p[3])])
    oh = (h + p[0] + p[2] - d[0] * (kh - 1) - 1) // s[0] + 1
    ow = (wd + p[1] + p[3] - d[1] * (kw - 1) - 1) // s[1] + 1
    out = np.zeros((n, o, oh, ow))
    per_group = o // g
    for b in range(n):
        for f in range(o):
            grp = f // per_group
            for i in range(oh):
                for j in range(ow):
                    acc = 0.0
                    for ci in range(cg):
                        for a in range(kh):
                            for e in range(kw):
                                acc += xp[b, grp * cg + ci, i * s[0] + a * d[0], j * s[1] + e * d[1]] * w[f, ci, a, e]
                    out[b, f, i, j] = acc
    return out


@st.composite
def conv_case(draw):
    g = draw(st.integers(1, 2))
    cg = draw(st.integers(1, 2))
    og = draw(st.integers(1, 2))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    s = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    d = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    p = tuple(draw(st.integers(0, 2)) for _ in range(4))
    h = draw(st.integers(max(1, d[0] * (kh - 1) + 1 - p[0] - p[2]), 6))
    w = draw(st.integers(max(1, d[1] * (kw - 1) + 1 - p[1] - p[3]), 6))
    n = draw(st.integers(1, 2))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    x = rng.integers(-3, 4, size=(n, g * cg, h, w)).astype(np.float64)
    wt = rng.integers(-3, 4, size=(g * og, cg, kh, kw)).astype(np.float64)
    return x, wt, s, p, d, g


@settings(max_examples=50, deadline=None)
@given(conv_case())
def test_conv2d_matches_direct_loops(case):
    x, w, s, p, d, g = case
    want = _naive_conv2d(x, w, s, p, d, g)
    got = ref("conv2d", x, w, strides=list(s), padding=list(p), dilation=list(d), groups=g)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


# --- max_pool2d -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "attrs, want",
    [
        ({"kernel": [2], "strides": [1]}, [[5, 6], [8, 9]]),
        ({"kernel": [2]}, [[5]]),  # strides default to the kernel
        ({"kernel": [2], "ceil_mode": True}, [[5, 6], [8, 9]]),
        ({"kernel": [2], "padding": [1]}, [[1, 3], [7, 9]]),
        ({"kernel": [3], "strides": [1], "padding": [1]}, [[5, 6, 6], [8, 9, 9], [8, 9, 9]]),
        ({"kernel": [1, 3], "strides": [2, 1]}, [[3], [9]]),
        ({"kernel": [2], "strides": [1], "padding": [0, 0, 1, 1]}, [[5, 6, 6], [8, 9, 9], [8, 9, 9]]),
    ],
)
def test_max_pool_values(attrs, want):
    np.testing.assert_array_equal(ref("max_pool2d", X33, **attrs), np.array(want, np.float32)[None, None])


def test_max_pool_padding_never_wins():
    got = ref("max_pool2d", -X33, kernel=[2], padding=[1])
    np.testing.assert_array_equal(got, [[[[-1, -2], [-4, -5]]]])
    got = ref("max_pool2d", -X33, kernel=[3], strides=[1], padding=[1])
    np.testing.assert_array_equal(got[0, 0, 0], [-1, -1, -2])


ROW = np.array([1, 2, 3, 4], np.float32).reshape(1, 1, 1, 4)


def test_pool_ceil_mode_with_padding():
    # W=4, kernel 3, stride 2, pad 1 each side: padded [p,1,2,3,4,p], floor gives 2 windows,
    # ceil gives 3 (the last one starts at padded index 4 and runs past the padding)
    attrs = dict(kernel=[1, 3], strides=[1, 2], padding=[0, 1])
    assert infer("max_pool2d", T((1, 1, 1, 4)), **attrs).shape == (1, 1, 1, 2)
    assert infer("max_pool2d", T((1, 1, 1, 4)), **attrs, ceil_mode=True).shape == (1, 1, 1, 3)
    np.testing.assert_array_equal(ref("max_pool2d", ROW, **attrs), [[[[2, 4]]]])
    np.testing.assert_array_equal(ref("max_pool2d", ROW, **attrs, ceil_mode=True), [[[[2, 4, 4]]]])
    np.testing.assert_array_equal(ref("avg_pool2d", ROW, **attrs), [[[[1, 3]]]])
    np.testing.assert_array_equal(ref("avg_pool2d", ROW, **attrs, ceil_mode=True), [[[[1, 3, 2]]]])
    np.testing.assert_array_equal(
        ref("avg_pool2d", ROW, **attrs, ceil_mode=True, count_include_pad=False), [[[[1.5, 3, 4]]]])


def test_ceil_mode_drops_a_window_that_starts_in_the_padding():
    # W=3, kernel 2, stride 2, pad 1: ceil((3+2-2)/2)+1 = 3, but the third window would start
    # at padded index 4, past the input (which ends at padded index 3): PyTorch keeps 2
    assert infer("max_pool2d", T((1, 1, 3, 3)), kernel=[2], padding=[1], ceil_mode=True) == T((1, 1, 2, 2))
    np.testing.assert_array_equal(ref("max_pool2d", X33, kernel=[2], padding=[1], ceil_mode=True),
                                  [[[[1, 3], [7, 9]]]])


# --- avg_pool2d -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "attrs, want",
    [
        ({"kernel": [2], "strides": [1]}, [[3, 4], [6, 7]]),
        ({"kernel": [2], "padding": [1]}, [[0.25, 1.25], [2.75, 7]]),
        ({"kernel": [2], "padding": [1], "count_include_pad": False}, [[1, 2.5], [5.5, 7]]),
        ({"kernel": [2], "ceil_mode": True}, [[3, 4.5], [7.5, 9]]),
        ({"kernel": [2], "ceil_mode": True, "count_include_pad": False}, [[3, 4.5], [7.5, 9]]),
        ({"kernel": [3], "strides": [1], "padding": [1]},
         [[12 / 9, 21 / 9, 16 / 9], [27 / 9, 45 / 9, 33 / 9], [24 / 9, 39 / 9, 28 / 9]]),
        ({"kernel": [3], "strides": [1], "padding": [1], "count_include_pad": False},
         [[12 / 4, 21 / 6, 16 / 4], [27 / 6, 45 / 9, 33 / 6], [24 / 4, 39 / 6, 28 / 4]]),
        ({"kernel": [2], "strides": [1], "padding": [0, 0, 1, 1], "count_include_pad": False},
         [[3, 4, 4.5], [6, 7, 7.5], [7.5, 8.5, 9]]),
        ({"kernel": [2], "strides": [1], "padding": [0, 0, 1, 1]},
         [[3, 4, 9 / 4], [6, 7, 15 / 4], [15 / 4, 17 / 4, 9 / 4]]),
    ],
)
def test_avg_pool_values(attrs, want):
    np.testing.assert_allclose(ref("avg_pool2d", X33, **attrs), np.array(want, np.float32)[None, None],
                               rtol=1e-6)


def test_avg_pool_float16():
    x = np.full((1, 1, 2, 2), 1000, np.float16)
    got = ref("avg_pool2d", x, kernel=[2])
    assert got.dtype == np.float16 and got[0, 0, 0, 0] == 1000


@pytest.mark.parametrize("op", ["max_pool2d", "avg_pool2d"])
def test_pool_inference(op):
    assert infer(op, T((2, 3, 8, 8)), kernel=[2]) == T((2, 3, 4, 4))
    assert infer(op, T((2, 3, 8, 8), "float16"), kernel=[3], strides=[1], padding=[1]) == T((2, 3, 8, 8), "float16")
    assert infer(op, T((1, 1, 7, 7)), kernel=[3], strides=[2]) == T((1, 1, 3, 3))
    assert infer(op, T((1, 1, 7, 7)), kernel=[3], strides=[2], ceil_mode=True) == T((1, 1, 3, 3))
    assert infer(op, T((1, 1, 8, 8)), kernel=[3], strides=[2]) == T((1, 1, 3, 3))
    assert infer(op, T((1, 1, 8, 8)), kernel=[3], strides=[2], ceil_mode=True) == T((1, 1, 4, 4))
    assert infer(op, T((1, 1, 6, 9)), kernel=[2, 3]) == T((1, 1, 3, 3))


@pytest.mark.parametrize("op", ["max_pool2d", "avg_pool2d"])
@pytest.mark.parametrize(
    "x, attrs, fragment",
    [
        (T((1, 3, 5)), {"kernel": [2]}, "needs a floating-point x[N,C,H,W], got f32[1,3,5]"),
        (T((1, 1, 5, 5), "int32"), {"kernel": [2]}, "needs a floating-point x[N,C,H,W]"),
        (T((1, 1, 2, 2)), {"kernel": [3]}, "window of extent 3 does not fit an axis of 2"),
        (T((1, 1, 5, 5)), {"kernel": [2, 2, 2]}, "kernel needs 1 or 2 values"),
        (T((1, 1, 5, 5)), {"kernel": [2], "strides": [1, 1, 1]}, "strides needs 1 or 2 values"),
        (T((1, 1, 5, 5)), {"kernel": [2], "padding": [2]}, "padding [2, 2, 2, 2] must be smaller than the kernel [2, 2]"),
        (T((1, 1, 5, 5)), {"kernel": [3, 2], "padding": [1, 2]}, "must be smaller than the kernel"),
        (T((1, 1, 5, 5)), {"kernel": [2], "padding": [0, 0, 2, 0]}, "must be smaller than the kernel"),
        (T((1, 1, 5, 5)), {"kernel": [2], "padding": [0, 0, 0, 3]}, "must be smaller than the kernel"),
    ],
)
def test_pool_errors(op, x, attrs, fragment):
    with pytest.raises(ShapeError) as info:
        infer(op, x, **attrs)
    assert str(info.value).startswith(f"op '{op}': ")
    assert fragment in str(info.value)


@pytest.mark.parametrize("op", ["max_pool2d", "avg_pool2d"])
def test_pool_attribute_errors(op):
    with pytest.raises(AttrError, match=f"op '{op}' needs attribute 'kernel'"):
        infer(op, T((1, 1, 4, 4)))
    with pytest.raises(AttrError, match=f"op '{op}': attribute 'strides' must be positive"):
        infer(op, T((1, 1, 4, 4)), kernel=[2], strides=[0])
    with pytest.raises(AttrError, match=f"op '{op}': attribute 'padding' must not be negative"):
        infer(op, T((1, 1, 4, 4)), kernel=[2], padding=[-1])


def test_count_include_pad_only_on_avg_pool():
    with pytest.raises(AttrError, match="op 'max_pool2d' has no attribute 'count_include_pad'"):
        infer("max_pool2d", T((1, 1, 4, 4)), kernel=[2], count_include_pad=False)


def _naive_pool(x, k, s, p, ceil_mode, mode, include_pad):
    n, c, h, w = x.shape

    def out_size(size, kk, ss, lo, hi):
        room = size + lo + hi - kk
        if ceil_mode:
            o = -(-room // ss) + 1
            if (o - 1) * ss >= size + lo:
                o -= 1
        else:
            o = room // ss + 1
        return o

    oh, ow = out_size(h, k[0], s[0], p[0], p[2]), out_size(w, k[1], s[1], p[1], p[3])
    out = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            r0, c0 = i * s[0] - p[0], j * s[1] - p[1]
            r1, c1 = min(r0 + k[0], h + p[2]), min(c0 + k[1], w + p[3])  # declared padding only
            rows = range(max(r0, 0), min(r1, h))
            cols = range(max(c0, 0), min(c1, w))
            cells = x[:, :, rows.start:rows.stop, cols.start:cols.stop]
            if mode == "max":
                out[:, :, i, j] = cells.max(axis=(2, 3))
            else:
                count = (r1 - r0) * (c1 - c0) if include_pad else len(rows) * len(cols)
                out[:, :, i, j] = cells.sum(axis=(2, 3)) / count
    return out


@st.composite
def pool_case(draw):
    k = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    s = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    p = (draw(st.integers(0, k[0] - 1)), draw(st.integers(0, k[1] - 1)),
         draw(st.integers(0, k[0] - 1)), draw(st.integers(0, k[1] - 1)))
    h = draw(st.integers(max(1, k[0] - p[0] - p[2]), 6))
    w = draw(st.integers(max(1, k[1] - p[1] - p[3]), 6))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    x = rng.integers(-5, 6, size=(1, 2, h, w)).astype(np.float64)
    return x, k, s, p, draw(st.booleans()), draw(st.booleans())


@settings(max_examples=50, deadline=None)
@given(pool_case())
def test_pools_match_direct_loops(case):
    x, k, s, p, ceil_mode, include_pad = case
    attrs = dict(kernel=list(k), strides=list(s), padding=list(p), ceil_mode=ceil_mode)
    got = ref("max_pool2d", x, **attrs)
    want = _naive_pool(x, k, s, p, ceil_mode, "max", include_pad)
    np.testing.assert_array_equal(got, want)
    assert np.all(np.isfinite(got))
    got = ref("avg_pool2d", x, **attrs, count_include_pad=include_pad)
    want = _naive_pool(x, k, s, p, ceil_mode, "avg", include_pad)
    np.testing.assert_allclose(got, want, rtol=1e-12)


# --- global_avg_pool2d ----------------------------------------------------------------------


def test_global_avg_pool_values():
    x = np.array([[[1, 2], [3, 4]], [[5, 6], [7, 9]]], np.float32)[None]
    np.testing.assert_array_equal(ref("global_avg_pool2d", x), [[[[2.5]], [[6.75]]]])
    np.testing.assert_array_equal(ref("global_avg_pool2d", x, keepdims=False), [[2.5, 6.75]])
    h = np.full((1, 1, 4, 4), 60000, np.float16)  # the fp16 sum would overflow
    got = ref("global_avg_pool2d", h)
    assert got.dtype == np.float16 and got[0, 0, 0, 0] == 60000


def test_global_avg_pool_inference():
    assert infer("global_avg_pool2d", T((2, 3, 7, 5))) == T((2, 3, 1, 1))
    assert infer("global_avg_pool2d", T((2, 3, 7, 5), "float16"), keepdims=False) == T((2, 3), "float16")
    with pytest.raises(ShapeError, match=r"^op 'global_avg_pool2d': needs a floating-point x\[N,C,H,W\], got f32\[2,3,4\]"):
        infer("global_avg_pool2d", T((2, 3, 4)))
    with pytest.raises(ShapeError, match="^op 'global_avg_pool2d': needs a floating-point"):
        infer("global_avg_pool2d", T((2, 3, 4, 4), "int8"))


def test_conv_pool_end_to_end():
    b = GraphBuilder()
    x = b.input("x", [1, 1, 3, 3])
    w = b.const(W22, name="w")
    y = b.conv2d(x, w, padding=[1])  # [1, 1, 4, 4]
    z = b.max_pool2d(y, kernel=[2])  # [1, 1, 2, 2]
    g = b.global_avg_pool2d(z, keepdims=False)
    b.output(z, g)
    zv, gv = evaluate(b.build(), {"x": X33})
    np.testing.assert_array_equal(zv, [[[[37, 47], [67, 77]]]])
    np.testing.assert_array_equal(gv, [[57]])


def test_strided_padded_pools_read_phases_unless_the_target_cannot():
    # the compute of a 3x3/2 padded pool reads its padded input in two phases of its columns
    # ([n, c, rows, 2, cols / 2]); a target that says so (the NPU: its vector copies cannot
    # stride over the input) gets the plain padded input
    from akg.graph.compute.lower import lower_graph

    b = GraphBuilder("pool")
    b.output(b.max_pool2d(b.input("x", (1, 2, 9, 9)), kernel=[3, 3], strides=[2, 2], padding=[1, 1]))
    graph = b.build()

    def pad_shape(window_phases):
        program = lower_graph(graph, window_phases)
        (pad,) = [op.output for op in program.ops() if op.output.name.endswith(".pad")]
        return tuple(pad.shape)

    assert pad_shape(True) == (1, 2, 11, 2, 6) and pad_shape(False) == (1, 2, 11, 11)


@pytest.mark.parametrize("channels, width, bits, phased", [
    (3, 32, 512, True),    # a stem over RGB, rows of a vector or more: phases
    (3, 32, 0, False),     # no vector width known (the default): plain padding
    (3, 16, 512, False),   # rows of 8 < 16 lanes: vectorised over channels, plain padding
    (8, 32, 512, False),   # more channels than an image's: plain padding
    (4, 32, 256, True),    # RGBA, AVX2's 8 lanes
])
def test_a_strided_conv_over_image_channels_reads_phases(channels, width, bits, phased):
    # a stem (image_rows) reads its padded input in phases of its columns, as its mapping
    # runs along the output rows; the values are those of the plain conv either way
    from akg.graph.compute.lower import lower_graph
    from akg.graph.ops.conv import image_rows

    rng = np.random.default_rng(0)
    b = GraphBuilder("stem")
    x = b.input("x", (1, channels, width, width))
    w = b.const(rng.standard_normal((16, channels, 7, 7)).astype(np.float32), name="w")
    b.output(b.conv2d(x, w, strides=[2, 2], padding=[3, 3]))
    graph = b.build()
    (pad,) = [op.output for op in lower_graph(graph, True, bits).ops() if op.output.name.endswith(".pad")]
    assert len(pad.shape) == (5 if phased else 4)
    assert image_rows(channels, 2, width // 2, bits // 32) == phased
    assert not image_rows(channels, 1, width, 16)  # not strided: rows without phases

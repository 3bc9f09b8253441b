"""Neural-network composites: softmax, log_softmax, layer_norm, batch_norm, variance, dropout,
cross_entropy, nll_loss."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from akg.errors import AttrError, InputDataError, ShapeError
from akg.graph import GraphBuilder, evaluate
from akg.graph.ops import COMPOSITE, OPS, get_op
from akg.graph.types import TensorType

FAMILY = {"softmax", "log_softmax", "layer_norm", "batch_norm", "variance", "dropout", "cross_entropy",
          "nll_loss"}
LN2, LN3 = math.log(2), math.log(3)


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
    out = np.asarray(out)
    (t,) = d.infer_types([TensorType.of(a) for a in arrays], attrs)
    assert out.shape == t.shape and out.dtype == np.dtype(t.dtype)
    return out


def f32(v):
    return np.array(v, np.float32)


def test_family_is_fully_covered():
    registered = {n for n, d in OPS.items() if d.infer.__module__ == "akg.graph.ops.nn"}
    assert registered == FAMILY
    assert all(get_op(n).kind == COMPOSITE for n in FAMILY)


# --- softmax / log_softmax ------------------------------------------------------------------


def test_softmax_values():
    x = f32([0, LN2, LN3])
    np.testing.assert_allclose(ref("softmax", x), [1 / 6, 2 / 6, 3 / 6], rtol=1e-6)
    # large inputs (exact in f32) do not overflow: softmax([0, 1, 2]) = e^i / (1 + e + e^2)
    np.testing.assert_allclose(ref("softmax", f32([1000, 1001, 1002])), [0.09003057, 0.24472847, 0.66524096], rtol=1e-6)
    np.testing.assert_allclose(ref("softmax", f32([-1000, -1000])), [0.5, 0.5])
    np.testing.assert_allclose(ref("softmax", f32([0, -np.inf])), [1, 0])
    np.testing.assert_array_equal(ref("softmax", f32([7.0])), [1.0])


def test_softmax_axis():
    x = f32([[0, 0], [LN3, 0]])
    np.testing.assert_allclose(ref("softmax", x, axis=0), [[0.25, 0.5], [0.75, 0.5]], rtol=1e-6)
    np.testing.assert_allclose(ref("softmax", x), [[0.5, 0.5], [0.75, 0.25]], rtol=1e-6)
    np.testing.assert_allclose(ref("softmax", x, axis=-2), ref("softmax", x, axis=0))


def test_log_softmax_values():
    x = f32([0, LN2, LN3])
    want = [math.log(1 / 6), math.log(1 / 3), math.log(1 / 2)]
    np.testing.assert_allclose(ref("log_softmax", x), want, rtol=1e-6)
    # log(e^i / (1 + e + e^2)) = i - 2.40760596, also for large inputs
    np.testing.assert_allclose(ref("log_softmax", f32([-5000, -4999, -4998])),
                               [-2.40760596, -1.40760596, -0.40760596], rtol=1e-6)
    np.testing.assert_allclose(ref("log_softmax", f32([[0, 0], [LN3, 0]]), axis=0),
                               [[math.log(0.25), math.log(0.5)], [math.log(0.75), math.log(0.5)]], rtol=1e-6)
    # far below the max, log_softmax stays finite where log(softmax) would be -inf
    np.testing.assert_allclose(ref("log_softmax", f32([0, -200])), [0, -200], atol=1e-6)


def test_softmax_float16():
    x = np.array([0, LN3], np.float16)
    got = ref("softmax", x)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), [0.25, 0.75], rtol=1e-3)
    assert ref("log_softmax", x).dtype == np.float16


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_inference_and_errors(op):
    assert infer(op, T((2, 3))) == T((2, 3))
    assert infer(op, T((2, 3), "float16"), axis=0) == T((2, 3), "float16")
    with pytest.raises(ShapeError, match=f"^op '{op}': axis 2 is out of range for rank 2"):
        infer(op, T((2, 3)), axis=2)
    with pytest.raises(ShapeError, match=f"^op '{op}': needs floating-point input, got i32\\[2,3\\]"):
        infer(op, T((2, 3), "int32"))
    with pytest.raises(ShapeError, match=f"^op '{op}': "):
        infer(op, T(()))


@settings(max_examples=50, deadline=None)
@given(hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4),
                  elements=st.floats(-50, 50)), st.data())
def test_softmax_properties(x, data):
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    s = ref("softmax", x, axis=axis)
    assert np.all(s >= 0) and np.all(s <= 1)
    np.testing.assert_allclose(s.sum(axis=axis), 1.0, rtol=1e-12)
    np.testing.assert_allclose(np.exp(ref("log_softmax", x, axis=axis)), s, rtol=1e-9, atol=1e-300)
    # softmax is invariant under adding a constant along the axis
    np.testing.assert_allclose(ref("softmax", x + 3.0, axis=axis), s, rtol=1e-9, atol=1e-300)


# --- layer_norm -----------------------------------------------------------------------------


def test_layer_norm_values():
    x = f32([[1, 2, 3], [2, 4, 6]])
    ones, zeros = f32([1, 1, 1]), f32([0, 0, 0])
    s = math.sqrt(1.5)  # 1 / sqrt(2/3)
    np.testing.assert_allclose(ref("layer_norm", x, ones, zeros, epsilon=0.0), [[-s, 0, s], [-s, 0, s]], rtol=1e-6)
    got = ref("layer_norm", x, f32([1, 2, 3]), f32([0, 1, 0]), epsilon=0.0)
    np.testing.assert_allclose(got, [[-s, 1, 3 * s], [-s, 1, 3 * s]], rtol=1e-6)


def test_layer_norm_epsilon():
    # mean 2, var 1, eps 3: (x - 2) / 2
    got = ref("layer_norm", f32([1, 3]), f32([1, 1]), f32([0, 0]), epsilon=3.0)
    np.testing.assert_allclose(got, [-0.5, 0.5], rtol=1e-6)
    # default epsilon 1e-5 on a constant row gives zeros, not NaN
    np.testing.assert_array_equal(ref("layer_norm", f32([4, 4]), f32([1, 1]), f32([0, 0])), [0, 0])


def test_layer_norm_over_several_axes():
    x = f32([[[1, 2], [3, 4]]])  # normalised over its last two axes: mean 2.5, var 1.25
    g, b = np.ones((2, 2), np.float32), np.zeros((2, 2), np.float32)
    got = ref("layer_norm", x, g, b, begin_norm_axis=1, epsilon=0.0)
    r = 1 / math.sqrt(1.25)
    np.testing.assert_allclose(got, [[[-1.5 * r, -0.5 * r], [0.5 * r, 1.5 * r]]], rtol=1e-6)
    got = ref("layer_norm", x, g, b, begin_norm_axis=-2, epsilon=0.0)
    np.testing.assert_allclose(got, [[[-1.5 * r, -0.5 * r], [0.5 * r, 1.5 * r]]], rtol=1e-6)


def test_layer_norm_float16_statistics():
    x = np.array([1000, 1002], np.float16)
    got = ref("layer_norm", x, np.ones(2, np.float16), np.zeros(2, np.float16), epsilon=0.0)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), [-1, 1], rtol=1e-3)


def test_layer_norm_inference_and_errors():
    assert infer("layer_norm", T((2, 3, 4)), T((4,)), T((4,))) == T((2, 3, 4))
    assert infer("layer_norm", T((2, 3, 4)), T((3, 4)), T((3, 4)), begin_norm_axis=1) == T((2, 3, 4))
    with pytest.raises(ShapeError, match=r"^op 'layer_norm': gamma must be f32\[4\], got f32\[3\]"):
        infer("layer_norm", T((2, 3, 4)), T((3,)), T((4,)))
    with pytest.raises(ShapeError, match=r"^op 'layer_norm': beta must be f32\[3,4\], got f32\[4\]"):
        infer("layer_norm", T((2, 3, 4)), T((3, 4)), T((4,)), begin_norm_axis=1)
    with pytest.raises(ShapeError, match=r"^op 'layer_norm': gamma must be f32\[4\], got f16\[4\]"):
        infer("layer_norm", T((2, 4)), T((4,), "float16"), T((4,)))
    with pytest.raises(ShapeError, match="^op 'layer_norm': begin_norm_axis 2 is out of range for rank 2"):
        infer("layer_norm", T((2, 4)), T(()), T(()), begin_norm_axis=2)
    with pytest.raises(ShapeError, match="^op 'layer_norm': needs floating-point input"):
        infer("layer_norm", T((2, 4), "int32"), T((4,), "int32"), T((4,), "int32"))


# --- batch_norm -----------------------------------------------------------------------------


def test_batch_norm_values():
    x = f32([[[1, 2], [3, 4]]])  # N=1, C=2, W=2
    mean, var = f32([1, 3]), f32([4, 0.25])
    gamma, beta = f32([1, 2]), f32([0, 10])
    got = ref("batch_norm", x, gamma, beta, mean, var, epsilon=0.0)
    np.testing.assert_allclose(got, [[[0, 0.5], [10, 14]]], rtol=1e-6)
    # eps is added to the variance: sqrt(4 + 5) = 3
    got = ref("batch_norm", x, f32([1, 1]), f32([0, 0]), mean, f32([4, 4]), epsilon=5.0)
    np.testing.assert_allclose(got, [[[0, 1 / 3], [0, 1 / 3]]], rtol=1e-6)


def test_batch_norm_channel_axis():
    x = f32([[1, 3], [2, 4]])  # channels on the last axis
    got = ref("batch_norm", x, f32([1, 2]), f32([0, 10]), f32([1, 3]), f32([4, 0.25]), axis=-1, epsilon=0.0)
    np.testing.assert_allclose(got, [[0, 10], [0.5, 14]], rtol=1e-6)
    nchw = np.arange(8, dtype=np.float32).reshape(1, 2, 2, 2)
    got = ref("batch_norm", nchw, f32([1, 1]), f32([0, 0]), f32([0, 4]), f32([1, 1]), epsilon=0.0)
    np.testing.assert_allclose(got, [[[[0, 1], [2, 3]], [[0, 1], [2, 3]]]])


def test_batch_norm_inference_and_errors():
    c = T((3,))
    assert infer("batch_norm", T((2, 3, 4, 4)), c, c, c, c) == T((2, 3, 4, 4))
    assert infer("batch_norm", T((2, 4, 3)), c, c, c, c, axis=-1) == T((2, 4, 3))
    with pytest.raises(ShapeError, match=r"^op 'batch_norm': mean must be f32\[3\], got f32\[4\]"):
        infer("batch_norm", T((2, 3, 4)), c, c, T((4,)), c)
    with pytest.raises(ShapeError, match=r"^op 'batch_norm': var must be f32\[3\], got f16\[3\]"):
        infer("batch_norm", T((2, 3, 4)), c, c, c, T((3,), "float16"))
    with pytest.raises(ShapeError, match=r"^op 'batch_norm': gamma must be f32\[4\]"):
        infer("batch_norm", T((2, 3, 4)), c, c, c, c, axis=2)
    with pytest.raises(ShapeError, match="^op 'batch_norm': axis 3 is out of range for rank 3"):
        infer("batch_norm", T((2, 3, 4)), c, c, c, c, axis=3)
    with pytest.raises(ShapeError, match="^op 'batch_norm': needs floating-point input"):
        infer("batch_norm", T((2, 3), "int32"), *[T((3,), "int32")] * 4)
    with pytest.raises(ShapeError, match="^op 'batch_norm': needs a channel axis"):
        infer("batch_norm", T(()), T(()), T(()), T(()), T(()), axis=0)


# --- dropout --------------------------------------------------------------------------------



def test_variance_values():
    x = f32([[1, 3], [2, 6]])
    np.testing.assert_allclose(ref("variance", x), 3.5)  # mean 3: (4 + 0 + 1 + 9) / 4
    np.testing.assert_allclose(ref("variance", x, axes=[0]), [0.25, 2.25])
    np.testing.assert_allclose(ref("variance", x, axes=[1], keepdims=True), [[1], [4]])
    np.testing.assert_allclose(ref("variance", np.full((3, 1), 5, np.float16), axes=[0]), [0])


def test_training_batch_norm_from_batch_statistics():
    """batch_norm with mean/variance of x over all but the channel axis normalises each
    channel to zero mean and unit variance (up to epsilon)."""
    b = GraphBuilder()
    x = b.input("x", (4, 2, 3))
    axes = [0, 2]
    one, zero = b.const(np.ones(2, np.float32)), b.const(np.zeros(2, np.float32))
    b.output(b.batch_norm(x, one, zero, b.mean(x, axes=axes), b.variance(x, axes=axes), epsilon=0.0))
    xv = np.random.default_rng(0).standard_normal((4, 2, 3)).astype(np.float32) * 3 + 1
    (y,) = evaluate(b.build(), {"x": xv})
    np.testing.assert_allclose(y.mean(axis=(0, 2)), 0, atol=1e-6)
    np.testing.assert_allclose(y.var(axis=(0, 2)), 1, rtol=1e-5)


def test_variance_inference_and_errors():
    assert infer("variance", T((2, 3, 4)), axes=[0, 2]) == T((3,))
    assert infer("variance", T((2, 3)), keepdims=True) == T((1, 1))
    with pytest.raises(ShapeError, match="^op 'variance': needs floating-point input"):
        infer("variance", T((2,), "int32"))
    with pytest.raises(ShapeError, match="^op 'variance': cannot take the variance over an empty axis"):
        infer("variance", T((0, 3)), axes=[0])


def test_dropout_is_the_identity_at_inference():
    x = f32([[1, -2], [3, 0.5]])
    got = ref("dropout", x, rate=0.9)
    np.testing.assert_array_equal(got, x)
    got[0, 0] = 100
    assert x[0, 0] == 1  # a copy, not a view
    assert infer("dropout", T((2, 3), "float16")) == T((2, 3), "float16")
    assert get_op("dropout").check_attrs({})["rate"] == 0.5
    with pytest.raises(ShapeError, match="^op 'dropout': needs floating-point input"):
        infer("dropout", T((2,), "int32"))
    with pytest.raises(AttrError, match=r"op 'dropout': attribute 'rate' must be in \[0, 1\), got -0.1"):
        infer("dropout", T((2,)), rate=-0.1)


# --- losses ---------------------------------------------------------------------------------

LOGP = f32([[-1, -2, -3], [-0.5, -1.5, -2.5]])
LABELS = np.array([2, 0], np.int32)


def test_nll_loss_values():
    np.testing.assert_allclose(ref("nll_loss", LOGP, LABELS), 1.75)
    np.testing.assert_allclose(ref("nll_loss", LOGP, LABELS, reduction="sum"), 3.5)
    np.testing.assert_allclose(ref("nll_loss", LOGP, LABELS, reduction="none"), [3, 0.5])
    np.testing.assert_allclose(ref("nll_loss", LOGP, np.array([1, 1], np.int64)), 1.75)
    np.testing.assert_allclose(ref("nll_loss", LOGP, np.array([0, 2], np.uint8), reduction="none"), [1, 2.5])


def test_ignored_labels_drop_out_of_the_loss_and_the_mean():
    labels = np.array([2, -100], np.int64)  # PyTorch's default ignore_index
    np.testing.assert_allclose(ref("nll_loss", LOGP, labels, ignore_index=-100), 3)
    np.testing.assert_allclose(ref("nll_loss", LOGP, labels, reduction="none", ignore_index=-100), [3, 0])
    np.testing.assert_allclose(ref("nll_loss", LOGP, np.array([2, 0], np.int32), ignore_index=0), 3)
    assert np.isnan(ref("nll_loss", LOGP, np.array([-100, -100], np.int64), ignore_index=-100))  # as PyTorch
    with pytest.raises(IndexError, match="label out of range"):
        ref("nll_loss", LOGP, np.array([2, -1], np.int64), ignore_index=-100)
    logits = f32([[0, LN2, LN3], [5, 5, 5]])
    np.testing.assert_allclose(ref("cross_entropy", logits, labels, ignore_index=-100), LN2, rtol=1e-6)


def test_cross_entropy_values():
    logits = f32([[0, LN2, LN3], [5, 5, 5]])
    labels = np.array([2, 1], np.int32)
    # row 0: -log(3/6); row 1: -log(1/3)
    np.testing.assert_allclose(ref("cross_entropy", logits, labels, reduction="none"), [LN2, LN3], rtol=1e-6)
    np.testing.assert_allclose(ref("cross_entropy", logits, labels), (LN2 + LN3) / 2, rtol=1e-6)
    np.testing.assert_allclose(ref("cross_entropy", logits, labels, reduction="sum"), LN2 + LN3, rtol=1e-6)
    big = f32([[1000, 1001, 1002], [-3000, -3000, -3000]])  # -log(e^2 / (1 + e + e^2)), log 3
    np.testing.assert_allclose(ref("cross_entropy", big, labels, reduction="none"), [0.40760596, LN3], rtol=1e-6)
    # a confident right answer costs ~0, a confident wrong one ~ the logit gap
    got = ref("cross_entropy", f32([[100, 0], [100, 0]]), np.array([0, 1], np.int32), reduction="none")
    np.testing.assert_allclose(got, [0, 100], atol=1e-5)


def test_cross_entropy_is_nll_of_log_softmax():
    logits = f32([[0.5, -1, 2, 0], [3, 3, -3, 1], [0, 0, 0, 0]])
    labels = np.array([3, 0, 1], np.int32)
    logp = ref("log_softmax", logits, axis=1)
    for reduction in ["mean", "sum", "none"]:
        np.testing.assert_allclose(ref("cross_entropy", logits, labels, reduction=reduction),
                                   ref("nll_loss", logp, labels, reduction=reduction), rtol=1e-6)


def test_loss_float16():
    got = ref("cross_entropy", np.array([[0, LN3]], np.float16), np.array([1], np.int32))
    assert got.dtype == np.float16
    np.testing.assert_allclose(float(got), -math.log(0.75), rtol=1e-3)


@pytest.mark.parametrize("op", ["nll_loss", "cross_entropy"])
def test_loss_inference_and_errors(op):
    assert infer(op, T((4, 3)), T((4,), "int32")) == T(())
    assert infer(op, T((4, 3), "float16"), T((4,), "int64"), reduction="none") == T((4,), "float16")
    assert infer(op, T((4, 3)), T((4,), "int8"), reduction="sum") == T(())
    for scores, labels in [(T((4, 3)), T((3,), "int32")), (T((4,)), T((4,), "int32")),
                           (T((4, 3)), T((4, 1), "int32")), (T((2, 4, 3)), T((2,), "int32"))]:
        with pytest.raises(ShapeError, match=f"^op '{op}': needs scores\\[N, C\\] and labels\\[N\\]"):
            infer(op, scores, labels)
    with pytest.raises(ShapeError, match=f"^op '{op}': labels must be integer class indices, got f32\\[4\\]"):
        infer(op, T((4, 3)), T((4,)))
    with pytest.raises(ShapeError, match=f"^op '{op}': needs floating-point input"):
        infer(op, T((4, 3), "int32"), T((4,), "int32"))
    with pytest.raises(AttrError, match=f"op '{op}': attribute 'reduction' must be one of 'mean', 'sum', 'none'"):
        infer(op, T((4, 3)), T((4,), "int32"), reduction="batchmean")


@pytest.mark.parametrize("op", ["nll_loss", "cross_entropy"])
@pytest.mark.parametrize("bad", [-1, 3, 100])
def test_loss_labels_out_of_range(op, bad):
    with pytest.raises(IndexError, match=r"out of range \[0, 3\)"):
        ref(op, LOGP, np.array([0, bad], np.int32))


def test_loss_index_bounds():
    for op in ["nll_loss", "cross_entropy"]:
        assert get_op(op).index_bounds(T((4, 7)), T((4,), "int32"), reduction="mean") == {1: 7}


def test_out_of_range_label_through_interpreter():
    b = GraphBuilder()
    s = b.input("s", [2, 3])
    y = b.input("y", [2], "int32")
    b.output(b.cross_entropy(s, y))
    graph = b.build()
    with pytest.raises(InputDataError, match="op 'cross_entropy'"):
        evaluate(graph, {"s": LOGP, "y": np.array([0, -1], np.int32)})
    (loss,) = evaluate(graph, {"s": f32([[0, 0, 0], [0, LN2, LN3]]), "y": np.array([0, 2], np.int32)})
    np.testing.assert_allclose(loss, (LN3 + LN2) / 2, rtol=1e-6)


def test_nn_end_to_end():
    b = GraphBuilder()
    x = b.input("x", [2, 3])
    g = b.const(f32([1, 1, 1]), name="g")
    z = b.const(f32([0, 0, 0]), name="z")
    h = b.layer_norm(x, g, z, epsilon=0.0)
    p = b.softmax(b.dropout(h, rate=0.1))
    b.output(h, p)
    hv, pv = evaluate(b.build(), [f32([[1, 2, 3], [0, 0, 3]])])
    s = math.sqrt(1.5)
    np.testing.assert_allclose(hv[0], [-s, 0, s], rtol=1e-6)
    # row 1: mean 1, var 2: [-1, -1, 2] / sqrt(2)
    r = 1 / math.sqrt(2)
    np.testing.assert_allclose(hv[1], [-r, -r, 2 * r], rtol=1e-6)
    e = np.exp([-s, 0, s])
    np.testing.assert_allclose(pv[0], e / e.sum(), rtol=1e-6)
    np.testing.assert_allclose(pv.sum(axis=1), [1, 1], rtol=1e-6)

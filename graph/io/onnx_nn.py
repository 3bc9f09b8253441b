"""ONNX's neural-network ops in the ONNX op table (`ONNX_OPS`): convolution, pooling,
normalisations, softmax and dropout. Split from `akg.graph.io.onnx_ops` for length."""

from __future__ import annotations

import math

import numpy as np

from akg.graph.io.onnx_ops import ONNX_OPS, InlineFunctionBody, OnnxOpContext as Ctx
from akg.graph.ir import Value
from akg.graph.types import is_float


# --- windows: convolution and pooling -------------------------------------------------------------


def _window_2d(c: Ctx, x: Value) -> tuple[Value, bool]:
    """x as NCHW: a 1-D window op (N, C, L) runs as 2-D with H = 1; 3-D and more are unsupported."""
    rank = len(x.shape)
    if rank == 3:
        return c.make("reshape", x, shape=[x.shape[0], x.shape[1], 1, x.shape[2]], what="as2d"), True
    if rank != 4:
        raise c.unsupported(f"{rank - 2}-D windows are not modelled (1-D and 2-D are)")
    return x, False


def _pair(values: list[int] | None, one_d: bool, default: int) -> list[int]:
    if values is None:
        return [default, default]
    return [default, *values] if one_d else list(values)


def _pads(c: Ctx, in_hw: list[int], kernel: list[int], strides: list[int], dilations: list[int],
          one_d: bool) -> list[int]:
    """(top, left, bottom, right) from `pads` or `auto_pad` (SAME_UPPER puts the odd cell last)."""
    auto = c.str_("auto_pad", "NOTSET")
    if auto in ("NOTSET", ""):
        pads = c.ints("pads", None)
        if pads is None:
            return [0, 0, 0, 0]
        return [0, pads[0], 0, pads[1]] if one_d else pads
    if auto == "VALID":
        return [0, 0, 0, 0]
    lo, hi = _same_pads(c, auto, in_hw, kernel, strides, dilations)
    return [lo[0], lo[1], hi[0], hi[1]]


def _same_pads(c: Ctx, auto: str, in_shape: list[int], kernel: list[int], strides: list[int],
               dilations: list[int]) -> tuple[list[int], list[int]]:
    """auto_pad SAME_UPPER / SAME_LOWER: the (begin, end) padding per axis that makes each
    output size ceil(in / stride); the odd cell goes last for UPPER, first for LOWER."""
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise c.fail(f"auto_pad '{auto}' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID")
    lo, hi = [], []
    for size, k, s, d in zip(in_shape, kernel, strides, dilations):
        total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
        small, big = total // 2, total - total // 2
        lo.append(small if auto == "SAME_UPPER" else big)
        hi.append(big if auto == "SAME_UPPER" else small)
    return lo, hi


def _back(c: Ctx, y: Value, one_d: bool) -> Value:
    if not one_d:
        return y
    return c.make("reshape", y, shape=[y.shape[0], y.shape[1], y.shape[3]])


@ONNX_OPS.register_op("Conv", "conv2d, add")
def _conv(c: Ctx):
    return conv(c, c.v(0), c.v(1), c.v(2) if c.has(2) else None)


def conv(c: Ctx, x: Value, w: Value, bias: Value | None) -> Value:
    """ONNX's Conv of x by w (plus a per-channel bias), the node's attributes as the spec's."""
    x2, one_d = _window_2d(c, x)
    if one_d:
        w = c.make("reshape", w, shape=[w.shape[0], w.shape[1], 1, w.shape[2]], what="w2d")
    kernel = list(w.shape[2:])
    strides = _pair(c.ints("strides", None), one_d, 1)
    dilations = _pair(c.ints("dilations", None), one_d, 1)
    pads = _pads(c, list(x2.shape[2:]), kernel, strides, dilations, one_d)
    y = c.make("conv2d", x2, w, strides=strides, padding=pads, dilation=dilations, groups=c.int_("group", 1),
               what="conv" if bias is not None or one_d else None)
    if bias is not None:
        y = c.make("add", y, c.make("reshape", bias, shape=[1, bias.shape[0], 1, 1],
                                    what="bias"), what="biased" if one_d else None)
    return _back(c, y, one_d)


def _window_taps(c: Ctx, in_shape: list[int], count_pad: bool) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Any-rank pooling windows as constants: for each output cell and window tap, the flat
    input position it reads, and whether the tap is a value (1), padding that counts (2, for
    count_include_pad) or nothing (0: outside the padding, or the padding of max and of
    uncounted averages). Returns (source, kind, output shape)."""
    rank = len(in_shape)
    kernel = c.ints("kernel_shape")
    strides = c.ints("strides", None) or [1] * rank
    dilations = c.ints("dilations", None) or [1] * rank
    ceil_mode = bool(c.int_("ceil_mode", 0))
    auto = c.str_("auto_pad", "NOTSET")
    if auto in ("NOTSET", ""):
        pads = c.ints("pads", None) or [0] * (2 * rank)
    elif auto == "VALID":
        pads = [0] * (2 * rank)
    else:
        lo, hi = _same_pads(c, auto, in_shape, kernel, strides, dilations)
        pads = lo + hi
    per_axis, out_shape = [], []
    for i, (n, k, st, d) in enumerate(zip(in_shape, kernel, strides, dilations)):
        before, after = pads[i], pads[i + rank]
        span = (k - 1) * d + 1
        room = (n + before + after - span) / st + 1
        out = math.ceil(room) if ceil_mode else math.floor(room)
        if ceil_mode and (out - 1) * st >= n + before:  # the last window starts in the input or left pad
            out -= 1
        q = np.arange(out)[:, None] * st + np.arange(k)[None, :] * d - before  # [out, k] input positions
        kind = np.where((q >= 0) & (q < n), 1, np.where((q >= -before) & (q < n + after), 2, 0))
        per_axis.append((np.clip(q, 0, n - 1), kind))
        out_shape.append(out)
    strides_in = [math.prod(in_shape[i + 1:]) for i in range(rank)]
    source = np.zeros([1] * (2 * rank), np.int64)
    kind = np.ones([1] * (2 * rank), np.int64)
    for i, (q, kd) in enumerate(per_axis):
        shape = [1] * (2 * rank)
        shape[i], shape[rank + i] = q.shape
        source = source + q.reshape(shape) * strides_in[i]
        kind = np.where((kind == 0) | (kd.reshape(shape) == 0), 0, np.maximum(kind, kd.reshape(shape)))
    taps = math.prod(kernel)
    source = np.broadcast_to(source, [*out_shape, *kernel]).reshape(-1, taps)
    kind = np.broadcast_to(kind, [*out_shape, *kernel]).reshape(-1, taps)
    if not count_pad:
        kind = np.where(kind == 2, 0, kind)
    return source, kind, out_shape


def _pool_any(c: Ctx, x: Value, op: str, count_pad: bool) -> Value:
    """Pooling of any rank and dilation as a gather of every window tap ([N, C, cells, taps])
    and a max or mean over the taps: the form for what max_pool2d / avg_pool2d do not take."""
    n, ch, *spatial = x.shape
    include = op == "avg_pool2d" and (count_pad or bool(c.int_("count_include_pad", 0))
                                      and c.str_("auto_pad", "NOTSET") in ("NOTSET", ""))
    source, kind, out_shape = _window_taps(c, spatial, include)
    if source.size * n * ch > 1 << 26:
        raise c.unsupported(f"a pooling window of {source.shape[1]} taps over {source.shape[0]} cells is too large "
                            "for the gathered form (2^26 elements)")
    flat = c.make("reshape", x, shape=[n * ch, math.prod(spatial)], what="flat")
    # the index shaped [*cells, taps]: a flat [cells, taps] one, max-reduced and reshaped to unit
    # axes, hit a divide by zero in LLVM lowering (reported)
    taps = c.make("gather", flat, c.const(source.reshape(*out_shape, -1), "int64", "taps_index"), axis=1,
                  what="taps")
    valid, last = (kind == 1).reshape(*out_shape, -1), len(out_shape) + 1
    if op == "max_pool2d":
        fill = -np.inf if is_float(x.dtype) else np.iinfo(x.dtype).min
        picked = taps if (kind == 1).all() else c.make("where", c.const(valid, "bool", "valid"), taps,
                                                        c.scalar(fill, x, "fill"), what="picked")
        y = c.make("max", picked, axes=[last], keepdims=False, what="pooled")
        if c.n_outputs > 1:  # Indices: the first largest tap's place in x, flattened (row-major)
            tap = c.make("cast", c.make("argmax", picked, axis=last, keepdims=False, what="tap"), to="int64",
                         what="tap64")
            cells = math.prod(out_shape)
            at = c.make("add", c.make("mul", c.const(np.arange(cells, dtype=np.int64).reshape(out_shape), "int64",
                                                        "cells"), c.scalar(source.shape[1], "int64", "taps"),
                                      what="row"), tap, what="at")
            places = source.reshape(-1)
            if c.int_("storage_order", 0):  # column-major places within each image
                places = np.ravel_multi_index(np.unravel_index(places, spatial), spatial, order="F")
            place = c.make("gather", c.const(places.astype(np.int64), "int64", "sources"), at, axis=0, what="place")
            block = np.arange(n * ch, dtype=np.int64).reshape(n * ch, *([1] * len(out_shape))) * math.prod(spatial)
            index = c.make("add", place, c.const(block, "int64", "block"), what="index_flat")
            shaped = c.make("reshape", y, shape=[n, ch, *out_shape], what="pool")
            return shaped, c.make("reshape", index, shape=[n, ch, *out_shape], what="indices")
    else:
        picked = taps if (kind == 1).all() else c.make("where", c.const(valid, "bool", "valid"), taps,
                                                        c.scalar(0, x, "zero"), what="picked")
        total = c.make("sum", picked, axes=[last], keepdims=False, what="total")
        count = np.maximum((kind > 0).sum(axis=1), 1).astype(x.dtype).reshape(out_shape)
        y = c.make("div", total, c.const(count, x.dtype, "count"), what="pooled")
    return c.make("reshape", y, shape=[n, ch, *out_shape], what="pool" if count_pad else None)


def _pool(c: Ctx, op: str, count_pad: bool = False):
    rank = len(c.v(0).shape)
    dilations = c.ints("dilations", None)
    if rank not in (3, 4) or dilations is not None and set(dilations) != {1} or c.n_outputs > 1:
        return _pool_any(c, c.v(0), op, count_pad)
    x, one_d = _window_2d(c, c.v(0))
    kernel = _pair(c.ints("kernel_shape"), one_d, 1)
    strides = _pair(c.ints("strides", None), one_d, 1)
    dilations = _pair(dilations, one_d, 1)
    pads = _pads(c, list(x.shape[2:]), kernel, strides, dilations, one_d)
    attrs = dict(kernel=kernel, strides=strides, padding=pads, ceil_mode=bool(c.int_("ceil_mode", 0)))
    if op == "avg_pool2d":
        # SAME auto-padding never counts the padding (ONNX's reference), explicit pads as asked
        include = count_pad or (bool(c.int_("count_include_pad", 0)) and c.str_("auto_pad", "NOTSET") in ("NOTSET", ""))
        attrs["count_include_pad"] = include
    dtype = x.dtype
    if op == "max_pool2d" and not is_float(dtype):  # integers pool exactly in float64
        x = c.make("cast", x, to="float64", what="float")
    y = c.make(op, x, what="pool" if one_d or count_pad or x.dtype != dtype else None, **attrs)
    if y.dtype != dtype:
        y = c.make("cast", y, to=dtype, what="pooled" if one_d else None)
    return _back(c, y, one_d)


@ONNX_OPS.register_op("LpPool", "abs, pow, avg_pool2d (any rank: gather, sum), mul")
def _lp_pool(c: Ctx):
    """(sum over the window of |x|^p)^(1/p): the mean with padding counted, times the window."""
    x = c.v(0)
    p = float(c.int_("p", 2))
    powered = c.make("pow", c.make("abs", x, what="abs"), c.scalar(p, x, "p"), what="powered")
    mean = _pool(c.with_args([powered]), "avg_pool2d", count_pad=True)
    kernel = c.ints("kernel_shape")
    total = c.make("mul", mean, c.scalar(math.prod(kernel), x, "window"), what="total")
    return c.make("pow", total, c.scalar(1 / p, x, "inv_p"))


ONNX_OPS.add("MaxPool", "max_pool2d; gather, max (3-D, dilated)", lambda c: _pool(c, "max_pool2d"))
ONNX_OPS.add("AveragePool", "avg_pool2d; gather, sum, div (3-D, dilated)", lambda c: _pool(c, "avg_pool2d"))


@ONNX_OPS.register_op("GlobalAveragePool", "mean")
def _global_avg(c: Ctx):
    x = c.v(0)
    return c.make("mean", x, axes=list(range(2, len(x.shape))), keepdims=True)


@ONNX_OPS.register_op("GlobalMaxPool", "max")
def _global_max(c: Ctx):
    x = c.v(0)
    return c.make("max", x, axes=list(range(2, len(x.shape))), keepdims=True)


# --- normalisations -------------------------------------------------------------------------------


def _per_channel(c: Ctx, v: Value, rank: int, what: str) -> Value:
    return c.make("reshape", v, shape=[1, v.shape[0], *([1] * (rank - 2))], what=what)


def _normalize(c: Ctx, x: Value, axes: list[int], eps: float) -> tuple[Value, Value, Value]:
    """(x - mean) * rsqrt(var + eps) over `axes`, and the mean and inverse deviation (kept dims)."""
    mean = c.make("mean", x, axes=axes, keepdims=True, what="mean")
    centred = c.make("sub", x, mean, what="centred")
    var = c.make("mean", c.make("mul", centred, centred, what="sq"), axes=axes, keepdims=True, what="var")
    inv = c.make("rsqrt", c.make("add", var, c.scalar(eps, var, "eps"), what="var_eps"), what="inv_std")
    return c.make("mul", centred, inv, what="normed"), mean, inv


def _stash(c: Ctx, x: Value) -> Value:
    """x in the stash type (stash_type=1: float32) the statistics are computed in."""
    if c.int_("stash_type", 1) == 1 and x.dtype != "float32":
        return c.make("cast", x, to="float32", what="stash")
    return x


@ONNX_OPS.register_op("BatchNormalization", "batch_norm")
def _batch_norm(c: Ctx):
    if c.int_("training_mode", 0) or c.n_outputs > 1:
        raise c.unsupported("training mode (batch statistics, running-mean outputs) is a training op")
    x = c.v(0)
    if len(x.shape) < 2:
        raise c.fail(f"needs a channel axis, got {x.type}")
    return c.make("batch_norm", x, c.v(1), c.v(2), c.v(3), c.v(4), axis=1, epsilon=c.float_("epsilon", 1e-5))


@ONNX_OPS.register_op("LayerNormalization", "mean, sub, mul, rsqrt, add")
def _layer_norm(c: Ctx):
    x = c.v(0)
    rank = len(x.shape)
    axis = c.axis(c.int_("axis", -1), rank)
    xs = _stash(c, x)
    normed, mean, inv = _normalize(c, xs, list(range(axis, rank)), c.float_("epsilon", 1e-5))
    if normed.dtype != x.dtype:
        normed = c.make("cast", normed, to=x.dtype, what="normed_x")
    y = c.make("mul", normed, c.v(1), what="scaled")
    if c.has(2):
        y = c.make("add", y, c.v(2), what="shifted")
    return y, mean, inv


@ONNX_OPS.register_op("RMSNormalization", "mean, mul, rsqrt")
def _rms_norm(c: Ctx):
    x = c.v(0)
    rank = len(x.shape)
    axis = c.axis(c.int_("axis", -1), rank)
    xs = _stash(c, x)
    ms = c.make("mean", c.make("mul", xs, xs, what="sq"), axes=list(range(axis, rank)), keepdims=True, what="ms")
    inv = c.make("rsqrt", c.make("add", ms, c.scalar(c.float_("epsilon", 1e-5), ms, "eps"), what="ms_eps"),
                 what="inv_rms")
    normed = c.make("mul", xs, inv, what="normed")
    if normed.dtype != x.dtype:
        normed = c.make("cast", normed, to=x.dtype, what="normed_x")
    return c.make("mul", normed, c.v(1))


@ONNX_OPS.register_op("InstanceNormalization", "mean, sub, mul, rsqrt, add")
def _instance_norm(c: Ctx):
    x = c.v(0)
    rank = len(x.shape)
    normed, _, _ = _normalize(c, x, list(range(2, rank)), c.float_("epsilon", 1e-5))
    y = c.make("mul", normed, _per_channel(c, c.v(1), rank, "scale"), what="scaled")
    return c.make("add", y, _per_channel(c, c.v(2), rank, "bias"))


@ONNX_OPS.register_op("GroupNormalization", "reshape, mean, sub, mul, rsqrt, add")
def _group_norm(c: Ctx):
    x = c.v(0)
    groups = c.int_("num_groups")
    n, ch = x.shape[:2]
    if ch % groups:
        raise c.fail(f"{ch} channels do not split into {groups} groups")
    grouped = c.make("reshape", _stash(c, x), shape=[n, groups, x.type.size // (n * groups)],
                     what="grouped")
    normed, _, _ = _normalize(c, grouped, [2], c.float_("epsilon", 1e-5))
    normed = c.make("reshape", normed, shape=x.shape, what="ungrouped")
    if normed.dtype != x.dtype:
        normed = c.make("cast", normed, to=x.dtype, what="normed_x")
    rank = len(x.shape)
    y = c.make("mul", normed, _per_channel(c, c.v(1), rank, "scale"), what="scaled")
    return c.make("add", y, _per_channel(c, c.v(2), rank, "bias"))


@ONNX_OPS.register_op("MeanVarianceNormalization", "mean, sub, mul, sqrt, div")
def _mvn(c: Ctx):
    x = c.v(0)
    axes = c.ints("axes", [0, 2, 3])
    axes = sorted({c.axis(a, len(x.shape), "axes") for a in axes})
    mean = c.make("mean", x, axes=axes, keepdims=True, what="mean")
    centred = c.make("sub", x, mean, what="centred")
    var = c.make("mean", c.make("mul", centred, centred, what="sq"), axes=axes, keepdims=True, what="var")
    std = c.make("add", c.make("sqrt", var, what="std"), c.scalar(1e-9, var, "eps"), what="std_eps")
    return c.make("div", centred, std)


@ONNX_OPS.register_op("LpNormalization", "sum, abs / mul, sqrt, div")
def _lp_norm(c: Ctx):
    x = c.v(0)
    axis = c.axis(c.int_("axis", -1), len(x.shape))
    p = c.int_("p", 2)
    if p == 1:
        norm = c.make("sum", c.make("abs", x, what="abs"), axes=[axis], keepdims=True, what="norm")
    elif p == 2:
        norm = c.make("sqrt", c.make("sum", c.make("mul", x, x, what="sq"), axes=[axis], keepdims=True,
                                     what="sumsq"), what="norm")
    else:
        raise c.fail(f"p must be 1 or 2, got {p}")
    zero = c.scalar(0, norm, "zero")
    safe = c.make("where", c.make("equal", norm, zero, what="is_zero"), c.scalar(1, norm, "one"), norm, what="safe")
    return c.make("div", x, safe)  # a zero vector stays zero (the ONNX reference)


@ONNX_OPS.register_op("LRN", "pad, slice, add, pow, div")
def _lrn(c: Ctx):
    x = c.v(0)
    size = c.int_("size")
    alpha, beta, bias = c.float_("alpha", 1e-4), c.float_("beta", 0.75), c.float_("bias", 1.0)
    rank = len(x.shape)
    sq = c.make("mul", x, x, what="sq")
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    before, after = [0] * rank, [0] * rank
    before[1], after[1] = lo, hi
    padded = c.make("pad", sq, before=before, after=after, value=0.0, what="padded")
    total = None
    for k in range(size):
        begin, end = [0] * rank, list(x.shape)
        begin[1], end[1] = k, k + x.shape[1]
        part = c.make("slice", padded, begin=begin, end=end, what=f"win{k}")
        total = part if total is None else c.make("add", total, part, what=f"acc{k}")
    base = c.make("add", c.make("mul", total, c.scalar(alpha / size, x, "alpha"), what="scaled"),
                  c.scalar(bias, x, "bias"), what="base")
    return c.make("div", x, c.make("pow", base, c.scalar(beta, x, "beta"), what="denom"))


# --- softmax family -------------------------------------------------------------------------------


@ONNX_OPS.register_op("Softmax", "softmax")
def _softmax(c: Ctx):
    x = c.v(0)
    return c.make("softmax", x, axis=c.axis(c.int_("axis", -1), len(x.shape)))


@ONNX_OPS.register_op("LogSoftmax", "log_softmax")
def _log_softmax(c: Ctx):
    x = c.v(0)
    return c.make("log_softmax", x, axis=c.axis(c.int_("axis", -1), len(x.shape)))


@ONNX_OPS.register_op("Hardmax", "argmax, one_hot")
def _hardmax(c: Ctx):
    x = c.v(0)
    axis = c.axis(c.int_("axis", -1), len(x.shape))
    index = c.make("argmax", x, axis=axis, keepdims=False, what="index")
    return c.make("one_hot", index, depth=x.shape[axis], axis=axis, dtype=x.dtype)


@ONNX_OPS.register_op("SoftmaxCrossEntropyLoss", "cross_entropy, log_softmax (with class weights or more "
                      "than 2 dims: ONNX's function body)")
def _softmax_cross_entropy(c: Ctx):
    """The loss PyTorch exports for `F.cross_entropy` as one akg cross_entropy (a kernel like a
    .mir model's, not the dozen ops of ONNX's function body: gathers of flattened indices,
    masks, a weighted mean)."""
    scores = c.v(0)
    if c.has(2) or len(scores.shape) != 2:
        raise InlineFunctionBody()
    reduction = c.str_("reduction", "mean")
    if reduction not in ("mean", "sum", "none"):
        raise c.fail(f"reduction must be mean, sum or none, got '{reduction}'")
    loss = c.make("cross_entropy", scores, c.v(1), reduction=reduction, ignore_index=c.get("ignore_index", None))
    if c.wants(1):
        return loss, c.make("log_softmax", scores, axis=1, what="log_prob")
    return loss


@ONNX_OPS.register_op("Dropout", "(identity at inference)")
def _dropout(c: Ctx):
    training = c.known(2, "training_mode")
    if training is not None and bool(np.asarray(training).reshape(-1)[0]):
        raise c.unsupported("training_mode=True draws a random mask (a training op)")
    x = c.v(0)
    y = c.make("reshape", x, shape=x.shape)
    if c.wants(1):
        return y, c.imp.const(np.ones(x.shape, bool), f"{c.name}.mask")
    return y


"""Convolution and pooling on NCHW tensors: conv2d (stride, padding, dilation, groups;
depthwise is groups == channels), max_pool2d, avg_pool2d, global_avg_pool2d."""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from akg.errors import ShapeError
from akg.graph.ops.registry import CONV, POOL, Attr, defop
from akg.graph.types import TensorType, is_float


def _positive(values) -> str | None:
    return "must be positive" if any(v <= 0 for v in values) else None


def _nonneg(values) -> str | None:
    return "must not be negative" if any(v < 0 for v in values) else None


def pair(values: tuple[int, ...], what: str) -> tuple[int, int]:
    if len(values) == 1:
        return values[0], values[0]
    if len(values) == 2:
        return values[0], values[1]
    raise ShapeError(f"{what} needs 1 or 2 values, got {list(values)}")


def pads4(padding: tuple[int, ...]) -> tuple[int, int, int, int]:
    """[p], [ph, pw] or [top, left, bottom, right] -> (top, left, bottom, right)."""
    if len(padding) in (1, 2):
        ph, pw = pair(padding, "padding")
        return ph, pw, ph, pw
    if len(padding) == 4:
        return tuple(padding)  # type: ignore[return-value]
    raise ShapeError(f"padding needs 1, 2 or 4 values, got {list(padding)}")


def window_out(size: int, k: int, stride: int, pad_lo: int, pad_hi: int, dilation: int = 1,
               ceil_mode: bool = False) -> int:
    """Number of window positions along one axis (PyTorch's rule for ceil_mode)."""
    span = dilation * (k - 1) + 1
    room = size + pad_lo + pad_hi - span
    if room < 0:
        raise ShapeError(f"window of extent {span} does not fit an axis of {size} (+{pad_lo}+{pad_hi} padding)")
    if not ceil_mode:
        return room // stride + 1
    out = -(-room // stride) + 1
    if (out - 1) * stride >= size + pad_lo:  # the last window must start inside the input
        out -= 1
    return out


def _windows(x: np.ndarray, k: tuple[int, int], s: tuple[int, int], d: tuple[int, int],
             out_hw: tuple[int, int]) -> np.ndarray:
    """View [N, C, OH, OW, KH, KW] of an already padded x."""
    eh, ew = d[0] * (k[0] - 1) + 1, d[1] * (k[1] - 1) + 1
    win = sliding_window_view(x, (eh, ew), axis=(2, 3))
    return win[:, :, : out_hw[0] * s[0] : s[0], : out_hw[1] * s[1] : s[1], :: d[0], :: d[1]]


# --- conv2d -----------------------------------------------------------------------------------

def _four_pads(padding: tuple[int, ...]) -> tuple[int, ...]:
    """[p] and [ph, pw] spelled as [top, left, bottom, right] (other lengths are left for the
    shape check to refuse)."""
    return pads4(padding) if len(padding) in (1, 2) else padding


_CONV_ATTRS = [
    Attr("strides", "ints", (1, 1), check=_positive),
    Attr("padding", "ints", (0, 0, 0, 0), check=_nonneg, canonical=_four_pads),
    Attr("dilation", "ints", (1, 1), check=_positive),
    Attr("groups", "int", 1, check=lambda g: None if g > 0 else "must be positive"),
]


def _conv2d_infer(x: TensorType, w: TensorType, strides, padding, dilation, groups) -> TensorType:
    if x.rank != 4 or w.rank != 4:
        raise ShapeError(f"needs x[N,C,H,W] and weight[O,C/groups,KH,KW], got {x} and {w}")
    if x.dtype != w.dtype or not is_float(x.dtype):
        raise ShapeError(f"needs floating-point operands of one dtype, got {x} and {w}")
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    if c % groups or o % groups or cg * groups != c:
        raise ShapeError(f"{c} input channels, {o} filters and groups={groups} do not fit weight {w}")
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = pair(strides, "strides"), pair(dilation, "dilation"), pads4(padding)
    return TensorType(
        (n, o, window_out(h, kh, sh, pt, pb, dh), window_out(wd, kw, sw, pl, pr, dw)), x.dtype
    )


def _conv2d_flops(ins, outs, attrs) -> int:
    o, cg, kh, kw = ins[1].shape
    return 2 * outs[0].size * cg * kh * kw


def _accumulate_dtype(dtype) -> np.dtype:
    return np.dtype(np.float32) if dtype == np.float16 else np.dtype(dtype)


@defop("conv2d", kind=CONV, infer=_conv2d_infer, attrs=_CONV_ATTRS, flops=_conv2d_flops)
def conv2d(x, w, strides, padding, dilation, groups):
    """2-D cross-correlation, NCHW input, OIHW weight (fp16 accumulates in fp32)."""
    out_t = _conv2d_infer(TensorType.of(x), TensorType.of(w), strides, padding, dilation, groups)
    pt, pl, pb, pr = pads4(padding)
    acc = _accumulate_dtype(x.dtype)
    xp = np.pad(x.astype(acc), [(0, 0), (0, 0), (pt, pb), (pl, pr)])
    o, cg, kh, kw = w.shape
    win = _windows(xp, (kh, kw), pair(strides, "strides"), pair(dilation, "dilation"), out_t.shape[2:])
    n, _, oh, ow = out_t.shape
    win = win.reshape(n, groups, cg, oh, ow, kh, kw)
    wg = w.astype(acc).reshape(groups, o // groups, cg, kh, kw)
    out = np.einsum("ngcyxij,gocij->ngoyx", win, wg, optimize=True)
    return out.reshape(out_t.shape).astype(x.dtype)


# --- pooling ----------------------------------------------------------------------------------

_POOL_ATTRS = [
    Attr("kernel", "ints", check=_positive),
    Attr("strides", "ints", None, optional=True, check=_positive),
    Attr("padding", "ints", (0, 0, 0, 0), check=_nonneg, canonical=_four_pads),
    Attr("ceil_mode", "bool", False),
]


def pool_geometry(x: TensorType, kernel, strides, padding, ceil_mode):
    """(kernel, strides, pads4, output [N, C, OH, OW]) of a pooling window."""
    if x.rank != 4 or not is_float(x.dtype):
        raise ShapeError(f"needs a floating-point x[N,C,H,W], got {x}")
    k = pair(kernel, "kernel")
    s = pair(strides, "strides") if strides is not None else k
    p = pads4(padding)
    if p[0] >= k[0] or p[2] >= k[0] or p[1] >= k[1] or p[3] >= k[1]:
        raise ShapeError(f"padding {list(p)} must be smaller than the kernel {list(k)}")
    n, c, h, w = x.shape
    oh = window_out(h, k[0], s[0], p[0], p[2], 1, ceil_mode)
    ow = window_out(w, k[1], s[1], p[1], p[3], 1, ceil_mode)
    return k, s, p, (n, c, oh, ow)


def _pool_infer(x: TensorType, kernel, strides, padding, ceil_mode, **_) -> TensorType:
    return x.with_shape(pool_geometry(x, kernel, strides, padding, ceil_mode)[3])


def _pool_flops(ins, outs, attrs) -> int:
    kh, kw = pair(attrs["kernel"], "kernel")
    return outs[0].size * kh * kw


def _padded_windows(x, kernel, strides, padding, ceil_mode, fill):
    k, s, (pt, pl, pb, pr), out = pool_geometry(TensorType.of(x), kernel, strides, padding, ceil_mode)
    # ceil_mode may need more than the declared padding on the high side
    extra_h = max(0, (out[2] - 1) * s[0] + k[0] - (x.shape[2] + pt + pb))
    extra_w = max(0, (out[3] - 1) * s[1] + k[1] - (x.shape[3] + pl + pr))
    xp = np.pad(x, [(0, 0), (0, 0), (pt, pb + extra_h), (pl, pr + extra_w)], constant_values=fill)
    return _windows(xp, k, s, (1, 1), out[2:]), (k, s, (pt, pl, pb, pr), out)


@defop("max_pool2d", kind=POOL, infer=_pool_infer, attrs=_POOL_ATTRS, flops=_pool_flops)
def max_pool2d(x, kernel, strides, padding, ceil_mode):
    """Max over each window; padding never wins (it is -inf)."""
    win, _ = _padded_windows(x, kernel, strides, padding, ceil_mode, -np.inf)
    return win.max(axis=(-2, -1))


@defop("avg_pool2d", kind=POOL, infer=_pool_infer, flops=_pool_flops,
       attrs=[*_POOL_ATTRS, Attr("count_include_pad", "bool", True)])
def avg_pool2d(x, kernel, strides, padding, ceil_mode, count_include_pad):
    """Mean over each window; the divisor counts declared padding when count_include_pad,
    never the extra cells that ceil_mode adds past the padding."""
    win, (k, s, (pt, pl, pb, pr), out) = _padded_windows(x, kernel, strides, padding, ceil_mode, 0)
    acc = _accumulate_dtype(x.dtype)
    total = win.astype(acc).sum(axis=(-2, -1))
    return (total / window_counts(x.shape[2:], k, s, (pt, pl, pb, pr), out[2:], count_include_pad)).astype(x.dtype)


def window_counts(hw, k, s, pads, out_hw, count_include_pad: bool) -> np.ndarray:
    """[OH, OW] divisors of avg_pool2d: window cells inside the input (and the declared padding
    when count_include_pad), never the extra cells ceil_mode adds."""
    (h, w), (pt, pl, pb, pr) = hw, pads
    lo_h = np.arange(out_hw[0]) * s[0] - (0 if count_include_pad else pt)
    lo_w = np.arange(out_hw[1]) * s[1] - (0 if count_include_pad else pl)
    lim_h = h + (pt + pb if count_include_pad else 0)
    lim_w = w + (pl + pr if count_include_pad else 0)
    cnt_h = np.minimum(lo_h + k[0], lim_h) - np.maximum(lo_h, 0)
    cnt_w = np.minimum(lo_w + k[1], lim_w) - np.maximum(lo_w, 0)
    return np.outer(cnt_h, cnt_w)


def _gap_infer(x: TensorType, keepdims) -> TensorType:
    if x.rank != 4 or not is_float(x.dtype):
        raise ShapeError(f"needs a floating-point x[N,C,H,W], got {x}")
    return x.with_shape((*x.shape[:2], 1, 1) if keepdims else x.shape[:2])


@defop("global_avg_pool2d", kind=POOL, infer=_gap_infer, attrs=[Attr("keepdims", "bool", True)],
       flops=lambda ins, outs, attrs: ins[0].size)
def global_avg_pool2d(x, keepdims):
    """Mean over H and W."""
    return x.astype(_accumulate_dtype(x.dtype)).mean(axis=(2, 3), keepdims=keepdims).astype(x.dtype)


# --- compute definitions ----------------------------------------------------------------------

from akg.graph.compute.expr import PHASES, call, cast, compute, const, reduce, reduce_axis, select  # noqa: E402
from akg.graph.compute.helpers import inside  # noqa: E402
from akg.graph.ops.reduce import accumulate_dtype  # noqa: E402
from akg.graph.ops.registry import defcompute  # noqa: E402


def padded(name: str, x, pads: tuple[int, int, int, int], fill: float):
    """x with its H and W axes padded by (top, left, bottom, right) cells of `fill`."""
    pt, pl, pb, pr = pads
    if not any(pads):
        return x
    n, c, h, w = x.shape
    return compute((n, c, h + pt + pb, w + pl + pr),
                   lambda b, ch, y, z: select(inside((y - pt, z - pl), (h, w)), x[b, ch, y - pt, z - pl],
                                              const(fill, x.dtype)), f"{name}.pad")


def padded_phases(name: str, x, pads: tuple[int, int, int, int], stride: int, fill: float):
    """x padded as `padded` does, its columns split into `stride` phases: [N, C, H', stride,
    ceil(W' / stride)], column j at [..., j % stride, j // stride] (cells past W' are `fill`), so
    that a window moving by `stride` along the row reads one phase contiguously."""
    pt, pl, pb, pr = pads
    n, c, h, w = x.shape
    cols = -(-(w + pl + pr) // stride)
    return compute((n, c, h + pt + pb, stride, cols),
                   lambda b, ch, y, p, z: select(inside((y - pt, z * stride + p - pl), (h, w)),
                                                 x[b, ch, y - pt, z * stride + p - pl], const(fill, x.dtype)),
                   f"{name}.pad", layout=PHASES)


IMAGE_CHANNELS = 4  # input channels per group of a conv over an image (gray, RGB, RGBA)


def image_rows(channels: int, stride: int, out_width: int, lanes: int) -> bool:
    """Whether a dense conv over an image's few channels (`channels` per group <=
    IMAGE_CHANNELS: a CNN's stem), strided along its rows, runs along its output rows: vectors
    of output columns, each tap loading one phase of the padded input contiguously
    (`padded_phases`), each accumulator a piece of an NCHW row. Vectorised over its output
    channels instead (a channels-last weight, `akg.graph.layout`), its reduction is too shallow
    (3 x 7 x 7 taps) for the epilogue that transposes each tile of 8 positions x 32 channels
    into NCHW rows, and every output row goes to as many places in memory as there are
    channels. ResNet-18's 7x7/2 stem at 224 px: 808-846 us warm, 1134-1176 us with its data
    out of cache as channel vectors, 731 / 773 us along the rows (2 Xeon cores). `lanes`: the
    target's vector lanes (0: unknown, no)."""
    return lanes > 1 and stride > 1 and channels <= IMAGE_CHANNELS and out_width >= lanes


@defcompute("conv2d")
def _conv2d_compute(ctx, x, w, strides, padding, dilation, groups):
    (sh, sw), (dh, dw) = pair(strides, "strides"), pair(dilation, "dilation")
    o, cg, kh, kw = w.shape
    per_group = o // groups
    acc = accumulate_dtype(x.dtype)
    # a strided grouped conv (a depthwise conv, whose vectors run along its output rows), or a
    # strided conv over an image's channels (`image_rows`): the padded input in phases, so
    # each vector of the row loads one phase contiguously instead of gathering every
    # stride-th element
    lanes = ctx.vector_bits // (8 * np.dtype(x.dtype).itemsize)
    phased = sw > 1 and ((groups > 1 and any(pads4(padding)))
                         or (groups == 1 and ctx.window_phases and image_rows(cg, sw, ctx.out.shape[-1], lanes)))
    xp = padded_phases(ctx.name, x, pads4(padding), sw, 0.0) if phased else padded(ctx.name, x, pads4(padding), 0.0)

    def body(b, f, y, z):
        c, ry, rx = (reduce_axis(cg, f"{ctx.name}.rc"), reduce_axis(kh, f"{ctx.name}.ry"),
                     reduce_axis(kw, f"{ctx.name}.rx"))
        channel = c if groups == 1 else (f // per_group) * cg + c
        if phased:  # column z * sw + rx * dw is phase (rx * dw) % sw at z + (rx * dw) // sw
            pixel = xp[b, channel, y * sh + ry * dh, (rx * dw) % sw, z + (rx * dw) // sw]
        else:
            pixel = xp[b, channel, y * sh + ry * dh, z * sw + rx * dw]
        term = cast(acc, pixel) * cast(acc, w[f, c, ry, rx])
        return reduce("sum", term, [c, ry, rx])

    name = ctx.name if acc == x.dtype else ctx.name + ".acc"
    total = compute(ctx.out.shape, body, name)
    if acc != x.dtype:
        total = compute(ctx.out.shape, lambda *i: cast(x.dtype, total[i]), ctx.name)
    return total


def _pool_source(ctx, x, kernel, strides, padding, ceil_mode, fill):
    """The window geometry, and a function (b, c, row, tap row, col, tap col) -> the padded
    input under that tap. A strided padded pool (ResNet's 3x3/2 max-pool) reads its padded
    input in phases of its columns, as a strided depthwise conv does (`padded_phases`), so a
    vector of outputs loads each tap's phase contiguously instead of gathering every
    stride-th element; not for a target whose vector copies cannot build the phases
    (`ComputeCtx.window_phases`, from `Target.window_phases`)."""
    k, s, p, out = pool_geometry(TensorType(x.shape, x.dtype), kernel, strides, padding, ceil_mode)
    extra = (max(0, (out[2] - 1) * s[0] + k[0] - (x.shape[2] + p[0] + p[2])),
             max(0, (out[3] - 1) * s[1] + k[1] - (x.shape[3] + p[1] + p[3])))
    pads = (p[0], p[1], p[2] + extra[0], p[3] + extra[1])
    if ctx.window_phases and s[1] > 1 and any(pads):
        xp = padded_phases(ctx.name, x, pads, s[1], fill)
        return k, s, p, out, lambda b, c, y, ry, z, rx: xp[b, c, y * s[0] + ry, rx % s[1], z + rx // s[1]]
    xp = padded(ctx.name, x, pads, fill)
    return k, s, p, out, lambda b, c, y, ry, z, rx: xp[b, c, y * s[0] + ry, z * s[1] + rx]


@defcompute("max_pool2d")
def _max_pool_compute(ctx, x, kernel, strides, padding, ceil_mode):
    k, s, _, out, tap = _pool_source(ctx, x, kernel, strides, padding, ceil_mode, float("-inf"))

    def body(b, c, y, z):
        ry, rx = reduce_axis(k[0], f"{ctx.name}.ry"), reduce_axis(k[1], f"{ctx.name}.rx")
        return reduce("max", tap(b, c, y, ry, z, rx), [ry, rx])

    return compute(out, body, ctx.name)


@defcompute("avg_pool2d")
def _avg_pool_compute(ctx, x, kernel, strides, padding, ceil_mode, count_include_pad):
    k, s, (pt, pl, pb, pr), out, tap = _pool_source(ctx, x, kernel, strides, padding, ceil_mode, 0.0)
    acc = accumulate_dtype(x.dtype)

    def window_sum(b, c, y, z):
        ry, rx = reduce_axis(k[0], f"{ctx.name}.ry"), reduce_axis(k[1], f"{ctx.name}.rx")
        return reduce("sum", cast(acc, tap(b, c, y, ry, z, rx)), [ry, rx])

    total = compute(out, window_sum, ctx.name + ".sum")
    h, w = x.shape[2:]
    lim_h, lim_w = (h + pt + pb, w + pl + pr) if count_include_pad else (h, w)
    off_h, off_w = (0, 0) if count_include_pad else (pt, pl)

    def count(v, stride, kk, off, lim):  # window cells inside [0, lim) along one axis
        lo = v * stride - off
        return call("min", lo + kk, const(lim, "int32")) - call("max", lo, const(0, "int32"))

    def body(b, c, y, z):
        cells = count(y, s[0], k[0], off_h, lim_h) * count(z, s[1], k[1], off_w, lim_w)
        return cast(x.dtype, total[b, c, y, z] / cast(acc, cells))

    return compute(out, body, ctx.name)


@defcompute("global_avg_pool2d")
def _global_avg_pool_compute(ctx, x, keepdims):
    n, c, h, w = x.shape
    acc = accumulate_dtype(x.dtype)

    def window_sum(b, ch, *_):
        ry, rx = reduce_axis(h, f"{ctx.name}.ry"), reduce_axis(w, f"{ctx.name}.rx")
        return reduce("sum", cast(acc, x[b, ch, ry, rx]), [ry, rx])

    total = compute(ctx.out.shape, window_sum, ctx.name + ".sum")
    return compute(ctx.out.shape, lambda *i: cast(x.dtype, total[i] / const(h * w, acc)), ctx.name)


# --- VJP rules ----------------------------------------------------------------------------------

from akg.graph.ops.registry import defvjp  # noqa: E402


def flipped_transposed(e, w, groups: int):
    """The weight of conv2d's input gradient: kernels flipped in H and W, input and output
    channels swapped within each group ([O, C/G, KH, KW] -> [C, O/G, KH, KW])."""
    o, cg, kh, kw = w.shape
    flipped = e.op("strided_slice", w, begin=[0, 0, kh - 1, kw - 1], end=[o, cg, -kh - 1, -kw - 1],
                   strides=[1, 1, -1, -1], hint="flipped")
    if groups == 1:
        return e.op("transpose", flipped, perm=[1, 0, 2, 3], hint="wt")
    grouped = e.op("reshape", flipped, shape=[groups, o // groups, cg, kh, kw], hint="wgroups")
    swapped = e.op("transpose", grouped, perm=[0, 2, 1, 3, 4], hint="wswap")
    return e.op("reshape", swapped, shape=[groups * cg, o // groups, kh, kw], hint="wt")


def conv_input_grad(e, g, wt, x_shape, strides, pads, dilation, groups: int):
    """dx of y = conv2d(x, w) as a stride-1 conv2d: g with zeros inserted between its elements
    (the strides), padded by the dilated kernel extent less the forward padding (cropped where
    that is negative), correlated with `wt = flipped_transposed(w)` at the forward dilation."""
    _, _, h, w = x_shape
    kh, kw = wt.shape[2:]
    (sh, sw), (dh, dw), (pt, pl, _, _) = strides, dilation, pads
    gd = e.op("dilate", g, strides=[1, 1, sh, sw], hint="gd") if sh > 1 or sw > 1 else g
    lo = [(kh - 1) * dh - pt, (kw - 1) * dw - pl]
    hi = [h + pt - gd.shape[2], w + pl - gd.shape[3]]
    if min(lo + hi) < 0:  # the forward padding exceeds the kernel: those cotangents reach no input
        n, c = gd.shape[:2]
        gd = e.op("slice", gd, begin=[0, 0, max(0, -lo[0]), max(0, -lo[1])],
                  end=[n, c, gd.shape[2] - max(0, -hi[0]), gd.shape[3] - max(0, -hi[1])], hint="gcrop")
    padding = [max(0, lo[0]), max(0, lo[1]), max(0, hi[0]), max(0, hi[1])]
    return e.op("conv2d", gd, wt, padding=padding, dilation=[dh, dw], groups=groups, hint="dx")


def conv_weight_grad(e, g, x, w_shape, strides, pads, dilation, groups: int):
    """dw of y = conv2d(x, w) as a conv2d with roles swapped: batch <-> channels, so the forward
    stride becomes the dilation and the forward dilation the stride."""
    n, c, h, w = x.shape
    o, cg, kh, kw = w_shape
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = strides, dilation, pads
    _, _, oh, ow = g.shape
    if groups == 1:
        xt = e.op("transpose", x, perm=[1, 0, 2, 3], hint="xt")
        gt = e.op("transpose", g, perm=[1, 0, 2, 3], hint="gt")
    else:
        og = o // groups
        xt = e.op("reshape", e.op("transpose", e.op("reshape", x, shape=[n, groups, cg, h, w], hint="xg"),
                                  perm=[2, 1, 0, 3, 4], hint="xgt"), shape=[cg, groups * n, h, w], hint="xt")
        gt = e.op("reshape", e.op("transpose", e.op("reshape", g, shape=[n, groups, og, oh, ow], hint="gg"),
                                  perm=[1, 2, 0, 3, 4], hint="ggt"), shape=[o, n, oh, ow], hint="gt")
    # rows past the last window start: trim them from the padding, slice off the rest
    excess = [h + pt + pb - ((oh - 1) * sh + 1) - (kh - 1) * dh, w + pl + pr - ((ow - 1) * sw + 1) - (kw - 1) * dw]
    pb, pr = pb - min(pb, excess[0]), pr - min(pr, excess[1])
    dwt = e.op("conv2d", xt, gt, strides=[dh, dw], padding=[pt, pl, pb, pr], dilation=[sh, sw],
               groups=groups, hint="dwt")
    if dwt.shape[2:] != (kh, kw):
        dwt = e.op("slice", dwt, begin=[0, 0, 0, 0], end=[cg, o, kh, kw], hint="dwcrop")
    return e.op("transpose", dwt, perm=[1, 0, 2, 3], hint="dw")


@defvjp("conv2d")
def _vjp_conv2d(e, g, x, w, strides, padding, dilation, groups):
    s, d, p = pair(strides, "strides"), pair(dilation, "dilation"), pads4(padding)
    dx = conv_input_grad(e, g, flipped_transposed(e, w, groups), x.shape, s, p, d, groups)
    return dx, conv_weight_grad(e, g, x, w.shape, s, p, d, groups)


def _pool_pads(x, kernel, strides, padding, ceil_mode):
    """(kernel, strides, padding with ceil_mode's extra high cells, output shape)."""
    k, s, (pt, pl, pb, pr), out = pool_geometry(x.type, kernel, strides, padding, ceil_mode)
    extra_h = max(0, (out[2] - 1) * s[0] + k[0] - (x.shape[2] + pt + pb))
    extra_w = max(0, (out[3] - 1) * s[1] + k[1] - (x.shape[3] + pl + pr))
    return k, s, (pt, pl, pb + extra_h, pr + extra_w), out


@defvjp("avg_pool2d")
def _vjp_avg_pool2d(e, g, x, kernel, strides, padding, ceil_mode, count_include_pad):
    """Average pooling is a depthwise conv2d with weights 1/count: its input gradient is the
    conv2d input gradient of g / count with all-ones kernels."""
    k, s, pads, out = _pool_pads(x, kernel, strides, padding, ceil_mode)
    declared = pool_geometry(x.type, kernel, strides, padding, ceil_mode)[2]
    counts = window_counts(x.shape[2:], k, s, declared, out[2:], count_include_pad)
    scaled = e.op("mul", g, e.const((1 / counts).astype(x.dtype)), hint="scaled")
    c = x.shape[1]
    wt = e.const(np.ones((c, 1, *k), x.dtype))
    return (conv_input_grad(e, scaled, wt, x.shape, s, pads, (1, 1), c),)


@defvjp("max_pool2d")
def _vjp_max_pool2d(e, g, x, kernel, strides, padding, ceil_mode):
    """Each window's cotangent goes to its first maximal element (as PyTorch): for every
    kernel offset, pick the window elements equal to the max and not already taken, put g
    there (zero insertion for the stride, padding for the offset) and add up."""
    k, s, (pt, pl, pb, pr), out = _pool_pads(x, kernel, strides, padding, ceil_mode)
    n, c, h, w = x.shape
    xp = e.op("pad", x, before=[0, 0, pt, pl], after=[0, 0, pb, pr], value=float("-inf"), hint="xp") \
        if any((pt, pl, pb, pr)) else x
    hp, wp = xp.shape[2:]
    span = ((out[2] - 1) * s[0] + 1, (out[3] - 1) * s[1] + 1)
    taken = total = None
    for p in range(k[0]):
        for q in range(k[1]):
            seen = e.op("strided_slice", xp, begin=[0, 0, p, q], end=[n, c, p + span[0], q + span[1]],
                        strides=[1, 1, *s], hint=f"x{p}_{q}")
            hit = e.op("equal", seen, e.out, hint=f"hit{p}_{q}")
            if taken is None:
                first, taken = hit, hit
            else:
                first = e.op("logical_and", hit, e.op("logical_not", taken), hint=f"first{p}_{q}")
                taken = e.op("logical_or", taken, hit, hint=f"taken{p}_{q}")
            part = e.op("where", first, g, 0.0, hint=f"g{p}_{q}")
            if s != (1, 1):
                part = e.op("dilate", part, strides=[1, 1, *s], hint=f"gd{p}_{q}")
            part = e.op("pad", part, before=[0, 0, p, q], after=[0, 0, hp - p - span[0], wp - q - span[1]],
                        hint=f"at{p}_{q}")
            total = part if total is None else e.op("add", total, part, hint="sum")
    if xp is not x:
        total = e.op("slice", total, begin=[0, 0, pt, pl], end=[n, c, pt + h, pl + w], hint="dx")
    return (total,)


@defvjp("global_avg_pool2d")
def _vjp_global_avg_pool2d(e, g, x, keepdims):
    h, w = x.shape[2:]
    return (e.broadcast_back(e.op("div", g, float(h * w)), (2, 3), x.shape),)


# --- sharding rules ---------------------------------------------------------------------------
# Batch and channels split; the spatial dims stay whole (a split would need halo exchanges).

from akg.graph.ops.registry import defsharding  # noqa: E402


@defsharding("conv2d")
def _conv2d_sharding(call, mesh):
    """Each mesh axis splits the batch, the filters (the output channels), or the input
    channels (a partial sum); a grouped conv splits whole groups (local groups / pieces).
    Linear in each operand: a partial x or a partial weight gives a partial output."""
    from akg.graph.parallel.rules import Role, assign_roles, group_size, partial_role, with_local

    groups = call.attrs["groups"]
    roles = [Role("batch", ins=((0, 0),), outs=((0, 0),))]
    if groups == 1:
        roles += [Role("filters", ins=((1, 0),), outs=((0, 1),)),
                  Role("channels", ins=((0, 1), (1, 1)), partial_outs=(0,))]
    else:
        roles.append(Role("groups", ins=((0, 1), (1, 0)), outs=((0, 1),)))
    roles += [partial_role("partial_x", (0,)), partial_role("partial_w", (1,))]

    def finish(s, by_role):
        k = group_size(mesh, by_role, "groups")
        if k == 1:
            return s
        return with_local(s, groups=groups // k) if groups % k == 0 else None

    return assign_roles(call, mesh, roles, finish)


@defsharding("max_pool2d", "avg_pool2d", "global_avg_pool2d")
def _pool_sharding(call, mesh):
    """Batch and channels split; average pools are linear (partial in, partial out)."""
    from akg.graph.parallel.rules import Role, assign_roles, partial_role

    roles = [Role("batch", ins=((0, 0),), outs=((0, 0),)), Role("channels", ins=((0, 1),), outs=((0, 1),))]
    if call.op != "max_pool2d":
        roles.append(partial_role("partial", (0,)))
    return assign_roles(call, mesh, roles)

"""ONNX's resampling and transposed-convolution ops in the ONNX op table (`ONNX_OPS`): Resize
(and Upsample through the version converter), GridSample, ConvTranspose, Col2Im, MaxUnpool
and AffineGrid, as gathers, constant interpolation matrices and convolutions of akg's registry."""

from __future__ import annotations

import itertools
import math

import numpy as np

from akg.graph.io.onnx_ops import ONNX_OPS, OnnxOpContext as Ctx
from akg.graph.io.onnx_reduce import reverse
from akg.graph.ir import Value
from akg.graph.types import is_float

# --- Resize ---------------------------------------------------------------------------------------


def _source_coords(mode: str, out: int, size: int, scale: float, roi: tuple[float, float] = (0.0, 1.0)) -> np.ndarray:
    """Where each output index samples the input axis (ONNX's coordinate_transformation_mode;
    the resized length in its formulas is scale * size, not rounded; tf_crop_and_resize reads
    the region `roi` (start, end, normalised) of the axis)."""
    x = np.arange(out, dtype=np.float64)
    length = scale * size
    if mode == "tf_crop_and_resize":
        start, end = roi
        if out > 1:
            return start * (size - 1) + x * (end - start) * (size - 1) / (out - 1)
        return np.full(out, 0.5 * (start + end) * (size - 1))
    if mode == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        adjust = out / length
        centre = size / 2
        return centre * (1 - adjust) + (x + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if length > 1 else np.zeros(out)
    if mode == "align_corners":
        return x * (size - 1) / (length - 1) if length > 1 else np.zeros(out)
    if mode == "asymmetric":
        return x / scale
    raise ValueError(mode)


def _nearest(coords: np.ndarray, mode: str) -> np.ndarray:
    if mode == "round_prefer_floor":
        return np.ceil(coords - 0.5)
    if mode == "round_prefer_ceil":
        return np.floor(coords + 0.5)
    if mode == "floor":
        return np.floor(coords)
    if mode == "ceil":
        return np.ceil(coords)
    raise ValueError(mode)


def _cubic(r: float, a: float) -> list[float]:
    """The 4 tap weights of ONNX's cubic convolution at fraction r in (0, 1]."""
    def near(t: float) -> float:
        return ((a + 2) * t - (a + 3)) * t * t + 1

    def far(t: float) -> float:
        return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return [far(r + 1), near(r), near(1 - r), far(2 - r)]


def interpolation_matrix(coords: np.ndarray, size: int, mode: str, a: float, exclude_outside: bool) -> np.ndarray:
    """W[out, in] such that resampled = W @ axis: linear (2 taps) or cubic (4 taps) around each
    source coordinate, taps past the ends clamped to the edge (ONNX's edge padding), or dropped
    and the rest renormalised with exclude_outside."""
    w = np.zeros((len(coords), size))
    for i, x in enumerate(coords):
        base = math.floor(x)
        r = x - base
        if r == 0:  # an exact hit reads as the far end of the previous cell (ONNX's reference)
            base, r = base - 1, 1.0
        if mode == "linear":
            taps, weights = [base, base + 1], [1 - r, r]
        else:
            taps, weights = [base - 1, base, base + 1, base + 2], _cubic(r, a)
        if exclude_outside:
            weights = [wt if 0 <= t < size else 0.0 for t, wt in zip(taps, weights)]
            total = sum(weights)
            weights = [wt / total for wt in weights]
        for t, wt in zip(taps, weights):
            w[i, min(max(t, 0), size - 1)] += wt
    return w


def _antialias_taps(ratio: float, scale: float, mode: str, a: float) -> np.ndarray:
    """The tap weights of ONNX's antialiased filter (downsampling widens it by 1 / scale)."""
    scale = min(scale, 1.0)
    if mode == "linear":
        start = int(np.floor(-1 / scale) + 1)
        args = (np.arange(start, 2 - start) - ratio) * scale
        weights = np.clip(1 - np.abs(args), 0, 1)
    else:
        start = int(np.floor(-2 / scale) + 1)
        t = np.abs(scale * (np.arange(start, 2 - start) - ratio))
        near = ((a + 2) * t - (a + 3)) * t * t + 1
        far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
        weights = np.where(t <= 1, near, np.where(t < 2, far, 0.0))
    return weights / weights.sum()


def antialias_matrix(coords: np.ndarray, size: int, scale: float, mode: str, a: float,
                     exclude_outside: bool) -> np.ndarray:
    """W[out, in] of an antialiased linear / cubic resize, with ONNX's reference's choice of
    the taps around each coordinate (n nearest, ties to the smaller) and edge clamping."""
    base = np.floor(coords)
    ratios = np.where(coords == base, 1.0, coords - base)
    rows = [_antialias_taps(float(r), scale, mode, a) for r in ratios]
    n = len(rows[0])
    pad = int(np.ceil(n / 2))
    padded = coords + pad
    p = np.floor(padded).astype(np.int64)
    frac = padded - p
    if n % 2 == 0:
        offset = np.where(frac == 0, -(n // 2), -(n // 2) + 1)
    else:
        offset = np.where(frac <= 0.5, -((n - 1) // 2), -((n - 1) // 2) + 1)
    taps = (p + offset)[:, None] + np.arange(n)[None, :] - pad
    weights = np.asarray(rows)
    if exclude_outside:
        weights = np.where((taps < 0) | (taps >= size), 0.0, weights)
        total = weights.sum(axis=1, keepdims=True)
        weights = weights / np.where(total == 0, 1.0, total)
    w = np.zeros((len(coords), size))
    for i in range(len(coords)):
        for t, wt in zip(np.clip(taps[i], 0, size - 1), weights[i]):
            w[i, t] += wt
    return w


def _resize_axis(c: Ctx, x: Value, axis: int, out: int, scale: float, k: int,
                 roi: tuple[float, float] = (0.0, 1.0)) -> Value:
    size = x.shape[axis]
    transform = c.str_("coordinate_transformation_mode", "half_pixel")
    try:
        coords = _source_coords(transform, out, size, scale, roi)
    except ValueError:
        raise c.unsupported(f"coordinate_transformation_mode '{transform}' is not modelled") from None
    mode = c.str_("mode", "nearest")
    if mode == "nearest":
        try:
            index = _nearest(coords, c.str_("nearest_mode", "round_prefer_floor"))
        except ValueError:
            raise c.unsupported(f"nearest_mode '{c.str_('nearest_mode')}' is not modelled") from None
        index = np.clip(index, 0, size - 1).astype(np.int64)
        return c.make("gather", x, c.const(index, "int64", f"index{k}"), axis=axis, what=f"axis{k}")
    if mode not in ("linear", "cubic"):
        raise c.fail(f"mode '{mode}' is not one of nearest, linear, cubic")
    if not is_float(x.dtype):
        raise c.unsupported(f"{mode} resizing of {x.dtype} tensors is not modelled")
    if c.int_("antialias", 0):
        w = antialias_matrix(coords, size, scale, mode, c.float_("cubic_coeff_a", -0.75),
                             bool(c.int_("exclude_outside", 0)))
    else:
        w = interpolation_matrix(coords, size, mode, c.float_("cubic_coeff_a", -0.75),
                                 bool(c.int_("exclude_outside", 0)))
    rank = len(x.shape)
    perm = [d for d in range(rank) if d != axis] + [axis]
    moved = c.make("transpose", x, perm=perm, what=f"moved{k}") if axis != rank - 1 else x
    rows = c.make("reshape", moved, shape=[moved.type.size // size, size], what=f"rows{k}")
    mixed = c.make("matmul", rows, c.const(w.T, x.dtype, f"weights{k}"), what=f"mixed{k}")
    shaped = c.make("reshape", mixed, shape=[*moved.shape[:-1], out], what=f"shaped{k}")
    if axis == rank - 1:
        return shaped
    back = [perm.index(d) for d in range(rank)]
    return c.make("transpose", shaped, perm=back, what=f"axis{k}")


@ONNX_OPS.register_op("Resize", "gather (nearest), matmul by constant weights (linear, cubic, antialiased)")
def _resize(c: Ctx):
    x = c.v(0)
    rank = len(x.shape)
    if c.int_("antialias", 0) and c.str_("mode", "nearest") == "nearest":
        raise c.fail("antialias applies to linear and cubic modes")
    axes = [c.axis(a, rank, "axes") for a in (c.ints("axes", None) or range(rank))]
    scales = c.known(2, "scales")
    sizes = c.known_ints(3, "sizes")
    if scales is not None and np.asarray(scales).size:
        scale = [float(s) for s in np.asarray(scales).reshape(-1)]
        out = [int(math.floor(x.shape[a] * s)) for a, s in zip(axes, scale)]
    elif sizes:
        policy = c.str_("keep_aspect_ratio_policy", "stretch")
        ratios = [s / x.shape[a] for a, s in zip(axes, sizes)]
        if policy == "stretch":
            scale, out = ratios, list(sizes)
        elif policy in ("not_larger", "not_smaller"):
            one = min(ratios) if policy == "not_larger" else max(ratios)
            scale = [one] * len(axes)
            out = [int(math.floor(x.shape[a] * one + 0.5)) for a in axes]
        else:
            raise c.fail(f"keep_aspect_ratio_policy '{policy}' is not one of stretch, not_larger, not_smaller")
    else:
        raise c.fail("needs scales or sizes")
    crop = c.str_("coordinate_transformation_mode", "half_pixel") == "tf_crop_and_resize"
    regions = [(0.0, 1.0)] * len(axes)
    if crop and scales is not None and np.asarray(scales).size:
        raise c.unsupported("tf_crop_and_resize with scales is not modelled (with sizes it is)")
    if crop:  # roi: the starts, then the ends, of the resized axes (all axes, or `axes`)
        roi = np.asarray(c.known(1, "roi"), np.float64).reshape(-1)
        if roi.size == 2 * rank and len(axes) != rank:
            roi = np.concatenate([roi[:rank][axes], roi[rank:][axes]])
        if roi.size != 2 * len(axes):
            raise c.fail(f"roi of {roi.size} values for {len(axes)} axes")
        regions = [(float(roi[k]), float(roi[k + len(axes)])) for k in range(len(axes))]
    y = x
    outside = np.zeros([1] * rank, bool)
    for k, (a, n, s) in enumerate(zip(axes, out, scale)):
        if crop or n != x.shape[a] or s != 1.0:
            y = _resize_axis(c, y, a, n, s, k, regions[k])
        if crop:  # a sample outside the input takes extrapolation_value
            coords = _source_coords("tf_crop_and_resize", n, x.shape[a], s, regions[k])
            shape = [1] * rank
            shape[a] = n
            outside = outside | ((coords < 0) | (coords > x.shape[a] - 1)).reshape(shape)
    if outside.any():
        fill = c.scalar(c.float_("extrapolation_value", 0.0), y, "extrapolation")
        y = c.make("where", c.const(outside, "bool", "outside"), fill, y, what="cropped")
    return y if y is not x else c.make("reshape", x, shape=x.shape)


# --- ConvTranspose --------------------------------------------------------------------------------


@ONNX_OPS.register_op("ConvTranspose", "dilate, pad, conv2d (flipped weights), add")
def _conv_transpose(c: Ctx):
    x, w = c.v(0), c.v(1)
    if len(x.shape) == 3:  # 1-D: as 2-D with H = 1
        x = c.make("reshape", x, shape=[x.shape[0], x.shape[1], 1, x.shape[2]], what="as2d")
        w = c.make("reshape", w, shape=[w.shape[0], w.shape[1], 1, w.shape[2]], what="w2d")
        y = _conv_transpose_2d(c, x, w, one_d=True)
        return c.make("reshape", y, shape=[y.shape[0], y.shape[1], y.shape[3]])
    if len(x.shape) != 4:
        raise c.unsupported(f"{len(x.shape) - 2}-D transposed convolution is not modelled (1-D and 2-D are)")
    return _conv_transpose_2d(c, x, w, one_d=False)


def _conv_transpose_2d(c: Ctx, x: Value, w: Value, one_d: bool) -> Value:
    """The 2-D case; `one_d`: the node's attributes describe one axis, W (H is 1 here)."""
    def pair(name: str, default: int) -> list[int] | None:
        values = c.ints(name, None)
        if values is None:
            return None
        return [default, *values] if one_d else values

    group = c.int_("group", 1)
    n, ch, h, wd = x.shape
    _, per_group, kh, kw = w.shape
    strides = pair("strides", 1) or [1, 1]
    dilations = pair("dilations", 1) or [1, 1]
    extra = pair("output_padding", 0) or [0, 0]
    span = [(k - 1) * d + 1 for k, d in zip((kh, kw), dilations)]
    auto = c.str_("auto_pad", "NOTSET")
    shape = pair("output_shape", 1)
    if shape is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
        want = shape[-2:] if shape is not None else [s * i for s, i in zip(strides, (h, wd))]
        total = [s * (i - 1) + e + k - o for s, i, e, k, o in zip(strides, (h, wd), extra, span, want)]
        upper = auto == "SAME_UPPER"  # the spec puts the larger half first otherwise
        begin = [t // 2 if upper else t - t // 2 for t in total]
        pads = [*begin, *(t - b for t, b in zip(total, begin))]
    elif auto == "VALID" or auto in ("NOTSET", ""):
        pads = c.ints("pads", None) if auto != "VALID" else None
        pads = [0, 0, 0, 0] if pads is None else [0, pads[0], 0, pads[1]] if one_d else pads
    else:
        raise c.fail(f"auto_pad '{auto}' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID")
    before = [k - 1 - p for k, p in zip(span, pads[:2])]
    after = [k - 1 - p + e for k, p, e in zip(span, pads[2:], extra)]
    if min(before + after) < 0:
        raise c.unsupported(f"pads {pads} larger than the kernel's reach are not modelled")
    spread = c.make("dilate", x, strides=[1, 1, *strides], what="spread") if strides != [1, 1] else x
    padded = c.make("pad", spread, before=[0, 0, *before], after=[0, 0, *after], value=0.0, what="padded")
    # the weights as a convolution's: flipped in space, in/out channels swapped within each group
    flipped = reverse(c, reverse(c, w, 2, "flip_h"), 3, "flipped")
    grouped = c.make("reshape", flipped, shape=[group, ch // group, per_group, kh, kw], what="w_groups")
    swapped = c.make("transpose", grouped, perm=[0, 2, 1, 3, 4], what="w_swapped")
    kernel = c.make("reshape", swapped, shape=[group * per_group, ch // group, kh, kw], what="kernel")
    y = c.make("conv2d", padded, kernel, strides=[1, 1], padding=[0, 0, 0, 0], dilation=dilations, groups=group,
               what="conv" if c.has(2) else None)
    if c.has(2):
        y = c.make("add", y, c.make("reshape", c.v(2), shape=[1, c.v(2).shape[0], 1, 1], what="bias"))
    return y


# --- GridSample -----------------------------------------------------------------------------------

_CUBIC_A = -0.75


class _Sampler:
    """Arithmetic on [N, *out] coordinate tensors for GridSample (named helpers, one dtype)."""

    def __init__(self, c: Ctx, dtype: str):
        self.c, self.dtype, self.k = c, dtype, 0

    def s(self, value: float) -> Value:
        return self.c.scalar(value, self.dtype, f"k{value}")

    def op(self, name: str, *args: Value) -> Value:
        self.k += 1
        return self.c.make(name, *args, what=f"gs{self.k}")

    def poly(self, t: Value, coeffs: list[float]) -> Value:
        """coeffs[0] * t^n + ... + coeffs[n] by Horner's rule."""
        out = self.s(coeffs[0])
        for a in coeffs[1:]:
            out = self.op("add", self.op("mul", out, t), self.s(a))
        return out

    def reflect(self, x: Value, lo: float, hi: float) -> Value:
        """x folded into [lo, hi] by reflections at the borders (ONNX's reference)."""
        span = hi - lo
        if span <= 0:
            return self.op("mul", x, self.s(0.0))
        below, above = self.op("less", x, self.s(lo)), self.op("greater", x, self.s(hi))
        dx = self.op("where", below, self.op("sub", self.s(lo), x), self.op("sub", x, self.s(hi)))
        n = self.op("floor", self.op("div", dx, self.s(span)))
        r = self.op("sub", dx, self.op("mul", n, self.s(span)))
        even = self.op("equal", self.op("mod", n, self.s(2.0)), self.s(0.0))
        from_lo, from_hi = self.op("add", self.s(lo), r), self.op("sub", self.s(hi), r)
        low_side = self.op("where", even, from_lo, from_hi)
        high_side = self.op("where", even, from_hi, from_lo)
        return self.op("where", below, low_side, self.op("where", above, high_side, x))

    def clamp(self, x: Value, lo: float, hi: float) -> Value:
        return self.op("minimum", self.op("maximum", x, self.s(lo)), self.s(hi))


def _cubic_weights(s: _Sampler, t: Value) -> list[Value]:
    a = _CUBIC_A
    t1 = s.op("add", t, s.s(1.0))
    one_minus = s.op("sub", s.s(1.0), t)
    two_minus = s.op("sub", s.s(2.0), t)
    far = [a, -5 * a, 8 * a, -4 * a]
    near = [a + 2, -(a + 3), 0.0, 1.0]
    return [s.poly(t1, far), s.poly(t, near), s.poly(one_minus, near), s.poly(two_minus, far)]


@ONNX_OPS.register_op("GridSample", "arithmetic on the grid, gather (each tap), mul, add")
def _grid_sample(c: Ctx):
    """y[n, c, o] = the input at grid[n, o] (normalised to [-1, 1], last axis in reverse axis
    order), interpolated (nearest / linear / cubic over 1 / 2 / 4 taps per axis) with the
    padding mode's reading outside (zeros, border, reflection), as ONNX's reference."""
    x, grid = c.v(0), c.v(1)
    n, ch, *spatial = x.shape
    dims = len(spatial)
    out = list(grid.shape[1:-1])
    if grid.shape[0] != n or grid.shape[-1] != dims or len(out) != dims:
        raise c.fail(f"grid {grid.type} does not fit an input {x.type}")
    if not is_float(x.dtype):
        raise c.unsupported(f"GridSample of {x.dtype} is not modelled (floating-point inputs are)")
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(c.str_("mode", "linear"), c.str_("mode", "linear"))
    padding = c.str_("padding_mode", "zeros")
    if mode not in ("nearest", "linear", "cubic") or padding not in ("zeros", "border", "reflection"):
        raise c.fail(f"mode '{mode}' / padding_mode '{padding}' is not one of nearest, linear, cubic / "
                     "zeros, border, reflection")
    align = bool(c.int_("align_corners", 0))
    g = grid if grid.dtype == x.dtype else c.make("cast", grid, to=x.dtype, what="grid_cast")
    s = _Sampler(c, x.dtype)
    per_axis: list[list[tuple[Value, Value | None, Value | None]]] = []  # (index, weight, inside) taps
    for i, size in enumerate(spatial):
        part = c.make("slice", g, begin=[0] * (dims + 1) + [dims - 1 - i], end=[*g.shape[:-1], dims - i],
                      what=f"coord{i}_s")
        u = c.make("reshape", part, shape=[n, *out], what=f"coord{i}")
        one = s.s(1.0)
        if align:
            pos = s.op("mul", s.op("add", u, one), s.s((size - 1) / 2))
            lo, hi = 0.0, size - 1.0
        else:
            pos = s.op("div", s.op("sub", s.op("mul", s.op("add", u, one), s.s(float(size))), one), s.s(2.0))
            lo, hi = -0.5, size - 0.5
        if mode == "nearest":
            pos = s.op("round", pos)  # half to even, as the reference's rint
        if padding == "border":
            pos = s.clamp(pos, 0.0, size - 1.0)
        elif padding == "reflection":
            pos = s.reflect(pos, lo, hi)
        if mode == "nearest":
            taps = [(c.make("cast", pos, to="int64", what=f"near{i}"), None)]
        else:
            base = s.op("floor", pos)
            t = s.op("sub", pos, base)
            base = c.make("cast", base, to="int64", what=f"base{i}")
            if mode == "linear":
                offsets, weights = [0, 1], [s.op("sub", s.s(1.0), t), t]
            else:
                offsets, weights = [-1, 0, 1, 2], _cubic_weights(s, t)
            taps = [(base if o == 0 else c.make("add", base, c.scalar(o, "int64", f"off{o}"), what=f"tap{i}_{o}"), w)
                    for o, w in zip(offsets, weights)]
        read = []
        for k, (index, w) in enumerate(taps):
            inside = None
            if padding == "zeros":
                inside = c.make("logical_and",
                                c.make("greater_equal", index, c.scalar(0, "int64", "zero_i"), what=f"ge{i}_{k}"),
                                c.make("less", index, c.scalar(size, "int64", f"size{i}"), what=f"lt{i}_{k}"),
                                what=f"inside{i}_{k}")
            elif padding == "reflection" and mode != "nearest":
                index = c.make("cast", s.reflect(c.make("cast", index, to=x.dtype, what=f"tapf{i}_{k}"), lo, hi),
                               to="int64", what=f"folded{i}_{k}")
            index = c.make("minimum", c.make("maximum", index, c.scalar(0, "int64", "zero_i"), what=f"lo{i}_{k}"),
                           c.scalar(size - 1, "int64", f"last{i}"), what=f"index{i}_{k}")
            read.append((index, w, inside))
        per_axis.append(read)
    strides = [math.prod(spatial[i + 1:]) for i in range(dims)]
    flat = c.make("reshape", x, shape=[x.type.size], what="flat")
    block = np.arange(n * ch, dtype=np.int64).reshape(n, ch, *([1] * dims)) * math.prod(spatial)
    offset = c.const(block, "int64", "block")
    total = None
    for k, combo in enumerate(itertools.product(*per_axis)):
        index = None
        weight = inside = None
        for (ix, w, ok), st in zip(combo, strides):
            term = ix if st == 1 else c.make("mul", ix, c.scalar(st, "int64", f"stride{st}"), what=f"t{k}_{st}")
            index = term if index is None else c.make("add", index, term, what=f"sum{k}_{st}")
            if w is not None:
                weight = w if weight is None else s.op("mul", weight, w)
            if ok is not None:
                inside = ok if inside is None else c.make("logical_and", inside, ok, what=f"ok{k}_{st}")
        where = c.make("add", c.make("reshape", index, shape=[n, 1, *out], what=f"at{k}"), offset, what=f"flat{k}")
        value = c.make("gather", flat, where, axis=0, what=f"value{k}")
        if inside is not None:
            value = c.make("where", c.make("reshape", inside, shape=[n, 1, *out], what=f"in{k}"), value,
                           c.scalar(0, x, "zero"), what=f"kept{k}")
        if weight is not None:
            value = c.make("mul", value, c.make("reshape", weight, shape=[n, 1, *out], what=f"w{k}"),
                           what=f"weighted{k}")
        total = value if total is None else c.make("add", total, value, what=f"acc{k}")
    return c.make("reshape", total, shape=total.shape)


# --- Col2Im, MaxUnpool, AffineGrid ----------------------------------------------------------------


@ONNX_OPS.register_op("Col2Im", "transpose, scatter_add (constant positions), slice")
def _col2im(c: Ctx):
    """Columns [N, C * prod(block), L] summed back into the image [N, C, *image_shape]: every
    (block offset, block position) pair adds at a constant place of the padded image."""
    x = c.v(0)
    image = c.known_ints(1, "image_shape")
    block = c.known_ints(2, "block_shape")
    dims = len(image)
    dilations = c.ints("dilations", None) or [1] * dims
    strides = c.ints("strides", None) or [1] * dims
    pads = c.ints("pads", None) or [0] * (2 * dims)
    n, cols, length = x.shape
    taps = math.prod(block)
    if cols % taps:
        raise c.fail(f"{cols} columns do not split into blocks of {taps}")
    ch = cols // taps
    padded = [size + pads[i] + pads[i + dims] for i, size in enumerate(image)]
    counts = [(p - (d * (k - 1) + 1)) // s + 1 for p, k, d, s in zip(padded, block, dilations, strides)]
    if math.prod(counts) != length:
        raise c.fail(f"{length} block positions, the shapes give {counts}")
    offsets = np.indices(block).reshape(dims, -1)  # [dims, taps]
    places = np.indices(counts).reshape(dims, -1)  # [dims, length]
    step, spread = np.asarray(strides)[:, None, None], np.asarray(dilations)[:, None, None]
    pos = places[:, None, :] * step + offsets[:, :, None] * spread  # [dims, taps, length]
    pad_strides = [math.prod(padded[i + 1:]) for i in range(dims)]
    index = sum(pos[i] * pad_strides[i] for i in range(dims)).astype(np.int64)  # [taps, length]
    parts = c.make("reshape", x, shape=[n, ch, taps, length], what="parts")
    rows = c.make("transpose", parts, perm=[2, 3, 0, 1], what="rows")  # [taps, length, n, ch]
    zeros = c.const(np.zeros((math.prod(padded), n, ch), x.dtype), x.dtype, "zeros")
    summed = c.make("scatter_add", zeros, c.const(index, "int64", "positions"), rows, axis=0, what="summed")
    img = c.make("reshape", c.make("transpose", summed, perm=[1, 2, 0], what="channels_first"),
                 shape=[n, ch, *padded], what="padded")
    if any(pads):
        img = c.make("slice", img, begin=[0, 0, *pads[:dims]],
                     end=[n, ch, *(pads[i] + image[i] for i in range(dims))], what="cropped")
    return c.make("reshape", img, shape=img.shape)


@ONNX_OPS.register_op("MaxUnpool", "scatter_add (at the indices MaxPool gave)")
def _max_unpool(c: Ctx):
    """x written at `indices` (positions in the whole output, flattened) of a zero tensor."""
    x, index = c.v(0), c.v(1)
    n, ch, *spatial = x.shape
    dims = len(spatial)
    kernel = c.ints("kernel_shape")
    strides = c.ints("strides", None) or [1] * dims
    pads = c.ints("pads", None) or [0] * (2 * dims)
    inferred = [n, ch, *((size - 1) * s - pads[i] - pads[i + dims] + k
                         for i, (size, k, s) in enumerate(zip(spatial, kernel, strides)))]
    shape = c.known_ints(2, "output_shape") or inferred
    if len(shape) != len(inferred) or any(a < b for a, b in zip(shape, inferred)):
        raise c.fail(f"output_shape {shape} is smaller than the unpooled shape {inferred}")
    total = math.prod(inferred)
    index = c.make("cast", index, to="int64", what="index64") if index.dtype != "int64" else index
    zeros = c.const(np.zeros(total, x.dtype), x.dtype, "zeros")
    out = c.make("scatter_add", zeros, c.make("reshape", index, shape=[x.type.size], what="flat_index"),
                 c.make("reshape", x, shape=[x.type.size], what="flat"), axis=0, what="scattered")
    # indices address the unpooled shape; a larger output_shape holds it in its first corner
    if shape == inferred:
        return c.make("reshape", out, shape=inferred)
    out = c.make("reshape", out, shape=inferred, what="unpooled")
    return c.make("pad", out, before=[0] * len(shape), after=[a - b for a, b in zip(shape, inferred)], value=0.0)


@ONNX_OPS.register_op("AffineGrid", "matmul by a constant base grid, transpose")
def _affine_grid(c: Ctx):
    """theta [N, d, d + 1] applied to the normalised coordinates (x, y[, z], 1) of every output
    place: grid [N, *size, d] (x first, as GridSample reads it)."""
    theta = c.v(0)
    size = c.known_ints(1, "size")
    n, dims = theta.shape[0], theta.shape[1]
    spatial = size[2:]
    if len(spatial) != dims or theta.shape[2] != dims + 1:
        raise c.fail(f"theta {theta.type} does not fit size {size}")
    align = bool(c.int_("align_corners", 0))

    def axis(d: int) -> np.ndarray:
        if align:
            return np.linspace(-1.0, 1.0, d) if d > 1 else np.zeros(d)
        return (np.arange(d) * 2 + 1) / d - 1

    mesh = np.meshgrid(*(axis(d) for d in spatial), indexing="ij")  # per axis, outermost first
    base = np.stack([*reversed([m.reshape(-1) for m in mesh]), np.ones(math.prod(spatial))])  # [d + 1, P]
    rows = c.make("reshape", theta, shape=[n * dims, dims + 1], what="rows")
    mapped = c.make("matmul", rows, c.const(base.astype(theta.dtype), theta.dtype, "base"), what="mapped")
    grid = c.make("transpose", c.make("reshape", mapped, shape=[n, dims, math.prod(spatial)], what="per_axis"),
                  perm=[0, 2, 1], what="points")
    return c.make("reshape", grid, shape=[n, *spatial, dims])

"""ONNX's resampling and transposed-convolution ops in the ONNX op table (`ONNX_OPS`): Resize
(and Upsample through the version converter) and ConvTranspose, as gathers, constant
interpolation matrices and convolutions of akg's registry."""

from __future__ import annotations

import math

import numpy as np

from akg.graph.io.onnx_ops import ONNX_OPS, OnnxOpContext as Ctx, reverse
from akg.graph.ir import Value
from akg.graph.types import is_float

# --- Resize ---------------------------------------------------------------------------------------


def _source_coords(mode: str, out: int, size: int, scale: float) -> np.ndarray:
    """Where each output index samples the input axis (ONNX's coordinate_transformation_mode;
    the resized length in its formulas is scale * size, not rounded)."""
    x = np.arange(out, dtype=np.float64)
    length = scale * size
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


def _resize_axis(c: Ctx, x: Value, axis: int, out: int, scale: float, k: int) -> Value:
    size = x.shape[axis]
    transform = c.str_("coordinate_transformation_mode", "half_pixel")
    try:
        coords = _source_coords(transform, out, size, scale)
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


@ONNX_OPS.register_op("Resize", "gather (nearest), matmul by constant weights (linear, cubic)")
def _resize(c: Ctx):
    x = c.v(0)
    rank = len(x.shape)
    if c.int_("antialias", 0):
        raise c.unsupported("antialias=1 is not modelled")
    if c.str_("coordinate_transformation_mode", "half_pixel") == "tf_crop_and_resize":
        raise c.unsupported("coordinate_transformation_mode 'tf_crop_and_resize' is not modelled")
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
    y = x
    for k, (a, n, s) in enumerate(zip(axes, out, scale)):
        if n != x.shape[a] or s != 1.0:
            y = _resize_axis(c, y, a, n, s, k)
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

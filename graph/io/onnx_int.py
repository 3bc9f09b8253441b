"""ONNX's integer ops in the ONNX op table (`ONNX_OPS`): bit shifts and bitwise logic (through
the bits of a value, as floor divisions by powers of two), and the integer / quantised linear
ops (MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv) computed in floating point, which
is exact for 8-bit operands at the sizes these ops meet. akg has no bitwise registry op."""

from __future__ import annotations

import numpy as np

from akg.graph.io.onnx_ops import ONNX_OPS, OnnxOpContext as Ctx
from akg.graph.io.onnx_reduce import matmul
from akg.graph.ir import Value

_INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32")


def _width(c: Ctx, x: Value) -> tuple[int, bool]:
    if x.dtype not in _INTS:
        raise c.unsupported(f"{c.op} of {x.dtype} is not modelled ({', '.join(_INTS)} are)")
    return np.iinfo(x.dtype).bits, x.dtype.startswith("int")


def _wide(c: Ctx, x: Value, what: str) -> Value:
    return x if x.dtype == "int64" else c.make("cast", x, to="int64", what=what)


def _powers(width: int) -> np.ndarray:
    """2^k for k < width as int64 (2^63 wraps to int64's minimum, as a shift does)."""
    return np.asarray([1 << k if k < 63 else -(1 << 63) for k in range(width)], np.int64)


@ONNX_OPS.register_op("BitShift", "gather (powers of two), mul / div, where")
def _bit_shift(c: Ctx):
    """x << y as x * 2^y wrapped to the type; x >> y as floor(x / 2^y) (arithmetic for signed
    x). Shifts out of [0, width) give 0 (left) or the sign (right), as ONNX's reference."""
    x, y = c.v(0), c.v(1)
    width, signed = _width(c, x)
    direction = c.str_("direction")
    if direction not in ("LEFT", "RIGHT"):
        raise c.fail(f"direction '{direction}' is not LEFT or RIGHT")
    x64, y64 = _wide(c, x, "x64"), _wide(c, y, "y64")
    zero = c.scalar(0, "int64", "zero")
    # the largest shift computed by arithmetic: a signed right shift by width - 1 is the sign
    top = width - 2 if direction == "RIGHT" and signed else width - 1
    in_range = c.make("logical_and", c.make("greater_equal", y64, zero, what="nonneg"),
                      c.make("less_equal", y64, c.scalar(top, "int64", "top"), what="small"), what="in_range")
    clipped = c.make("where", in_range, y64, zero, what="clipped")
    power = c.make("gather", c.const(_powers(width), "int64", "powers"), clipped, axis=0, what="power")
    if direction == "LEFT":
        shifted = c.make("mul", x64, power, what="shifted")
        out = c.make("where", in_range, shifted, zero, what="result64")
    else:
        shifted = c.make("div", x64, power, what="shifted")  # akg's integer div floors
        sign = c.make("where", c.make("less", x64, zero, what="negative"), c.scalar(-1, "int64", "minus_one"), zero,
                      what="sign")
        out = c.make("where", in_range, shifted, sign, what="result64")
    return c.make("cast", out, to=x.dtype)


def _bits(c: Ctx, x64: Value, width: int, signed: bool, what: str) -> Value:
    """The two's-complement bits of x (an int64 holding a `width`-bit value), a bool [..., width]."""
    col = c.make("reshape", x64, shape=[*x64.shape, 1], what=f"{what}_col")
    powers = _powers(width)
    if signed:
        powers[-1] = 1  # the top bit is the sign, taken below
    q = c.make("div", col, c.const(powers, "int64", f"{what}_powers"), what=f"{what}_q")
    bit = c.make("not_equal", c.make("mod", q, c.scalar(2, "int64", "two"), what=f"{what}_r"),
                 c.scalar(0, "int64", "zero"), what=f"{what}_bits")
    if not signed:
        return bit
    negative = c.make("less", col, c.scalar(0, "int64", "zero"), what=f"{what}_sign")
    top = np.zeros(width, bool)
    top[-1] = True
    return c.make("where", c.const(top, "bool", "top_bit"), negative, bit, what=f"{what}_twos")


def _from_bits(c: Ctx, bits: Value, width: int, signed: bool, dtype: str) -> Value:
    weights = _powers(width)
    if not signed and width == 64:
        raise c.unsupported("uint64 is not an akg dtype")
    if signed:
        weights[-1] = -(1 << (width - 1))
    else:
        weights[-1] = 1 << (width - 1)
    picked = c.make("where", bits, c.const(weights, "int64", "weights"), c.scalar(0, "int64", "zero"), what="picked")
    total = c.make("sum", picked, axes=[len(bits.shape) - 1], keepdims=False, what="value64")
    return c.make("cast", total, to=dtype)


def _bitwise(combine):
    def convert(c: Ctx):
        a, b = c.v(0), c.v(1)
        width, signed = _width(c, a)
        bits = combine(c, _bits(c, _wide(c, a, "a64"), width, signed, "a"),
                       _bits(c, _wide(c, b, "b64"), width, signed, "b"))
        return _from_bits(c, bits, width, signed, a.dtype)
    return convert


def _xor(c: Ctx, p: Value, q: Value) -> Value:
    from akg.graph.io.onnx_ops import either_not_both

    return either_not_both(c, p, q, "xor")


ONNX_OPS.add("BitwiseAnd", "(bits) div, mod, logical_and, sum",
             _bitwise(lambda c, p, q: c.make("logical_and", p, q, what="and")))
ONNX_OPS.add("BitwiseOr", "(bits) div, mod, logical_or, sum",
             _bitwise(lambda c, p, q: c.make("logical_or", p, q, what="or")))
ONNX_OPS.add("BitwiseXor", "(bits) div, mod, logical ops, sum", _bitwise(_xor))


@ONNX_OPS.register_op("BitwiseNot", "sub (-1 - x, two's complement)")
def _bitwise_not(c: Ctx):
    x = c.v(0)
    _width(c, x)
    return c.make("sub", c.scalar(-1, x, "all_ones"), x)


# --- integer and quantised linear algebra ---------------------------------------------------------


def _centred(c: Ctx, x: Value, zp_index: int, what: str, channel_axis: int | None = None,
             dtype: str = "float64") -> Value:
    """x - zero point, in floating point (exact for the integers these ops take)."""
    xf = c.make("cast", x, to=dtype, what=f"{what}_f")
    if not c.has(zp_index):
        return xf
    zp = c.make("cast", c.v(zp_index), to=dtype, what=f"{what}_zp")
    if channel_axis is not None and len(zp.shape) == 1 and zp.shape[0] > 1:
        shape = [1] * len(x.shape)
        shape[channel_axis] = zp.shape[0]
        zp = c.make("reshape", zp, shape=shape, what=f"{what}_zp_axis")
    elif len(zp.shape) == 1 and zp.shape[0] == 1:
        zp = c.make("reshape", zp, shape=[], what=f"{what}_zp0")
    return c.make("sub", xf, zp, what=f"{what}_centred")


def _rows_zp(c: Ctx, a: Value, zp_index: int) -> Value:
    """MatMulInteger's a: a per-row zero point (1-D, one per row of a) broadcasts along rows."""
    af = c.make("cast", a, to="float64", what="a_f")
    if not c.has(zp_index):
        return af
    zp = c.make("cast", c.v(zp_index), to="float64", what="a_zp")
    if len(zp.shape) == 1 and len(a.shape) >= 2 and zp.shape[0] == a.shape[-2] and zp.shape[0] > 1:
        zp = c.make("reshape", zp, shape=[zp.shape[0], 1], what="a_zp_rows")
    return c.make("sub", af, zp, what="a_centred")


@ONNX_OPS.register_op("MatMulInteger", "cast, sub, matmul (float64), cast")
def _matmul_integer(c: Ctx):
    a = _rows_zp(c, c.v(0), 2)
    b = _centred(c, c.v(1), 3, "b")
    return c.make("cast", matmul(c, a, b), to="int32")


def _conv_float(c: Ctx, x: Value, w: Value, bias: Value | None) -> Value:
    """The convolution in float32 (exact while the sums stay below 2^24), back in float64."""
    from akg.graph.io.onnx_nn import conv

    y = conv(c, x, w, bias)
    return c.make("cast", y, to="float64", what="acc")


@ONNX_OPS.register_op("ConvInteger", "cast, sub, conv2d (float64), cast")
def _conv_integer(c: Ctx):
    x = _centred(c, c.v(0), 2, "x", dtype="float32")
    w = _centred(c, c.v(1), 3, "w", channel_axis=0, dtype="float32")
    return c.make("cast", _conv_float(c, x, w, None), to="int32")


def _requantize(c: Ctx, acc: Value, scale: Value, zp_index: int, like: Value) -> Value:
    """round(acc * scale + y_zero_point) clipped to the output type (ONNX's reference: half to even)."""
    dtype = c.v(zp_index).dtype if c.has(zp_index) else like.dtype
    info = np.iinfo(dtype)
    y = c.make("mul", acc, c.make("cast", scale, to="float64", what="factor64"), what="scaled")
    if c.has(zp_index):
        y = c.make("add", y, c.make("cast", c.v(zp_index), to="float64", what="y_zp"), what="shifted")
    y = c.make("round", y, what="rounded")
    y = c.make("minimum", c.make("maximum", y, c.scalar(info.min, "float64", "low"), what="floored"),
               c.scalar(info.max, "float64", "high"), what="clipped")
    return c.make("cast", y, to=dtype)


@ONNX_OPS.register_op("QLinearMatMul", "cast, sub, matmul (float64), mul, round, clip, cast")
def _qlinear_matmul(c: Ctx):
    a = _centred(c, c.v(0), 2, "a")
    b = _centred(c, c.v(3), 5, "b")
    acc = matmul(c, a, b)
    # the scale factor in the scales' own type, as the reference computes it
    factor = c.make("div", c.make("mul", c.v(1), c.v(4), what="ab_scale"), c.v(6), what="factor")
    return _requantize(c, acc, factor, 7, c.v(0))


@ONNX_OPS.register_op("QLinearConv", "cast, sub, conv2d (float64), mul, round, clip, cast")
def _qlinear_conv(c: Ctx):
    x = _centred(c, c.v(0), 2, "x", dtype="float32")
    w = _centred(c, c.v(3), 5, "w", channel_axis=0, dtype="float32")
    bias = c.make("cast", c.v(8), to="float32", what="bias_f") if c.has(8) else None
    acc = _conv_float(c, x, w, bias)
    w_scale = c.v(4)
    if len(w_scale.shape) == 1 and w_scale.shape[0] > 1:
        w_scale = c.make("reshape", w_scale, shape=[1, w_scale.shape[0], *([1] * (len(acc.shape) - 2))],
                         what="w_scale_axis")
    factor = c.make("div", c.make("mul", c.v(1), w_scale, what="xw_scale"), c.v(6), what="factor")
    return _requantize(c, acc, factor, 7, c.v(0))

"""TIR casts between float32 and the float8 storage types, by their bits (TVM's own float8
casts lose NaN, infinities, subnormals and the fnuz encodings): round to nearest even, past the
largest finite value NaN (infinity for e5m2), as ml_dtypes does. Saturation is the cast op's
clamp before this (akg.graph.ops.elementwise); other types reach float8 through float32."""

from __future__ import annotations

from typing import NamedTuple


class Float8(NamedTuple):
    mantissa: int  # mantissa bits
    bias: int  # exponent bias
    fnuz: bool  # no negative zero, no infinities, one NaN (0x80)
    inf: bool  # has infinities (e5m2): exponent all ones is inf/NaN
    top: int  # the largest finite magnitude's code


FLOAT8 = {
    "float8_e4m3fn": Float8(3, 7, False, False, 0x7E),
    "float8_e4m3fnuz": Float8(3, 8, True, False, 0x7F),
    "float8_e5m2": Float8(2, 15, False, True, 0x7B),
    "float8_e5m2fnuz": Float8(2, 16, True, False, 0x7F),
}


BITS_SUFFIX = "_bits"  # the name of the buffer that views a float8/bfloat16 tensor as its bits (astgen)


def bits_dtype(dtype: str) -> str:
    """The TIR type a kernel keeps a tensor of `dtype` in: float8 and bfloat16 as their bits,
    uint8 and uint16 (TVM's bfloat16 legalisation converts a bfloat16 load bound in a Let, as
    the fast-math exp binds its input, as a number: bits 0xC040 became 49216.0, not -3.0)."""
    return "uint8" if dtype in FLOAT8 else "uint16" if dtype == "bfloat16" else dtype


def tir_cast(dtype: str, value, src: str | None = None, *, bits: bool = False):
    """tirx.Cast(dtype, value) of a value of type `src` (default its TIR type), by bits where
    either side is bfloat16 or a float8 type (so that no simplifier folds a rounding
    float32 -> bfloat16 -> float32 away, and LLVM never sees a float8 value). With `bits`,
    float8 and bfloat16 values are their uint8 / uint16 bits (`bits_dtype`: how astgen keeps
    them in buffers)."""
    from tvm import tirx

    src = src or _dtype(value)
    if dtype in FLOAT8 or dtype == "bfloat16":
        if src != "float32":
            value = tir_cast("float32", value, src, bits=bits)
        if dtype == "bfloat16":
            code = tirx.Cast("uint16", _encode_bf16(value))
        else:
            code = tirx.Cast("uint8", _encode(FLOAT8[dtype], value))
        return code if bits else tirx.reinterpret(dtype, code)
    if src == "bfloat16":  # an encoding, or (`bits`) the bits themselves, by its bits
        inner = _encoded(value)
        if inner is None and _dtype(value) == "uint16":
            inner = value.value if type(value).__name__ == "Cast" and _dtype(value.value) == "uint32" \
                else tirx.Cast("uint32", value)
        wide = tirx.Cast("float32", value) if inner is None else tirx.reinterpret("float32", inner << _u32(16))
        return wide if dtype == "float32" else tirx.Cast(dtype, wide)
    if src in FLOAT8:
        wide = _decode(FLOAT8[src], _bits(value))
        return wide if dtype == "float32" else tirx.Cast(dtype, wide)
    return tirx.Cast(dtype, value)


def _dtype(value) -> str:
    return str(value.ty) if hasattr(value, "ty") else str(value.dtype)  # a TIR expression, a TE element


def _encoded(value):
    """The uint32 bits a storage-typed value was made from in this expression (the
    reinterpretation of an encoding), else None."""
    from tvm import tirx

    if type(value).__name__ == "Call" and str(value.op.name) == "tirx.reinterpret" and \
            _dtype(value.args[0]) in ("uint8", "uint16"):
        inner = value.args[0]
        if type(inner).__name__ == "Cast" and _dtype(inner.value) == "uint32":
            return inner.value
        return tirx.Cast("uint32", inner)
    return None


def _bits(value):
    """The bits of a float8 value as uint32."""
    from tvm import tirx

    inner = _encoded(value)
    if inner is not None:
        return inner
    if _dtype(value) == "uint8":  # the bits themselves
        if type(value).__name__ == "Cast" and _dtype(value.value) == "uint32":
            return value.value
        return tirx.Cast("uint32", value)
    if not hasattr(value, "ty"):
        value = value.asobject() if hasattr(value, "asobject") else value
    return tirx.Cast("uint32", tirx.reinterpret("uint8", value))


def _encode_bf16(x):
    """float32 -> bfloat16 bits (uint32): round to nearest even; NaN stays a (quiet) NaN."""
    from tvm import tirx

    u = tirx.reinterpret("uint32", x)
    rounded = (u + _u32(0x7FFF) + ((u >> _u32(16)) & _u32(1))) >> _u32(16)
    return tirx.Select(tirx.isnan(x), (u >> _u32(16)) | _u32(0x40), rounded)


def _u32(n: int):
    from tvm import tirx

    return tirx.const(n, "uint32")


def _let(name: str, value, body):
    """`body(v)` with v bound to `value` once (TIR is a tree: without it every use repeats it)."""
    from tvm import tirx

    v = tirx.Var(name, _dtype(value))
    return tirx.Let(v, value, body(v))


def _encode(f: Float8, x):
    """float32 -> float8 bits (uint32)."""
    from tvm import tirx

    shift = 23 - f.mantissa
    nan = 0x80 if f.fnuz else 0x7F if not f.inf else 0x7E
    over = 0x7C if f.inf else nan  # infinity, or NaN where there is none

    def from_bits(u):
        sign = (u >> _u32(24)) & _u32(0x80)
        return _let("f8_abs", u & _u32(0x7FFFFFFF), lambda bits: from_magnitude(bits, sign))

    def from_magnitude(bits, sign):
        a = tirx.reinterpret("float32", bits)
        # normal: round the float32 mantissa to f.mantissa bits (ties to even), then rebias
        rounded = (bits + _u32((1 << (shift - 1)) - 1) + ((bits >> _u32(shift)) & _u32(1))) >> _u32(shift)
        normal = rounded - _u32((127 - f.bias) << f.mantissa)
        # subnormal: a multiple of the smallest subnormal, rounded to nearest even
        small = tirx.Cast("uint32", tirx.nearbyint(a * tirx.const(2.0 ** (f.bias - 1 + f.mantissa), "float32")))
        magnitude = tirx.Select(tirx.LT(a, tirx.const(2.0 ** (1 - f.bias), "float32")), small, normal)

        def code(m):
            if f.fnuz:  # one zero, and a signless NaN (an overflow is that NaN already)
                signed = tirx.Select(tirx.Or(tirx.EQ(m, _u32(0)), tirx.EQ(m, _u32(0x80))), m, m | sign)
                return tirx.Select(tirx.isnan(a), _u32(0x80), signed)
            return tirx.Select(tirx.isnan(a), _u32(nan) | sign, m | sign)

        return _let("f8_mag", magnitude, lambda m: _let("f8_top", tirx.Select(tirx.GT(m, _u32(f.top)), _u32(over), m),
                                                        lambda m2: code(m2)))

    return _let("f8_u", tirx.reinterpret("uint32", x), from_bits)


def _decode(f: Float8, bits):
    """float8 bits (uint32) -> float32."""
    return _let("f8_bits", bits, lambda b: _decode_bound(f, b))


def _decode_bound(f: Float8, b):
    from tvm import tirx

    sign = b >> _u32(7)
    exp = (b >> _u32(f.mantissa)) & _u32((1 << (7 - f.mantissa)) - 1)
    man = b & _u32((1 << f.mantissa) - 1)
    normal = tirx.reinterpret("float32", (sign << _u32(31)) | ((exp + _u32(127 - f.bias)) << _u32(23))
                              | (man << _u32(23 - f.mantissa)))
    small = tirx.Cast("float32", man) * tirx.const(2.0 ** (1 - f.bias - f.mantissa), "float32")
    small = tirx.Select(tirx.EQ(sign, _u32(1)), -small, small)
    value = tirx.Select(tirx.EQ(exp, _u32(0)), small, normal)
    nan = tirx.reinterpret("float32", (sign << _u32(31)) | _u32(0x7FC00000))
    if f.fnuz:
        return tirx.Select(tirx.EQ(b, _u32(0x80)), nan, value)
    top_exp = _u32((1 << (7 - f.mantissa)) - 1)
    if f.inf:  # e5m2: exponent all ones is infinity (mantissa 0) or NaN
        inf = tirx.reinterpret("float32", (sign << _u32(31)) | _u32(0x7F800000))
        special = tirx.Select(tirx.EQ(man, _u32(0)), inf, nan)
        return tirx.Select(tirx.EQ(exp, top_exp), special, value)
    return tirx.Select(tirx.EQ(b & _u32(0x7F), _u32(0x7F)), nan, value)

"""Vectorisable float32 math: exp, erf, tanh, sigmoid and rsqrt as straight-line TIR.

LLVM turns `exp` and friends into scalar libm calls, one per lane, even in vector loops.
These expansions are polynomial/rational approximations built from multiplies, adds,
compares and bit tricks that vectorise: exp and sigmoid are within ~1e-7 relative of the
float64 result (exp within an ulp), erf within ~5e-7 absolute, tanh within ~3e-7 relative,
rsqrt within ~2e-7 relative. Infinities and NaNs behave as in libm; exp flushes results
below ~1.7e-38 to zero. Each takes the target's reassociation fence (`fence(value, dtype)`,
`LoweringHooks.fence`) where it is generated inside an explicit vector loop of one native
vector, which exp's rounding by a magic number needs under fast-math.

rsqrt has a second reason: with fast-math flags LLVM rewrites `x * (1 / sqrt(v))` into
`x / sqrt(v)`, so a per-row rsqrt hoisted out of a loop (layer_norm) turns back into one
vector division per element, the slowest instruction there is.
"""

from __future__ import annotations

from tvm import tirx

F32 = "float32"


def _c(v: float):
    return tirx.const(v, F32)


def _let(value, body):
    """body(v) with v bound once to value (TIR Let), so a subexpression is computed once."""
    if isinstance(value, (tirx.Var, tirx.FloatImm)):
        return body(value)
    var = tirx.Var("t", F32)
    return tirx.Let(var, value, body(var))


def _horner(x, coeffs):
    acc = _c(coeffs[0])
    for c in coeffs[1:]:
        acc = acc * x + _c(c)
    return acc


# expf as in Cephes: exp(x) = 2^n * exp(r), r = x - n*ln2 in [-ln2/2, ln2/2] (ln2 split in
# two parts, so that r keeps its precision). The expansion evaluates 2 exp(r) = 2 + 2r +
# r^2 P(r) as one Horner chain of degree 6 and scales it by 2^(n-1), so no final add or
# doubling is needed, and no compare (below). P's coefficients were fitted to the relative
# error of 2 exp(r) on that interval (weighted least squares on Chebyshev nodes, iterated
# toward minimax): 4e-9 before float32 rounding, so the result is within an ulp (0.87 ulp
# measured); Cephes' degree-7 form is no more accurate.
_EXP2_POLY = (2.7629226e-03, 1.673742e-02, 8.333678e-02, 3.3333042e-01, 9.999999e-01, 2.0, 2.0)
# In explicit loops of one vector n is rounded by adding a "magic" float, 1.5 * 2^23 + 126, whose
# ulp is 1: the sum x*log2(e) + magic is rounded to an integer with n + 126 in its low
# mantissa bits (for |n + 126| < 2^22), subtracting magic gives n, and the sum's bits shifted
# left by 23 leave n + 126 in the exponent field: 2^(n-1) with no rounding instruction and
# no float-to-int conversion (on AVX-512 both run on one port, the bottleneck of a softmax's
# exponentials: 4096 x 1024 softmax 0.95 -> 0.84 ms in a hand-written A/B).
# The sum goes through the target's reassociation fence: fast-math may otherwise fold
# (s + magic) - magic back into s. The clamps keep n + 126 in [0, 254]. Above: n reaches
# 128 at most, and every x past log(FLT_MAX) = 88.7228 then overflows to inf in the final
# multiply, so no compare is needed for it. Below: n = -126 gives exponent bits 0, the float
# +0.0, so exp(x) is 0 below x ~ -86.99 (results under ~1.7e-38, subnormals among them, are
# flushed to zero). A NaN passes through both clamps (TIR's min/max keep a NaN second
# operand) and through the arithmetic, so it needs no compare either.
_EXP_HIGH, _EXP_LOW = 89.0, -87.6
_EXP_MAGIC = 12582912.0 + 126.0


def fast_exp(x, fence=None):
    """exp(x); `fence` is the target's reassociation fence where the expression ends up in
    an explicit vector loop of one native vector, None elsewhere (LLVM's loop vectoriser
    gives up on a loop with a fence, and LLVM scalarises a fence on a wider vector): n is
    then rounded and converted by instructions."""
    return _let(x, lambda v: _exp(v, fence))


def _exp(x, fence):
    log2e, i32 = _c(1.44269504088896341), "int32"

    def scaled(clamped, n, exponent_bits):
        """2 exp(r) * 2^(n-1), 2^(n-1) the float32 whose bits are `exponent_bits` (exponent
        field n + 126; n reaches 128 just below exp's overflow threshold, one more than the
        largest float32 exponent)."""
        return _let(clamped - n * _c(0.693359375) - n * _c(-2.12194440e-4),
                    lambda r: _horner(r, _EXP2_POLY) * tirx.reinterpret(F32, exponent_bits))

    def by_instructions(clamped):
        return _let(tirx.floor(clamped * log2e + _c(0.5)), lambda n: scaled(
            clamped, n, tirx.shift_left(tirx.Cast(i32, n) + tirx.const(126, i32), tirx.const(23, i32))))

    def by_magic(clamped):
        def from_sum(shifted):
            bits = tirx.shift_left(tirx.reinterpret(i32, shifted), tirx.const(23, i32))
            return _let(shifted - _c(_EXP_MAGIC), lambda n: scaled(clamped, n, bits))

        return _let(fence(clamped * log2e + _c(_EXP_MAGIC), F32), from_sum)

    return _let(tirx.Max(_c(_EXP_LOW), tirx.Min(_c(_EXP_HIGH), x)), by_instructions if fence is None else by_magic)


# erf(x) = x * P(x^2) / Q(x^2) on [-4, 4] (beyond that erf is +-1 in float32)
_ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
          -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02)
_ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
          -1.42647390514189e-02)


def fast_erf(x, fence=None):
    return _let(x, lambda v: tirx.Select(tirx.isnan(v), v, _let(
        tirx.Max(tirx.Min(v, _c(4.0)), _c(-4.0)),
        lambda c: _let(c * c, lambda x2: c * _horner(x2, _ERF_P) / _horner(x2, _ERF_Q)))))


def fast_tanh(x, fence=None):
    """Odd series for |x| < 0.25, else 1 - 2 / (exp(2|x|) + 1) with the sign of x."""
    return _let(x, lambda v: _tanh(v, fence))


def _tanh(x, fence):
    def body(ax):
        x2 = x * x
        series = x * (_c(1.0) + x2 * (_c(-1 / 3) + x2 * (_c(2 / 15) + x2 * (_c(-17 / 315) + x2 * _c(62 / 2835)))))
        return _let(_c(1.0) - _c(2.0) / (fast_exp(ax + ax, fence) + _c(1.0)), lambda big: tirx.Select(
            ax < _c(0.25), series, tirx.Select(x < _c(0.0), -big, big)))

    return tirx.Select(tirx.isnan(x), x, _let(tirx.abs(x), body))


def fast_sigmoid(x, fence=None):
    return _c(1.0) / (_c(1.0) + fast_exp(-x, fence))


_TINY = 1.1754943508222875e-38  # smallest normal float32


def fast_rsqrt(x, fence=None):
    """1/sqrt(x): the exponent-halving bit trick, then three Newton steps. Subnormal inputs
    are scaled by 2^64 first (the trick needs a normal exponent). Every Let binds a plain
    expression (TVM's vectoriser rejects a Let whose value is itself a Let)."""
    def body(v):
        small = v < _c(_TINY)

        def start(xs):
            guess = tirx.reinterpret(F32, tirx.const(0x5F375A86, "int32") - tirx.shift_right(
                tirx.reinterpret("int32", xs), tirx.const(1, "int32")))
            return _let(_c(0.5) * xs, lambda half: _let(guess, lambda y: newton(half, y, 3)))

        def newton(half, y, steps):
            if steps == 0:
                return finish(y)
            return _let(y * (_c(1.5) - half * y * y), lambda t: newton(half, t, steps - 1))

        def finish(y):
            y = tirx.Select(small, y * _c(2.0 ** 32), y)
            y = tirx.Select(v == _c(float("inf")), _c(0.0), y)
            negative_zero = tirx.reinterpret("int32", v) < tirx.const(0, "int32")
            y = tirx.Select(v == _c(0.0), tirx.Select(negative_zero, _c(float("-inf")), _c(float("inf"))), y)
            return tirx.Select(tirx.any(v < _c(0.0), tirx.isnan(v)), _c(float("nan")), y)

        return _let(tirx.Select(small, v * _c(2.0 ** 64), v), start)

    return _let(x, body)


FAST_F32 = {"exp": fast_exp, "erf": fast_erf, "tanh": fast_tanh, "sigmoid": fast_sigmoid,
            "rsqrt": fast_rsqrt}

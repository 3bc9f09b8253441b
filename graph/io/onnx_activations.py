"""ONNX's activations and the trigonometric and hyperbolic functions akg has no op for, in the
ONNX op table (`ONNX_OPS`): each expanded into registry ops (Atan, Asin, Acos through a polynomial)."""

from __future__ import annotations

import math

from akg.graph.io.onnx_ops import ONNX_OPS, OnnxOpContext as Ctx
from akg.graph.ir import Value


# --- activations (expanded) ---------------------------------------------------------------------


def _where_negative(c: Ctx, x: Value, negative: Value, inclusive: bool = False) -> Value:
    zero = c.scalar(0, x, "zero")
    return c.make("where", c.make("less_equal" if inclusive else "less", x, zero, what="neg"), negative, x)


@ONNX_OPS.register_op("LeakyRelu", "where, mul")
def _leaky_relu(c: Ctx):
    x = c.v(0)
    return _where_negative(c, x, c.make("mul", x, c.scalar(c.float_("alpha", 0.01), x, "alpha")))


@ONNX_OPS.register_op("PRelu", "where, mul")
def _prelu(c: Ctx):
    x = c.v(0)
    return _where_negative(c, x, c.make("mul", x, c.v(1)))


def _expm1(c: Ctx, x: Value) -> Value:
    return c.make("sub", c.make("exp", x, what="exp"), c.scalar(1, x, "one"))


@ONNX_OPS.register_op("Elu", "where, exp")
def _elu(c: Ctx):
    x = c.v(0)
    return _where_negative(c, x, c.make("mul", _expm1(c, x), c.scalar(c.float_("alpha", 1.0), x, "alpha")))


@ONNX_OPS.register_op("Selu", "where, exp, mul")
def _selu(c: Ctx):
    x = c.v(0)
    alpha = c.float_("alpha", 1.67326319217681884765625)
    gamma = c.float_("gamma", 1.05070102214813232421875)
    inner = _where_negative(c, x, c.make("mul", _expm1(c, x), c.scalar(alpha, x, "alpha")), inclusive=True)
    return c.make("mul", inner, c.scalar(gamma, x, "gamma"))


@ONNX_OPS.register_op("Celu", "maximum, minimum, exp")
def _celu(c: Ctx):
    x = c.v(0)
    alpha = c.scalar(c.float_("alpha", 1.0), x, "alpha")
    zero = c.scalar(0, x, "zero")
    neg = c.make("mul", alpha, _expm1(c, c.make("div", x, alpha)))
    return c.make("add", c.make("maximum", x, zero), c.make("minimum", neg, zero))


def _hard_sigmoid(c: Ctx, x: Value, alpha: float, beta: float) -> Value:
    y = c.make("add", c.make("mul", x, c.scalar(alpha, x, "alpha")), c.scalar(beta, x, "beta"))
    return c.make("minimum", c.make("maximum", y, c.scalar(0, x, "zero")), c.scalar(1, x, "one"))


@ONNX_OPS.register_op("HardSigmoid", "maximum, minimum")
def _hardsigmoid(c: Ctx):
    return _hard_sigmoid(c, c.v(0), c.float_("alpha", 0.2), c.float_("beta", 0.5))


@ONNX_OPS.register_op("HardSwish", "mul, maximum, minimum")
def _hardswish(c: Ctx):
    x = c.v(0)
    return c.make("mul", x, _hard_sigmoid(c, x, 1 / 6, 0.5))


@ONNX_OPS.register_op("ThresholdedRelu", "where")
def _thresholded_relu(c: Ctx):
    x = c.v(0)
    return c.make("where", c.make("greater", x, c.scalar(c.float_("alpha", 1.0), x, "alpha")), x,
                c.scalar(0, x, "zero"))


@ONNX_OPS.register_op("Shrink", "where")
def _shrink(c: Ctx):
    x = c.v(0)
    bias, lambd = c.scalar(c.float_("bias", 0.0), x, "bias"), c.float_("lambd", 0.5)
    low = c.make("less", x, c.scalar(-lambd, x, "low"))
    high = c.make("greater", x, c.scalar(lambd, x, "high"))
    return c.make("where", low, c.make("add", x, bias), c.make("where", high, c.make("sub", x, bias),
                                                          c.scalar(0, x, "zero")))


def _softplus(c: Ctx, x: Value) -> Value:
    return c.make("log", c.make("add", c.make("exp", x, what="exp"), c.scalar(1, x, "one")), what="softplus")


ONNX_OPS.add("Softplus", "log, exp", lambda c: _softplus(c, c.v(0)))
ONNX_OPS.add("Mish", "tanh, log, exp", lambda c: c.make("mul", c.v(0), c.make("tanh", _softplus(c, c.v(0)))))


@ONNX_OPS.register_op("Softsign", "div, abs")
def _softsign(c: Ctx):
    x = c.v(0)
    return c.make("div", x, c.make("add", c.make("abs", x), c.scalar(1, x, "one")))


@ONNX_OPS.register_op("Swish", "mul, sigmoid")
def _swish(c: Ctx):
    x = c.v(0)
    return c.make("mul", x, c.make("sigmoid", c.make("mul", x, c.scalar(c.float_("alpha", 1.0), x, "alpha"))))


@ONNX_OPS.register_op("Gelu", "gelu")
def _gelu(c: Ctx):
    return c.make("gelu", c.v(0), approximate=c.str_("approximate", "none"))


@ONNX_OPS.register_op("Tan", "sin, cos")
def _tan(c: Ctx):
    x = c.v(0)
    return c.make("div", c.make("sin", x), c.make("cos", x))


def _exp_pair(c: Ctx, x: Value, sign: str) -> Value:
    e, en = c.make("exp", x, what="exp"), c.make("exp", c.make("neg", x), what="exp_neg")
    return c.make("mul", c.make(sign, e, en), c.scalar(0.5, x, "half"))


ONNX_OPS.add("Sinh", "exp", lambda c: _exp_pair(c, c.v(0), "sub"))
ONNX_OPS.add("Cosh", "exp", lambda c: _exp_pair(c, c.v(0), "add"))


@ONNX_OPS.register_op("Asinh Acosh", "log, sqrt")
def _asinh(c: Ctx):
    x = c.v(0)
    one = c.scalar(1, x, "one")
    sq = c.make("sqrt", c.make("add" if c.op == "Asinh" else "sub", c.make("mul", x, x), one))
    return c.make("log", c.make("add", x, sq))


@ONNX_OPS.register_op("Atanh", "log, div")
def _atanh(c: Ctx):
    x = c.v(0)
    one = c.scalar(1, x, "one")
    return c.make("mul", c.make("log", c.make("div", c.make("add", one, x), c.make("sub", one, x))), c.scalar(0.5, x, "half"))


# Abramowitz & Stegun 4.4.49: atan(t) on [0, 1] as t * P(t^2), absolute error below 2e-8
_ATAN_COEFFS = (0.9999993329, -0.3332985605, 0.1994653599, -0.1390853351, 0.0964200441,
                -0.0559098861, 0.0218612288, -0.0040540580)


def atan(c: Ctx, x: Value) -> Value:
    """atan from the registry's arithmetic: |x| > 1 folds to pi/2 - atan(1/|x|), the sign is
    put back at the end (akg has no atan op)."""
    zero, one = c.scalar(0, x, "zero"), c.scalar(1, x, "one")
    ax = c.make("abs", x, what="abs")
    big = c.make("greater", ax, one, what="big")
    t = c.make("where", big, c.make("div", one, ax, what="inv"), ax, what="t")
    t2 = c.make("mul", t, t, what="t2")
    poly = c.scalar(_ATAN_COEFFS[-1], x, "a_last")
    for k, a in enumerate(reversed(_ATAN_COEFFS[:-1])):
        poly = c.make("add", c.make("mul", poly, t2, what=f"h{k}"), c.scalar(a, x, f"a{k}"), what=f"p{k}")
    small = c.make("mul", poly, t, what="small")
    folded = c.make("where", big, c.make("sub", c.scalar(math.pi / 2, x, "half_pi"), small, what="fold"), small,
                    what="folded")
    return c.make("where", c.make("less", x, zero, what="negative"), c.make("neg", folded, what="negated"), folded)


def _asin(c: Ctx, x: Value) -> Value:
    one = c.scalar(1, x, "one")
    cos = c.make("sqrt", c.make("sub", one, c.make("mul", x, x, what="sq"), what="one_minus"), what="cos")
    return atan(c, c.make("div", x, cos, what="tan"))


ONNX_OPS.add("Atan", "(polynomial) mul, add, div, where", lambda c: atan(c, c.v(0)))
ONNX_OPS.add("Asin", "(atan of x / sqrt(1 - x^2))", lambda c: _asin(c, c.v(0)))
ONNX_OPS.add("Acos", "(pi/2 - asin)", lambda c: c.make(
    "sub", c.scalar(math.pi / 2, c.v(0), "half_pi"), _asin(c, c.v(0))))

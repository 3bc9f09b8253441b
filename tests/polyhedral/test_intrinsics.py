"""Vectorisable float32 math (polyhedral/intrinsics.py): exp built without compares, within
an ulp of the float64 result over its whole range, with libm's infinities and NaNs; the
functions built on it (softmax, tanh, sigmoid) against NumPy."""

from dataclasses import replace

import numpy as np
import pytest
from tvm import tirx

import akg
from akg.graph import GraphBuilder
from akg.polyhedral.intrinsics import fast_exp
from akg.schedules.cpu import bands_of, cpu_config
from akg.target import get_target

LOG_FLT_MAX = float(np.log(np.float64(np.finfo(np.float32).max)))  # 88.7228...


def _unary(op, n, strip=None):
    """A kernel of `op` over n elements; `strip`: the width of its vector strip (0: no vector
    loops; None: the default)."""
    b = GraphBuilder(op)
    b.output(getattr(b, op)(b.input("x", (n,))))
    graph = b.build()
    kernel = akg.build(graph)
    if strip is not None:
        (band,) = bands_of(kernel.config)
        band = replace(band, register=(strip or band.register[0],))
        kernel = akg.build(graph, config=cpu_config("smart", (band,), vectorize=bool(strip)))
    return kernel


def _ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """|got - want| in units of the float32 spacing at want."""
    return np.abs(got.astype(np.float64) - want) / np.spacing(want.astype(np.float32)).astype(np.float64)


def test_exp_needs_no_compare():
    text = str(fast_exp(tirx.Var("x", "float32")))
    assert "Select" not in text and "isnan" not in text
    # one Horner chain scaled by 2^(n-1): no separate doubling of the result
    assert "* T.float32(2.0)" not in text


LANES = get_target("cpu").vector_lanes("float32")  # the host's: the kernels run here


@pytest.mark.parametrize("strip,magic", [(LANES, True), (2 * LANES, False), (0, False)],
                         ids=["one-vector", "two-vectors", "no-vector-loop"])
def test_exp_within_an_ulp_over_its_normal_range(strip, magic):
    # every result that is a normal float32 not flushed (x above ~-86.99, see _EXP_LOW); in
    # an explicit loop of one vector (16 lanes on AVX-512) n is rounded by a magic number behind a
    # reassociation fence, elsewhere (two vectors: LLVM would scalarise the fence; no vector
    # loop: LLVM's loop vectoriser gives up on a fence) by floor and a conversion
    x = np.linspace(-86.9, LOG_FLT_MAX - 1e-5, 1 << 20, dtype=np.float32)
    x = np.concatenate([x, np.float32(1e-3) * np.arange(-2000, 2000, dtype=np.float32)])
    kernel = _unary("exp", x.size, strip=strip)
    assert ("llvm.arithmetic.fence" in kernel.tir()) == magic
    got = kernel(x)[0]
    want = np.exp(x.astype(np.float64))
    assert _ulps(got, want).max() < 1.5
    assert np.all(np.isfinite(got))


def test_exp_infinities_nan_overflow_and_underflow():
    below = np.nextafter(np.float32(LOG_FLT_MAX), np.float32(0))  # largest x with a finite exp
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, below, np.float32(88.7229), 89.0, 100.0, 1e30,
                  -87.5, -90.0, -1e30, -86.0, 1e-30, -1e-30], np.float32)
    got = _unary("exp", x.size)(x)[0]
    assert np.isnan(got[0])
    assert got[1] == np.inf and got[2] == 0.0 and got[3] == 1.0 and got[4] == 1.0
    assert np.isfinite(got[5]) and _ulps(got[5:6], np.exp(x[5:6].astype(np.float64)))[0] < 1.5
    assert np.all(got[6:10] == np.inf)
    assert np.all(got[10:13] == 0.0)  # below ~1.7e-38 the result is flushed to zero
    np.testing.assert_allclose(got[13], np.exp(np.float64(-86.0)), rtol=2e-7)
    assert got[14] == 1.0 and got[15] == 1.0


@pytest.mark.parametrize("shape", [(1, 1), (1, 1000), (3, 17), (37, 1024), (8, 4099)])
def test_softmax_matches_float64_at_every_shape(shape):
    b = GraphBuilder("softmax")
    b.output(b.softmax(b.input("x", shape)))
    kernel = akg.build(b.build())
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 30).astype(np.float32)
    x[0, 0] = 120.0  # a row whose other exponentials all underflow against its maximum
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=1, keepdims=True))
    np.testing.assert_allclose(kernel(x)[0], e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op, reference", [("tanh", np.tanh), ("sigmoid", lambda v: 1 / (1 + np.exp(-v)))])
def test_functions_built_on_exp(op, reference):
    x = np.concatenate([np.linspace(-100, 100, 20001, dtype=np.float32),
                        np.array([np.inf, -np.inf, np.nan, 0.0, 1e-20], np.float32)])
    got = _unary(op, x.size)(x)[0]
    with np.errstate(over="ignore"):
        want = reference(x.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)

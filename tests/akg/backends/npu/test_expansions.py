"""NPU vector mapping of ops without an instruction of their own, expanded into ones that
exist: tanh (through exp, in float32) and pow (products for small integer exponents, sqrt /
rsqrt for +-0.5, else exp(y ln |x|) with NumPy's signs and NaNs for negative bases). Each is
checked against the NumPy reference."""

import numpy as np
import pytest

from akg.graph import GraphBuilder

from conftest_npu import check_npu


def graph(build):
    b = GraphBuilder("k")
    build(b)
    return b.build()


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_tanh_matches_reference_over_its_range(dtype):
    x = np.linspace(-12, 12, 64 * 300).reshape(64, 300).astype(dtype)
    x[0, :4] = [0.0, 1e-6, -1e-4, 3e-3]
    g = graph(lambda b: b.output(b.op("tanh", b.input("x", (64, 300), dtype))))
    check_npu(g, inputs={"x": x})


@pytest.mark.parametrize("exponent", [2.0, 3.0, -1.0, 0.5, -0.5, 1.7])
def test_pow_by_a_constant(exponent):
    g = graph(lambda b: b.output(b.op("pow", b.op("add", b.op("abs", b.input("x", (32, 100))), 0.25),
                                      b.const(np.array(exponent, np.float32)))))
    check_npu(g)


def test_pow_of_negative_bases_follows_numpy():
    x = np.array([[-2.0, -2.0, -2.0, -0.5, 0.0, 0.0, 0.0, 3.0] * 4] * 4, np.float32)
    y = np.array([[2.0, 3.0, 0.5, -1.0, 0.0, 2.0, -1.0, 1.5] * 4] * 4, np.float32)
    g = graph(lambda b: b.output(b.op("pow", b.input("x", (4, 32)), b.input("y", (4, 32)))))
    with np.errstate(all="ignore"):
        want = np.power(x, y)
    assert np.isnan(want).any() and np.isinf(want).any()  # the cases the expansion must get right
    check_npu(g, inputs={"x": x, "y": y})

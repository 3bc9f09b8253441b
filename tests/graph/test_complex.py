"""complex64: the ops (complex, real, imag, arithmetic) in the reference interpreter, the
decomposition into float32 pairs (akg.graph.complex), and kernels compiled for cpu against the
reference, with complex64 arrays at the kernel's and the model's boundary."""

from __future__ import annotations

import numpy as np
import pytest

import akg
from akg.errors import UnsupportedOpError
from akg.graph import GraphBuilder, evaluate, random_inputs
from akg.graph.complex import complex_io, decompose_complex, has_complex


def _arith_graph(shape=(4, 6)):
    b = GraphBuilder("carith")
    x = b.input("x", shape, "complex64")
    y = b.input("y", shape, "complex64")
    s = b.add(x, y)
    d = b.sub(s, b.neg(y))
    m = b.mul(d, x)
    q = b.div(m, y, name="q")
    re = b.real(q, name="re")
    mag = b.abs(x, name="mag")
    z = b.complex(b.imag(m), re, name="z")
    b.output(q, re, mag, z)
    return b.build()


def test_reference_evaluates_complex_natively():
    g = _arith_graph()
    x = random_inputs(g, seed=1)
    assert x["x"].dtype == np.complex64 and np.abs(x["x"].imag).max() > 0
    q, re, mag, z = evaluate(g, x)
    a, b = x["x"], x["y"]
    want = ((a + b) - (-b)) * a / b
    np.testing.assert_allclose(q, want, rtol=1e-5)
    assert q.dtype == np.complex64 and re.dtype == np.float32 and mag.dtype == np.float32
    np.testing.assert_allclose(mag, np.abs(a), rtol=1e-6)
    np.testing.assert_allclose(z, ((a + b) - (-b)).__mul__(a).imag + 1j * want.real, rtol=1e-5)
    wide = evaluate(g, x, float64=True)
    assert wide[0].dtype == np.complex128


def test_decomposition_is_float_only_and_agrees():
    g = _arith_graph()
    d = decompose_complex(g)
    assert not has_complex(d)
    assert complex_io(g) == {"x", "y", "q", "z"}
    assert [v.name for v in d.inputs] == ["x", "y"] and [v.name for v in d.outputs] == ["q", "re", "mag", "z"]
    assert d.inputs[0].type.shape == (4, 6, 2) and d.inputs[0].dtype == "float32"
    x = random_inputs(g, seed=2)
    pairs = {k: v.view(np.float32).reshape(*v.shape, 2) for k, v in x.items()}
    got = evaluate(d, pairs)
    want = evaluate(g, x)
    for a, w in zip(got, want):
        if w.dtype == np.complex64:
            a = a.view(np.complex64).reshape(w.shape)
        np.testing.assert_allclose(a, w, rtol=1e-5, atol=1e-6)
    assert decompose_complex(d) is d  # nothing complex: unchanged


def test_layout_and_reduction_on_complex_decompose():
    b = GraphBuilder("clayout")
    x = b.input("x", (2, 3), "complex64")
    t = b.transpose(x, perm=(1, 0))
    r = b.reshape(t, shape=(6,))
    c = b.concat(r, r, axis=0)
    s = b.sum(c, axes=(0,), keepdims=True, name="s")
    b.output(c, s)
    g = b.build()
    x = random_inputs(g)
    d = decompose_complex(g)
    got = evaluate(d, {"x": x["x"].view(np.float32).reshape(2, 3, 2)})
    want = evaluate(g, x)
    for a, w in zip(got, want):
        np.testing.assert_allclose(a.view(np.complex64).reshape(w.shape), w, rtol=1e-5, atol=1e-6)


def test_unsupported_op_on_complex_is_named():
    b = GraphBuilder("cexp")
    x = b.input("x", (2,), "complex64")
    b.output(b.maximum(x, x))
    with pytest.raises(UnsupportedOpError, match="maximum"):
        decompose_complex(b.build())


def test_complex_kernel_on_cpu_matches_reference(check_kernel):
    g = _arith_graph()
    kernel = check_kernel(g)
    out = kernel(**random_inputs(g))
    assert [a.dtype for a in out] == [np.complex64, np.float32, np.float32, np.complex64]
    with pytest.raises(akg.errors.InputDataError, match="complex64"):
        kernel(x=np.zeros((4, 6), np.float32), y=np.zeros((4, 6), np.complex64))


def test_complex_model_runs_with_complex_arrays():
    g = _arith_graph((3, 5))
    model = akg.compile_model(g, target="cpu")
    x = random_inputs(g, seed=3)
    got = model(**x)
    want = evaluate(g, x)
    for a, w in zip(got, want):
        assert a.dtype == w.dtype and a.shape == w.shape
        np.testing.assert_allclose(a, w, rtol=1e-4, atol=1e-5)
    assert model.random_inputs()["x"].dtype == np.complex64

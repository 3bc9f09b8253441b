"""tests/targets/tir_interp.py, the NumPy interpreter of TIR PrimFuncs: akg's kernels for a
broad set of graphs and configs, interpreted on random inputs, must give the compiled kernel's
outputs (exactly for integers and booleans, to a few float ulps otherwise) and pass the graph
reference check (akg.verify); run serially (loop by loop) and batched (loop nests as NumPy
array operations) they must agree bit for bit. Hand-built TIR checks the semantics that akg's
kernels do not reach (vectors, wrap-around, NaN rules, casts, steps) against TVM's LLVM
build, and that an unsupported node or a bad access is an error."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm import tirx
from tvm.tirx.buffer import buffer_data

import akg
from akg.graph import GraphBuilder, random_inputs
from akg.verify import Reference, compare

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kernel_suite  # noqa: E402
from tir_interp import TirInterpreter, compile_func, interpret  # noqa: E402

# interpreter vs compiled kernel: a few ulps of the output's scale (LLVM contracts FMAs and may
# reassociate; the interpreter rounds every operation as written)
ULPS = {"float16": 2e-3, "float32": 2e-6, "float64": 1e-13}


def graph(body, name="k"):
    b = GraphBuilder(name)
    body(b)
    return b.build()


def config(**legacy):
    """A Config from the knobs of the recorded (pre-steps) form, which akg keeps reading."""
    from akg.schedules.space import Config

    return Config.from_json(legacy)


def _poisoned(shape, dtype):
    """An output array whose every element the kernel must overwrite to pass."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return np.full(shape, np.nan, dtype)
    if dtype.kind == "b":
        return np.ones(shape, dtype)
    return np.full(shape, np.iinfo(dtype).min + 7, dtype)


def run_interpreted(kernel, inputs: list[np.ndarray], batch: bool = True, min_batch=None) -> list[np.ndarray]:
    program = kernel.program
    outs = [_poisoned(t.shape, t.dtype) for t in program.outputs]
    args = [*(np.array(a) for a in inputs), *(np.array(a) for a in program.params.values()), *outs]
    interpret(kernel.func, args, batch=batch, min_batch=min_batch)
    return outs


def assert_same(got: np.ndarray, want: np.ndarray, what: str, ulps: float | None = None):
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.shape, want.shape, got.dtype, want.dtype)
    if got.dtype.kind != "f" or ulps == 0:
        assert np.array_equal(got, want, equal_nan=got.dtype.kind == "f"), f"{what}: {np.sum(got != want)} differ"
        return
    g, w = got.astype(np.float64), want.astype(np.float64)
    assert np.array_equal(np.isnan(g), np.isnan(w)), f"{what}: NaNs differ"
    finite = np.isfinite(w)
    assert np.array_equal(g[~finite & ~np.isnan(w)], w[~finite & ~np.isnan(w)]), f"{what}: infinities differ"
    scale = max(1.0, float(np.abs(w[finite]).max())) if finite.any() else 1.0
    err = np.abs(g[finite] - w[finite])
    tol = (ulps if ulps is not None else ULPS[str(got.dtype)]) * scale
    assert err.size == 0 or err.max() <= tol, f"{what}: worst error {err.max():.3g} > {tol:.3g} (scale {scale:.3g})"


def check(g, cfg=None, seed: int = 0, inputs=None, serial: bool = True, ulps: float | None = None):
    """Build `g`, then: interpreted == compiled, interpreted passes the reference check, and
    (with `serial`) batched interpretation (as chosen, and wherever legal) == serial
    interpretation bit for bit."""
    kernel = akg.build(g, target="cpu", config=cfg)
    named = inputs if inputs is not None else random_inputs(g, seed)
    args = list(named.values())
    compiled = kernel(*args)
    got = run_interpreted(kernel, args)
    for k, (a, c) in enumerate(zip(got, compiled)):
        assert_same(a, c, f"output {k} vs compiled", ulps)
    problems = compare(g, got, Reference.of(g, named))
    assert not problems, "; ".join(map(str, problems))
    if serial:
        serial_outs = run_interpreted(kernel, args, batch=False)
        for k, (a, b, s) in enumerate(zip(got, run_interpreted(kernel, args, min_batch=2), serial_outs)):
            assert_same(a, s, f"output {k} batched vs serial", 0)
            assert_same(b, s, f"output {k} batched wherever legal vs serial", 0)
    return kernel, got


# --- the kernel test suite (tests/akg/test_build.py), interpreted ---------------------------------

@pytest.fixture(name="check_kernel", scope="module")  # stateless: shared across hypothesis examples
def interpreting_check_kernel():
    """The suite's check, here: the CPU kernel interpreted == compiled == the reference, batched
    == serial."""
    def check_kernel(graph, kernel=None, seed: int = 0, inputs=None):
        assert kernel is None, "the suite's kernels are built here, for the CPU"
        return check(graph, seed=seed, inputs=inputs)[0]
    return check_kernel


SUITE_TESTS = {f"test_suite_{name[5:]}": fn for name, fn in kernel_suite.suite_tests().items()}
# the suite's longest interpretations run with -m slow (the compiled kernels run in test_build)
SLOW_SUITE = ("test_suite_layout_chain", "test_suite_matmul_bias_activation", "test_suite_conv_bn_relu")
globals().update({name: pytest.mark.slow(fn) if name in SLOW_SUITE else fn for name, fn in SUITE_TESTS.items()})


def test_the_suite_is_collected():
    assert len(SUITE_TESTS) >= 15 and "test_suite_conv2d" in SUITE_TESTS


# --- akg kernels: op families ------------------------------------------------------------------

UNARY = ["neg", "abs", "exp", "tanh", "sigmoid", "relu", "relu6", "erf", "sin", "cos", "floor", "ceil",
         "round", "sign", "reciprocal", "log", "sqrt", "rsqrt", "gelu"]


@pytest.mark.parametrize("fast_math", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_unary_family(fast_math):
    def body(b):
        x = b.input("x", (7, 33))
        pos = b.add(b.abs(x), 0.5)
        b.output(*(b.op(op, pos if op in ("log", "sqrt", "rsqrt") else x) for op in UNARY))
    check(graph(body), config(fast_math=fast_math))


def test_binary_broadcast_family():
    def body(b):
        x, y = b.input("x", (3, 1, 5)), b.input("y", (4, 1))
        b.output(*(b.op(op, b.abs(x) if op == "pow" else x, y)
                   for op in ["add", "sub", "mul", "div", "maximum", "minimum", "mod", "pow", "equal",
                              "not_equal", "less", "less_equal", "greater", "greater_equal"]))
    check(graph(body))


def test_elementwise_broadcast_chain():
    def body(b):
        x, y = b.input("x", (5, 7, 33)), b.input("y", (7, 1))
        b.output(b.tanh(b.mul(b.add(x, y), b.sigmoid(y))))
    kernel, _ = check(graph(body))
    assert compile_func(kernel.func).batched_nests  # the element-wise nest runs as array operations


def test_integer_and_bool_ops():
    def body(b):
        x, y = b.input("x", (5, 6), "int32"), b.input("y", (6,), "int32")
        d = b.add(b.abs(y), b.const(np.int32(1)))
        p, q = b.input("p", (5, 6), "bool"), b.input("q", (6,), "bool")
        b.output(b.div(x, d), b.mod(x, d), b.logical_and(p, q), b.logical_or(p, b.logical_not(q)),
                 b.where(p, x, y), b.mul(x, x), b.sub(b.neg(x), y), b.maximum(x, y), b.less(x, y))
    check(graph(body))


def test_integer_wrap_around_matches_the_kernel():
    big = np.array([[2**31 - 1, -2**31, 123456789, -987654321, 65536, 46341]], np.int32)

    def body(b):
        x = b.input("x", (1, 6), "int32")
        b.output(b.mul(x, x), b.add(x, x), b.sub(b.neg(x), x))
    check(graph(body), inputs={"x": big})


def test_int32_reductions():
    def body(b):
        b.output(b.sum(b.input("x", (64, 515), "int32"), axes=[1]), b.max(b.input("y", (9, 40), "int32"), axes=[0]))
    check(graph(body))


def test_casts_and_special_values():
    def body(b):
        x = b.input("x", (4, 5))
        b.output(b.cast(x, to="int32"), b.cast(x, to="float16"), b.cast(x, to="bool"), b.cast(x, to="int8"),
                 b.cast(b.abs(x), to="uint8"), b.cast(x, to="float64"), b.cast(b.cast(x, to="int32"), to="float32"),
                 b.isnan(b.log(x)), b.isinf(b.div(x, b.const(np.float32(0)))))
    check(graph(body))


def test_transpose_pad_chain():
    def body(b):
        t = b.transpose(b.exp(b.input("x", (5, 8, 13))), perm=[2, 0, 1])
        b.output(b.reshape(t, shape=[-1]), b.pad(t, before=[1, 1, 1], after=[0, 2, 0]))
    check(graph(body))


@pytest.mark.parametrize("op, shape", [("sum", (16, 1000)), ("max", (16, 333)), ("min", (8, 256))])
def test_vector_reductions(op, shape):
    kernel, _ = check(graph(lambda b: b.output(b.op(op, b.input("x", shape), axes=[1]))))
    tir = kernel.tir()
    assert "_acc" in tir or "_partial" in tir  # vector accumulators, lane folds (and fences)


def test_arg_reductions():
    check(graph(lambda b: b.output(b.argmax(b.input("x", (4, 7)), axis=1),
                                   b.argmin(b.input("y", (4, 7)), axis=0, keepdims=True),
                                   b.argmax(b.input("z", (3, 200)), axis=1))))


def test_matmul_default_schedule():
    check(graph(lambda b: b.output(b.gelu(b.add(b.matmul(b.input("a", (64, 48)), b.input("w", (48, 96))),
                                                 b.input("bias", (96,)))))))


@pytest.mark.parametrize("m, k, n, tile, register", [
    pytest.param(64, 48, 96, (16, 32), (8, 16), marks=pytest.mark.slow),  # tiles divide: packed panel, register tile
    (37, 29, 53, (16, 32), (4, 16)),  # partial tiles: guarded copies, full/partial tile separation
    pytest.param(8, 16, 40, (8, 16), (0, 0), marks=pytest.mark.slow),  # no register tile: plain packed layout
])
def test_matmul_tiles_register_tiles_and_packing(m, k, n, tile, register):
    g = graph(lambda b: b.output(b.relu(b.matmul(b.input("a", (m, k)), b.input("w", (k, n))))))
    band = {"order": [0, 1], "tile": list(tile), "register": list(register), "sink": True, "pack": True}
    kernel, _ = check(g, config(bands=[band]))
    assert "w_local" in kernel.tir()


@pytest.mark.parametrize("switches", [
    pytest.param({"vectorize": False, "unroll": False, "parallel": False, "promote": False, "fast_math": False},
                 marks=pytest.mark.slow),
    {"promote": False}, {"vectorize": False}, {"unroll": False}], ids=["all-off", "no-promote", "no-vector",
                                                                        "no-unroll"])
def test_switches(switches):
    def body(b):
        x = b.input("x", (32, 48))
        b.output(b.relu(b.matmul(x, b.input("w", (48, 64)))), b.softmax(b.input("s", (8, 64))))
    check(graph(body), config(**switches))


@pytest.mark.parametrize("fusion", ["max", "smart", "none"])
def test_fusion_strategies(fusion):
    def body(b):
        x = b.input("x", (16, 40))
        b.output(b.softmax(b.add(b.matmul(x, b.input("w", (40, 24))), 1.0)))
    check(graph(body), config(fusion=fusion))


def test_conv_bn_relu():
    def body(b):
        y = b.conv2d(b.input("x", (1, 3, 10, 10)), b.input("w", (4, 3, 3, 3)), strides=[2, 2], padding=[1, 1])
        y = b.batch_norm(y, b.input("g", (4,)), b.input("bt", (4,)), b.input("m", (4,)),
                         b.add(b.abs(b.input("v", (4,))), 0.1))
        b.output(b.relu(y))
    check(graph(body))


def test_softmax_and_layer_norm_rows():
    def body(b):
        b.output(b.softmax(b.input("x", (8, 256))),
                 b.layer_norm(b.input("y", (16, 64)), b.input("g", (64,)), b.input("bt", (64,))))
    check(graph(body))


def test_float16():
    def body(b):
        b.output(b.exp(b.input("x", (4, 6), "float16")), b.sum(b.input("y", (8, 300), "float16"), axes=[1]),
                 b.matmul(b.input("a", (4, 64), "float16"), b.input("c", (64, 3), "float16")),
                 b.div(b.input("p", (8, 64), "float16"), b.input("d", (8, 1), "float16")))
    check(graph(body))


def test_float64():
    def body(b):
        x = b.input("x", (6, 20), "float64")
        b.output(b.exp(x), b.sum(b.mul(x, x), axes=[1]), b.softmax(x))
    check(graph(body))


def test_weights_are_params():
    rng = np.random.default_rng(0)
    g = graph(lambda b: b.output(b.matmul(b.input("x", (3, 8)), b.const(rng.standard_normal((8, 5)).astype(np.float32),
                                                                         name="w"))))
    kernel, _ = check(g)
    assert kernel.input_names == ["x"] and kernel.program.params


SPECIAL = np.array([0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 1e-3, 1e-30, 3e-39, 1e30, -1e30, 80.0, 88.5, -88.0,
                    -104.0, 200.0, np.inf, -np.inf, np.nan, 0.2, -0.2, 4.5, -4.5], np.float32)


@pytest.mark.parametrize("op", ["exp", "tanh", "sigmoid", "erf", "rsqrt"])
def test_fast_math_expansions_on_special_values(op):
    """The fast-math expansions (Lets, Selects, bit tricks, reinterpret) in a vector loop and its
    remainder: the compiled kernel's NaNs, infinities and signed zeros, its finite values to an
    ulp or two (LLVM contracts the polynomials into FMAs, the interpreter rounds each step)."""
    x = np.concatenate([SPECIAL, np.random.default_rng(0).standard_normal(41).astype(np.float32) * 30])
    g = graph(lambda b: b.output(b.op(op, b.input("x", x.shape))))
    kernel = akg.build(g, target="cpu")
    got, want = run_interpreted(kernel, [x])[0], kernel(x)[0]
    finite = np.isfinite(want)
    assert np.array_equal(got[~finite], want[~finite], equal_nan=True), x[~finite]
    sign = np.signbit(got) != np.signbit(want)
    assert not (sign & ~np.isnan(want)).any(), x[sign]
    np.testing.assert_allclose(got[finite], want[finite], rtol=2.5e-7, atol=1.2e-38)
    assert_same(got, run_interpreted(kernel, [x], batch=False)[0], op, ulps=0)
    assert_same(got, run_interpreted(kernel, [x], min_batch=2)[0], op, ulps=0)
    assert not compare(g, [got], Reference.of(g, {"x": x}))


def test_interpreter_speed():
    """1e5 points of a fast-math element-wise kernel, and 3e5 multiply-adds of a matmul."""
    for body, points in [(lambda b: b.output(b.sigmoid(b.add(b.input("x", (100, 1000)), b.input("y", (1000,))))), 1e5),
                         (lambda b: b.output(b.matmul(b.input("a", (64, 48)), b.input("w", (48, 96)))), 64 * 48 * 96)]:
        g = graph(body)
        kernel = akg.build(g, target="cpu")
        args = list(random_inputs(g, 0).values())
        run_interpreted(kernel, args)  # compile
        t0 = time.perf_counter()
        got = run_interpreted(kernel, args)
        elapsed = time.perf_counter() - t0
        assert_same(got[0], kernel(*args)[0], "output")
        assert elapsed < 5.0, f"{points:.0f} points took {elapsed:.2f} s"


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(6))
def test_random_shapes_serial_and_batched(seed):
    rng = np.random.default_rng(seed)
    m, k, n = (int(v) for v in rng.choice([1, 3, 7, 16, 31, 33], 3))

    def body(b):
        y = b.matmul(b.input("a", (m, k)), b.input("w", (k, n)))
        b.output(b.softmax(b.add(y, b.input("bias", (n,)))), b.layer_norm(y, b.input("g", (n,)), b.input("bt", (n,))),
                 b.transpose(b.tanh(y), perm=[1, 0]))
    check(graph(body), seed=seed)


# --- hand-built TIR against TVM's LLVM build -------------------------------------------------------


def _build(params, body):
    func = tirx.PrimFunc(params, body).with_attr("global_symbol", "main")
    return func, tvm.compile(tvm.IRModule({"main": func}), target="llvm")


def _both(func, exe, arrays):
    """(interpreted batched wherever legal, batched as chosen, serial, compiled) results of
    running on copies of arrays."""
    results = []
    for batch, least in ((True, 1), (True, None), (False, None)):
        a = [x.copy() for x in arrays]
        interpret(func, a, batch=batch, min_batch=least)
        results.append(a)
    tensors = [tvm.runtime.tensor(x.copy(), tvm.cpu()) for x in arrays]
    exe["main"](*tensors)
    results.append([t.numpy() for t in tensors])
    return results


def _assert_all_equal(results):
    ref = results[-1]
    for got in results[:-1]:
        for g, r in zip(got, ref):
            assert np.array_equal(g, r, equal_nan=g.dtype.kind == "f"), (g, r)


def _i32(v):
    return tirx.const(v, "int32")


def test_tir_float_rules_nan_min_max_compare_round_cast():
    n = 10
    x, y = tirx.decl_buffer((n,), "float32", "x"), tirx.decl_buffer((n,), "float32", "y")
    o, ob = tirx.decl_buffer((9, n), "float32", "o"), tirx.decl_buffer((4, n), "bool", "ob")
    oi = tirx.decl_buffer((3, n), "int32", "oi")
    i = tirx.Var("i", "int32")
    X, Y = tirx.BufferLoad(x, [i]), tirx.BufferLoad(y, [i])
    body = tirx.For(i, 0, n, tirx.ForKind.SERIAL, tirx.SeqStmt([
        tirx.BufferStore(o, tirx.Min(X, Y), [0, i]), tirx.BufferStore(o, tirx.Max(X, Y), [1, i]),
        tirx.BufferStore(o, tirx.nearbyint(X), [2, i]), tirx.BufferStore(o, tirx.round(X), [3, i]),
        tirx.BufferStore(o, X / Y, [4, i]), tirx.BufferStore(o, tirx.floor(X / Y), [5, i]),
        tirx.BufferStore(o, tirx.Select(X > Y, X - Y, Y * X), [6, i]),
        tirx.BufferStore(o, tirx.Cast("float32", tirx.Cast("float16", X * Y)), [7, i]),
        tirx.BufferStore(o, tirx.if_then_else(tirx.isnan(X), tirx.const(-1.0, "float32"), tirx.abs(X)), [8, i]),
        tirx.BufferStore(ob, tirx.NE(X, Y), [0, i]), tirx.BufferStore(ob, tirx.EQ(X, Y), [1, i]),
        tirx.BufferStore(ob, tirx.LE(X, Y), [2, i]), tirx.BufferStore(ob, tirx.Cast("bool", X), [3, i]),
        tirx.BufferStore(oi, tirx.Cast("int32", X), [0, i]), tirx.BufferStore(oi, tirx.Cast("int32", Y * X), [1, i]),
        tirx.BufferStore(oi, tirx.Cast("int32", tirx.Cast("int8", tirx.Cast("int32", X))), [2, i]),
    ]))
    func, exe = _build([x, y, o, ob, oi], body)
    xs = np.array([np.nan, 1, np.nan, 2.5, -2.5, 0.5, -7.3, 3e9, 300.7, 65519.0], np.float32)
    ys = np.array([1, np.nan, np.nan, 2.5, 1.5, -0.5, 2.0, 1.0, 0.0, 2.0], np.float32)
    _assert_all_equal(_both(func, exe, [xs, ys, np.zeros((9, n), np.float32), np.zeros((4, n), bool),
                                        np.zeros((3, n), np.int32)]))


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8", "uint32"])
def test_tir_integer_wrap_division_and_shifts(dtype):
    n = 16
    m, r = tirx.decl_buffer((n,), dtype, "m"), tirx.decl_buffer((9, n), dtype, "r")
    j = tirx.Var("j", "int32")
    M = tirx.BufferLoad(m, [j])
    c = tirx.const(3, dtype)
    signed = not dtype.startswith("u")
    d = tirx.const(-3, dtype) if signed else c
    body = tirx.For(j, 0, n, tirx.ForKind.VECTORIZED, tirx.SeqStmt([
        tirx.BufferStore(r, tirx.truncdiv(M, d), [0, j]), tirx.BufferStore(r, tirx.truncmod(M, d), [1, j]),
        tirx.BufferStore(r, tirx.floordiv(M, d), [2, j]), tirx.BufferStore(r, tirx.floormod(M, d), [3, j]),
        tirx.BufferStore(r, M * M + M, [4, j]), tirx.BufferStore(r, M - M * c - c, [5, j]),
        tirx.BufferStore(r, tirx.shift_left(M, tirx.const(2, dtype)), [6, j]),
        tirx.BufferStore(r, tirx.shift_right(M, tirx.const(1, dtype)), [7, j]),
        tirx.BufferStore(r, tirx.bitwise_xor(tirx.bitwise_and(M, c), tirx.bitwise_not(M)), [8, j]),
    ]))
    func, exe = _build([m, r], body)
    info = np.iinfo(dtype)
    vals = np.linspace(int(info.min) // 2, int(info.max) // 2, n).astype(np.int64) * 2 + 1
    vals[:6] = [0, 1, -1, 7, -8, 100] if signed else [0, 1, 2, 7, 8, 100]
    _assert_all_equal(_both(func, exe, [vals.astype(dtype), np.zeros((9, n), dtype)]))


def test_tir_vectors_ramp_broadcast_and_lets():
    a = tirx.decl_buffer((32,), "float32", "a")
    o = tirx.decl_buffer((4, 16), "float32", "o")
    idx = tirx.decl_buffer((8,), "int32", "idx")
    t = tirx.Var("t", "float32x8")
    r8 = tirx.Ramp(_i32(0), _i32(2), 8)
    two = tirx.Broadcast(tirx.const(2.0, "float32"), 8)
    body = tirx.SeqStmt([
        tirx.BufferStore(o, tirx.Let(t, tirx.BufferLoad(a, [r8]), t * t + two), [_i32(0), tirx.Ramp(_i32(0), _i32(1), 8)]),
        tirx.BufferStore(o, tirx.Max(tirx.BufferLoad(a, [tirx.Ramp(_i32(31), _i32(-3), 8)]), two),
                         [_i32(1), tirx.Ramp(_i32(8), _i32(1), 8)]),
        tirx.BufferStore(o, tirx.BufferLoad(a, [tirx.BufferLoad(idx, [tirx.Ramp(_i32(0), _i32(1), 8)])]),
                         [_i32(2), tirx.Ramp(_i32(1), _i32(2), 8)]),
        tirx.BufferStore(o, tirx.Select(tirx.BufferLoad(a, [r8]) > two, tirx.exp(tirx.BufferLoad(a, [r8])), two),
                         [_i32(3), tirx.Ramp(_i32(0), _i32(1), 8)]),
    ])
    func, exe = _build([a, idx, o], body)
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal(32).astype(np.float32) * 3, rng.integers(0, 32, 8).astype(np.int32),
              np.zeros((4, 16), np.float32)]
    *interp, compiled = _both(func, exe, arrays)
    for got in interp:
        np.testing.assert_array_equal(got[2][:3], compiled[2][:3])
        np.testing.assert_allclose(got[2][3], compiled[2][3], rtol=2e-7)  # libm exp


def test_tir_loop_steps_lets_binds_and_while():
    s = tirx.decl_buffer((20,), "int32", "s")
    k, q = tirx.Var("k", "int32"), tirx.Var("q", "int32")
    body = tirx.SeqStmt([
        tirx.For(k, 2, 15, tirx.ForKind.SERIAL, tirx.BufferStore(s, k * k, [k]), step=_i32(4)),
        tirx.Bind(q, tirx.BufferLoad(s, [_i32(6)]) + 1),
        tirx.BufferStore(s, q, [_i32(19)]),
    ])
    func, exe = _build([s], body)
    _assert_all_equal(_both(func, exe, [np.zeros(20, np.int32)]))


def test_tir_loop_carried_dependences_are_not_batched():
    """Loops whose iterations read what others write (a prefix sum, an overlapping fold, a shift
    in place, a prefix sum over rows) must run as the serial loop does. (Serial loops: TVM's
    vectoriser assumes a vectorized loop has no such dependence and does not keep its order.)"""
    n = 24
    a = tirx.decl_buffer((n,), "float32", "a")
    b2 = tirx.decl_buffer((4, 6), "float32", "b2")
    i, j, u, v, w = (tirx.Var(name, "int32") for name in "ijuvw")
    A = lambda e: tirx.BufferLoad(a, [e])
    body = tirx.SeqStmt([
        tirx.For(i, 1, n - 1, tirx.ForKind.SERIAL, tirx.BufferStore(a, A(i - 1) + A(i), [i])),  # prefix sum
        tirx.For(j, 0, 12, tirx.ForKind.SERIAL, tirx.BufferStore(a, A(j) + A(j + 4), [j])),  # overlapping fold
        tirx.For(u, 0, n - 1, tirx.ForKind.SERIAL, tirx.BufferStore(a, A(u + 1), [u])),  # shift left in place
        tirx.For(v, 1, 3, tirx.ForKind.SERIAL,  # a prefix sum down the columns
                 tirx.For(w, 0, 6, tirx.ForKind.VECTORIZED,
                          tirx.BufferStore(b2, tirx.BufferLoad(b2, [v, w]) + tirx.BufferLoad(b2, [v - 1, w]), [v, w]))),
    ])
    func, exe = _build([a, b2], body)
    rng = np.random.default_rng(2)
    arrays = [rng.standard_normal(n).astype(np.float32), rng.standard_normal((4, 6)).astype(np.float32)]
    _assert_all_equal(_both(func, exe, arrays))
    # only the inner loop over a row (no dependence between its iterations) may run batched
    assert TirInterpreter(func, min_batch=1).batched_nests == [("w",)]


def test_tir_independent_nests_are_batched():
    a = tirx.decl_buffer((8, 16), "float32", "a")
    o = tirx.decl_buffer((8, 16), "float32", "o")
    i, j = tirx.Var("i", "int32"), tirx.Var("j", "int32")
    A = tirx.BufferLoad(a, [i, j])
    body = tirx.For(i, 0, 8, tirx.ForKind.PARALLEL, tirx.For(j, 0, 16, tirx.ForKind.VECTORIZED, tirx.IfThenElse(
        A > tirx.const(0.0, "float32"), tirx.BufferStore(o, tirx.sqrt(A), [i, j]),
        tirx.BufferStore(o, A * tirx.const(-2.0, "float32"), [i, j]))))
    func, exe = _build([a, o], body)
    arrays = [np.random.default_rng(3).standard_normal((8, 16)).astype(np.float32), np.zeros((8, 16), np.float32)]
    _assert_all_equal(_both(func, exe, arrays))
    assert ("i", "j") in TirInterpreter(func, min_batch=1).batched_nests


def test_tir_float16_arithmetic_rounds_every_operation():
    n = 64
    x, y = tirx.decl_buffer((n,), "float16", "x"), tirx.decl_buffer((n,), "float16", "y")
    o = tirx.decl_buffer((3, n), "float16", "o")
    i = tirx.Var("i", "int32")
    X, Y = tirx.BufferLoad(x, [i]), tirx.BufferLoad(y, [i])
    body = tirx.For(i, 0, n, tirx.ForKind.SERIAL, tirx.SeqStmt([
        tirx.BufferStore(o, X * Y + X, [0, i]), tirx.BufferStore(o, X / (Y - tirx.const(0.1, "float16")), [1, i]),
        tirx.BufferStore(o, tirx.Cast("float16", tirx.Cast("float32", X) * tirx.const(1000.0, "float32")), [2, i])]))
    func, exe = _build([x, y, o], body)
    rng = np.random.default_rng(4)
    arrays = [(rng.standard_normal(n) * 60).astype(np.float16), rng.standard_normal(n).astype(np.float16),
              np.zeros((3, n), np.float16)]
    _assert_all_equal(_both(func, exe, arrays))


def test_tir_views_pragmas_and_deep_expressions():
    b = tirx.decl_buffer((4, 6), "float32", "b")
    flat = tirx.decl_buffer((24,), "float32", "flat", data=buffer_data(b))
    o = tirx.decl_buffer((3, 5), "float32", "o")
    j, k, r, c = (tirx.Var(name, "int32") for name in "jkrc")
    deep = tirx.BufferLoad(flat, [r * 5 + c])
    for _ in range(300):  # a 600-node expression: generated in pieces, compiled with a deeper stack
        deep = deep * tirx.const(1.001, "float32") + tirx.const(0.5, "float32")
    body = tirx.SeqStmt([
        tirx.DeclBuffer(flat, data=buffer_data(b)),
        tirx.AttrStmt(tirx.const(0, "int32"), "pragma_hint", 1, tirx.For(j, 0, 24, tirx.ForKind.SERIAL, tirx.BufferStore(
            flat, tirx.BufferLoad(flat, [j]) * tirx.const(2.0, "float32") + tirx.Cast("float32", j), [j]))),
        tirx.Evaluate(0),
        # written through one view, read through the other: each iteration reads the previous one's
        # store (serial: b[0, 0] spreads along the row), so this loop must not run batched
        tirx.For(k, 0, 5, tirx.ForKind.SERIAL, tirx.BufferStore(
            flat, tirx.BufferLoad(b, [_i32(0), k]), [k + 1])),
        # the row offset is a term constant over the inner nest (floordiv of the outer variable)
        tirx.For(r, 0, 3, tirx.ForKind.SERIAL, tirx.For(c, 0, 5, tirx.ForKind.VECTORIZED, tirx.BufferStore(
            o, deep + tirx.BufferLoad(o, [tirx.floordiv(r * 2, 2), c]), [tirx.floordiv(r * 2, 2), c]))),
    ])
    func, exe = _build([b, o], body)
    rng = np.random.default_rng(5)
    *interp, compiled = _both(func, exe, [rng.standard_normal((4, 6)).astype(np.float32),
                                          rng.standard_normal((3, 5)).astype(np.float32)])
    for got in interp:
        np.testing.assert_array_equal(got[0], compiled[0])
        np.testing.assert_allclose(got[1], compiled[1], rtol=1e-6)  # LLVM contracts the chain into FMAs
    np.testing.assert_array_equal(interp[0][1], interp[2][1])
    nests = TirInterpreter(func, min_batch=1).batched_nests
    assert ("c",) in nests and ("k",) not in nests


def test_tir_llvm_fence_is_the_identity():
    a = tirx.decl_buffer((8,), "float32", "a")
    i = tirx.Var("i", "int32")
    fenced = tirx.call_llvm_pure_intrin("float32", "llvm.arithmetic.fence", tirx.BufferLoad(a, [i]))
    func, exe = _build([a], tirx.For(i, 0, 8, tirx.ForKind.VECTORIZED,
                                     tirx.BufferStore(a, fenced + fenced, [i])))
    _assert_all_equal(_both(func, exe, [np.arange(8, dtype=np.float32)]))


# --- errors ----------------------------------------------------------------------------------------


def test_unsupported_nodes_raise_not_implemented():
    a = tirx.decl_buffer((4,), "float32", "a")
    i = tirx.Var("i", "int32")
    extern = tirx.call_extern("float32", "my_fn", tirx.BufferLoad(a, [i]))
    with pytest.raises(NotImplementedError, match="call_extern"):
        TirInterpreter(tirx.PrimFunc([a], tirx.For(i, 0, 4, tirx.ForKind.SERIAL, tirx.BufferStore(a, extern, [i]))))
    bound = tirx.For(i, 0, 4, tirx.ForKind.THREAD_BINDING, tirx.BufferStore(a, tirx.const(1.0, "float32"), [i]),
                     thread_binding=tirx.IterVar(None, tirx.Var("tx", "int32"), 1, "threadIdx.x"))
    with pytest.raises(NotImplementedError, match="THREAD_BINDING|thread"):
        TirInterpreter(tirx.PrimFunc([a], bound))
    b16 = tirx.decl_buffer((4,), "bfloat16", "b16")
    with pytest.raises(NotImplementedError, match="bfloat16"):
        TirInterpreter(tirx.PrimFunc([b16], tirx.Evaluate(0)))


def test_out_of_bounds_accesses_raise():
    a = tirx.decl_buffer((4,), "float32", "a")
    i = tirx.Var("i", "int32")
    for lo, serial in [(-1, True), (1, True), (-1, False), (1, False)]:
        func = tirx.PrimFunc([a], tirx.For(i, 0, 4, tirx.ForKind.SERIAL,
                                           tirx.BufferStore(a, tirx.BufferLoad(a, [i + lo]), [i])))
        with pytest.raises(IndexError, match="a"):
            interpret(func, [np.zeros(4, np.float32)], batch=not serial)


def test_uninitialised_local_memory_reads_as_poison():
    a = tirx.decl_buffer((4,), "float32", "a")
    tmp = tirx.decl_buffer((4,), "float32", "tmp")
    i = tirx.Var("i", "int32")
    func = tirx.PrimFunc([a], tirx.SeqStmt([tirx.AllocBuffer(tmp), tirx.For(
        i, 0, 4, tirx.ForKind.SERIAL, tirx.BufferStore(a, tirx.BufferLoad(tmp, [i]), [i]))]))
    out = np.zeros(4, np.float32)
    interpret(func, [out])
    assert np.isnan(out).all()
    interpret(func, [out], poison=False)
    assert (out == 0).all()


def test_argument_checks():
    kernel = akg.build(graph(lambda b: b.output(b.exp(b.input("x", (4, 4))))), target="cpu")
    with pytest.raises(ValueError, match="takes 2 arguments"):
        interpret(kernel.func, [np.zeros((4, 4), np.float32)])
    with pytest.raises(TypeError, match="must be float32"):
        interpret(kernel.func, [np.zeros((4, 4), np.float64), np.zeros((4, 4), np.float32)])
    with pytest.raises(ValueError, match="shape"):
        interpret(kernel.func, [np.zeros((4, 5), np.float32), np.zeros((4, 4), np.float32)])

"""MindIR importer: every corpus fixture against MindSpore's own outputs (reference
interpreter, and compiled for cpu), primitive mappings on hand-built models, typed errors for
malformed, truncated and unsupported input, and `akg convert`."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from akg.cli import main
from akg.errors import ImportFormatError, UnsupportedError, UnsupportedOpError
from akg.graph import evaluate
from akg.graph.io import LOADERS, emit_mir, load_model, parse_mir
from akg.graph.io import _mind_ir_pb2 as pb
from akg.graph.io.mindir import MINDIR_OPS, load_mindir, parse_mindir
from akg.graph.io.mindir_train import TRAINING_PRIMITIVES

ROOT = Path(__file__).resolve().parents[3]
CORPUS = next((p for p in (ROOT.parent / "shared" / "corpus" / "mindir", Path("/work/shared/corpus/mindir"))
               if p.is_dir()), ROOT.parent / "shared" / "corpus" / "mindir")
needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason=f"MindIR corpus not at {CORPUS}")
FIXTURES = ["add", "relu", "mlp", "lenet5", "resnet_block", "transformer_layer"]
# README: two fp32 implementations agree to ~3e-6 of max|output|; GELU's erf form would be ~1.2e-4 off
TOL = 1e-5


def fixture_io(name: str) -> tuple[list[np.ndarray], list[np.ndarray]]:
    with np.load(CORPUS / f"{name}.io.npz") as npz:
        count = lambda prefix: sum(k.startswith(prefix) for k in npz.files)  # noqa: E731
        return ([npz[f"input_{i}"] for i in range(count("input_"))],
                [npz[f"output_{i}"] for i in range(count("output_"))])


def rel_error(got: np.ndarray, want: np.ndarray) -> float:
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape, got.dtype, want.dtype)
    return float(np.abs(got.astype(np.float64) - want).max() / max(np.abs(want).max(), 1e-30))


# --- the corpus ------------------------------------------------------------------------------------

OPS = {  # op -> count in each imported fixture
    "add": {"add": 1},
    "relu": {"relu": 1},
    "mlp": {"matmul": 2, "add": 2, "relu": 1},
    "lenet5": {"conv2d": 2, "add": 5, "relu": 4, "max_pool2d": 2, "reshape": 3, "matmul": 3},
    "resnet_block": {"conv2d": 2, "batch_norm": 2, "relu": 2, "add": 1},
    "transformer_layer": {"reshape": 10, "matmul": 6, "add": 8, "transpose": 4, "batch_matmul": 2,
                          "mul": 1, "softmax": 1, "layer_norm": 2, "gelu": 1},
}


@needs_corpus
@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_imports_and_matches_mindspore(name):
    g = load_model(CORPUS / f"{name}.mindir")  # through LOADERS, as `akg show|run` do
    inputs, expected = fixture_io(name)
    assert g.name == name
    assert [v.name for v in g.inputs] == (["x", "y"] if name == "add" else ["x"])
    assert [v.name for v in g.outputs] == [f"output_{i}" for i in range(len(expected))]
    counts: dict[str, int] = {}
    for n in g.nodes:
        counts[n.op] = counts.get(n.op, 0) + 1
    assert counts == OPS[name]
    got = evaluate(g, inputs)
    for i, (a, e) in enumerate(zip(got, expected, strict=True)):
        assert rel_error(a, e) < TOL, (name, i, rel_error(a, e))


@needs_corpus
def test_weights_and_settings_come_through():
    g = load_mindir(CORPUS / "resnet_block.mindir")
    assert {v.name for v in g.constants} >= {"conv1.weight", "bn1.moving_mean", "bn2.moving_variance"}
    conv = next(n for n in g.nodes if n.op == "conv2d")
    assert conv.attrs["padding"] == (1, 1, 1, 1) and conv.attrs["strides"] == (1, 1)
    assert {n.attrs["epsilon"] for n in g.nodes if n.op == "batch_norm"} == {1e-5}
    t = load_mindir(CORPUS / "transformer_layer.mindir")
    assert [n.attrs["approximate"] for n in t.nodes if n.op == "gelu"] == ["tanh"]
    assert {n.attrs["transpose_b"] for n in t.nodes if n.op == "matmul"} == {True}
    pool = next(n for n in load_mindir(CORPUS / "lenet5.mindir").nodes if n.op == "max_pool2d")
    assert pool.attrs["kernel"] == (2, 2) and pool.attrs["strides"] == (2, 2)


@needs_corpus
def test_the_tolerance_tells_gelu_forms_apart():
    """MindSpore's GeLU is the tanh form: the erf form misses the expected outputs."""
    g = load_mindir(CORPUS / "transformer_layer.mindir")
    erf = parse_mir(emit_mir(g, inline_limit=None)[0].replace('approximate="tanh"', 'approximate="none"'))
    inputs, (expected,) = fixture_io("transformer_layer")
    assert rel_error(evaluate(erf, inputs)[0], expected) > 3 * TOL
    assert rel_error(evaluate(g, inputs)[0], expected) < TOL


@needs_corpus
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "transformer_layer"
                                  else n for n in FIXTURES])
def test_compiled_fixture_matches_mindspore(name):
    import akg

    g = load_mindir(CORPUS / f"{name}.mindir")
    inputs, expected = fixture_io(name)
    kernel = akg.build(g)
    got = kernel(**{v.name: a for v, a in zip(g.inputs, inputs)})
    got = list(got) if isinstance(got, (list, tuple)) else [got]
    for a, e in zip(got, expected, strict=True):
        assert rel_error(a, e) < TOL


# --- hand-built models ------------------------------------------------------------------------

F32, I32, I64, BOOL = 1, 6, 7, 9
A = pb.AttributeProto


def _tensor_proto(array: np.ndarray) -> pb.TensorProto:
    codes = {"float32": F32, "int32": I32, "int64": I64, "bool": BOOL}
    t = pb.TensorProto(dims=array.shape, data_type=codes[array.dtype.name])
    t.raw_data = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes()
    return t


def _attr(name: str, value, item: bool = False) -> pb.AttributeProto:
    """A Python value as MindSpore writes it; tuple items keep scalars in `ints` / `floats`."""
    a = A(name=name)
    if isinstance(value, np.ndarray):
        a.type = A.TENSORS
        a.tensors.append(_tensor_proto(value))
    elif isinstance(value, bool):
        a.type = A.BOOL
        a.ints.append(int(value)) if item else setattr(a, "i", int(value))
    elif isinstance(value, int):
        a.type = A.INT64
        a.ints.append(value) if item else setattr(a, "i", value)
    elif isinstance(value, float):
        a.type = A.FLOAT
        a.floats.append(value) if item else setattr(a, "f", value)
    elif isinstance(value, str):
        a.type, a.s = A.STRING, value.encode()
    elif isinstance(value, tuple):
        a.type = A.TUPLE
        a.values.extend(_attr("", v, item=True) for v in value)
    elif value is None:
        a.type = A.NONE
    return a


class Model:
    """A tiny ModelProto built the way MindSpore 2.x writes one (prefixed names, REF:: nodes)."""

    def __init__(self, graph: str = "g"):
        self.m = pb.ModelProto(ir_version="1.1", producer_name="MindSpore", mind_ir_version=3)
        self.g = self.m.graph
        self.g.name = graph
        self.count = 0

    def name(self, short: str) -> str:
        return f"{self.g.name}:{short}"

    def input(self, short: str, shape, dtype: int = F32) -> str:
        vi = self.g.input.add(name=self.name(short))
        vi.tensor.add(dims=shape, data_type=dtype)
        return vi.name

    def param(self, short: str, array: np.ndarray) -> str:
        t = _tensor_proto(array)
        t.name, t.ref_key = self.name(short), short
        self.g.parameter.append(t)
        return t.name

    def const(self, value) -> str:
        self.count += 1
        node = self.g.node.add(op_type="Constant", name=f"ValueNode_{self.count}",
                               output=[f"ValueNode_{self.count}"])
        node.attribute.append(_attr("value", value))
        return node.name

    def op(self, prim: str, *inputs, declared=None, function: bool = True, **attrs) -> str:
        self.count += 1
        key = f"{prim}:{self.count}"
        p = self.m.primitives.add(name=key, op_type=prim,
                                  prim_type=pb.PrimitiveProto.PRIMITIVE_FUNCTION if function
                                  else pb.PrimitiveProto.PRIMITIVE)
        p.attribute.extend(_attr(k, v) for k, v in attrs.items())
        out = self.name(f"CNode_{self.count}:{self.count}")
        node = self.g.node.add(op_type=f"REF::{key}", name=out, output=[out])
        node.input.extend(i if isinstance(i, str) else self.const(i) for i in inputs)  # str: a name
        if declared is not None:
            shape, dtype = declared
            d = node.attribute.add(name="shape", type=A.TENSORS)
            d.tensors.add(dims=shape, data_type=dtype)
        return out

    def output(self, *names: str) -> "Model":
        for n in names:
            self.g.output.add(name=n)
        return self

    def bytes(self) -> bytes:
        return self.m.SerializeToString()

    def load(self, file: str = "m.mindir"):
        return parse_mindir(self.bytes(), file)


def run(model: Model, *arrays):
    g = model.load()
    return g, evaluate(g, list(arrays))


RNG = np.random.default_rng(0)
X = RNG.standard_normal((2, 3, 8, 8)).astype(np.float32)


def test_bookkeeping_and_names():
    m = Model("7_net_construct_1")
    x = m.input("in put$1", [2, 3])
    w = m.param("fc.weight", np.arange(6, dtype=np.float32).reshape(2, 3))
    u = m.g.node.add(op_type="Constant", name="U", output=["U"])
    u.attribute.add(name="value", type=A.UMONAD)
    load = m.op("Load", w, "U")
    y = m.op("Mul", x, load, declared=([2, 3], F32))
    tup = m.op("MakeTuple", load)
    state = m.op("UpdateState", "U", tup)
    out = m.op("Depend", y, state)
    g, (got, passthrough) = run(m.output(out, x), np.ones((2, 3), np.float32))
    assert [v.name for v in g.inputs] == ["in_put_1"] and [v.name for v in g.constants] == ["fc.weight"]
    assert [n.op for n in g.nodes] == ["mul", "reshape"]  # Load / MakeTuple / UpdateState / Depend gone
    assert [v.name for v in g.outputs] == ["output_0", "output_1"]  # an input as output is copied
    np.testing.assert_array_equal(got, np.arange(6).reshape(2, 3))
    np.testing.assert_array_equal(passthrough, 1)


def test_function_settings_reductions_softmax_and_tuples():
    m = Model()
    x = m.input("x", [2, 3, 4])
    mean = m.op("ReduceMean", x, (1,), True, declared=([2, 1, 4], F32))
    total = m.op("ReduceSum", x, (), False, False, declared=([], F32))
    soft = m.op("Softmax", x, (-1,))
    cat = m.op("Concat", m.op("MakeTuple", x, soft), 2, declared=([2, 3, 8], F32))
    pick = m.op("TupleGetItem", m.op("MakeTuple", mean, total), 1)
    sq = m.op("Squeeze", mean, (1,))
    xv = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    _, (a, b, c, d) = run(m.output(mean, pick, cat, sq), xv)
    np.testing.assert_allclose(a, xv.mean(axis=1, keepdims=True), rtol=1e-6)
    np.testing.assert_allclose(b, xv.sum(), rtol=1e-5)
    e = np.exp(xv - xv.max(-1, keepdims=True))
    np.testing.assert_allclose(c, np.concatenate([xv, e / e.sum(-1, keepdims=True)], 2), rtol=1e-6)
    assert d.shape == (2, 4)


def test_conv_and_pool_same_padding_stride_2():
    m = Model()
    x = m.input("x", [2, 3, 8, 8])
    w = m.param("w", RNG.standard_normal((4, 3, 3, 3)).astype(np.float32))
    conv = m.op("Conv2D", x, w, function=False, pad_mode="same", stride=(1, 1, 2, 2), dilation=(1, 1, 1, 1),
                group=1, format="NCHW", mode=1, declared=([2, 4, 4, 4], F32))
    pool = m.op("MaxPool", x, function=False, kernel_size=(1, 1, 3, 3), strides=(1, 1, 2, 2), pad_mode="SAME",
                format="NCHW", declared=([2, 3, 4, 4], F32))
    g, (y, p) = run(m.output(conv, pool), X)
    # same, stride 2, k 3 on 8: output 4, total padding 1: none on top/left, 1 at the bottom/right
    xp = np.pad(X, [(0, 0), (0, 0), (0, 1), (0, 1)])
    wv = g.constants[g.value("w")]
    want = np.einsum("nchwij,ocij->nohw",
                     np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))[:, :, ::2, ::2], wv)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    xm = np.pad(X, [(0, 0), (0, 0), (0, 1), (0, 1)], constant_values=-np.inf)
    np.testing.assert_array_equal(p, np.lib.stride_tricks.sliding_window_view(xm, (3, 3), axis=(2, 3))
                                  [:, :, ::2, ::2].max(axis=(-2, -1)))


def test_layout_ops_match_numpy():
    m = Model()
    x = m.input("x", [4, 6])
    idx = m.input("i", [3], I32)
    strided = m.op("StridedSlice", x, (1, 0), (0, 6), (1, 2), 0, 2, 0, 0, 1, declared=([3], F32))
    gathered = m.op("Gather", x, idx, 1, 0)
    sliced = m.op("Slice", x, (1, 2), (2, -1))
    t = m.op("Transpose", m.op("ExpandDims", x, 0), (2, 0, 1))
    b = m.op("BroadcastTo", m.op("Reshape", x, (4, 1, 6)), (-1, 2, -1))
    xv = RNG.standard_normal((4, 6)).astype(np.float32)
    iv = np.array([5, 0, 2], np.int32)
    _, (s, gth, sl, tr, bc) = run(m.output(strided, gathered, sliced, t, b), xv, iv)
    np.testing.assert_array_equal(s, xv[1, ::2])  # shrink axis 0, end_mask on axis 1
    np.testing.assert_array_equal(gth, xv[:, iv])
    np.testing.assert_array_equal(sl, xv[1:3, 2:])
    np.testing.assert_array_equal(tr, xv[None].transpose(2, 0, 1))
    np.testing.assert_array_equal(bc, np.broadcast_to(xv[:, None], (4, 2, 6)))


def test_cast_batchnorm_nhwc_layernorm_params_axis_and_gelu():
    m = Model()
    x = m.input("x", [2, 3, 4])
    as_int = m.op("Cast", x, 35, declared=([2, 3, 4], I32))  # the target dtype is the declared one
    stats = [m.param(n, np.full(4, v, np.float32)) for n, v in (("g", 2.0), ("b", 1.0), ("mu", 0.5), ("var", 3.0))]
    bn = m.op("TupleGetItem", m.op("BatchNorm", x, *stats, False, 1e-5, 0.1, 1), 0)  # NHWC: last axis
    gamma = m.param("gamma", np.arange(4, dtype=np.float32))
    beta = m.param("beta", np.ones(4, np.float32))
    ln = m.op("TupleGetItem", m.op("LayerNorm", x, gamma, beta, 1, -1, 1e-5), 0)
    gelu = m.op("GeLU", x)
    xv = RNG.standard_normal((2, 3, 4)).astype(np.float32) * 3
    _, (c, y, z, q) = run(m.output(as_int, bn, ln, gelu), xv)
    np.testing.assert_array_equal(c, xv.astype(np.int32))
    np.testing.assert_allclose(y, (xv - 0.5) / np.sqrt(3 + 1e-5) * 2 + 1, rtol=1e-5)
    mu, var = xv.mean(axis=(1, 2), keepdims=True), xv.var(axis=(1, 2), keepdims=True)
    np.testing.assert_allclose(z, (xv - mu) / np.sqrt(var + 1e-5) * np.arange(4) + 1, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(q, 0.5 * xv * (1 + np.tanh(np.sqrt(2 / np.pi) * (xv + 0.044715 * xv**3))),
                               rtol=1e-5, atol=1e-6)


# --- every primitive of the table against NumPy -------------------------------------------------

CODES = {"float32": F32, "int32": I32, "bool": BOOL}
Q = RNG.standard_normal((2, 3, 4, 4)).astype(np.float32)
P = np.abs(RNG.standard_normal((2, 3, 4, 4)).astype(np.float32)) + 0.1  # positive
B = RNG.standard_normal((2, 3, 4, 4)) > 0
I = np.array([[1, 3, 0]], np.int32)


def single(prim: str, inputs: list[np.ndarray], *settings, declared=None, function=True, **attrs):
    m = Model()
    names = [m.input(f"x{i}", a.shape, CODES[a.dtype.name]) for i, a in enumerate(inputs)]
    return m.output(m.op(prim, *names, *settings, declared=declared, function=function, **attrs)), inputs


def picked(prim: str, inputs: list[np.ndarray], *settings):
    """Item 0 of a multi-output primitive (TupleGetItem)."""
    m = Model()
    names = [m.input(f"x{i}", a.shape) for i, a in enumerate(inputs)]
    return m.output(m.op("TupleGetItem", m.op(prim, *names, *settings), 0)), inputs


def reshaped_like(x: np.ndarray, y: np.ndarray):
    m = Model()
    a, b = m.input("a", x.shape), m.input("b", y.shape)
    return m.output(m.op("Reshape", a, m.op("Shape", b))), [x, y]


def tuple_input(prim: str, inputs: list[np.ndarray], *settings):
    m = Model()
    names = [m.input(f"x{i}", a.shape) for i, a in enumerate(inputs)]
    return m.output(m.op(prim, m.op("MakeTuple", *names), *settings)), inputs


def pools(x, k, s, reduce, fill):
    """'same' pooling, stride s: TensorFlow's padding (odd cell high), divisor = cells inside."""
    total = [max((-(-d // s) - 1) * s + k - d, 0) for d in x.shape[2:]]
    pads = [(0, 0), (0, 0)] + [(t // 2, t - t // 2) for t in total]
    win = np.lib.stride_tricks.sliding_window_view(np.pad(x, pads, constant_values=fill), (k, k), axis=(2, 3))
    win = win[:, :, ::s, ::s]
    if reduce == "max":
        return win.max(axis=(-2, -1))
    inside = np.lib.stride_tricks.sliding_window_view(np.pad(np.ones(x.shape[2:]), pads[2:]), (k, k))[::s, ::s]
    return win.sum(axis=(-2, -1)) / inside.sum(axis=(-2, -1))


def conv(x, w, stride, pads):
    xp = np.pad(x, [(0, 0), (0, 0), pads[:2], pads[2:]])
    win = np.lib.stride_tricks.sliding_window_view(xp, w.shape[2:], axis=(2, 3))[:, :, ::stride, ::stride]
    return np.einsum("nchwij,ocij->nohw", win, w)


W = RNG.standard_normal((5, 3, 3, 3)).astype(np.float32)
WD = RNG.standard_normal((5, 4)).astype(np.float32)
_UNARY_NP = {
    "ReLU": lambda x: np.maximum(x, 0), "ReLU6": lambda x: np.clip(x, 0, 6), "Sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "Tanh": np.tanh, "Exp": np.exp, "Neg": np.negative, "Abs": np.abs, "Sin": np.sin, "Cos": np.cos,
    "Floor": np.floor, "Ceil": np.ceil, "Round": np.round, "Sign": np.sign, "Square": np.square,
    "Erf": lambda x: np.vectorize(__import__("math").erf)(x).astype(np.float32),
    "SiLU": lambda x: x / (1 + np.exp(-x)), "HSigmoid": lambda x: np.clip(x + 3, 0, 6) / 6,
    "HSwish": lambda x: x * np.clip(x + 3, 0, 6) / 6, "IsNan": np.isnan, "IsInf": np.isinf,
    "ZerosLike": np.zeros_like, "OnesLike": np.ones_like,
}
_POSITIVE_NP = {"Log": np.log, "Sqrt": np.sqrt, "Rsqrt": lambda x: 1 / np.sqrt(x), "Reciprocal": lambda x: 1 / x}
_BINARY_NP = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "RealDiv": np.divide, "Div": np.divide,
    "Maximum": np.maximum, "Minimum": np.minimum, "FloorMod": np.mod, "Equal": np.equal,
    "NotEqual": np.not_equal, "Greater": np.greater, "GreaterEqual": np.greater_equal, "Less": np.less,
    "LessEqual": np.less_equal, "SquaredDifference": lambda a, b: (a - b) ** 2,
    "FloorDiv": lambda a, b: np.floor(a / b),
}
CASES = {
    **{k: (lambda k=k: single(k, [Q * 4 if k == "ReLU6" else Q]), f) for k, f in _UNARY_NP.items()},
    **{k: (lambda k=k: single(k, [P]), f) for k, f in _POSITIVE_NP.items()},
    **{k: (lambda k=k: single(k, [Q, P]), f) for k, f in _BINARY_NP.items()},
    "Pow": (lambda: single("Pow", [P], 1.5), lambda x: x ** 1.5),
    "LogicalNot": (lambda: single("LogicalNot", [B]), np.logical_not),
    "LogicalAnd": (lambda: single("LogicalAnd", [B, ~B[:1]]), np.logical_and),
    "LogicalOr": (lambda: single("LogicalOr", [B, ~B[:1]]), np.logical_or),
    "AddExt": (lambda: single("AddExt", [Q, P], 2.0), lambda a, b: a + 2 * b),
    "SubExt": (lambda: single("SubExt", [Q, P], 1.0), np.subtract),
    "Select": (lambda: single("Select", [B, Q, P]), np.where),
    "AddN": (lambda: tuple_input("AddN", [Q, P, Q]), lambda a, b, c: a + b + c),
    "Concat": (lambda: tuple_input("Concat", [Q, P], 1), lambda a, b: np.concatenate([a, b], 1)),
    "Cast": (lambda: single("Cast", [Q], 35, declared=([2, 3, 4, 4], I32)), lambda x: x.astype(np.int32)),
    "Dropout": (lambda: picked("Dropout", [Q], 0.9, 0, 0), lambda x: x),
    "GeLU": (lambda: single("GeLU", [Q]),
             lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))),
    "MatMul": (lambda: single("MatMul", [Q[0, 0], P[0, 0]], True, False), lambda a, b: a.T @ b),
    "BatchMatMul": (lambda: single("BatchMatMul", [Q, P], False, True), lambda a, b: a @ b.swapaxes(-1, -2)),
    "Dense": (lambda: single("Dense", [Q], WD, None), lambda x: x @ WD.T),
    "BiasAdd": (lambda: single("BiasAdd", [Q], np.arange(3, dtype=np.float32), 0),
                lambda x: x + np.arange(3).reshape(3, 1, 1)),
    "Conv2D": (lambda: single("Conv2D", [Q], W, function=False, pad_mode="pad", pad=(1, 0, 2, 1), stride=(2, 2),
                              dilation=(1, 1), group=1, format="NCHW", mode=1),
               lambda x: conv(x, W, 2, (1, 0, 2, 1))),
    "MaxPool": (lambda: single("MaxPool", [Q], function=False, kernel_size=(1, 1, 3, 3), strides=(1, 1, 2, 2),
                               pad_mode="SAME", format="NCHW"), lambda x: pools(x, 3, 2, "max", -np.inf)),
    "AvgPool": (lambda: single("AvgPool", [Q], (3, 3), (2, 2), 1, 0), lambda x: pools(x, 3, 2, "avg", 0)),
    "BatchNorm": (lambda: picked("BatchNorm", [Q, P[0, :, 0, 0], Q[0, :, 0, 0], Q[1, :, 0, 0], P[1, :, 0, 0]],
                                 False, 1e-3),
                  lambda x, g, b, mu, v: (x - mu[:, None, None]) / np.sqrt(v[:, None, None] + 1e-3)
                  * g[:, None, None] + b[:, None, None]),
    "LayerNorm": (lambda: picked("LayerNorm", [Q, P[0, 0], Q[0, 0]], 2, 2, 1e-5),
                  lambda x, g, b: (x - x.mean((2, 3), keepdims=True)) / np.sqrt(x.var((2, 3), keepdims=True)
                                                                             + 1e-5) * g + b),
    "Softmax": (lambda: single("Softmax", [Q], (1,)), lambda x: np.exp(x) / np.exp(x).sum(1, keepdims=True)),
    "LogSoftmax": (lambda: single("LogSoftmax", [Q], -1), lambda x: x - np.log(np.exp(x).sum(-1, keepdims=True))),
    "ReduceSum": (lambda: single("ReduceSum", [Q], (1, 3), True, False), lambda x: x.sum((1, 3), keepdims=True)),
    "ReduceMean": (lambda: single("ReduceMean", [Q], (), False), lambda x: x.mean()),
    "ReduceMax": (lambda: single("ReduceMax", [Q], -1, False), lambda x: x.max(-1)),
    "ReduceMin": (lambda: single("ReduceMin", [Q], (0, 2), False), lambda x: x.min((0, 2))),
    "ReduceProd": (lambda: single("ReduceProd", [P], 1, False), lambda x: x.prod(1)),
    "Argmax": (lambda: single("Argmax", [Q], 1, 34, declared=([2, 4, 4], I32)), lambda x: x.argmax(1)),
    "Argmin": (lambda: single("Argmin", [Q], -1, 34, declared=([2, 3, 4], I32)), lambda x: x.argmin(-1)),
    "Reshape": (lambda: single("Reshape", [Q], (6, -1)), lambda x: x.reshape(6, -1)),
    "Shape": (lambda: reshaped_like(Q, P.reshape(6, 16)), lambda x, y: x.reshape(6, 16)),
    "Flatten": (lambda: single("Flatten", [Q]), lambda x: x.reshape(2, -1)),
    "FlattenExt": (lambda: single("FlattenExt", [Q], 1, 2), lambda x: x.reshape(2, 12, 4)),
    "Transpose": (lambda: single("Transpose", [Q], (3, 1, 0, 2)), lambda x: x.transpose(3, 1, 0, 2)),
    "ExpandDims": (lambda: single("ExpandDims", [Q], -1), lambda x: x[..., None]),
    "Squeeze": (lambda: single("Squeeze", [Q[:, :1]], ()), lambda x: x[:, 0]),
    "Split": (lambda: single("Split", [Q], 2, 2), lambda x: tuple(np.split(x, 2, 2))),
    "Gather": (lambda: single("Gather", [Q, I], 2, 0), lambda x, i: np.take(x, i, 2)),
    "Slice": (lambda: single("Slice", [Q], (0, 1, 2, 0), (-1, 2, 1, 3)), lambda x: x[:, 1:3, 2:3, 0:3]),
    "StridedSlice": (lambda: single("StridedSlice", [Q], (0, 2, -1), (2, 0, 0), (1, -1, -2), 0, 2, 0, 0, 1),
                     lambda x: x[0, 2::-1, -1::-2]),
    "BroadcastTo": (lambda: single("BroadcastTo", [Q[:, :1]], (3, -1, 2, -1, -1)),
                    lambda x: np.broadcast_to(x, (3, 2, 2, 4, 4))),
    "Pad": (lambda: single("Pad", [Q], function=False, paddings=((0, 0), (1, 0), (0, 2), (1, 1))),
            lambda x: np.pad(x, [(0, 0), (1, 0), (0, 2), (1, 1)])),
    "OneHot": (lambda: single("OneHot", [I], 5, 2.0, -1.0, 0, declared=([5, 1, 3], F32)),
               lambda i: np.where(np.arange(5)[:, None, None] == i, 2.0, -1.0).astype(np.float32)),
}


@pytest.mark.parametrize("prim", sorted(CASES))
def test_primitive_matches_numpy(prim):
    build, reference = CASES[prim]
    model, inputs = build()
    g, got = run(model, *inputs)
    want = reference(*inputs)
    want = list(want) if isinstance(want, tuple) else [want]
    assert len(got) == len(want)
    for a, e in zip(got, want):
        e = np.asarray(e)
        assert a.shape == e.shape, (a.shape, e.shape)
        if e.dtype.kind == "f":
            np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-5)
        else:
            np.testing.assert_array_equal(a, e)


def test_every_primitive_of_the_table_is_tested():
    # the training primitives (graph/io/mindir_train.py) have their cases in test_mindir_training.py
    assert sorted(set(MINDIR_OPS) - set(TRAINING_PRIMITIVES)) == sorted(CASES)


# --- typed errors --------------------------------------------------------------------------------


def test_unknown_primitive_names_primitive_and_file(tmp_path, capsys):
    m = Model()
    m.output(m.op("FrobNicate", m.input("x", [2])))
    with pytest.raises(UnsupportedOpError, match=r"^m\.mindir: op 'FrobNicate' is not supported"):
        m.load()
    path = tmp_path / "frob.mindir"
    path.write_bytes(m.bytes())
    assert main(["show", str(path)]) == 4
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "frob.mindir" in err and "FrobNicate" in err


@pytest.mark.parametrize("build, error, message", [
    (lambda m: m.output(m.op("TupleGetItem", m.op("BatchNorm", m.input("x", [1, 2]), *["p"] * 4), 1)),
     UnsupportedOpError, "batch statistics"),
    (lambda m: m.output(m.op("BatchNorm", m.input("x", [1, 2]), *["p"] * 4, True)),
     UnsupportedOpError, "training mode"),
    (lambda m: m.output(m.op("ReLU", m.input("x", [2]), declared=([3], F32))),
     ImportFormatError, r"gives f32\[2\] but MindSpore declares f32\[3\]"),
    (lambda m: m.output(m.op("ReLU", "g:nowhere")), ImportFormatError, "never defined"),
    (lambda m: m.output("g:y"), ImportFormatError, "'g:y' is used but never defined"),
    (lambda m: m.output(m.op("ReLU", m.input("x", [2], dtype=16))), UnsupportedError, "bfloat16"),
    (lambda m: m.output(m.op("ReLU", m.input("x", [-1, 2]))), UnsupportedError, "dynamic shape"),
    (lambda m: m, ImportFormatError, "no outputs"),
])
def test_bad_models_give_typed_errors(build, error, message):
    m = Model()
    m.g.node.add(op_type="Constant", name="p", output=["p"]).attribute.append(_attr("value", np.ones(2, np.float32)))
    with pytest.raises(error, match=message) as info:
        build(m).load("bad.mindir")
    assert str(info.value).startswith("bad.mindir: ")


def test_cycle_is_an_error():
    m = Model()
    node = m.g.node.add(op_type="REF::ReLU:1", name="g:a", output=["g:a"], input=["g:b"])
    m.g.node.add(op_type="REF::ReLU:1", name="g:b", output=["g:b"], input=[node.name])
    m.m.primitives.add(name="ReLU:1", op_type="ReLU")
    with pytest.raises(ImportFormatError, match="cycle"):
        m.output("g:a").load()


@needs_corpus
def test_truncated_files_give_import_format_errors(tmp_path):
    data = (CORPUS / "lenet5.mindir").read_bytes()
    for cut in (0, 1, 7, 100, len(data) // 3, len(data) // 2, len(data) - 300, len(data) - 1):
        path = tmp_path / f"cut{cut}.mindir"
        path.write_bytes(data[:cut])
        with pytest.raises(ImportFormatError, match=re.escape(str(path))):
            load_model(path)


@needs_corpus
def test_every_truncation_is_an_error_or_the_same_graph():
    """A protobuf cut at a field boundary can still parse: then only trailing fields the graph
    does not need may be lost, and the import must be exactly the full one."""
    data = (CORPUS / "add.mindir").read_bytes()
    full = parse_mindir(data, "add.mindir")
    failures = 0
    for cut in range(len(data)):
        try:
            g = parse_mindir(data[:cut], "add.mindir")
        except ImportFormatError as e:
            assert str(e).startswith("add.mindir: ")
            failures += 1
        else:
            assert g == full, cut
    assert failures >= len(data) - 3


def test_garbage_and_foreign_files(tmp_path):
    for name, data in (("random.mindir", RNG.integers(0, 256, 4096, dtype=np.uint8).tobytes()),
                       ("text.mindir", b"graph @g(%x: f32[2]) {\n  return %x\n}\n"),
                       ("empty.mindir", b"")):
        (tmp_path / name).write_bytes(data)
        with pytest.raises(ImportFormatError, match=name):
            load_model(tmp_path / name)
    with pytest.raises(ImportFormatError, match="no such file"):
        load_model(tmp_path / "missing.mindir")


# --- registration, CLI, packaging ---------------------------------------------------------------


@needs_corpus
def test_convert_round_trip_and_run(tmp_path, capsys):
    assert LOADERS[".mindir"] is load_mindir
    src = CORPUS / "transformer_layer.mindir"
    out = tmp_path / "t.mir"
    assert main(["convert", str(src), "-o", str(out)]) == 0
    assert "weights:" in capsys.readouterr().out and out.with_suffix(".npz").exists()
    converted = load_model(out)
    inputs, (expected,) = fixture_io("transformer_layer")
    (a,) = evaluate(converted, inputs)
    (b,) = evaluate(load_mindir(src), inputs)
    np.testing.assert_array_equal(a, b)
    assert rel_error(a, expected) < TOL
    np.savez(tmp_path / "in.npz", x=inputs[0])
    assert main(["run", str(src), "--inputs", str(tmp_path / "in.npz"), "--output", str(tmp_path / "o.npz")]) == 0
    with np.load(tmp_path / "o.npz") as npz:
        np.testing.assert_array_equal(npz["output_0"], b)
    assert main(["convert", str(src), "-o", str(tmp_path / "t.txt")]) == 2


def test_protobuf_pin_matches_the_generated_module():
    from google.protobuf import __version__ as runtime

    pin = re.search(r'"protobuf>=([\d.]+),<(\d+)"', (ROOT / "setup.py").read_text())
    gencode = re.search(r"# Protobuf Python Version: ([\d.]+)", Path(pb.__file__).read_text())
    assert pin and gencode and pin.group(1) == gencode.group(1)
    version = lambda s: tuple(int(p) for p in re.findall(r"\d+", s)[:3])  # noqa: E731
    assert version(pin.group(1)) <= version(runtime) < (int(pin.group(2)),)

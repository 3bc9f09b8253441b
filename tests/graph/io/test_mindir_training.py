"""MindIR training graphs (graph/io/mindir_train.py and the side-effect handling of
graph/io/mindir.py): MindSpore TrainOneStepCell exports (forward, loss, backward, SGD / Momentum
/ Adam update) reproduce the loss and the updated parameters MindSpore computed, in the reference
interpreter and compiled for cpu; every training primitive against NumPy on hand-built models;
reads after writes; typed errors naming the node. The fixtures were written by
scripts/make_mindir_training.py with MindSpore 2.10.0; MindSpore is not needed here."""

from __future__ import annotations

import importlib.util
import tempfile
from pathlib import Path

import numpy as np
import pytest

from akg.api import compile_model
from akg.errors import ImportFormatError, UnsupportedOpError
from akg.graph import evaluate
from akg.graph.io import load_model
from akg.graph.io.mindir import MINDIR_OPS, load_mindir_step, parse_mindir
from akg.graph.io.mindir_train import TRAINING_PRIMITIVES

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "mindir"


def _sibling(name: str):
    """tests/graph/io/<name>.py as a module (the tests run with --import-mode=importlib)."""
    spec = importlib.util.spec_from_file_location(f"_akg_tests_{name}", Path(__file__).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_mindir = _sibling("test_mindir")  # the hand-built ModelProto, as MindSpore 2.x writes one
A, F32, I32, Model = _mindir.A, _mindir.F32, _mindir.I32, _mindir.Model
STEPS = ["train_sgd", "train_momentum", "train_sgd_nesterov", "train_adam"]
PARAMS = ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
STATE = {"train_sgd": "accum stat", "train_momentum": "moments", "train_sgd_nesterov": "accum stat",
         "train_adam": "moment1 moment2"}  # per parameter, after the scalars global_step (and beta powers)
TOL = 1e-5  # relative to max|expected|, as for the inference corpus


def rel_error(got: np.ndarray, want: np.ndarray) -> float:
    got = np.asarray(got)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape, got.dtype, want.dtype)
    return float(np.abs(got.astype(np.float64) - want).max() / max(np.abs(want).max(), 1e-30))


def step_of(name: str):
    graph, state = load_mindir_step(FIXTURES / f"{name}.mindir")
    io = dict(np.load(FIXTURES / f"{name}.io.npz"))
    feeds = {graph.inputs[0].name: io["input_0"], graph.inputs[1].name: io["input_1"], **state}
    expected = {"output_0": io["output_0"], **{k: v for k, v in io.items() if k.startswith("new.")}}
    return graph, state, io, feeds, expected


# --- the MindSpore fixtures ---------------------------------------------------------------------


@pytest.mark.parametrize("name", STEPS)
def test_step_inputs_outputs_and_initial_state(name):
    graph, state, io, _, expected = step_of(name)
    scalars = ["global_step"] + (["beta1_power", "beta2_power"] if name == "train_adam" else [])
    written = PARAMS + scalars + [f"{s}.{p}" for s in STATE[name].split() for p in PARAMS]
    assert [v.name for v in graph.inputs] == ["inputs0", "inputs1"] + written
    assert [v.name for v in graph.outputs] == ["output_0"] + [f"new.{p}" for p in written]
    read_only = set(expected) - {v.name for v in graph.outputs}  # MindSpore saved every parameter
    assert read_only == ({"new.learning_rate"} | ({"new.momentum"} if name != "train_adam" else set()))
    for k in read_only:
        np.testing.assert_array_equal(expected[k], io[f"init.{k[4:]}"])
    # the parameters that are only read (learning_rate, SGD's momentum) stay constants
    assert {k[4:] for k in read_only} <= {v.name for v in graph.constants}
    assert list(state) == written
    for k, v in state.items():  # the file's weights are the producer's values before the step
        np.testing.assert_array_equal(v, io[f"init.{k}"])
    # the fixture is not trivial: the step moves every weight and (but plain SGD) the optimizer state
    state_moves = {"train_momentum": ["moments"], "train_sgd_nesterov": ["accum"], "train_adam": ["moment1"]}
    for p in PARAMS + [f"{s}.{p}" for s in state_moves.get(name, []) for p in PARAMS]:
        assert np.abs(io[f"new.{p}"] - io[f"init.{p}"]).max() > 1e-3, p


@pytest.mark.parametrize("name", STEPS)
def test_step_matches_mindspore_in_the_interpreter(name):
    graph, _, _, feeds, expected = step_of(name)
    got = evaluate(graph, feeds)
    for v, a in zip(graph.outputs, got, strict=True):
        assert rel_error(a, expected[v.name]) < TOL, (name, v.name, rel_error(a, expected[v.name]))


@pytest.mark.parametrize("name", STEPS)
def test_step_matches_mindspore_compiled_for_cpu(name):
    graph, _, _, feeds, expected = step_of(name)
    got = compile_model(graph, "cpu")(**feeds)
    for v, a in zip(graph.outputs, got, strict=True):
        assert rel_error(a, expected[v.name]) < TOL, (name, v.name, rel_error(a, expected[v.name]))


def test_step_ops_and_the_plain_loader():
    graph, _, _, _, _ = step_of("train_sgd")
    ops = sorted({n.op for n in graph.nodes})
    assert {"cross_entropy", "softmax", "one_hot", "where", "greater", "sum", "matmul"} <= set(ops)
    plain = load_model(FIXTURES / "train_sgd.mindir")  # `akg run|compile` see the same step
    assert [v.name for v in plain.inputs] == [v.name for v in graph.inputs]
    assert [v.name for v in plain.outputs] == [v.name for v in graph.outputs]


def test_two_steps_feed_new_values_back():
    graph, state, _, feeds, expected = step_of("train_momentum")
    first = dict(zip((v.name for v in graph.outputs), evaluate(graph, feeds)))
    again = {**feeds, **{k: first[f"new.{k}"] for k in state}}
    second = dict(zip((v.name for v in graph.outputs), evaluate(graph, again)))
    assert second["new.global_step"].tolist() == [2]
    assert second["output_0"] < expected["output_0"]  # the same batch: the loss goes down
    # momentum: the second update is lr * (0.9 * moments' + grad'), not a repeat of the first
    moved1 = first["new.fc2.bias"] - feeds["fc2.bias"]
    moved2 = second["new.fc2.bias"] - first["new.fc2.bias"]
    assert np.abs(moved2 - moved1).max() > 1e-4


# --- every training primitive against NumPy -----------------------------------------------------

RNG = np.random.default_rng(5)


def monad(m: Model) -> str:
    u = m.g.node.add(op_type="Constant", name="U", output=["U"])
    u.attribute.add(name="value", type=A.UMONAD)
    return "U"


def run_step(m: Model, inputs: dict[str, np.ndarray]):
    """Import a hand-built model as a step (from a file, as a user reads one) and run it on
    `inputs` and its initial state; (the graph, outputs by name)."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "m.mindir"
        path.write_bytes(m.bytes())
        g, state = load_mindir_step(path)
    got = evaluate(g, {**inputs, **state})
    return g, dict(zip((v.name for v in g.outputs), got))


def _softmax(x):
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def case_sparse_softmax_cross_entropy():
    m = Model()
    logits, labels = m.input("logits", [5, 3]), m.input("labels", [5], I32)
    loss = m.op("SparseSoftmaxCrossEntropyWithLogits", logits, labels, function=False, is_grad=False, sens=1.0,
                declared=([], F32))
    grad = m.op("SparseSoftmaxCrossEntropyWithLogits", logits, labels, function=False, is_grad=True,
                declared=([5, 3], F32))
    x, y = RNG.standard_normal((5, 3)).astype(np.float32), np.array([0, 2, 1, 2, 0], np.int32)
    _, out = run_step(m.output(loss, grad), {"logits": x, "labels": y})
    hot = np.eye(3, dtype=np.float32)[y]
    np.testing.assert_allclose(out["output_0"], -(np.log(_softmax(x)) * hot).sum(1).mean(), rtol=1e-6)
    np.testing.assert_allclose(out["output_1"], (_softmax(x) - hot) / 5, rtol=1e-5, atol=1e-7)


def case_softmax_cross_entropy():
    m = Model()
    logits, labels = m.input("logits", [4, 3]), m.input("labels", [4, 3])
    pair = m.op("SoftmaxCrossEntropyWithLogits", logits, labels, function=False)
    out = [m.op("TupleGetItem", pair, i) for i in (0, 1)]
    x = RNG.standard_normal((4, 3)).astype(np.float32)
    y = RNG.dirichlet(np.ones(3), 4).astype(np.float32)  # soft labels: every class counts
    _, got = run_step(m.output(*out), {"logits": x, "labels": y})
    np.testing.assert_allclose(got["output_0"], -(np.log(_softmax(x)) * y).sum(1), rtol=1e-5)
    np.testing.assert_allclose(got["output_1"], _softmax(x) - y, rtol=1e-5, atol=1e-7)


def case_relu_grad():
    m = Model()
    dy, y = m.input("dy", [4, 6]), m.input("y", [4, 6])
    dyv, yv = RNG.standard_normal((4, 6)).astype(np.float32), np.maximum(RNG.standard_normal((4, 6)), 0).astype(np.float32)
    _, out = run_step(m.output(m.op("ReluGrad", dy, y)), {"dy": dyv, "y": yv})
    np.testing.assert_array_equal(out["output_0"], np.where(yv > 0, dyv, 0))


def case_bias_add_grad():
    m = Model()
    dy = m.input("dy", [2, 3, 4, 5])
    nchw = m.op("BiasAddGrad", dy, 0, declared=([3], F32))
    nhwc = m.op("BiasAddGrad", dy, 1, declared=([5], F32))
    v = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    _, out = run_step(m.output(nchw, nhwc), {"dy": v})
    np.testing.assert_allclose(out["output_0"], v.sum((0, 2, 3)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["output_1"], v.sum((0, 1, 2)), rtol=1e-5, atol=1e-6)


def case_assign():
    """AssignAdd, AssignSub, Assign in a chain of states: each reads what the one before wrote;
    a Load at the start still sees the file's value."""
    m = Model()
    u = monad(m)
    x = m.input("x", [3])
    p0, q0 = np.arange(3, dtype=np.float32), np.full(3, 7, np.float32)
    p, q = m.param("p", p0), m.param("q", q0)
    before = m.op("Load", p, u)
    a1 = m.op("AssignAdd", p, x, u, function=False, side_effect_mem=True)
    u1 = m.op("UpdateState", u, a1)
    a2 = m.op("AssignSub", p, m.op("Load", q, u1), u1, function=False, side_effect_mem=True)
    u2 = m.op("UpdateState", u1, a2)
    a3 = m.op("Assign", q, m.op("Mul", m.op("Load", p, u2), x), u2, function=False, side_effect_mem=True)
    u3 = m.op("UpdateState", u2, a3)
    after = m.op("Load", q, u3)
    xv = np.array([1, -2, 4], np.float32)
    g, out = run_step(m.output(before, after), {"x": xv})
    p1 = p0 + xv - q0
    assert [v.name for v in g.inputs] == ["x", "p", "q"]
    np.testing.assert_array_equal(out["output_0"], p0)
    np.testing.assert_array_equal(out["new.p"], p1)
    np.testing.assert_array_equal(out["new.q"], p1 * xv)
    np.testing.assert_array_equal(out["output_1"], p1 * xv)


def _sgd_reference(p, g, lr, accum, m, stat, decay, dampening, nesterov):
    """MindSpore's SGD CPU kernel, elementwise."""
    g = g + decay * p
    accum = np.where(stat > 0, g, accum * m + (1 - dampening) * g)
    step = g + m * accum if nesterov else accum
    return p - lr * step, accum, np.zeros_like(stat)


def _sgd(nesterov: bool, dampening: float):
    m = Model()
    u = monad(m)
    grad = m.input("grad", [3, 4])
    p0 = RNG.standard_normal((3, 4)).astype(np.float32)
    a0 = RNG.standard_normal((3, 4)).astype(np.float32)
    s0 = (RNG.random((3, 4)) < 0.5).astype(np.float32)
    p, accum, stat = m.param("w", p0), m.param("accum.w", a0), m.param("stat.w", s0)
    lr, mom = m.param("lr", np.float32(0.05)), m.param("momentum", np.float32(0.9))
    w = m.op("SGD", p, grad, lr, accum, mom, stat, u, function=False, weight_decay=0.1, dampening=dampening,
             nesterov=nesterov, side_effect_mem=True, declared=([3, 4], F32))
    gv = RNG.standard_normal((3, 4)).astype(np.float32)
    _, out = run_step(m.output(m.op("Depend", grad, m.op("UpdateState", u, w))), {"grad": gv})
    want = _sgd_reference(p0, gv, 0.05, a0, 0.9, s0, 0.1, dampening, nesterov)
    for name, e in zip(("new.w", "new.accum.w", "new.stat.w"), want):
        np.testing.assert_allclose(out[name], e, rtol=1e-5, atol=1e-6, err_msg=name)


def case_sgd():
    _sgd(nesterov=False, dampening=0.2)
    _sgd(nesterov=True, dampening=0.0)


def case_apply_momentum():
    for nesterov in (False, True):
        m = Model()
        u = monad(m)
        grad, mom = m.input("grad", [6]), m.input("momentum", [])  # momentum may be computed
        v0, a0 = RNG.standard_normal(6).astype(np.float32), RNG.standard_normal(6).astype(np.float32)
        var, accum, lr = m.param("v", v0), m.param("moments.v", a0), m.param("lr", np.float32(0.1))
        w = m.op("ApplyMomentum", var, accum, lr, grad, mom, u, function=False, use_nesterov=nesterov,
                 gradient_scale=1.0, side_effect_mem=True, declared=([6], F32))
        gv = RNG.standard_normal(6).astype(np.float32)
        _, out = run_step(m.output(m.op("Depend", grad, m.op("UpdateState", u, w))),
                          {"grad": gv, "momentum": np.float32(0.8)})
        a1 = 0.8 * a0 + gv
        v1 = v0 - (0.1 * gv + 0.1 * 0.8 * a1 if nesterov else 0.1 * a1)
        np.testing.assert_allclose(out["new.moments.v"], a1, rtol=1e-6)
        np.testing.assert_allclose(out["new.v"], v1, rtol=1e-5, atol=1e-7)


def case_adam():
    for nesterov in (False, True):
        m = Model()
        u = monad(m)
        grad = m.input("grad", [5])
        v0, m0 = RNG.standard_normal(5).astype(np.float32), RNG.standard_normal(5).astype(np.float32)
        s0 = RNG.uniform(0, 1, 5).astype(np.float32)
        names = [m.param("w", v0), m.param("moment1.w", m0), m.param("moment2.w", s0),
                 m.param("beta1_power", np.float32(0.9 ** 2)), m.param("beta2_power", np.float32(0.999 ** 2)),
                 m.param("lr", np.float32(0.01)), m.const(np.array(0.9, np.float32)), m.const(np.array(0.999, np.float32)),
                 m.const(np.array(1e-8, np.float32)), grad]
        w = m.op("Adam", *names, u, function=False, use_nesterov=nesterov, use_locking=False, side_effect_mem=True)
        gv = RNG.standard_normal(5).astype(np.float32)
        _, out = run_step(m.output(m.op("Depend", grad, m.op("UpdateState", u, w))), {"grad": gv})
        m1 = m0 + (gv - m0) * 0.1
        s1 = s0 + (gv * gv - s0) * 0.001
        lr = 0.01 * np.sqrt(1 - 0.999 ** 2) / (1 - 0.9 ** 2)
        moment = 0.9 * m1 + 0.1 * gv if nesterov else m1
        np.testing.assert_allclose(out["new.moment1.w"], m1, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(out["new.moment2.w"], s1, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(out["new.w"], v0 - lr * moment / (np.sqrt(s1) + 1e-8), rtol=1e-5, atol=1e-7)


CASES = {
    "SparseSoftmaxCrossEntropyWithLogits": case_sparse_softmax_cross_entropy,
    "ReluGrad": case_relu_grad,
    "BiasAddGrad": case_bias_add_grad,
    "Assign": case_assign, "AssignAdd": case_assign, "AssignSub": case_assign,
    "SGD": case_sgd,
    "ApplyMomentum": case_apply_momentum,
    "SoftmaxCrossEntropyWithLogits": case_softmax_cross_entropy,
    "Adam": case_adam,
}


@pytest.mark.parametrize("prim", sorted(CASES))
def test_training_primitive_matches_numpy(prim):
    CASES[prim]()


def test_every_training_primitive_is_tested():
    assert sorted(CASES) == sorted(TRAINING_PRIMITIVES)
    assert set(TRAINING_PRIMITIVES) <= set(MINDIR_OPS)


# --- typed errors naming the node ---------------------------------------------------------------


def test_write_to_a_non_parameter():
    m = Model()
    u = monad(m)
    x = m.input("x", [3])
    w = m.op("Assign", x, x, u, function=False, side_effect_mem=True)
    m.output(m.op("Depend", x, m.op("UpdateState", u, w)))
    with pytest.raises(ImportFormatError, match=r"^m\.mindir: node 'CNode_\d+:\d+' \(Assign\): writes input 0 "
                                                r"'x', which is not a parameter"):
        m.load()


def test_unknown_optimizer_is_refused_not_dropped():
    """ApplyAdam is not modelled: the file must not import as a forward pass that trains nothing."""
    m = Model()
    u = monad(m)
    x = m.input("x", [3])
    p = m.param("p", np.zeros(3, np.float32))
    w = m.op("ApplyAdam", p, x, u, function=False, side_effect_mem=True)
    m.output(m.op("Depend", x, m.op("UpdateState", u, w)))
    with pytest.raises(UnsupportedOpError, match=r"^m\.mindir: op 'ApplyAdam' is not supported.*writes "
                                                 r"parameters in place.*node 'CNode_\d+:\d+'"):
        m.load()


def _sgd_model(momentum_input: bool = False, inputs: int = 6):
    m = Model()
    u = monad(m)
    grad = m.input("grad", [2])
    mom = m.input("momentum", []) if momentum_input else m.param("momentum", np.float32(0.9))
    names = [m.param("w", np.ones(2, np.float32)), grad, m.param("lr", np.float32(0.1)),
             m.param("accum", np.zeros(2, np.float32)), mom, m.param("stat", np.ones(2, np.float32))]
    w = m.op("SGD", *names[:inputs], u, function=False, side_effect_mem=True)
    return m.output(m.op("Depend", grad, m.op("UpdateState", u, w)))


def test_sgd_errors():
    with pytest.raises(UnsupportedOpError, match=r"op 'SGD' is not supported.*momentum that is not a "
                                                 r"constant.*node 'CNode_\d+:\d+'"):
        _sgd_model(momentum_input=True).load()
    with pytest.raises(ImportFormatError, match=r"node 'CNode_\d+:\d+' \(SGD\): missing input 5, the "
                                                r"parameter it writes"):
        _sgd_model(inputs=4).load()


def test_malformed_training_ops():
    m = Model()
    u = monad(m)
    p = m.param("p", np.zeros(3, np.float32))
    w = m.op("Assign", p, m.input("i", [3], I32), u, function=False, side_effect_mem=True)
    m.output(m.op("Depend", m.op("Load", p, u), m.op("UpdateState", u, w)))
    with pytest.raises(ImportFormatError, match=r"node 'CNode_\d+:\d+' \(Assign\): assigns i32\[3\] to a parameter of "
                                                r"type f32\[3\]"):
        m.load()
    m = Model()
    bad = m.op("SparseSoftmaxCrossEntropyWithLogits", m.input("x", [2, 3, 4]), m.input("y", [2], I32),
               function=False, is_grad=False)
    with pytest.raises(ImportFormatError, match=r"node 'CNode_\d+:\d+' \(SparseSoftmaxCrossEntropyWithLogits\): "
                                                r"needs logits\[N, C\] and labels\[N\]"):
        m.output(bad).load()
    m = Model()
    sens = m.op("SparseSoftmaxCrossEntropyWithLogits", m.input("x", [2, 3]), m.input("y", [2], I32),
                function=False, is_grad=False, sens=2.0)
    with pytest.raises(UnsupportedOpError, match=r"SparseSoftmaxCrossEntropyWithLogits.*sens = 2.0"):
        m.output(sens).load()

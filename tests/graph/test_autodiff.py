"""grad / value_and_grad: naming, accumulation, dead code, errors, gradients of the examples
against finite differences (float64) and torch.autograd, graphs already holding gradient
ops, and expansion of backward graphs into ops the kernel generator handles."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from akg.errors import InvalidGraphError, MissingRuleError, ShapeError
from akg.graph import GraphBuilder, evaluate, parse_mir, random_inputs
from akg.graph.autodiff import grad, trainable_params, value_and_grad
from akg.graph.expand import expand
from akg.graph.ops import COMPUTES, VJP_RULES
from akg.graph.train import params_as_inputs


def _load_make_examples():
    """scripts/make_examples.py, whose builders make the examples at any size."""
    path = Path(__file__).resolve().parents[2] / "scripts" / "make_examples.py"
    spec = importlib.util.spec_from_file_location("make_examples_for_autodiff", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


make = _load_make_examples()


def copy_into(b: GraphBuilder, graph, dtype=lambda d: d) -> dict:
    """Rebuild graph's inputs, constants and nodes in b (dtypes mapped by `dtype`)."""
    env = {}
    for v in graph.inputs:
        env[v] = b.input(v.name, v.shape, dtype(v.dtype))
    for v, a in graph.constants.items():
        env[v] = b.const(a.astype(dtype(str(a.dtype))), name=v.name)
    for n in graph.nodes:
        out = b.op(n.op, *(env[v] for v in n.inputs), name=[v.name for v in n.outputs], **n.attrs)
        for v, o in zip(n.outputs, out if isinstance(out, tuple) else (out,)):
            env[v] = o
    return env


def to_float64(graph):
    """The same graph computing in float64 (inputs, constants and every op)."""
    b = GraphBuilder(graph.name)
    env = copy_into(b, graph, lambda d: "float64" if d == "float32" else d)
    b.output(*(env[v] for v in graph.outputs))
    return b.build()


def with_loss(graph, seed=0):
    """graph plus a scalar `loss` = sum(first output * a fixed random cotangent)."""
    b = GraphBuilder(graph.name)
    env = copy_into(b, graph)
    y = env[graph.outputs[0]]
    ct = np.random.default_rng(seed).standard_normal(y.shape).astype(y.dtype)
    b.output(b.sum(b.mul(y, b.const(ct, name="cotangent")), name="loss"))
    return b.build()


SMALL = {
    "mlp": lambda: make.mlp(batch=4, sizes=(12, 8, 6, 5)),
    "resnet_block": lambda: with_loss(make.resnet_block(channels=4, size=6)),
    "transformer_block": lambda: with_loss(make.transformer_block(seq=6, hidden=8, heads=2, ffn=16)),
}


def small_example(name):
    return to_float64(SMALL[name]())


# --- the transform ----------------------------------------------------------------------------


def tiny():
    b = GraphBuilder("tiny")
    x = b.input("x", (3,), "float64")
    w = b.const(np.array([0.5, -1.0, 2.0]), name="w")
    y = b.mul(x, w, name="y")
    side = b.exp(y, name="side")  # an output the loss does not need
    loss = b.sum(b.add(b.mul(y, y), b.sin(x)), name="loss")
    b.output(side, loss)
    return b.build()


def test_outputs_are_the_loss_then_named_gradients():
    g = grad(tiny(), "loss", ["x", "w"])
    assert [v.name for v in g.outputs] == ["loss", "grad.x", "grad.w"]
    assert [v.name for v in g.inputs] == ["x"]
    xv = np.array([0.3, -0.7, 1.1])
    wv = np.array([0.5, -1.0, 2.0])
    loss, gx, gw = evaluate(g, {"x": xv})
    np.testing.assert_allclose(loss, np.sum((xv * wv) ** 2 + np.sin(xv)))
    np.testing.assert_allclose(gx, 2 * xv * wv * wv + np.cos(xv))  # x is used twice: accumulated
    np.testing.assert_allclose(gw, 2 * xv * xv * wv)


def test_dead_forward_code_is_removed():
    g = grad(tiny(), "loss", ["w"])
    names = {v.name for v in g.values}
    assert "side" not in names  # forward output the loss does not need
    assert "grad.x" not in names  # x's cotangent is not asked for
    assert [n.op for n in g.nodes].count("exp") == 0


def test_accumulation_is_one_add_named_after_the_value():
    g = grad(tiny(), "loss", ["x"])
    acc = [n for n in g.nodes if n.outputs[0].name == "grad.x"]
    assert len(acc) == 1 and acc[0].op == "add"


def test_gradient_of_an_unused_value_is_zero_and_of_the_loss_is_one():
    b = GraphBuilder()
    x = b.input("x", (2,), "float64")
    b.input("u", (2, 2), "float64")
    loss = b.sum(x, name="loss")
    b.output(loss)
    g = grad(b.build(), "loss", ["u", "loss", "x"])
    _, gu, gl, gx = evaluate(g, {"x": np.ones(2), "u": np.ones((2, 2))})
    assert gu.shape == (2, 2) and not gu.any()
    assert gl == 1.0
    np.testing.assert_array_equal(gx, [1, 1])


def test_gradient_with_respect_to_an_intermediate_value():
    g = grad(tiny(), "loss", ["y"])
    xv = np.array([0.3, -0.7, 1.1])
    _, gy = evaluate(g, {"x": xv})
    np.testing.assert_allclose(gy, 2 * xv * np.array([0.5, -1.0, 2.0]))


def test_non_differentiable_ops_pass_no_gradient():
    b = GraphBuilder()
    x = b.input("x", (4,), "float64")
    loss = b.sum(b.mul(x, b.floor(x)), name="loss")
    b.output(loss)
    xv = np.array([0.5, 1.5, -2.5, 3.2])
    _, gx = evaluate(grad(b.build(), "loss", ["x"]), {"x": xv})
    np.testing.assert_allclose(gx, np.floor(xv))


def test_default_wrt_is_the_trainable_params():
    g = make.resnet_block(channels=2, size=4)
    names = [v.name for v in trainable_params(g)]
    assert names == ["conv1.weight", "bn1.gamma", "bn1.beta", "conv2.weight", "bn2.gamma", "bn2.beta"]
    t = make.transformer_block(seq=4, hidden=4, heads=2, ffn=8)
    assert "scale" not in [v.name for v in trainable_params(t)]  # a scalar literal stays put
    m = make.mlp(batch=2, sizes=(3, 2))
    assert [v.name for v in grad(m, "loss").outputs] == ["loss", "grad.fc1.weight", "grad.fc1.bias"]


def test_value_and_grad():
    f = value_and_grad(tiny(), "loss", ["w"])
    xv = np.array([1.0, 2.0, 3.0])
    loss, grads = f({"x": xv})
    assert set(grads) == {"w"}
    np.testing.assert_allclose(grads["w"], 2 * xv * xv * np.array([0.5, -1.0, 2.0]))
    np.testing.assert_allclose(loss, evaluate(tiny(), {"x": xv})[1])


def test_result_prints_and_parses_back():
    g = grad(make.mlp(batch=2, sizes=(4, 3, 2)), "loss")
    assert parse_mir(str(g)) == g


# --- errors -------------------------------------------------------------------------------------


def test_unknown_loss_or_wrt_names_the_value():
    with pytest.raises(InvalidGraphError, match="loss: graph 'tiny' has no value %nope"):
        grad(tiny(), "nope", ["x"])
    with pytest.raises(InvalidGraphError, match="wrt: graph 'tiny' has no value %wq"):
        grad(tiny(), "loss", ["wq"])
    with pytest.raises(InvalidGraphError, match="wrt names %x twice"):
        grad(tiny(), "loss", ["x", "x"])


def test_loss_must_be_a_float_scalar():
    with pytest.raises(ShapeError, match="the loss %y must be a floating-point scalar, it is f64\\[3\\]"):
        grad(tiny(), "y", ["x"])


def test_wrt_must_be_floating_point():
    m = make.mlp(batch=2, sizes=(3, 2))
    with pytest.raises(ShapeError, match="cannot differentiate with respect to %labels: i32\\[2\\]"):
        grad(m, "loss", ["labels"])


def test_missing_rule_names_the_op(monkeypatch):
    monkeypatch.delitem(VJP_RULES._items, "erf")
    b = GraphBuilder()
    x = b.input("x", (2,))
    b.output(b.sum(b.erf(x), name="loss"))
    with pytest.raises(MissingRuleError, match="no VJP rule for 'erf'"):
        grad(b.build(), "loss", ["x"])


# --- whole examples against finite differences ---------------------------------------------


def _fd_check(graph, loss="loss", directions=3, eps=1e-6, seed=0):
    params = [v.name for v in trainable_params(graph, loss)]
    g = grad(graph, loss, params)
    inputs = random_inputs(graph, seed)
    _, *grads = evaluate(g, inputs)
    lifted = params_as_inputs(graph, params)
    out_index = [v.name for v in lifted.outputs].index(loss)
    theta = {v.name: a for v, a in graph.constants.items() if v.name in params}
    rng = np.random.default_rng(seed + 1)
    for _ in range(directions):
        d = {p: rng.standard_normal(theta[p].shape) for p in params}

        def at(sign):
            shifted = {p: theta[p] + sign * eps * d[p] for p in params}
            return float(evaluate(lifted, {**inputs, **shifted})[out_index])

        fd = (at(1) - at(-1)) / (2 * eps)
        analytic = sum(float((gp * d[p]).sum()) for p, gp in zip(params, grads))
        assert abs(fd - analytic) <= 1e-6 * (1 + abs(fd)), (graph.name, fd, analytic)
    return params, grads, inputs


@pytest.mark.parametrize("name", sorted(SMALL))
def test_example_gradients_match_finite_differences(name):
    _fd_check(small_example(name))


# --- against torch.autograd --------------------------------------------------------------------


def torch_forward(graph, values):
    """Evaluate graph with torch ops (for the ops the examples use) on tensors by name."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    env = dict(values)
    for node in graph.nodes:
        x = [env[v.name] for v in node.inputs]
        a = node.attrs
        if node.op in ("add", "mul", "sub"):
            y = {"add": torch.add, "mul": torch.mul, "sub": torch.sub}[node.op](*x)
        elif node.op in ("matmul", "batch_matmul"):
            p, q = x
            p = p.transpose(-1, -2) if a["transpose_a"] else p
            q = q.transpose(-1, -2) if a["transpose_b"] else q
            y = torch.matmul(p, q)
        elif node.op == "relu":
            y = torch.relu(x[0])
        elif node.op == "gelu":
            y = F.gelu(x[0], approximate=a["approximate"])
        elif node.op == "sum":
            y = x[0].sum(dim=a["axes"], keepdim=a["keepdims"]) if a["axes"] else x[0].sum()
        elif node.op == "cross_entropy":
            y = F.cross_entropy(x[0], x[1].long(), reduction=a["reduction"])
        elif node.op == "conv2d":
            pt, pl, pb, pr = (list(a["padding"]) * 2)[:4] if len(a["padding"]) == 2 else a["padding"]
            y = F.conv2d(F.pad(x[0], (pl, pr, pt, pb)), x[1], stride=a["strides"], dilation=a["dilation"],
                         groups=a["groups"])
        elif node.op == "batch_norm":
            stats = [graph.producer(v) for v in node.inputs[3:]]
            training = [s.op if s else None for s in stats] == ["mean", "variance"] and all(
                s.inputs[0] is node.inputs[0] for s in stats)  # batch statistics of x itself
            y = F.batch_norm(x[0], None if training else x[3], None if training else x[4], x[1], x[2],
                             training=training, eps=a["epsilon"])
        elif node.op == "mean":
            y = x[0].mean(dim=a["axes"], keepdim=a["keepdims"])
        elif node.op == "variance":
            y = x[0].var(dim=a["axes"], keepdim=a["keepdims"], unbiased=False)
        elif node.op == "reshape":
            y = x[0].reshape(a["shape"])
        elif node.op == "transpose":
            y = x[0].permute(a["perm"])
        elif node.op == "softmax":
            y = torch.softmax(x[0], dim=a["axis"])
        elif node.op == "layer_norm":
            first = a["begin_norm_axis"] % x[0].dim()
            y = F.layer_norm(x[0], x[0].shape[first:], x[1], x[2], eps=a["epsilon"])
        elif node.op == "max_pool2d":
            y = F.max_pool2d(x[0], a["kernel"], a["strides"], a["padding"][:2], ceil_mode=a["ceil_mode"])
        elif node.op == "avg_pool2d":
            y = F.avg_pool2d(x[0], a["kernel"], a["strides"], a["padding"][:2], ceil_mode=a["ceil_mode"],
                             count_include_pad=a["count_include_pad"])
        elif node.op == "global_avg_pool2d":
            y = x[0].mean(dim=(2, 3), keepdim=a["keepdims"])
        else:
            raise NotImplementedError(node.op)
        env[node.outputs[0].name] = y
    return env


def _torch_check(graph, inputs, wrt):
    torch = pytest.importorskip("torch")
    values = {k: torch.tensor(v) for k, v in inputs.items()}
    weights = {v.name: torch.tensor(np.array(a), requires_grad=v.name in wrt) for v, a in graph.constants.items()}
    for name in wrt:
        if name in values:
            values[name].requires_grad_(True)
    values.update(weights)
    env = torch_forward(graph, values)
    loss = env["loss"]
    want = torch.autograd.grad(loss, [values[n] for n in wrt])
    got_loss, *got = evaluate(grad(graph, "loss", wrt), inputs)
    np.testing.assert_allclose(got_loss, loss.detach().numpy(), rtol=1e-10)
    for name, w, g in zip(wrt, want, got):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-8, atol=1e-10, err_msg=name)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_example_gradients_match_torch(name):
    pytest.importorskip("torch")
    graph = small_example(name)
    wrt = [v.name for v in trainable_params(graph, "loss")]
    if graph.inputs[0].dtype == "float64":
        wrt.append(graph.inputs[0].name)
    _torch_check(graph, random_inputs(graph, 3), wrt)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_full_size_examples_match_torch(name, examples_dir):
    """The committed examples at their real sizes (float64), every parameter and the input."""
    pytest.importorskip("torch")
    from akg.graph.io import load_mir

    graph = load_mir(examples_dir / f"{name}.mir")
    graph = to_float64(graph if name == "mlp" else with_loss(graph))
    wrt = [v.name for v in trainable_params(graph, "loss")] + ["x"]
    _torch_check(graph, random_inputs(graph, 3), wrt)


def test_pooling_and_training_batch_norm_match_torch():
    """Ties in max pooling go to the first maximum, as in PyTorch; batch statistics (mean and
    variance of x as batch_norm inputs) give training-mode batch norm's gradient."""
    pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    b = GraphBuilder("pools")
    x = b.input("x", (2, 3, 7, 7), "float64")
    axes = [0, 2, 3]
    gamma = b.const(rng.uniform(0.5, 1.5, 3), name="gamma")
    beta = b.const(rng.standard_normal(3), name="beta")
    bn = b.batch_norm(x, gamma, beta, b.mean(x, axes=axes), b.variance(x, axes=axes))
    tied = b.max_pool2d(x, kernel=[3], strides=[2], padding=[1], ceil_mode=True)
    avg = b.avg_pool2d(bn, kernel=[3], strides=[2], padding=[1], count_include_pad=False)
    pooled = b.add(b.max_pool2d(b.relu(bn), kernel=[2]), b.avg_pool2d(bn, kernel=[2]))
    y = b.add(b.sum(b.mul(tied, avg)), b.sum(b.mul(pooled, pooled)))
    gap = b.global_avg_pool2d(b.mul(bn, bn), keepdims=False)
    b.output(b.add(y, b.sum(gap), name="loss"))
    graph = b.build()
    xv = rng.integers(0, 3, (2, 3, 7, 7)).astype(np.float64)  # many ties
    _torch_check(graph, {"x": xv}, ["x", "gamma", "beta"])


# --- graphs holding gradient ops ---------------------------------------------------------------


def test_grad_of_a_graph_that_already_holds_gradient_ops():
    """Second pass over a backward graph: a gradient-norm penalty differentiated again."""
    first = grad(small_example("mlp"), "loss", ["fc2.weight"])
    b = GraphBuilder("penalised")
    env = copy_into(b, first)
    gw = env[first.outputs[1]]
    penalty = b.sum(b.mul(gw, gw), name="penalty")
    b.output(b.add(env[first.outputs[0]], penalty, name="total"))
    graph = b.build()
    second = grad(graph, "total", ["fc1.weight", "fc2.weight"])
    assert [v.name for v in second.outputs] == ["total", "grad2.fc1.weight", "grad2.fc2.weight"]
    assert any(v.name.startswith("grad.") for v in second.values)  # the first pass's ops are kept
    _fd_check(graph, "total")


# --- expansion --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SMALL))
def test_backward_graphs_expand_to_ops_with_compute_definitions(name):
    g = grad(SMALL[name](), "loss")
    flat = expand(g)
    assert {n.op for n in flat.nodes} <= set(COMPUTES), sorted({n.op for n in flat.nodes} - set(COMPUTES))
    inputs = random_inputs(g, 0)
    for a, b in zip(evaluate(g, inputs), evaluate(flat, inputs)):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=1e-5)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_backward_graphs_lower_to_tensor_expressions(name):
    from akg.graph.compute.lower import lower_graph

    program = lower_graph(grad(SMALL[name](), "loss"))
    assert len(program.outputs) == 1 + len(trainable_params(SMALL[name](), "loss"))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SMALL))
def test_backward_graphs_compile_for_cpu(name):
    import akg

    g = grad(SMALL[name](), "loss")
    inputs = random_inputs(g, 0)
    for v, got, want in zip(g.outputs, akg.build(g)(**inputs), evaluate(g, inputs)):
        scale = max(1.0, float(np.abs(want).max()))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * scale, err_msg=v.name)

"""Training steps: the step graph's interface, one SGD / Adam update against hand-written NumPy,
and the mlp example learning a fixed synthetic data set in the reference interpreter."""

from __future__ import annotations

import numpy as np
import pytest

from akg.errors import InputError, InvalidGraphError, MissingRuleError
from akg.graph import GraphBuilder, evaluate, parse_mir
from akg.graph.autodiff import grad
from akg.graph.train import (
    OPTIMIZERS, Adam, Sgd, initial_state, make_optimizer, params_as_inputs, run_step, state_names, train_step,
)


def quadratic():
    """loss = sum((x @ w - t)^2) with w a constant: its gradient is 2 x^T (x w - t)."""
    b = GraphBuilder("quad")
    x = b.input("x", (4, 3), "float64")
    t = b.input("t", (4, 2), "float64")
    w = b.const(np.arange(6, dtype=np.float64).reshape(3, 2) / 10, name="w")
    r = b.sub(b.matmul(x, w), t)
    b.output(b.sum(b.mul(r, r), name="loss"))
    return b.build()


DATA = {"x": np.random.default_rng(0).standard_normal((4, 3)), "t": np.random.default_rng(1).standard_normal((4, 2))}
W0 = np.arange(6, dtype=np.float64).reshape(3, 2) / 10


def true_grad(w):
    return 2 * DATA["x"].T @ (DATA["x"] @ w - DATA["t"])


def test_params_as_inputs_keeps_names_and_order():
    g = params_as_inputs(quadratic(), ["w"])
    assert [v.name for v in g.inputs] == ["x", "t", "w"] and not g.constants
    (loss,) = evaluate(g, {**DATA, "w": W0})
    assert loss == pytest.approx(np.sum((DATA["x"] @ W0 - DATA["t"]) ** 2))
    with pytest.raises(InvalidGraphError, match="param %x is not a constant"):
        params_as_inputs(quadratic(), ["x"])


def test_plain_sgd_has_no_state():
    step = train_step(quadratic(), "loss", optimizer="sgd", lr=0.1)
    assert [v.name for v in step.inputs] == ["x", "t", "w"]
    assert [v.name for v in step.outputs] == ["loss", "new.w"]
    assert state_names(step) == ["w"]
    loss, state = run_step(step, {"w": W0}, DATA)
    np.testing.assert_allclose(state["w"], W0 - 0.1 * true_grad(W0))


def test_sgd_momentum_two_steps():
    step = train_step(quadratic(), "loss", ["w"], "sgd", lr=0.05, momentum=0.9)
    assert [v.name for v in step.inputs] == ["x", "t", "w", "opt.momentum.w"]
    assert [v.name for v in step.outputs] == ["loss", "new.w", "new.opt.momentum.w"]
    state = initial_state(quadratic(), step)
    np.testing.assert_array_equal(state["w"], W0)
    w, v = W0, np.zeros_like(W0)
    for _ in range(2):
        v = 0.9 * v + true_grad(w)
        w = w - 0.05 * v
        _, state = run_step(step, state, DATA)
    np.testing.assert_allclose(state["w"], w)
    np.testing.assert_allclose(state["opt.momentum.w"], v)


def test_adam_three_steps():
    step = train_step(quadratic(), "loss", optimizer="adam", lr=0.01, betas=(0.8, 0.9), eps=1e-6)
    assert [v.name for v in step.inputs] == ["x", "t", "w", "opt.m.w", "opt.v.w", "opt.step"]
    state = initial_state(quadratic(), step)
    assert state["opt.step"].dtype == np.float32 and state["opt.step"] == 0
    w, m, v = W0, 0 * W0, 0 * W0
    for t in (1, 2, 3):
        g = true_grad(w)
        m, v = 0.8 * m + 0.2 * g, 0.9 * v + 0.1 * g * g
        w = w - 0.01 * (m / (1 - 0.8**t)) / (np.sqrt(v / (1 - 0.9**t)) + 1e-6)
        _, state = run_step(step, state, DATA)
    np.testing.assert_allclose(state["w"], w, rtol=1e-6)
    assert state["opt.step"] == 3


def test_step_graph_prints_and_parses_back():
    step = train_step(quadratic(), "loss", optimizer="adam")
    assert parse_mir(str(step)) == step


def test_optimizer_registry_keys_are_names():
    assert list(OPTIMIZERS) == ["adam", "sgd"]
    assert all(cls.name == key for key, cls in OPTIMIZERS.items())


def test_optimizer_settings_are_checked():
    assert make_optimizer("sgd", lr=None, momentum=0.5) == Sgd(lr=0.01, momentum=0.5)
    assert make_optimizer("adam", betas=[0.5, 0.6]) == Adam(betas=(0.5, 0.6))
    with pytest.raises(InputError, match="optimizer 'sgd' has no setting 'betas' \\(its settings: lr, momentum\\)"):
        make_optimizer("sgd", betas=(0.9, 0.99))
    with pytest.raises(MissingRuleError, match="no optimizer for 'lamb' \\(known: adam, sgd\\)"):
        train_step(quadratic(), "loss", optimizer="lamb")


def test_a_graph_without_parameters_or_with_clashing_names_is_refused():
    b = GraphBuilder("free")
    x = b.input("x", (2,), "float64")
    b.output(b.sum(b.mul(x, x), name="loss"))
    with pytest.raises(InvalidGraphError, match="no parameters to train"):
        train_step(b.build(), "loss")
    b = GraphBuilder("clash")
    w = b.const(np.ones(2), name="w")
    b.output(b.sum(b.mul(w, b.input("new.x", (2,), "float64")), name="loss"))
    with pytest.raises(InvalidGraphError, match="already has a value %new.x"):
        train_step(b.build(), "loss")


# --- the mlp example learns --------------------------------------------------------------------


@pytest.fixture(scope="module")
def mlp_and_data(examples_dir):
    from akg.graph.io import load_mir

    model = load_mir(examples_dir / "mlp.mir")
    rng = np.random.default_rng(42)
    x = rng.standard_normal((32, 784)).astype(np.float32)
    labels = np.argmax(x @ rng.standard_normal((784, 10)), axis=1).astype(np.int32)  # learnable
    return model, {"x": x, "labels": labels}


@pytest.mark.parametrize("optimizer, settings", [("sgd", {"lr": 0.05, "momentum": 0.9}), ("adam", {"lr": 1e-3})])
def test_mlp_training_decreases_the_loss_over_50_steps(mlp_and_data, optimizer, settings):
    model, data = mlp_and_data
    step = train_step(model, "loss", optimizer=optimizer, **settings)
    state = initial_state(model, step)
    losses = []
    for _ in range(50):
        loss, state = run_step(step, state, data)
        losses.append(float(loss))
    assert losses[0] > 2.0  # about log(10) with random labels
    assert losses[-1] < 0.1 * losses[0]
    assert sum(b < a for a, b in zip(losses, losses[1:])) >= 40  # mostly monotone
    # the trained weights give the same loss in the original graph's forward pass
    trained = params_as_inputs(model, [v.name for v in model.constants])
    forward = dict(zip((v.name for v in trained.outputs),
                       evaluate(trained, {**data, **{k: v for k, v in state.items() if not k.startswith("opt.")}})))
    final, _ = run_step(step, state, data)
    assert forward["loss"] == pytest.approx(float(final), rel=1e-5)


def test_step_gradients_equal_grad(mlp_and_data):
    """The step's update is built on `grad` of the same loss: SGD with lr 1 moves by -grad."""
    model, data = mlp_and_data
    step = train_step(model, "loss", optimizer="sgd", lr=1.0)
    state = initial_state(model, step)
    _, new = run_step(step, state, data)
    _, *grads = evaluate(grad(model, "loss"), data)
    for name, g in zip(state, grads):
        np.testing.assert_allclose(state[name] - new[name], g, rtol=1e-5, atol=1e-7)


@pytest.mark.slow
def test_compiled_step_gives_the_interpreter_losses(load_script):
    """The whole training step (forward, backward, Adam) as one cpu kernel, 10 steps."""
    import akg

    model = load_script("make_examples").mlp(batch=8, sizes=(20, 16, 4))
    rng = np.random.default_rng(0)
    data = {"x": rng.standard_normal((8, 20)).astype(np.float32), "labels": rng.integers(0, 4, 8).astype(np.int32)}
    step = train_step(model, "loss", optimizer="adam", lr=1e-2)
    kernel = akg.build(step)
    state = compiled = initial_state(model, step)
    for _ in range(10):
        loss, state = run_step(step, state, data)
        outs = kernel(**data, **compiled)
        compiled = {v.name[len("new."):]: a for v, a in zip(step.outputs, outs) if v.name.startswith("new.")}
        assert float(outs[0]) == pytest.approx(float(loss), rel=1e-4)

"""Training graphs through the whole compiler: the mlp example's training step compiled for
cpu gives the interpreter's losses over 50 steps, and backward graphs fuse like forward ones."""

import numpy as np
import pytest

from akg.graph import GraphBuilder
from akg.graph.autodiff import grad
from akg.graph.fuse import partition
from akg.graph.io import load_mir
from akg.graph.train import initial_state, run_step, train_step
from akg.api import compile_model


# learning rates small enough that the loss stays well above float32 noise for 50 steps
@pytest.mark.parametrize("optimizer, lr", [("sgd", 0.002), ("adam", 1e-4)])
def test_compiled_mlp_training_step_matches_the_interpreter(examples_dir, optimizer, lr):
    model = load_mir(examples_dir / "mlp.mir")
    rng = np.random.default_rng(0)
    data = {"x": rng.standard_normal((32, 784)).astype(np.float32),
            "labels": rng.integers(0, 10, 32).astype(np.int32)}
    step = train_step(model, "loss", optimizer=optimizer, lr=lr, **({"momentum": 0.9} if optimizer == "sgd" else {}))
    compiled = compile_model(step)
    ref_state = state = initial_state(model, step)
    ref_losses, losses = [], []
    for _ in range(50):
        loss, ref_state = run_step(step, ref_state, data)
        outs = compiled(**data, **state)
        state = {v.name[len("new."):]: a for v, a in zip(step.outputs, outs) if v.name.startswith("new.")}
        ref_losses.append(float(loss))
        losses.append(float(outs[0]))
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-4)
    assert losses[-1] < 0.8 * losses[0]


def test_layer_norm_backward_fuses_into_a_few_reduction_kernels():
    b = GraphBuilder("ln")
    x = b.input("x", (64, 256))
    y = b.layer_norm(x, b.const(np.ones(256, np.float32), name="g"), b.const(np.zeros(256, np.float32), name="bt"))
    b.output(b.sum(b.mul(y, b.input("dy", (64, 256))), name="loss"))
    g = grad(b.build(), "loss", ["x", "g", "bt"])
    parts = partition(g)
    nodes = len(parts.graph.nodes)
    assert nodes >= 15 and len(parts) <= 4, [k.ops for k in parts.kernels]

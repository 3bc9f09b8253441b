"""The example models: generated deterministically, committed .mir up to date, runnable."""

import numpy as np
import pytest

from akg.graph import evaluate, random_inputs
from akg.graph.io import load_mir
from akg.graph.stats import graph_stats


def test_committed_mir_files_match_the_builders(examples_dir, load_script):
    assert load_script("make_examples").main(["--check", "--out", str(examples_dir)]) == 0


def test_weights_are_deterministic(load_script):
    make = load_script("make_examples")
    a, b = make.resnet_block(), make.resnet_block()
    assert a == b


def test_mlp_matches_a_hand_written_numpy_forward(examples_dir):
    g = load_mir(examples_dir / "mlp.mir")
    w = {v.name: a for v, a in g.constants.items()}
    inputs = random_inputs(g, seed=1)
    logits, loss = evaluate(g, inputs)
    h = inputs["x"]
    for i in (1, 2, 3):
        h = h @ w[f"fc{i}.weight"] + w[f"fc{i}.bias"]
        if i < 3:
            h = np.maximum(h, 0)
    np.testing.assert_allclose(logits, h, rtol=1e-5, atol=1e-5)
    z = h - h.max(1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(1, keepdims=True))
    np.testing.assert_allclose(loss, -logp[np.arange(32), inputs["labels"]].mean(), rtol=1e-5)


@pytest.mark.parametrize("name, nodes, params", [
    ("resnet_block", 7, 2 * 64 * 64 * 9 + 8 * 64),
    ("transformer_block", 29, 4 * (768 * 768 + 768) + 2 * 768 * 3072 + 3072 + 768 + 4 * 768),
])
def test_blocks_have_the_specified_size_and_run(examples_dir, name, nodes, params):
    g = load_mir(examples_dir / f"{name}.mir")
    stats = graph_stats(g)
    assert (stats.nodes, stats.parameters - sum(v.type.size for v in g.constants if v.type.rank == 0)) == (nodes, params)
    (out,) = evaluate(g, random_inputs(g))
    assert out.shape == g.inputs[0].shape and np.isfinite(out).all()

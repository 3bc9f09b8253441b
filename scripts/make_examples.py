#!/usr/bin/env python
"""Write the example models: examples/<name>.mir (committed) and examples/<name>.npz (weights,
generated deterministically here and not committed).

    python scripts/make_examples.py            # write every example and its weights
    python scripts/make_examples.py --check    # fail if a committed .mir differs from the builder
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

from akg.graph import Graph, GraphBuilder
from akg.graph.io import emit_mir

EXAMPLES_DIR = Path(__file__).resolve().parent.parent / "examples"


class _Weights:
    """Deterministic initialisers; every tensor draws from its own named stream."""

    def __init__(self, b: GraphBuilder, seed: int):
        self.b, self.seed = b, seed

    def _rng(self, name: str) -> np.random.Generator:
        return np.random.default_rng([self.seed, *name.encode()])

    def normal(self, name: str, shape, std: float, mean: float = 0.0):
        array = (mean + std * self._rng(name).standard_normal(shape)).astype(np.float32)
        return self.b.const(array, name=name)

    def uniform(self, name: str, shape, lo: float, hi: float):
        return self.b.const(self._rng(name).uniform(lo, hi, shape).astype(np.float32), name=name)


def mlp(batch: int = 32, sizes=(784, 256, 128, 10)) -> Graph:
    """A 3-layer perceptron with ReLU, its logits and mean cross-entropy loss."""
    b = GraphBuilder("mlp")
    w = _Weights(b, seed=1)
    x = b.input("x", (batch, sizes[0]))
    labels = b.input("labels", (batch,), "int32")
    h = x
    for i, (n_in, n_out) in enumerate(zip(sizes, sizes[1:]), start=1):
        weight = w.normal(f"fc{i}.weight", (n_in, n_out), std=float(np.sqrt(2.0 / n_in)))
        bias = w.normal(f"fc{i}.bias", (n_out,), std=0.01)
        h = b.add(b.matmul(h, weight), bias, name=f"fc{i}")
        if i < len(sizes) - 1:
            h = b.relu(h, name=f"relu{i}")
    loss = b.cross_entropy(h, labels, name="loss")
    b.output(h, loss)
    return b.build()


def resnet_block(channels: int = 64, size: int = 56) -> Graph:
    """ResNet basic block: conv-bn-relu, conv-bn, + identity, relu (3x3 convs, pad 1)."""
    b = GraphBuilder("resnet_block")
    w = _Weights(b, seed=2)
    x = b.input("x", (1, channels, size, size))
    h = x
    for i in (1, 2):
        std = float(np.sqrt(2.0 / (channels * 9)))
        h = b.conv2d(h, w.normal(f"conv{i}.weight", (channels, channels, 3, 3), std), padding=[1, 1],
                     name=f"conv{i}")
        h = b.batch_norm(h, w.normal(f"bn{i}.gamma", (channels,), 0.1, 1.0),
                         w.normal(f"bn{i}.beta", (channels,), 0.1),
                         w.normal(f"bn{i}.mean", (channels,), 0.1),
                         w.uniform(f"bn{i}.var", (channels,), 0.5, 1.5), name=f"bn{i}")
        if i == 1:
            h = b.relu(h, name="relu1")
    y = b.relu(b.add(h, x, name="residual"), name="out")
    b.output(y)
    return b.build()


def transformer_block(seq: int = 128, hidden: int = 768, heads: int = 12, ffn: int = 3072) -> Graph:
    """One BERT-base encoder layer (post-norm): self-attention, add & norm, GELU FFN, add & norm."""
    b = GraphBuilder("transformer_block")
    w = _Weights(b, seed=3)
    head_dim = hidden // heads
    x = b.input("x", (seq, hidden))

    def linear(name: str, h, n_in: int, n_out: int):
        y = b.matmul(h, w.normal(f"{name}.weight", (n_in, n_out), 0.02))
        return b.add(y, w.normal(f"{name}.bias", (n_out,), 0.02), name=name)

    def split_heads(name: str, h):  # [seq, hidden] -> [heads, seq, head_dim]
        h = b.reshape(h, shape=[seq, heads, head_dim], name=f"{name}.heads")
        return b.transpose(h, perm=[1, 0, 2], name=f"{name}.t")

    q, k, v = (split_heads(n, linear(n, x, hidden, hidden)) for n in ("query", "key", "value"))
    scores = b.batch_matmul(q, k, transpose_b=True, name="scores")
    scale = b.const(np.float32(1.0 / np.sqrt(head_dim)), name="scale")
    probs = b.softmax(b.mul(scores, scale, name="scaled"), axis=-1, name="probs")
    ctx = b.transpose(b.batch_matmul(probs, v, name="context"), perm=[1, 0, 2], name="context.t")
    ctx = b.reshape(ctx, shape=[seq, hidden], name="context.merged")
    attn = linear("attn_out", ctx, hidden, hidden)

    def add_norm(name: str, h, residual):
        gamma = w.normal(f"{name}.gamma", (hidden,), 0.02, 1.0)
        beta = w.normal(f"{name}.beta", (hidden,), 0.02)
        return b.layer_norm(b.add(h, residual, name=f"{name}.residual"), gamma, beta,
                            epsilon=1e-12, name=name)

    h1 = add_norm("attn_norm", attn, x)
    f = b.gelu(linear("ffn_in", h1, hidden, ffn), name="ffn_act")
    y = add_norm("out_norm", linear("ffn_out", f, ffn, hidden), h1)
    b.output(y)
    return b.build()


EXAMPLES = {"mlp": mlp, "resnet_block": resnet_block, "transformer_block": transformer_block}


def write(name: str, graph: Graph, folder: Path) -> None:
    """The model's .mir and .npz files, each replaced whole (a reader in another process, a
    test run in parallel, sees the old file or the new one, never half of one)."""
    text, weights = emit_mir(graph, weights_file=f"{name}.npz")
    header = f"# {name}: written by scripts/make_examples.py (weights: {name}.npz, generated)\n"
    _replace(folder / f"{name}.mir", lambda f: f.write((header + text).encode()))
    if weights:
        _replace(folder / f"{name}.npz", lambda f: np.savez(f, **weights))


def _replace(path: Path, fill) -> None:
    """Write `path` through `fill(binary file)` into a temporary file beside it, then rename."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            fill(f)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare committed .mir files with the builders")
    parser.add_argument("--out", type=Path, default=EXAMPLES_DIR)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    stale = []
    for name, build in EXAMPLES.items():
        graph = build()
        if args.check:
            text, _ = emit_mir(graph, weights_file=f"{name}.npz")
            if not (args.out / f"{name}.mir").read_text().endswith(text):
                stale.append(name)
            continue
        write(name, graph, args.out)
        print(f"wrote {args.out / name}.mir")
    if stale:
        print(f"stale: {', '.join(stale)} (run python scripts/make_examples.py)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

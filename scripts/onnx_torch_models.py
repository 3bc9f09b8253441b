#!/usr/bin/env python
"""ONNX models exported by PyTorch from real architectures, for the ONNX importer's tests and
for trying akg on them by hand: a ResNet (basic blocks, batch norm, a strided downsampling
shortcut, max and global average pooling), a BERT-style encoder (token, position and segment
embeddings over int64 ids, multi-head self-attention with a padding mask, GELU feed-forward,
post-norm layer norms, a tanh pooler) and an MLP over int64 token inputs (an embedding bag).

Each model has fixed random weights (seeded) and fixed example inputs; `export` writes
`<name>.onnx` with `torch.onnx.export` (the TorchScript exporter, which needs no onnxscript)
and `<name>.io.npz` with the inputs and PyTorch's own outputs (`input_<i>`, `output_<i>`, as
the shared MindIR corpus names them).

    python scripts/onnx_torch_models.py OUT_DIR [--only resnet,bert] [--opset 17]

Needs torch (`pip install 'akg[torch]'`, the CPU wheel 2.13.0) and onnx.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Callable

import numpy as np


def _nn():
    import torch

    return torch, torch.nn


def resnet(width: int = 8, image: int = 32, batch: int = 2, classes: int = 10, seed: int = 0):
    """A ResNet of two stages of basic blocks (the second downsampling by a strided 1x1
    shortcut), in eval mode with non-trivial batch-norm statistics."""
    torch, nn = _nn()

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            y = torch.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            return torch.relu(y + (x if self.down is None else self.down(x)))

    class ResNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                                      nn.MaxPool2d(3, 2, 1))
            self.stage1 = nn.Sequential(Block(width, width, 1), Block(width, width, 1))
            self.stage2 = nn.Sequential(Block(width, 2 * width, 2), Block(2 * width, 2 * width, 1))
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(2 * width, classes)

        def forward(self, x):
            x = self.stage2(self.stage1(self.stem(x)))
            return self.fc(torch.flatten(self.pool(x), 1))

    torch.manual_seed(seed)
    model = ResNet()
    _randomise_batch_norms(model, seed)
    x = torch.randn(batch, 3, image, image, generator=torch.Generator().manual_seed(seed + 1))
    return model.eval(), (x,), ["image"]


def bert(hidden: int = 32, heads: int = 4, layers: int = 2, seq: int = 8, batch: int = 2, vocab: int = 50,
         seed: int = 0):
    """A BERT-style encoder: embeddings + layer norm, `layers` post-norm layers of multi-head
    self-attention (a padding mask from int64 attention-mask input) and a GELU feed-forward,
    a tanh pooler over the first token."""
    torch, nn = _nn()
    head = hidden // heads

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)
            self.o = nn.Linear(hidden, hidden)
            self.ln1 = nn.LayerNorm(hidden, eps=1e-12)
            self.ff1, self.ff2 = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)
            self.ln2 = nn.LayerNorm(hidden, eps=1e-12)

        def split(self, t):
            b, s, _ = t.shape
            return t.view(b, s, heads, head).transpose(1, 2)

        def forward(self, x, bias):
            b, s, _ = x.shape
            q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(head) + bias
            ctx = torch.matmul(torch.softmax(scores, dim=-1), v).transpose(1, 2).reshape(b, s, hidden)
            x = self.ln1(x + self.o(ctx))
            return self.ln2(x + self.ff2(nn.functional.gelu(self.ff1(x))))

    class Bert(nn.Module):
        def __init__(self):
            super().__init__()
            self.tokens = nn.Embedding(vocab, hidden)
            self.positions = nn.Embedding(seq, hidden)
            self.segments = nn.Embedding(2, hidden)
            self.ln = nn.LayerNorm(hidden, eps=1e-12)
            self.layers = nn.ModuleList(Layer() for _ in range(layers))
            self.pooler = nn.Linear(hidden, hidden)

        def forward(self, ids, segment, mask):
            positions = torch.arange(ids.shape[1], dtype=torch.int64).unsqueeze(0)
            x = self.ln(self.tokens(ids) + self.positions(positions) + self.segments(segment))
            bias = (1.0 - mask[:, None, None, :].to(torch.float32)) * -10000.0
            for layer in self.layers:
                x = layer(x, bias)
            return x, torch.tanh(self.pooler(x[:, 0]))

    torch.manual_seed(seed)
    model = Bert()
    g = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(0, vocab, (batch, seq), generator=g, dtype=torch.int64)
    segment = torch.randint(0, 2, (batch, seq), generator=g, dtype=torch.int64)
    mask = torch.ones(batch, seq, dtype=torch.int64)
    mask[1, seq // 2:] = 0  # the second sequence is padded
    return model.eval(), (ids, segment, mask), ["input_ids", "token_type_ids", "attention_mask"]


def token_mlp(vocab: int = 100, dim: int = 16, hidden: int = 32, classes: int = 5, tokens: int = 6,
              batch: int = 4, seed: int = 0):
    """An MLP classifier over int64 token ids: the mean of the tokens' embeddings, two linear
    layers with a ReLU between and a log-softmax."""
    torch, nn = _nn()

    class TokenMlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(vocab, dim)
            self.fc1, self.fc2 = nn.Linear(dim, hidden), nn.Linear(hidden, classes)

        def forward(self, ids):
            x = self.embed(ids).mean(dim=1)
            return torch.log_softmax(self.fc2(torch.relu(self.fc1(x))), dim=-1)

    torch.manual_seed(seed)
    ids = torch.randint(0, vocab, (batch, tokens), generator=torch.Generator().manual_seed(seed + 1),
                        dtype=torch.int64)
    return TokenMlp().eval(), (ids,), ["ids"]


def _randomise_batch_norms(model, seed: int) -> None:
    """Moving statistics and affine parameters away from the identity, so that a mistake in
    the batch-norm mapping shows in the outputs."""
    torch, nn = _nn()
    g = torch.Generator().manual_seed(seed + 7)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                c = m.num_features
                m.running_mean.copy_(0.1 * torch.randn(c, generator=g))
                m.running_var.copy_(0.5 + torch.rand(c, generator=g))
                m.weight.copy_(1.0 + 0.1 * torch.randn(c, generator=g))
                m.bias.copy_(0.1 * torch.randn(c, generator=g))


MODELS: dict[str, Callable] = {"resnet": resnet, "bert": bert, "token_mlp": token_mlp}


def export(name: str, out_dir: str | Path, opset: int = 17) -> tuple[Path, list[np.ndarray], list[np.ndarray]]:
    """Export model `name` to `out_dir/<name>.onnx`; returns (path, inputs, PyTorch's outputs)
    and writes them to `out_dir/<name>.io.npz` too."""
    import warnings

    torch, _ = _nn()
    model, inputs, input_names = MODELS[name]()
    with torch.no_grad():
        outputs = model(*inputs)
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        torch.onnx.export(model, inputs, str(path), input_names=input_names,
                          output_names=[f"output_{i}" for i in range(len(outputs))], opset_version=opset,
                          dynamo=False)
    xs = [t.numpy() for t in inputs]
    ys = [t.numpy() for t in outputs]
    np.savez(out_dir / f"{name}.io.npz", **{f"input_{i}": x for i, x in enumerate(xs)},
             **{f"output_{i}": y for i, y in enumerate(ys)})
    return path, xs, ys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--only", default=",".join(MODELS), help="comma-separated model names")
    parser.add_argument("--opset", type=int, default=17)
    args = parser.parse_args(argv)
    for name in args.only.split(","):
        if name not in MODELS:
            parser.error(f"unknown model {name!r} (known: {', '.join(MODELS)})")
        path, xs, ys = export(name, args.out_dir, args.opset)
        print(f"{path}: inputs {[x.shape for x in xs]}, outputs {[y.shape for y in ys]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

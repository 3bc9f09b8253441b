"""The whole-model benchmark's built models, in akg's graph form (`GraphBuilder`) with random
weights: ResNet-18 (any width, image size and batch), MobileNetV2 inverted-residual blocks and
BERT encoder layers. `models.py` runs each through akg and, with the same weights, through
PyTorch (a torch function made from the graph), Inductor and ONNX Runtime (exported from that
torch function). Building a graph needs no torch.

Weights are scaled so that activations keep unit size through the network (He init for
convolutions followed by batch norm with statistics near the identity), so a deep model's
output is not dominated by rounding and the comparison with the interpreter stays meaningful.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from akg.graph import GraphBuilder
from akg.graph.ir import Graph, Value


class _Weights:
    """Deterministic random weights, named after the layer they belong to."""

    def __init__(self, b: GraphBuilder, seed: int):
        self.b = b
        self.rng = np.random.default_rng(seed)

    def normal(self, name: str, shape: tuple[int, ...], scale: float) -> Value:
        return self.b.const((self.rng.standard_normal(shape) * scale).astype(np.float32), name=name)

    def uniform(self, name: str, shape: tuple[int, ...], low: float, high: float) -> Value:
        return self.b.const(self.rng.uniform(low, high, shape).astype(np.float32), name=name)


def conv_bn(w: _Weights, x: Value, name: str, cin: int, cout: int, k: int, stride: int = 1,
            groups: int = 1) -> Value:
    """A bias-free k x k convolution ('same' padding for odd k) followed by inference batch norm."""
    b = w.b
    fan_in = cin // groups * k * k
    weight = w.normal(f"{name}.weight", (cout, cin // groups, k, k), math.sqrt(2.0 / fan_in))
    y = b.conv2d(x, weight, strides=[stride, stride], padding=[k // 2, k // 2], groups=groups)
    return b.batch_norm(y, w.uniform(f"{name}.bn.gamma", (cout,), 0.5, 1.0),
                        w.normal(f"{name}.bn.beta", (cout,), 0.1), w.normal(f"{name}.bn.mean", (cout,), 0.1),
                        w.uniform(f"{name}.bn.var", (cout,), 0.8, 1.2))


def resnet18(width: int = 64, image: int = 224, batch: int = 1, classes: int = 1000, seed: int = 0,
             name: str | None = None) -> Graph:
    """torchvision's ResNet-18 (BasicBlocks [2, 2, 2, 2]) with stage widths width x (1, 2, 4, 8)."""
    b = GraphBuilder(name or f"resnet18_w{width}_{image}px_b{batch}")
    w = _Weights(b, seed)
    x = b.input("x", (batch, 3, image, image))
    h = b.relu(conv_bn(w, x, "conv1", 3, width, 7, stride=2))
    h = b.max_pool2d(h, kernel=[3, 3], strides=[2, 2], padding=[1, 1])
    cin = width
    for stage, cout in enumerate((width, 2 * width, 4 * width, 8 * width), start=1):
        for block in range(2):
            stride = 2 if stage > 1 and block == 0 else 1
            prefix = f"layer{stage}.{block}"
            y = b.relu(conv_bn(w, h, f"{prefix}.conv1", cin, cout, 3, stride))
            y = conv_bn(w, y, f"{prefix}.conv2", cout, cout, 3)
            shortcut = conv_bn(w, h, f"{prefix}.downsample", cin, cout, 1, stride) if stride > 1 or cin != cout else h
            h = b.relu(b.add(y, shortcut))
            cin = cout
    pooled = b.reshape(b.global_avg_pool2d(h), shape=[batch, cin])
    logits = b.add(b.matmul(pooled, w.normal("fc.weight", (cin, classes), 1 / math.sqrt(cin))),
                   w.normal("fc.bias", (classes,), 0.01))
    b.output(logits)
    return b.build()


def inverted_residual(w: _Weights, x: Value, name: str, cin: int, cout: int, stride: int, expand: int) -> Value:
    """MobileNetV2's block: 1x1 expand + ReLU6, 3x3 depthwise + ReLU6, 1x1 project, and the
    residual add where the block keeps its shape."""
    b = w.b
    hidden = cin * expand
    h = b.relu6(conv_bn(w, x, f"{name}.expand", cin, hidden, 1)) if expand != 1 else x
    h = b.relu6(conv_bn(w, h, f"{name}.depthwise", hidden, hidden, 3, stride, groups=hidden))
    h = conv_bn(w, h, f"{name}.project", hidden, cout, 1)
    return b.add(h, x) if stride == 1 and cin == cout else h


def mobilenetv2_blocks(channels: int = 24, image: int = 56, batch: int = 1, seed: int = 0,
                       name: str | None = None) -> Graph:
    """Three inverted-residual blocks of MobileNetV2's second stage and the first of its third:
    `channels` -> `channels` twice (expansion 6, residual), then a strided block to
    channels * 4 / 3 (no residual)."""
    b = GraphBuilder(name or f"mobilenetv2_blocks_c{channels}_{image}px_b{batch}")
    w = _Weights(b, seed)
    h = b.input("x", (batch, channels, image, image))
    wider = channels * 4 // 3
    for i, (cin, cout, stride) in enumerate(((channels, channels, 1), (channels, channels, 1),
                                             (channels, wider, 2))):
        h = inverted_residual(w, h, f"block{i}", cin, cout, stride, expand=6)
    b.output(h)
    return b.build()


def bert_layer(w: _Weights, x: Value, name: str, seq: int, hidden: int, heads: int, ffn: int) -> Value:
    """A post-norm BERT encoder layer on x[seq, hidden]: multi-head self-attention, residual +
    layer norm, a GELU feed-forward network, residual + layer norm."""
    b = w.b
    head = hidden // heads

    def dense(h: Value, label: str, cin: int, cout: int) -> Value:
        weight = w.normal(f"{name}.{label}.weight", (cin, cout), 1 / math.sqrt(cin))
        return b.add(b.matmul(h, weight), w.normal(f"{name}.{label}.bias", (cout,), 0.02))

    def split_heads(h: Value) -> Value:  # [seq, hidden] -> [heads, seq, head]
        return b.transpose(b.reshape(h, shape=[seq, heads, head]), perm=[1, 0, 2])

    def norm(h: Value, label: str) -> Value:
        return b.layer_norm(h, w.uniform(f"{name}.{label}.gamma", (hidden,), 0.8, 1.2),
                            w.normal(f"{name}.{label}.beta", (hidden,), 0.02), epsilon=1e-12)

    q, k, v = (split_heads(dense(x, label, hidden, hidden)) for label in ("query", "key", "value"))
    scores = b.mul(b.batch_matmul(q, k, transpose_b=True), b.const(np.float32(1 / math.sqrt(head))))
    context = b.batch_matmul(b.softmax(scores), v)
    merged = b.reshape(b.transpose(context, perm=[1, 0, 2]), shape=[seq, hidden])
    attn = norm(b.add(dense(merged, "attn_out", hidden, hidden), x), "attn_norm")
    ffn_out = dense(b.gelu(dense(attn, "ffn_in", hidden, ffn)), "ffn_out", ffn, hidden)
    return norm(b.add(ffn_out, attn), "out_norm")


def bert(layers: int = 1, seq: int = 128, hidden: int = 768, heads: int = 12, ffn: int = 3072, seed: int = 0,
         name: str | None = None) -> Graph:
    """`layers` BERT encoder layers on one sequence of `seq` embeddings."""
    b = GraphBuilder(name or f"bert_l{layers}_h{hidden}_s{seq}")
    w = _Weights(b, seed)
    h = b.input("x", (seq, hidden))
    for i in range(layers):
        h = bert_layer(w, h, f"layer{i}", seq, hidden, heads, ffn)
    b.output(h)
    return b.build()


# The benchmark's models by name (`models.py --models`), each a function of no arguments.
BUILT_MODELS: dict[str, Callable[[], Graph]] = {
    "resnet18_224": lambda: resnet18(64, 224, 1, name="resnet18_224"),
    "resnet18_w16_32": lambda: resnet18(16, 32, 2, classes=10, name="resnet18_w16_32"),
    "mobilenetv2_blocks": lambda: mobilenetv2_blocks(24, 56, 1, name="mobilenetv2_blocks"),
    "bert_base_layer": lambda: bert(1, 128, 768, 12, 3072, name="bert_base_layer"),
    "bert2_h128": lambda: bert(2, 32, 128, 2, 512, name="bert2_h128"),
}

#!/usr/bin/env python
"""Small and depthwise convolutions on CPU, per kernel: the shapes of the benchmark's small CNNs
(ResNet-18 at width 16 on 32x32, ResNet-18's 14x14 and 7x7 stages, MobileNetV2 blocks), each
conv with its batch norm and relu as the model fuses them, compiled with default configs two
ways in one process and timed in alternating rounds with TVM's time_evaluator
(`timing.time_modules_interleaved`), with ONNX Runtime's time for the same conv where installed:

- `before`: weights as given and the mapping that vectorises along the output width only
  (`akg.graph.layout.wants_channels_last` and `akg.schedules.cpu_defaults.vectorises_across_rows`
  answer False while it is built);
- `after`: the model pipeline's choice: conv weights channels-last where the output rows are
  narrower than a vector, and the output channels vectorised over (issue 15, item 4).

Both are checked against the reference interpreter.

    python scripts/bench/small_convs.py [--only resnet16] [--rounds 7]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import sys
from pathlib import Path

os.environ.setdefault("TVM_NUM_THREADS", str(os.cpu_count() or 1))

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import time_modules_interleaved, timeit_interleaved  # noqa: E402

# name: batch, channels, out channels, image, kernel, stride, groups
SHAPES = {
    "resnet16.stem 7x7/2 3->16 32px": (2, 3, 16, 32, 7, 2, 1),
    "resnet16.layer1 3x3 16 8px": (2, 16, 16, 8, 3, 1, 1),
    "resnet16.layer2 3x3/2 16->32 8px": (2, 16, 32, 8, 3, 2, 1),
    "resnet16.layer2.down 1x1/2 16->32": (2, 16, 32, 8, 1, 2, 1),
    "resnet16.layer2 3x3 32 4px": (2, 32, 32, 4, 3, 1, 1),
    "resnet16.layer3 3x3 64 2px": (2, 64, 64, 2, 3, 1, 1),
    "resnet16.layer4 3x3 128 1px": (2, 128, 128, 1, 3, 1, 1),
    "resnet18.layer3 3x3 256 14px": (1, 256, 256, 14, 3, 1, 1),
    "resnet18.layer4 3x3 512 7px": (1, 512, 512, 7, 3, 1, 1),
    "mobilenet.expand 1x1 24->144 56px": (1, 24, 144, 56, 1, 1, 1),
    "mobilenet.depthwise 3x3 144 56px": (1, 144, 144, 56, 3, 1, 144),
    "mobilenet.depthwise 3x3/2 144 56px": (1, 144, 144, 56, 3, 2, 144),
    "mobilenet.project 1x1 144->24 56px": (1, 144, 24, 56, 1, 1, 1),
    "depthwise 3x3 192 7px": (1, 192, 192, 7, 3, 1, 192),
}


def conv_graph(batch, channels, out_channels, image, k, stride, groups, seed=0):
    """conv2d + inference batch norm + relu, the weights random and the conv 'same' padded."""
    from akg.graph import GraphBuilder

    rng = np.random.default_rng(seed)
    b = GraphBuilder("conv")
    x = b.input("x", (batch, channels, image, image))
    fan_in = channels // groups * k * k
    w = b.const((rng.standard_normal((out_channels, channels // groups, k, k)) * np.sqrt(2 / fan_in))
                .astype(np.float32), name="w")
    y = b.conv2d(x, w, strides=[stride, stride], padding=[k // 2, k // 2], groups=groups)
    stats = [rng.uniform(0.5, 1.5, out_channels), rng.standard_normal(out_channels) * 0.1,
             rng.standard_normal(out_channels) * 0.1, rng.uniform(0.5, 1.5, out_channels)]
    y = b.batch_norm(y, *(b.const(s.astype(np.float32)) for s in stats))
    b.output(b.relu(y))
    return b.build()


@contextlib.contextmanager
def without_channel_vectors():
    """The layout and mapping before channel vectors: weights as given, the vector loop along
    the output width."""
    import akg.graph.layout as layout
    import akg.schedules.cpu_defaults as cpu_defaults

    saved = layout.wants_channels_last, cpu_defaults.vectorises_across_rows
    layout.wants_channels_last = lambda *a: False
    cpu_defaults.vectorises_across_rows = lambda *a: False
    try:
        yield
    finally:
        layout.wants_channels_last, cpu_defaults.vectorises_across_rows = saved


def build_kernel(graph):
    """The one kernel the model pipeline cuts from `graph`, built with its default config, its
    device arguments and whether it matches the reference interpreter."""
    import akg
    from akg.graph import random_inputs
    from akg.graph.fuse import partition
    from akg.target import get_target
    from akg.verify import Reference, compare

    target = get_target("cpu")
    (part,) = partition(graph, target=target).kernels
    kernel = akg.build(part.subgraph, target)
    inputs = random_inputs(graph, 0)
    ok = not compare(graph, kernel(**inputs), Reference.of(graph, inputs))
    tensors, outs = kernel.device_arguments(**inputs)
    return kernel, [*tensors, *outs], ok


def ort_time(graph, rounds: int) -> float | None:
    """ONNX Runtime's seconds per call of the same conv + bn + relu (None without it)."""
    try:
        import onnxruntime  # noqa: F401
        import torch
    except ImportError:
        return None
    import tempfile

    from models import onnx_session, torch_function

    from akg.graph import random_inputs

    inputs = random_inputs(graph, 0)
    tensors = [torch.from_numpy(inputs[v.name]) for v in graph.inputs]
    with torch.no_grad():
        run = onnx_session(torch_function(graph), tensors, Path(tempfile.mkdtemp()) / "conv.onnx")
    return timeit_interleaved({"ort": run}, rounds=rounds, seconds=0.1)["ort"]


def measure(name: str, shape, rounds: int) -> dict:
    from akg.graph.stats import graph_stats

    graph = conv_graph(*shape)
    with without_channel_vectors():
        before, before_args, before_ok = build_kernel(graph)
    after, after_args, after_ok = build_kernel(graph)
    times = time_modules_interleaved({"before": (before.executable, before_args),
                                      "after": (after.executable, after_args)}, rounds=rounds, seconds=0.1)
    return {"name": name, "flops": graph_stats(graph).flops, "ok": before_ok and after_ok,
            "before_s": times["before"], "after_s": times["after"], "ort_s": ort_time(graph, rounds)}


def table(rows) -> str:
    lines = ["| conv (+ bn + relu) | MFLOP | before us | after us | after GFLOP/s | speed-up | ONNX Runtime us "
             "| after vs ORT | matches the reference |", "|" + "---|" * 9]
    for r in rows:
        ort = f"{r['ort_s'] * 1e6:.1f}" if r["ort_s"] else "n/a"
        vs = f"{r['ort_s'] / r['after_s']:.2f}x" if r["ort_s"] else "n/a"
        lines.append(f"| {r['name']} | {r['flops'] / 1e6:.2f} | {r['before_s'] * 1e6:.1f} | {r['after_s'] * 1e6:.1f} "
                     f"| {r['flops'] / r['after_s'] / 1e9:.1f} | {r['before_s'] / r['after_s']:.2f}x | {ort} | {vs} "
                     f"| {'yes' if r['ok'] else 'NO'} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="", help="comma-separated prefixes of the shapes' names")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args(argv)
    wanted = [w for w in args.only.split(",") if w]
    rows = []
    for name, shape in SHAPES.items():
        if wanted and not any(name.startswith(w) for w in wanted):
            continue
        rows.append(measure(name, shape, args.rounds))
        print(table(rows[-1:]).splitlines()[-1], flush=True)
    load = os.getloadavg()
    from models import machine

    print(f"\ndate: {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC; machine: {machine()}; "
          f"TVM_NUM_THREADS={os.environ['TVM_NUM_THREADS']}; load average at the end {load[0]:.2f}, {load[1]:.2f}\n"
          f"command: `python scripts/bench/small_convs.py {' '.join(argv if argv is not None else sys.argv[1:])}`\n")
    print(table(rows))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

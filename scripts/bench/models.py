#!/usr/bin/env python
"""End-to-end model benchmark on CPU: akg (default configs, and tuned) against the reference
interpreter, PyTorch eager, torch.compile (Inductor) and ONNX Runtime when installed, with
the same weights, in one process. Needs `pip install torch==2.13.0` (a CPU wheel). The
compiled contenders (akg default, akg tuned, eager, Inductor) are timed in alternating rounds;
each reports the median call time of its best round (`timeit_interleaved`).

    python scripts/bench/models.py [--models transformer_block,resnet_block,mindir]
                                   [--trials 64] [--record docs/performance.md]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TVM_NUM_THREADS", str(os.cpu_count() or 1))

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import timeit_interleaved  # noqa: E402

from akg.graph import evaluate, random_inputs  # noqa: E402
from akg.graph.io import load_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MINDIR = ROOT.parent / "shared" / "corpus" / "mindir"


def timeit(fn, min_seconds: float = 1.0, min_runs: int = 5) -> float:
    """Median seconds of fn() after a warm-up, over at least min_runs runs / min_seconds."""
    fn()
    samples, start = [], time.perf_counter()
    while len(samples) < min_runs or time.perf_counter() - start < min_seconds:
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
        if len(samples) > 1000:
            break
    return statistics.median(samples)


# --- the same graph as a PyTorch function ------------------------------------------------------


def torch_function(graph):
    """A function of torch tensors computing `graph` with torch ops (same weights)."""
    import torch
    import torch.nn.functional as F

    consts = {v.name: torch.from_numpy(np.ascontiguousarray(a)) for v, a in graph.constants.items()}

    def conv2d(x, w, strides, padding, dilation, groups):
        top, left, bottom, right = padding if len(padding) == 4 else (*padding, *padding)
        return F.conv2d(F.pad(x, (left, right, top, bottom)), w, None, tuple(strides), 0, tuple(dilation), groups)

    ops = {
        "matmul": lambda a, b, transpose_a, transpose_b: (a.T if transpose_a else a) @ (b.T if transpose_b else b),
        "batch_matmul": lambda a, b, transpose_a, transpose_b: torch.matmul(
            a.transpose(-1, -2) if transpose_a else a, b.transpose(-1, -2) if transpose_b else b),
        "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
        "relu": torch.relu, "exp": torch.exp, "tanh": torch.tanh, "sigmoid": torch.sigmoid,
        "reshape": lambda x, shape: x.reshape(shape),
        "transpose": lambda x, perm: x.permute(*(perm if perm is not None else reversed(range(x.dim())))),
        "softmax": lambda x, axis: torch.softmax(x, axis),
        "gelu": lambda x, approximate: F.gelu(x, approximate=approximate),
        "layer_norm": lambda x, g, b, begin_norm_axis, epsilon: F.layer_norm(
            x, x.shape[begin_norm_axis % x.dim():], g, b, epsilon),
        "batch_norm": lambda x, g, b, m, v, axis, epsilon: F.batch_norm(x, m, v, g, b, False, 0.0, epsilon),
        "conv2d": conv2d,
        "max_pool2d": lambda x, kernel, strides, padding, ceil_mode: F.max_pool2d(
            x, tuple(kernel), tuple(strides or kernel), tuple(padding[:2]), ceil_mode=ceil_mode),
        "global_avg_pool2d": lambda x, keepdims: x.mean((2, 3), keepdim=keepdims),
        "dense": lambda x, w, *b: F.linear(x, w, b[0] if b else None),
        "sum": lambda x, axes, keepdims: x.sum(tuple(axes) if axes is not None else tuple(range(x.dim())), keepdim=keepdims),
        "mean": lambda x, axes, keepdims: x.mean(tuple(axes) if axes is not None else tuple(range(x.dim())), keepdim=keepdims),
        "cross_entropy": lambda x, labels, reduction: F.cross_entropy(x, labels.long(), reduction=reduction),
        "dropout": lambda x, rate: x,
    }

    def run(*inputs):
        env = dict(consts)
        env.update({v.name: t for v, t in zip(graph.inputs, inputs)})
        for n in graph.nodes:
            out = ops[n.op](*(env[v.name] for v in n.inputs), **dict(n.attrs))
            outs = out if isinstance(out, tuple) else (out,)
            env.update({v.name: o for v, o in zip(n.outputs, outs)})
        return tuple(env[v.name] for v in graph.outputs)

    return run


def bench_model(name: str, graph, trials: int, workdir: Path) -> dict:
    import torch

    from akg.api import compile_model
    from akg.tuner.tune import tune

    torch.set_num_threads(os.cpu_count() or 1)
    inputs = random_inputs(graph, 0)
    ordered = [inputs[v.name] for v in graph.inputs]
    row = {"model": name}
    ref = evaluate(graph, inputs)
    row["interpreter_s"] = timeit(lambda: evaluate(graph, inputs), min_seconds=0.5, min_runs=3)

    default = compile_model(graph)
    row["kernels"] = len(default.calls)
    row["distinct_kernels"] = len(default.kernels)
    row["peak_bytes"], row["naive_bytes"] = default.plan.peak_bytes, default.plan.naive_bytes
    out = default(**inputs)
    row["akg_default_err"] = max(float(np.abs(a - b).max()) for a, b in zip(out, ref))
    contenders = {"akg_default_s": lambda: default(**inputs)}

    if trials:
        db = str(workdir / f"{name}.db")
        t0 = time.perf_counter()
        result = tune(graph, trials=trials, db=db)
        row["tune_s"] = time.perf_counter() - t0
        row["tune_trials"] = sum(k.trials for k in result.kernels)
        tuned = compile_model(graph, db=db)
        out = tuned(**inputs)
        row["akg_tuned_err"] = max(float(np.abs(a - b).max()) for a, b in zip(out, ref))
        contenders["akg_tuned_s"] = lambda: tuned(**inputs)

    fn = torch_function(graph)
    tensors = [torch.from_numpy(a) for a in ordered]
    with torch.no_grad():
        got = fn(*tensors)
        row["torch_err"] = max(float(np.abs(g.numpy() - r).max()) for g, r in zip(got, ref))
        contenders["torch_eager_s"] = lambda: fn(*tensors)
        try:
            compiled = torch.compile(fn)
            compiled(*tensors)
            contenders["torch_compile_s"] = lambda: compiled(*tensors)
        except Exception as e:  # noqa: BLE001  (Inductor needs a working C++ toolchain)
            row["torch_compile_error"] = str(e).splitlines()[0][:120]
        row.update(timeit_interleaved(contenders))
    try:
        import onnxruntime as ort  # noqa: F401

        row["onnxruntime_s"] = _onnxruntime(fn, tensors, workdir / f"{name}.onnx")
    except ImportError:
        row["onnxruntime_s"] = None
    except Exception as e:  # noqa: BLE001
        row["onnxruntime_error"] = str(e).splitlines()[0][:120]
    return row


def _onnxruntime(fn, tensors, path: Path) -> float:
    import onnxruntime as ort
    import torch

    torch.onnx.export(_Module(fn), tuple(tensors), str(path))
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {i.name: t.numpy() for i, t in zip(session.get_inputs(), tensors)}
    return timeit(lambda: session.run(None, feeds))


class _Module:
    def __new__(cls, fn):
        import torch

        class Wrapped(torch.nn.Module):
            def forward(self, *xs):
                return fn(*xs)

        return Wrapped()


def fmt_ms(s):
    return f"{s * 1e3:.2f} ms" if s else "n/a"


def ratio(a, b):
    return f"{b / a:.2f}x" if a and b else "n/a"


def table(rows) -> str:
    head = ("| model | kernels | akg default | akg tuned | interpreter | PyTorch eager | torch.compile | ONNX Runtime "
            "| tuned vs eager | tuned vs Inductor | memory plan peak / naive |")
    lines = [head, "|" + "---|" * 11]
    for r in rows:
        best = r.get("akg_tuned_s") or r["akg_default_s"]
        lines.append(
            f"| {r['model']} | {r['kernels']} ({r['distinct_kernels']} distinct) | {fmt_ms(r['akg_default_s'])} "
            f"| {fmt_ms(r.get('akg_tuned_s'))} | {fmt_ms(r['interpreter_s'])} | {fmt_ms(r['torch_eager_s'])} "
            f"| {fmt_ms(r.get('torch_compile_s'))} | {fmt_ms(r.get('onnxruntime_s'))} "
            f"| {ratio(best, r['torch_eager_s'])} | {ratio(best, r.get('torch_compile_s'))} "
            f"| {r['peak_bytes'] / 2**20:.1f} / {r['naive_bytes'] / 2**20:.1f} MiB |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="transformer_block,resnet_block,mindir")
    ap.add_argument("--trials", type=int, default=64, help="tuning trials per model (0: default configs only)")
    ap.add_argument("--record", type=Path)
    args = ap.parse_args(argv)
    graphs = []
    for name in args.models.split(","):
        if name == "mindir":
            graphs += [(p.stem, load_model(p)) for p in sorted(MINDIR.glob("*.mindir"))
                       if p.stem in ("lenet5", "resnet_block", "transformer_layer", "mlp")]
        else:
            graphs.append((name, load_model(ROOT / "examples" / f"{name}.mir")))
    workdir = Path(tempfile.mkdtemp(prefix="akg-bench-models-"))
    rows = []
    for name, g in graphs:
        print(f"== {name}", flush=True)
        rows.append(bench_model(name, g, args.trials, workdir))
        print(table(rows[-1:]).splitlines()[-1], flush=True)
    text = table(rows)
    print(text)
    if args.record:
        with open(args.record, "a") as f:
            f.write(f"\n## Models, end to end on CPU ({dt.date.today()})\n\n")
            f.write(f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores. "
                    f"Command: `python scripts/bench/models.py {' '.join(argv or sys.argv[1:])}`. "
                    f"Tuned: {args.trials} trials per model.\n\n{text}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

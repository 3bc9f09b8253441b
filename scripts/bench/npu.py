#!/usr/bin/env python
"""NPU benchmark (npu-sim): akg's kernels for the simulated ascend910-like NPU against the
spec's roofline and against a naive mapping, in one run.

For each workload of issue 14 it builds three kernels for `--target npu` and simulates them
(cycles are deterministic, so one simulation each suffices):

- naive: the legal config of the target's knob space with the smallest tiles and single
  buffering (no fusion matters here: every workload is one fused kernel);
- default: the target's default config;
- tuned: the config the tuner chooses after `--trials` simulated trials (fresh SQLite
  database per workload, seed 0).

The roofline is the spec's ideal one (`NpuSpec.roofline`): cube-bound for contractions (2 flops
per multiply-accumulate), GM-bound for the others (inputs read once, outputs written once);
a kernel's fraction is roofline cycles / its cycles. Contractions also get an attainable bound
(`report.contraction_bound`): the cube work, and the GM reads that the best tiling fitting L1
and L0C still needs per core at the spec's per-core GM -> L1 rate (64 B/cycle) and the HBM cap;
the table gives the tuned kernel's fraction of both. Also reported: simulated cycles per
second of simulator wall time (timing-only, what the tuner runs, and functional with race
checks, what verification runs) and the tuner's wall seconds per trial.

    python scripts/bench/npu.py [--trials 32] [--only matmul_1024,softmax] [--record docs/performance.md]

Every figure is a simulation ("npu-sim"), not a measurement of hardware.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import platform
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable



@dataclass
class Workload:
    name: str
    build: Callable  # GraphBuilder -> None (adds inputs and outputs)
    kind: str  # "cube" (roofline: cube-bound) or "gm" (GM-bandwidth bound)
    target: float  # fraction of the roofline the issue asks for
    flops: float = 0.0  # cube flops (2 per multiply-accumulate)
    bound: Callable | None = None  # spec -> ContractionBound: what the per-core GM rate and L1 allow


def _matmul(m: int, k: int, n: int):
    def build(b):
        b.output(b.matmul(b.input("a", (m, k), "float16"), b.input("b", (k, n), "float16")))
    def bound(spec):
        from akg.backends.npu.report import contraction_bound
        return contraction_bound(spec, m, n, k)
    return Workload(f"matmul {m}x{k}x{n} f16", build, "cube", 0.80, 2.0 * m * n * k, bound)


def _conv(x: tuple, w: tuple, padding: list[int], name: str):
    def build(b):
        b.output(b.conv2d(b.input("x", x, "float16"), b.input("w", w, "float16"), padding=padding))
    n, c, h, wd = x
    f, _, kh, kw = w
    oh, ow = h + 2 * padding[0] - kh + 1, wd + 2 * padding[1] - kw + 1

    def bound(spec):  # the filters by the im2col matrix, a column costing its share of the input map
        from akg.backends.npu.report import contraction_bound
        return contraction_bound(spec, f, n * oh * ow, c * kh * kw, c * h * wd * 2 / (oh * ow))
    return Workload(name, build, "cube", 0.70, 2.0 * n * f * oh * ow * c * kh * kw, bound)


def _unary(op: str, shape: tuple, dtype: str = "float16", target: float = 0.90, **attrs):
    def build(b):
        b.output(b.op(op, b.input("x", shape, dtype), **attrs))
    return Workload(f"{op} {'x'.join(map(str, shape))} {dtype}", build, "gm", target)


def _add(shape: tuple, dtype: str = "float16"):
    def build(b):
        b.output(b.add(b.input("x", shape, dtype), b.input("y", shape, dtype)))
    return Workload(f"add {'x'.join(map(str, shape))} {dtype}", build, "gm", 0.90)


def _layer_norm(rows: int, cols: int):
    def build(b):
        b.output(b.layer_norm(b.input("x", (rows, cols), "float16"), b.input("g", (cols,), "float16"),
                              b.input("bt", (cols,), "float16")))
    return Workload(f"layer_norm {rows}x{cols} f16", build, "gm", 0.70)


def _cast(shape: tuple):
    def build(b):
        b.output(b.cast(b.input("x", shape, "float32"), to="float16"))
    return Workload(f"cast f32->f16 {'x'.join(map(str, shape))}", build, "gm", 0.90)


WORKLOADS = {
    "matmul_512x4608x4608": _matmul(512, 4608, 4608),
    "matmul_2048x2048x512": _matmul(2048, 2048, 512),
    "matmul_1024": _matmul(1024, 1024, 1024),
    "conv_resnet50_1x1": _conv((16, 2048, 7, 7), (512, 2048, 1, 1), [0, 0], "conv 1x1 (16,2048,7,7)x(512,2048) f16"),
    "conv_3x3": _conv((16, 256, 14, 14), (256, 256, 3, 3), [1, 1], "conv 3x3 (16,256,14,14)x(256,256) f16"),
    "softmax": _unary("softmax", (16, 16, 512, 512), target=0.70),
    "layer_norm": _layer_norm(4096, 1024),
    "add": _add((4096, 4096)),
    "cast": _cast((4096, 4096)),
    "relu": _unary("relu", (4096, 4096)),
}


def gm_bytes(graph) -> int:
    return sum(v.type.nbytes for v in [*graph.inputs, *graph.outputs])


def naive_configs(task) -> list:
    """The space's valid configs, single buffering first, smallest tiles first (the first of
    them that builds is the naive mapping)."""
    from akg.errors import AkgError

    space = task.space()
    keyed = []
    for k, config in enumerate(space):
        if k >= 20000:
            break
        try:
            space.validate(config)
        except AkgError:
            continue
        tiles = [math.prod(s.arg) for s in config.steps if s.op == "tile" and isinstance(s.arg, tuple)]
        buffers = next((s.arg for s in config.steps if s.op == "promote"), 1)
        keyed.append(((buffers if isinstance(buffers, int) else 1, sum(tiles)), k, config))
    return [c for _, _, c in sorted(keyed, key=lambda t: t[:2])]


def build_naive(graph, target):
    """The smallest-tile, single-buffered config that builds (the mapping's instruction limit
    rejects the smallest tiles of large kernels), and its kernel."""
    import akg
    from akg.errors import AkgError
    from akg.tuner.task import TuningTask

    last = None
    for config in naive_configs(TuningTask(_subgraph(graph), target))[:200]:
        try:
            return akg.build(graph, target=target, config=config)
        except AkgError as e:
            last = e
    raise last if last is not None else RuntimeError("no valid config")


def simulate_kernel(kernel) -> tuple[float, float, float]:
    """(cycles, timing-only wall s, functional + races wall s) of one built kernel."""
    backend = kernel.target.backend()
    t0 = time.perf_counter()
    report = backend.report(kernel.executable, races=False)
    timing = time.perf_counter() - t0
    t0 = time.perf_counter()
    backend.report(kernel.executable, races=True)
    functional = time.perf_counter() - t0
    return float(report.cycles), timing, functional


def run_one(name: str, w: Workload, trials: int, tmp: Path) -> dict:
    import akg
    from akg.errors import AkgError
    from akg.graph import GraphBuilder
    from akg.target import get_target
    from akg.tuner.tune import tune

    b = GraphBuilder(name)
    w.build(b)
    graph = b.build()
    target = get_target("npu")
    spec = target.spec
    roof = spec.roofline(w.flops, 0.0, gm_bytes(graph))
    ideal = roof.cube if w.kind == "cube" else roof.gm
    row = {"workload": w.name, "ideal": ideal, "target": w.target}
    if w.bound is not None:
        attainable = w.bound(spec)
        row["attainable"], row["attainable_limit"] = attainable.bound, f"{attainable.limit}: {attainable.tiling}"
    for label in ("naive", "default", "tuned"):
        try:
            if label == "naive":
                kernel = build_naive(graph, target)
            elif label == "default":
                kernel = akg.build(graph, target=target)
            else:
                t0 = time.perf_counter()
                result = tune(graph, target=target, trials=trials, db=f"sqlite:///{tmp}/{name}.db", seed=0)
                row["tune_s"] = time.perf_counter() - t0
                row["trials"] = result.kernels[0].trials
                kernel = akg.build(graph, target=target, db=f"sqlite:///{tmp}/{name}.db")
            cycles, timing, functional = simulate_kernel(kernel)
            row[label] = cycles
            row[f"{label}_sim"] = (timing, functional)
        except AkgError as e:
            row[label] = None
            row[f"{label}_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:140]}"
    return row


def _subgraph(graph):
    from akg.graph.pipeline import plan_model
    from akg.target import get_target

    return plan_model(graph, get_target("npu")).kernels[0].subgraph


def table(rows: list[dict]) -> str:
    lines = ["| workload | roofline cycles | attainable cycles | naive | default | tuned | tuned / roofline | target | "
             "tuned / attainable | tuned vs naive | sim cycles/s (timing / functional) | tune s per trial |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        def c(label):
            return f"{r[label]:,.0f}" if r.get(label) else "error"
        frac = r["ideal"] / r["tuned"] if r.get("tuned") else None
        sim = r.get("tuned_sim") or r.get("default_sim")
        speed = (f"{r['tuned'] / sim[0]:,.0f} / {r['tuned'] / sim[1]:,.0f}"
                 if sim and r.get("tuned") else "-")
        per_trial = f"{r['tune_s'] / max(1, r.get('trials', 1)):.2f}" if r.get("tune_s") else "-"
        versus = f"{r['naive'] / r['tuned']:.2f}x" if r.get("naive") and r.get("tuned") else "-"
        met = ("**met**" if frac is not None and frac >= r["target"] else "not met") if frac is not None else "-"
        attainable = f"{r['attainable']:,.0f}" if r.get("attainable") else "-"
        of_attainable = (f"{r['attainable'] / r['tuned']:.1%}" if r.get("attainable") and r.get("tuned") else "-")
        lines.append(f"| {r['workload']} | {r['ideal']:,.0f} | {attainable} | {c('naive')} | {c('default')} | "
                     f"{c('tuned')} | {f'{frac:.1%}' if frac is not None else '-'} ({met}) | {r['target']:.0%} | "
                     f"{of_attainable} | {versus} | {speed} | {per_trial} |")
    errors = [f"- {r['workload']}, {label}: {r[label + '_error']}" for r in rows
              for label in ("naive", "default", "tuned") if r.get(label + "_error")]
    bounds = [f"- {r['workload']}: attainable bound set by {r['attainable_limit']}" for r in rows
              if r.get("attainable_limit")]
    return "\n".join(lines + ([""] + bounds if bounds else []) + ([""] + errors if errors else []))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=32)
    ap.add_argument("--only", help="comma-separated workload names: " + ", ".join(WORKLOADS))
    ap.add_argument("--record", type=Path, help="append the table to this markdown file")
    args = ap.parse_args(argv)
    names = args.only.split(",") if args.only else list(WORKLOADS)
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        ap.error(f"unknown workloads {unknown}; known: {', '.join(WORKLOADS)}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="akg-npu-bench-") as tmp:
        for name in names:
            t0 = time.perf_counter()
            rows.append(run_one(name, WORKLOADS[name], args.trials, Path(tmp)))
            print(f"{name}: {time.perf_counter() - t0:.0f}s", file=sys.stderr, flush=True)
    text = table(rows)
    header = (f"date: {dt.date.today()}; host: {platform.node() or '?'} ({os.cpu_count()} CPUs; simulator wall "
              f"times depend on it, cycles do not); command: `python scripts/bench/npu.py "
              f"{' '.join(argv if argv is not None else sys.argv[1:])}`; all cycles npu-sim (ascend910-like spec)")
    print(header + "\n\n" + text)
    if args.record:
        with open(args.record, "a") as f:
            f.write(f"\n## npu-sim: kernels against the spec's roofline ({dt.date.today()})\n\n{header}\n\n{text}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

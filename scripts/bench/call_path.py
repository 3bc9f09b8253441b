#!/usr/bin/env python
"""The runtime's call path: what a compiled model's call costs beyond its kernels.

For each model (the examples, and a synthetic chain of tiny matmul kernels) it times a whole
model call through the per-kernel path (`CompiledModel.call_per_kernel`: Python binds device
tensors and calls every kernel) and through the backend's linked driver (one packed call for
the model, `Backend.link`), and every kernel call on its own with TVM's `time_evaluator` on
the same shapes, weights and input values, in alternating rounds (each keeps its best round,
as `timing.timeit_interleaved` does). The overhead of a path is its model time minus the sum
of its kernels' times.

    python scripts/bench/call_path.py [--models mlp,resnet_block,transformer_block,chain25]
                                      [--rounds 9] [--record docs/performance.md]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import math
import os
import statistics
import subprocess
import time
from pathlib import Path

os.environ.setdefault("TVM_NUM_THREADS", str(os.cpu_count() or 1))

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def chain_graph(kernels: int = 25, rows: int = 4, width: int = 16):
    """x[rows, width] through `kernels` matmuls with their own weights and a relu each: one
    kernel per matmul (two matmuls never fuse), each a few hundred nanoseconds of work."""
    from akg.graph import GraphBuilder

    rng = np.random.default_rng(0)
    b = GraphBuilder(f"chain{kernels}")
    h = b.input("x", (rows, width))
    for i in range(kernels):
        w = b.const((rng.standard_normal((width, width)) / math.sqrt(width)).astype(np.float32), name=f"w{i}")
        h = b.relu(b.matmul(h, w))
    b.output(h)
    return b.build()


def load(name: str):
    from akg.graph.io import load_mir

    if name.startswith("chain"):
        return chain_graph(int(name[len("chain"):] or 25))
    return load_mir(EXAMPLES / f"{name}.mir")


def kernel_timers(model, inputs: dict):
    """One timer per kernel call of the model: time_evaluator on device tensors holding the
    values the model computes (its inputs, weights and the outputs of the calls before)."""
    import tvm

    backend = model.backend
    env = {n: backend.to_device(np.asarray(a)) for n, a in model.constants.items()}
    env.update({n: backend.to_device(np.ascontiguousarray(a)) for n, a in inputs.items()})
    timers = []
    for call in model.calls:
        exe = model.kernels[call.kernel].executable
        outs = [backend.empty(model.specs[n].shape, model.specs[n].dtype) for n in call.outputs]
        params = [backend.to_device(np.array(p, order="C")) for p in call.params]
        args = [*(env[n] for n in call.inputs), *params, *outs]
        backend.entry(exe)(*args)
        env.update(zip(call.outputs, outs))
        one = float(exe.time_evaluator("main", tvm.cpu(), number=3, repeat=1)(*args).mean)
        number = max(1, int(0.01 / max(one, 1e-7)))  # ~10 ms a sample
        timers.append((exe.time_evaluator("main", tvm.cpu(), number=number, repeat=5), args))
    return timers


def _median_call(fn, seconds: float) -> float:
    samples, start = [], time.perf_counter()
    while time.perf_counter() - start < seconds or len(samples) < 3:
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def measure(name: str, rounds: int, seconds: float = 0.2) -> dict:
    """Rounds that each time the per-kernel path, the linked path and every kernel (the
    median of a round's samples); each keeps its best round (interference only adds time)."""
    from akg.graph import random_inputs

    from akg.api import compile_model

    graph = load(name)
    model = compile_model(graph)
    inputs = random_inputs(graph, 0)
    linked = model
    per_kernel = dataclasses.replace(model, use_driver=False)
    for a, b in zip(linked(**inputs), per_kernel(**inputs)):
        assert np.array_equal(a, b, equal_nan=True), f"{name}: the two paths disagree"
    assert linked.driver() is not None, f"{name}: the backend did not link the model"
    timers = kernel_timers(model, inputs)
    paths = {"per_kernel": lambda: per_kernel(**inputs), "linked": lambda: linked(**inputs)}
    best = {label: math.inf for label in paths}
    kernel_best = [math.inf] * len(timers)
    for _ in range(rounds):
        for label, fn in paths.items():
            best[label] = min(best[label], _median_call(fn, seconds))
        for i, (timer, args) in enumerate(timers):
            kernel_best[i] = min(kernel_best[i], statistics.median(timer(*args).results))
    kernels = sum(kernel_best)
    return {"model": name, "calls": len(model.calls), "kernels_us": kernels * 1e6,
            "per_kernel_us": best["per_kernel"] * 1e6, "linked_us": best["linked"] * 1e6,
            "per_kernel_overhead_us": (best["per_kernel"] - kernels) * 1e6,
            "linked_overhead_us": (best["linked"] - kernels) * 1e6}


def table(rows: list[dict]) -> str:
    lines = [("| model | kernel calls | kernels (us) | per-kernel path: call (us) | overhead (us) | "
              "linked driver: call (us) | overhead (us) | overhead per kernel call, old -> new (us) |"),
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['calls']} | {r['kernels_us']:.1f} | {r['per_kernel_us']:.1f} | "
                     f"{r['per_kernel_overhead_us']:.1f} | {r['linked_us']:.1f} | {r['linked_overhead_us']:.1f} | "
                     f"{r['per_kernel_overhead_us'] / r['calls']:.2f} -> {r['linked_overhead_us'] / r['calls']:.2f} |")
    return "\n".join(lines)


def _machine() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    except OSError:
        return "unknown"
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    model = fields.get("Model name", "?").strip()
    return f"{model}, {fields.get('CPU(s)', '?').strip()} CPUs"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="mlp,resnet_block,transformer_block,chain25")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--record", help="append the table to this markdown file")
    args = ap.parse_args(argv)
    rows = []
    for name in args.models.split(","):
        rows.append(measure(name.strip(), args.rounds))
        print(table(rows[-1:]).splitlines()[-1], flush=True)
    load_avg = os.getloadavg()
    text = "\n".join([
        (f"date: {dt.date.today()}; machine: {_machine()}; TVM_NUM_THREADS={os.environ['TVM_NUM_THREADS']}; "
         f"load average at the end {load_avg[0]:.2f}, {load_avg[1]:.2f}, {load_avg[2]:.2f}"),
        f"command: `python scripts/bench/call_path.py --models {args.models} --rounds {args.rounds}`", "",
        table(rows), ""])
    print(text)
    if args.record:
        with open(args.record, "a") as f:
            f.write("\n" + text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

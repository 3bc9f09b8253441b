#!/usr/bin/env python
"""Kernel benchmark: akg's untuned default config against naive TE, NumPy and TVM
MetaSchedule (64 trials), in one process on one machine.

Every peer compiles the same computation: akg's compute definitions are rebuilt as TVM TE
(`akg.graph.compute.to_te`) for naive TE and MetaSchedule. NumPy runs in a subprocess with
OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE unset. Times are medians of hot-cache runs.

    python scripts/bench/kernels.py [--trials 64] [--only a,b] [--no-ms] [--json out.json]
                                    [--record docs/performance.md]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import memory_bound  # noqa: E402
import peers  # noqa: E402  (sets TVM_NUM_THREADS before TVM starts its thread pool)
import suite  # noqa: E402

import akg  # noqa: E402
from akg.graph import GraphBuilder  # noqa: E402
from akg.graph.compute.lower import lower_graph  # noqa: E402
from akg.graph.compute.to_te import to_te  # noqa: E402
from akg.graph.interpreter import random_inputs  # noqa: E402
from akg.graph.io import load_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT.parent / "shared" / "corpus" / "akg-composite"


@dataclass
class Bench:
    name: str
    graph: object
    flops: float
    bytes: float
    bound: str  # "compute" (GFLOP/s) or "memory" (GB/s)
    numpy_fn: str  # "file.py:function" taking the input list


def _graph(name, body):
    b = GraphBuilder(name)
    body(b)
    return b.build()


def suite_benches() -> list[Bench]:
    here = os.path.dirname(os.path.abspath(__file__))
    np_fn = lambda f: f"{os.path.join(here, 'suite.py')}:{f}"  # noqa: E731
    w = suite.WORKLOADS
    return [
        Bench("matmul", _graph("matmul", lambda b: b.output(b.matmul(b.input("a", (1024, 1024)),
                                                                     b.input("b", (1024, 1024))))),
              w["matmul"].flops, w["matmul"].bytes, "compute", np_fn("np_matmul")),
        Bench("batch_matmul", _graph("batch_matmul", lambda b: b.output(b.batch_matmul(
            b.input("a", (12, 128, 64)), b.input("b", (12, 64, 128))))),
              w["batch_matmul"].flops, w["batch_matmul"].bytes, "compute", np_fn("np_batch_matmul")),
        Bench("conv2d", _graph("conv2d", lambda b: b.output(b.conv2d(
            b.input("x", (1, 64, 56, 56)), b.input("w", (64, 64, 3, 3)), padding=[1, 1]))),
              w["conv2d"].flops, w["conv2d"].bytes, "compute", np_fn("np_conv2d")),
        Bench("softmax", _graph("softmax", lambda b: b.output(b.softmax(b.input("x", (4096, 1024))))),
              w["softmax"].flops, w["softmax"].bytes, "memory", np_fn("np_softmax")),
        Bench("layer_norm", _graph("layer_norm", lambda b: b.output(b.layer_norm(
            b.input("x", (4096, 1024)), b.input("g", (1024,)), b.input("bt", (1024,)), epsilon=suite.LN_EPS))),
              w["layer_norm"].flops, w["layer_norm"].bytes, "memory", np_fn("np_layer_norm")),
        Bench("bias_gelu", _graph("bias_gelu", lambda b: b.output(b.gelu(b.add(
            b.input("x", (4096, 3072)), b.input("bias", (3072,)))))),
              w["bias_gelu"].flops, w["bias_gelu"].bytes, "memory", np_fn("np_bias_gelu")),
        Bench("reduce_sum", _graph("reduce_sum", lambda b: b.output(b.sum(b.input("x", (4096, 1024)), axes=[1]))),
              w["reduce_sum"].flops, w["reduce_sum"].bytes, "memory", np_fn("np_reduce_sum")),
        # the multi-pass reductions of memory_bound.py, built the same way
        Bench("rms_norm", _graph("rms_norm", lambda b: memory_bound.rms_norm(b, suite.RN_M, suite.RN_N)),
              w["rms_norm"].flops, w["rms_norm"].bytes, "memory", np_fn("np_rms_norm")),
        Bench("layer_norm_backward", _graph("layer_norm_backward", lambda b: memory_bound.layer_norm_backward(
            b, suite.LB_M, suite.LB_N)), w["layer_norm_backward"].flops, w["layer_norm_backward"].bytes, "memory",
              np_fn("np_layer_norm_backward")),
    ]


def corpus_chains(count: int = 3, max_bytes: int = 64 << 20) -> list[Bench]:
    """The corpus kernels with the most ops among those made only of elementwise, layout and
    reduction ops (and small enough to time comfortably)."""
    from akg.graph.ops import LINALG, CONV, POOL, INDEX, get_op

    found = []
    for path in sorted(CORPUS.rglob("*")):
        if path.suffix not in (".info", ".json"):
            continue
        try:
            g = load_model(path)
        except Exception:  # noqa: BLE001  (non-kernel files, unsupported layouts)
            continue
        if any(get_op(n.op).kind in (LINALG, CONV, POOL, INDEX) for n in g.nodes):
            continue
        size = sum(v.type.nbytes for v in (*g.inputs, *g.outputs))
        if size > max_bytes or not g.nodes:
            continue
        found.append((len(g.nodes), str(path), g, size))
    found.sort(key=lambda t: (-t[0], t[1]))
    here = os.path.dirname(os.path.abspath(__file__))
    out = []
    for k, (n, path, g, size) in enumerate(found[:count]):
        os.environ[f"AKG_BENCH_CHAIN_{k}"] = path
        flops = sum(v.type.size for node in g.nodes for v in node.outputs)
        out.append(Bench(f"corpus:{Path(path).stem[:40]}", g, flops, size, "memory",
                         f"{os.path.join(here, '_chains.py')}:chain{k}"))
    return out


def arrays_for(graph):
    program = lower_graph(graph)
    inputs = random_inputs(graph, 0)
    ins = [inputs[t.name] for t in program.inputs] + [np.asarray(a) for a in program.params.values()]
    outs = [np.zeros(t.shape, t.dtype) for t in program.outputs]
    return program, ins, outs


def run_bench(bench: Bench, trials: int, do_ms: bool, work_dir: str) -> dict:
    target = peers.detect_target()
    program, ins, outs = arrays_for(bench.graph)
    row = {"name": bench.name, "bound": bench.bound, "flops": bench.flops, "bytes": bench.bytes}
    t0 = time.perf_counter()
    kernel = akg.build(bench.graph)
    row["akg_build_s"] = time.perf_counter() - t0
    wrapped = peers.Kernel(kernel.executable, target, "akg")
    got = wrapped.run(ins, outs)
    from akg.verify import Reference, compare

    reference = Reference.of(bench.graph, random_inputs(bench.graph, 0))
    row["akg_ok"] = not compare(bench.graph, got, reference)
    row["akg_s"] = wrapped.time(ins + outs)
    row["akg_config"] = kernel.config.to_json()
    te_args = to_te(program)
    naive = peers.build_naive_te(te_args, target)
    row["naive_s"] = naive.time(ins + outs, min_seconds=0.2)
    try:
        row["numpy_s"] = peers.numpy_baseline(bench.numpy_fn, ins)
    except Exception as e:  # noqa: BLE001
        row["numpy_s"], row["numpy_error"] = None, str(e)[:200]
    if do_ms:
        res = peers.tune_metaschedule(te_args, target, trials=trials,
                                      work_dir=os.path.join(work_dir, bench.name.replace(":", "_")))
        row["ms_tune_s"] = res.tune_seconds
        row["ms_trials"] = res.trials
        row["ms_trial_95"] = res.trial_reaching(0.95)
        row["ms_s"] = res.kernel.time(ins + outs) if res.kernel is not None else None
    return row


def rate(row: dict, seconds: float | None) -> str:
    if not seconds:
        return "n/a"
    if row["bound"] == "memory":
        return f"{row['bytes'] / seconds / 1e9:.1f} GB/s"
    return f"{row['flops'] / seconds / 1e9:.1f} GFLOP/s"


def ratio(a: float | None, b: float | None) -> str:
    return f"{b / a:.2f}x" if a and b else "n/a"


def table(rows: list[dict]) -> str:
    lines = ["| workload | akg default | rate | naive TE | NumPy | MetaSchedule-64 | akg vs MS-64 | akg vs naive | MS-64 tuning |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ms = lambda s: f"{s * 1e3:.3f} ms" if s else "n/a"  # noqa: E731
        lines.append(f"| {r['name']} | {ms(r['akg_s'])}{'' if r['akg_ok'] else ' (WRONG)'} | {rate(r, r['akg_s'])} "
                     f"| {ms(r.get('naive_s'))} | {ms(r.get('numpy_s'))} | {ms(r.get('ms_s'))} "
                     f"| {ratio(r['akg_s'], r.get('ms_s'))} | {ratio(r['akg_s'], r.get('naive_s'))} "
                     f"| {r.get('ms_tune_s', 0):.0f} s |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--only", default="")
    ap.add_argument("--no-ms", action="store_true")
    ap.add_argument("--ms-from", type=Path, help="take the MetaSchedule time of each workload from a "
                    "tuning.py --json file (its run at --trials) instead of tuning MetaSchedule again")
    ap.add_argument("--no-peaks", action="store_true")
    ap.add_argument("--work-dir", default="/tmp/akg_bench_kernels_ms")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--record", type=Path, help="append the results to this markdown file")
    args = ap.parse_args(argv)
    benches = suite_benches() + corpus_chains()
    if args.only:
        wanted = args.only.split(",")
        benches = [b for b in benches if any(b.name.startswith(w) for w in wanted)]
    peaks = {} if args.no_peaks else peers.machine_peaks(verbose=False)
    ms_from = {}
    if args.ms_from:
        ms_from = {r["name"]: r for r in json.loads(args.ms_from.read_text()) if r["budget"] == args.trials}
    rows = []
    for b in benches:
        print(f"== {b.name}", flush=True)
        rows.append(run_bench(b, args.trials, not (args.no_ms or args.ms_from), args.work_dir))
        if b.name in ms_from:
            rows[-1].update(ms_s=ms_from[b.name]["ms_s"], ms_tune_s=ms_from[b.name]["ms_tune_s"],
                            ms_source=str(args.ms_from))
        print(table(rows[-1:]).splitlines()[-1], flush=True)
    text = table(rows)
    print(text)
    if peaks:
        print(json.dumps(peaks))
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "peaks": peaks}, indent=1, default=str))
    if args.record:
        with open(args.record, "a") as f:
            f.write(f"\n## Kernels, untuned default config ({dt.date.today()})\n\n")
            f.write(f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores "
                    f"({peers.detect_target()}). Command: `python scripts/bench/kernels.py "
                    f"{' '.join(argv or sys.argv[1:])}`.\n")
            if peaks:
                f.write(f"Measured peaks: {json.dumps(peaks)}\n")
            f.write("\n" + text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""Tuning-farm benchmark: tuning throughput (measured candidates per minute) with 1, 2 and 4
Dask workers on this machine against the local builder and runner, and the scheduling overhead
per candidate of measuring on Dask.

Throughput: the same tune (one kernel, a fresh database, random cost model and search so that
the tuner's own work stays small and equal, no final comparison) with the local builder and
runner, then on a local Dask cluster of N worker processes (one thread each). Every setup first
tunes another kernel once, so that the worker processes (and their build and measure
subprocesses) are up before the clock starts: a number is steady-state candidates per minute.
Throughput should grow with workers until the cores are used.

Overhead: the same built candidates measured by one Dask worker and by the local runner. For
the Dask runner, the overhead per candidate is the wall time of the batch less the time its
worker spent inside the candidates' jobs, divided by their number; it should stay under 5% of
the median candidate's measurement time.

    python scripts/bench/farm.py [--workers 1,2,4] [--trials 32] [--batch 8] [--size 64] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

from akg.graph import GraphBuilder
from akg.target import get_target
from akg.tuner.builder import InProcessBuilder, LocalBuilder
from akg.tuner.runner import LocalRunner, TaskData
from akg.tuner.runner.dask import DaskRunner
from akg.tuner.tune import candidate, kernels_of, tune
from akg.tuner.task import TuningTask


def matmul(n: int, name: str):
    b = GraphBuilder(name)
    b.output(b.relu(b.matmul(b.input("a", (n, n)), b.input("w", (n, n)))))
    return b.build()


def throughput(builder, runner, args, folder: str, label: str) -> dict:
    """Measured candidates per minute of a tune, after a warm-up tune of another kernel."""
    common = dict(batch=args.batch, cost_model="random", search="random", confirm=False, seed=args.seed,
                  builder=builder, runner=runner)
    tune(matmul(args.size // 2, "warmup"), trials=args.batch, db=os.path.join(folder, f"{label}-warm.db"), **common)
    t0 = time.perf_counter()
    result = tune(matmul(args.size, "mm"), trials=args.trials, db=os.path.join(folder, f"{label}.db"), **common)
    wall = time.perf_counter() - t0
    return {"setup": label, "candidates": result.new_measurements, "seconds": round(wall, 2),
            "per_minute": round(60 * result.new_measurements / wall, 1),
            "failed": sum(k.failures for k in result.kernels)}


def overhead(args) -> dict:
    """Dask's cost per measured candidate on one worker, against the median measurement."""
    target = get_target("cpu")
    graph = matmul(args.size, "mm")
    (sg,) = kernels_of(graph, target)
    task = TuningTask(sg, target)
    configs = list({c.to_json(): c for c in (task.space().sample(task.rng) for _ in range(4 * args.batch))}.values())
    builds = [b for b in InProcessBuilder().build(graph, target, [candidate(task, c) for c in configs])
              if str(b.status) == "ok"][:args.batch * 2]
    data = TaskData(graph, args.seed, target.cost_unit)
    local = LocalRunner()
    try:
        local.run(data, builds[:1])  # the worker process is up
        t0 = time.perf_counter()
        local.run(data, builds)
        local_wall = time.perf_counter() - t0
    finally:
        local.close()
    runner = DaskRunner(target, workers=1)
    try:
        runner.run(data, builds[:1])
        runner.cluster.timings.clear()
        t0 = time.perf_counter()
        runner.run(data, builds)
        wall = time.perf_counter() - t0
        inside = [t.inside for t in runner.cluster.timings if t.kind == "measure"]
    finally:
        runner.close()
    per = (wall - sum(inside)) / len(builds)
    median = statistics.median(inside)
    return {"candidates": len(builds), "dask_seconds": round(wall, 3), "local_seconds": round(local_wall, 3),
            "median_measurement_s": round(median, 4), "overhead_per_candidate_s": round(per, 4),
            "overhead_fraction": round(per / median, 4)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", default="1,2,4", help="Dask worker counts to try (comma-separated)")
    ap.add_argument("--trials", type=int, default=32, help="candidates per timed tune")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--size", type=int, default=64, help="the matmul's size")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args(argv)
    counts = [int(n) for n in args.workers.split(",") if n.strip()]
    rows = []
    with tempfile.TemporaryDirectory(prefix="akg-farm-bench-") as folder:
        builder, runner = LocalBuilder(), LocalRunner()
        try:
            rows.append(throughput(builder, runner, args, folder, "local"))
        finally:
            builder.close()
            runner.close()
        print(rows[-1], flush=True)
        for n in counts:
            started = time.perf_counter()
            runner = DaskRunner("cpu", workers=n)
            start = time.perf_counter() - started
            try:
                rows.append({**throughput(runner.builder(), runner, args, folder, f"dask-{n}"),
                             "cluster_start_s": round(start, 1)})
            finally:
                runner.close()
            print(rows[-1], flush=True)
    cost = overhead(args)
    print(f"\nhost: {os.cpu_count()} cores; {args.trials} candidates a tune, batches of {args.batch}, "
          f"matmul {args.size}x{args.size} + relu")
    print(f"{'setup':10} {'cand/min':>9} {'vs local':>9} {'seconds':>8} {'failed':>7}")
    base = rows[0]["per_minute"]
    for r in rows:
        print(f"{r['setup']:10} {r['per_minute']:9.1f} {r['per_minute'] / base:8.2f}x {r['seconds']:8.1f} "
              f"{r['failed']:7d}")
    print(f"\noverhead on one Dask worker: {cost['overhead_per_candidate_s'] * 1e3:.1f} ms a candidate, "
          f"{100 * cost['overhead_fraction']:.1f}% of the median measurement "
          f"({cost['median_measurement_s'] * 1e3:.0f} ms); {cost['candidates']} candidates in "
          f"{cost['dask_seconds']:.2f}s on Dask, {cost['local_seconds']:.2f}s locally")
    verdict = "under" if cost["overhead_fraction"] < 0.05 else "NOT under"
    print(f"overhead {verdict} 5% of a median measurement")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"throughput": rows, "overhead": cost, "cores": os.cpu_count()}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

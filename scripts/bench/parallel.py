#!/usr/bin/env python
"""Auto-parallel: the searched plan against Megatron's (dp, tp, pp) grid and pure data parallel.

GPT training steps (Megatron's specs: 350M, 2.6B = hidden 2560 x 32 layers, 39B = hidden 8192 x
48 layers; seq 1024, vocab 51200, bf16, Adam, global batch --batch sequences) on simulated
A100-80GB clusters of --devices GPUs, 8 per node, NVLink inside a node and --network Gb/s per
GPU between nodes. All numbers are the cost model's predictions (graph/parallel/cost.py) plus
the search's own time; nothing runs on a GPU.

Per model, cluster size and network:
- grid: every (dp, tp, pp) with tp <= --max-tp, pp <= --max-pp whose Megatron plan fits 80 GiB:
  Megatron's parameter layout pinned (column-parallel q/k/v/fc1, row-parallel proj/fc2,
  vocabulary-parallel embedding, replicated over dp), the ops in between propagated by the
  same program, stages balanced by the same DP; (N, 1, 1) is pure data parallel;
- search: the same meshes with nothing pinned; its plan is the cheapest.
Each step runs batch / (dp x --micro-batch) microbatches (at least pp): gradient accumulation,
and 1F1B through the stages of a pipeline.

Then the search time of the 39B model at 24, 48 and 96 layers on one mesh.

    python scripts/bench/parallel.py [--models gpt-350m,gpt-2.6b,gpt-39b] [--devices 8,64,1024]
        [--network 100] [--batch 1024] [--max-tp 8] [--max-pp 16] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

from akg.errors import NoPlanError, ShardingError
from akg.graph.parallel import gpt
from akg.graph.parallel.cost import a100
from akg.graph.parallel.mesh import Mesh
from akg.graph.parallel.search import grid_plans, search, search_meshes


def microbatches(batch: int, dp: int, pp: int, per_replica: int) -> int:
    """Microbatches of `per_replica` sequences per data-parallel replica (fewer sequences when
    the batch runs out), at least `pp` of them: gradient accumulation without a pipeline,
    1F1B with one."""
    size = max(1, min(per_replica, batch // dp // pp))
    return max(1, batch // (dp * size))


def bench_row(model: str, devices: int, gbits: float, args, graphs: dict) -> dict:
    cluster = a100(gbits)
    spec = gpt.spec(model)

    def graph_of(dp, tp, pp):
        m = microbatches(args.batch, dp, pp, args.micro_batch)
        b = args.batch // m
        if args.batch % m or b % dp:
            raise NoPlanError(f"a batch of {args.batch} does not split into {m} microbatches over dp={dp}")
        if pp > 1 and pp > spec.layers:
            raise NoPlanError(f"{pp} stages for {spec.layers} layers")
        if b not in graphs:
            graphs[b] = gpt.build(spec, b)
        return graphs[b], m

    t0 = time.perf_counter()
    grid = grid_plans(graph_of, devices, cluster, gpt.megatron_pins, max_tp=args.max_tp, max_pp=args.max_pp)
    t_grid = time.perf_counter() - t0
    t0 = time.perf_counter()
    found = search_meshes(graph_of, devices, cluster, max_tp=args.max_tp, max_pp=args.max_pp)
    t_search = time.perf_counter() - t0
    fits = [g for g in grid if g.plan is not None]
    best_grid = min(fits, key=lambda g: g.step_time, default=None)
    dp_only = next((g for g in grid if (g.dp, g.tp, g.pp) == (devices, 1, 1)), None)
    ok = [s for s in found if s.plan is not None]
    best = min(ok, key=lambda s: s.step_time, default=None)
    losses = [(g.dp, g.tp, g.pp) for g, s in zip(grid, found)
              if g.plan is not None and (s.plan is None or s.step_time > g.step_time * (1 + 1e-6))]
    wins = [(g.dp, g.tp, g.pp) for g, s in zip(grid, found)
            if g.plan is not None and s.plan is not None and s.step_time < g.step_time * (1 - 1e-3)]
    ilp = [s.plan.predicted["search_seconds"] for s in ok]

    def cfg(p):
        return f"({p.dp},{p.tp},{p.pp})" if p is not None else "-"

    def t(p):
        return p.step_time if p is not None and p.plan is not None else None

    return {
        "model": model, "devices": devices, "network_gbits": gbits,
        "grid_best": cfg(best_grid), "grid_time": t(best_grid),
        "dp_time": t(dp_only), "dp_reason": dp_only.reason if dp_only and dp_only.plan is None else "",
        "search_best": cfg(best), "search_time": t(best),
        "search_memory_gib": best.plan.predicted["memory"] / (1 << 30) if best else None,
        "grid_fitting": len(fits), "search_fitting": len(ok), "meshes": len(grid),
        "meshes_where_search_strictly_better": [list(w) for w in wins],
        "meshes_where_search_worse": [list(w) for w in losses],
        "grid_seconds": t_grid, "search_seconds": t_search,
        "search_seconds_per_mesh_max": max(ilp, default=0.0),
        "search_stats": best.plan.predicted["ilp"] if best else None,
    }


def scaling(args) -> list[dict]:
    """Search time of the 39B spec at 24, 48, 96 layers on one mesh (the graph built before)."""
    out = []
    mesh = Mesh.parse(args.scaling_mesh)
    for layers in (24, 48, 96):
        t0 = time.perf_counter()
        g = gpt.build("gpt-39b", args.scaling_batch, layers=layers)
        t_build = time.perf_counter() - t0
        t0 = time.perf_counter()
        try:
            plan = search(g, mesh, a100(100))
            stats = plan.predicted["ilp"]
            note = ""
        except (NoPlanError, ShardingError) as e:
            stats, note = None, str(e)
        out.append({"layers": layers, "nodes": len(g.nodes), "build_seconds": t_build,
                    "search_seconds": time.perf_counter() - t0, "ilp": stats, "note": note})
    return out


def fmt_ms(x):
    return f"{x * 1e3:.1f}" if x is not None else "does not fit"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="gpt-350m,gpt-2.6b,gpt-39b")
    ap.add_argument("--devices", default="8,64,1024")
    ap.add_argument("--network", default="100", help="inter-node Gb/s per GPU, comma-separated")
    ap.add_argument("--batch", type=int, default=1024, help="global batch (sequences of 1024 tokens)")
    ap.add_argument("--micro-batch", type=int, default=4, help="sequences per replica per microbatch")
    ap.add_argument("--max-tp", type=int, default=8)
    ap.add_argument("--max-pp", type=int, default=16)
    ap.add_argument("--scaling-mesh", default="dp=8,tp=8")
    ap.add_argument("--scaling-batch", type=int, default=64)
    ap.add_argument("--no-scaling", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    rows = []
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {platform.node()} "
          f"({os.cpu_count()} cores), load {os.getloadavg()[0]:.1f}", flush=True)
    print("| model | GPUs | Gb/s | best grid (dp,tp,pp) ms | pure DP ms | search (dp,tp,pp) ms | search/grid | "
          "search/DP | fit grid/search of | strictly better on | search s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for model in args.models.split(","):
        graphs: dict = {}
        for n in (int(x) for x in args.devices.split(",")):
            for gbits in (float(x) for x in args.network.split(",")):
                r = bench_row(model, n, gbits, args, graphs)
                rows.append(r)
                ratio = (f"{r['search_time'] / r['grid_time']:.3f}" if r["search_time"] and r["grid_time"] else "-")
                vs_dp = (f"{r['search_time'] / r['dp_time']:.3f}" if r["search_time"] and r["dp_time"] else "-")
                better = " ".join("({},{},{})".format(*w) for w in r["meshes_where_search_strictly_better"]) or "-"
                print(f"| {model} | {n} | {gbits:g} | {r['grid_best']} {fmt_ms(r['grid_time'])} | "
                      f"{fmt_ms(r['dp_time'])} | {r['search_best']} {fmt_ms(r['search_time'])} | {ratio} | {vs_dp} | "
                      f"{r['grid_fitting']}/{r['search_fitting']} of {r['meshes']} | {better} | "
                      f"{r['search_seconds']:.0f} (max {r['search_seconds_per_mesh_max']:.1f}/mesh) |", flush=True)
                if r["meshes_where_search_worse"]:
                    print(f"WORSE than the grid on {r['meshes_where_search_worse']}", flush=True)
    scale = [] if args.no_scaling else scaling(args)
    if scale:
        print(f"\nsearch time, gpt-39b shapes on {args.scaling_mesh}, batch {args.scaling_batch}:")
        print("| layers | nodes | graph build s | search s | program choices / rows |")
        print("|---|---|---|---|---|")
        for s in scale:
            st = s["ilp"] or {}
            print(f"| {s['layers']} | {s['nodes']} | {s['build_seconds']:.1f} | {s['search_seconds']:.1f} | "
                  f"{st.get('choices', '-')} / {st.get('rows', '-')} {s['note']} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "scaling": scale, "args": vars(args)}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

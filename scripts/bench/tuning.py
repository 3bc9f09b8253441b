#!/usr/bin/env python
"""Tuning benchmark: akg's tuner against TVM MetaSchedule at equal trial budgets (64 and
256 by default), on the kernel suite, in one process on one machine.

For each workload and budget: the final kernel time of each tuner, the ratio, tuning wall
time and time per trial, and the trial at which each reached 95% of its own final speed. A
second akg run on the warm database must measure nothing. NumPy (OPENBLAS_CORETYPE /
OPENBLAS_L2_SIZE unset) is reported for reference.

Final times: once both tuners are done, akg's default kernel, akg's tuned kernel and
MetaSchedule's kernel run on the same buffers in alternating rounds
(`timing.time_modules_interleaved`: each round one `time_evaluator` run per contender, each
contender's mean call in its best round; 9 rounds or more, until the bests settle and the
run's `timing.HostProbe` is out of a slow spell), so a slow spell of the shared host cannot
favour whoever happened to be timed in a quiet one. For memory-bound workloads whose output is
as large as their largest input, a one-read, one-write kernel over the same bytes (`y = x * 1.5`,
built by akg, moving as many bytes as the workload must) runs in the same rounds: the "stream
floor" no kernel of that workload can beat. The table gives such a kernel's bandwidth (the
bytes it must move at least, over its time) as a fraction of the floor's; the summary checks the multi-pass reductions (layer_norm, softmax,
rms_norm, layer_norm_backward) against 80% of it and lists every row whose tuned kernel timed
slower than its default beyond `timing.TOLERANCE`. Where MetaSchedule fails on a workload (its
schedule rules raise on the layer-norm backward) the row says so and stays out of the
geometric mean.

    python scripts/bench/tuning.py [--budgets 64,256] [--only matmul,softmax] [--record docs/performance.md]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import functools
import math
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import peers  # noqa: E402  (sets TVM_NUM_THREADS before TVM starts its thread pool)
from kernels import arrays_for, corpus_chains, suite_benches  # noqa: E402
from timing import TOLERANCE, HostProbe, time_modules_interleaved  # noqa: E402

import akg  # noqa: E402
from akg.db import open_database  # noqa: E402
from akg.graph.compute.to_te import to_te  # noqa: E402
from akg.graph.subgraph import Subgraph  # noqa: E402
from akg.target import get_target  # noqa: E402
from akg.tuner.tune import tune  # noqa: E402


def reach(curve: list[tuple[int, float]], fraction: float = 0.95) -> int | None:
    """First trial whose best-so-far time is within 1/fraction of the final best."""
    bests = [c for _, c in curve if c is not None and not math.isnan(c)]
    if not bests:
        return None
    final = min(bests)
    best = math.inf
    for trial, cost in curve:
        if cost is not None and not math.isnan(cost):
            best = min(best, cost)
        if best <= final / fraction:
            return trial
    return None


def akg_side(bench, budget: int, db: str) -> tuple[dict, dict]:
    """Tune with akg; (row fields, {label: tvm module} of the default and tuned kernels)."""
    default = akg.build(bench.graph)
    t0 = time.perf_counter()
    result = tune(bench.graph, trials=budget, db=db)
    wall = time.perf_counter() - t0
    # the tuned kernel's key: the workload after expansion and partitioning, which differs
    # from the benchmark graph's own key when the graph holds composite ops (softmax)
    key = result.kernels[0].workload_key if len(result.kernels) == 1 else Subgraph(bench.graph).workload_key
    history = open_database(db).history(key, get_target("cpu").key)
    curve, best = [], math.inf
    for i, rec in enumerate(history, 1):
        if rec.cost is not None and str(rec.status) == "ok":
            best = min(best, rec.cost)
        curve.append((i, best if best < math.inf else None))
    # the kernel akg builds from the database (the kernel tune tuned where the graph plans into
    # one; akg.build's own single kernel, with its default config, where tune planned it into
    # several and tuned those)
    kernel = akg.build(bench.graph, db=db)
    again = tune(bench.graph, trials=budget, db=db)
    same = kernel.config == default.config
    row = {"akg_tune_s": wall, "akg_trials": result.new_measurements, "akg_tuner_best_s": min(
        (c for _, c in curve if c is not None), default=None),
           "akg_reach95": reach(curve), "akg_second_run_new": again.new_measurements,
           "akg_config": kernel.config.to_json(), "akg_config_source": kernel.config_source,
           "akg_tuned_kernels": len(result.kernels), "akg_same_config": same}
    # a tuned config that is the default's is timed once: two builds of one config differ by
    # a few percent in alternating rounds, which is no verdict on the tuner
    modules = {"akg_default_s": default.executable}
    if not same:
        modules["akg_s"] = kernel.executable
    return row, modules


def ms_side(bench, budget: int, work_dir: str, target, program) -> tuple[dict, dict]:
    """Tune with MetaSchedule; (row fields, {label: tvm module} of its kernel, if any)."""
    try:
        res = peers.tune_metaschedule(to_te(program), target, trials=budget, work_dir=work_dir)
    except Exception as e:  # noqa: BLE001  (MetaSchedule's own schedule rules can fail on a workload)
        peers.stop_popen_workers()
        lines = str(e).splitlines() or [type(e).__name__]
        first = next((ln for ln in lines if "Error message:" in ln), lines[0])
        print(f"   MetaSchedule failed: {first.strip()[:200]}", flush=True)
        return {"ms_tune_s": 0.0, "ms_trials": 0, "ms_reach95": None, "ms_tuner_best_s": None,
                "ms_error": f"{type(e).__name__}: {first.strip()[:200]}"}, {}
    curve = [(i, best) for i, _, best, _ in res.curve]
    row = {"ms_tune_s": res.tune_seconds, "ms_trials": res.trials, "ms_reach95": reach(curve),
           "ms_tuner_best_s": res.best_seconds}
    return row, ({"ms_s": res.kernel.mod} if res.kernel else {})


def stream_floor(bench, ins, outs):
    """A one-read, one-write akg kernel that moves as many bytes as the workload must (its
    inputs and outputs together, half read and half written, in rows as long as the largest
    input's), for memory-bound workloads whose output is as large as their largest input (none
    for the others: a reduction writes little, and a matmul's floor is its arithmetic). A floor
    over fewer bytes than the kernel's would sit in a cache the kernel's data overflows: a
    layer-norm backward moves 48 MB, a copy of its 16 MB input 32 MB, which a 32 MB L3 holds.
    Where the target has streaming stores, the copy is built with each store kind (its default
    and the other) and the faster one is the floor (`final_times`)."""
    from akg.graph import GraphBuilder
    from memory_bound import toggled_stream

    from akg.target import STREAM

    big = max(ins, key=lambda a: a.size)
    if bench.bound != "memory" or max(o.size for o in outs) != big.size:
        return [], []
    total = sum(a.nbytes for a in (*ins, *outs))
    cols = big.shape[-1]
    rows = max(1, round(total / 2 / (cols * big.itemsize)))
    x = np.random.default_rng(0).standard_normal((rows, cols)).astype(big.dtype)
    b = GraphBuilder("stream_floor")
    b.output(b.mul(b.input("x", x.shape, str(x.dtype)), b.const(np.asarray(1.5, x.dtype), name="s")))
    graph = b.build()
    floor = akg.build(graph)
    kernels = [floor.executable]
    if floor.target.has(STREAM):
        kernels.append(akg.build(graph, config=toggled_stream(floor.config)).executable)
    return kernels, [x, np.empty_like(x)]


def final_times(modules: dict, ins, outs, floor) -> dict:
    """Every contender on the same buffers, in alternating rounds (see the module doc)."""
    import tvm

    dev = tvm.cpu()
    args = [tvm.runtime.tensor(a, dev) for a in ins] + [tvm.runtime.tensor(np.empty_like(o), dev) for o in outs]
    calls = {label: (mod, args) for label, mod in modules.items()}
    floor_mods, floor_arrays = floor
    floors = [f"stream_floor_s{'' if k == 0 else f'_{k}'}" for k in range(len(floor_mods))]
    for label, mod in zip(floors, floor_mods):
        calls[label] = (mod, [tvm.runtime.tensor(a, dev) for a in floor_arrays])
    times = time_modules_interleaved(calls, rounds=9, seconds=0.2, probe=host_probe())
    if floors:  # the floor: the faster store kind
        times["stream_floor_s"] = min(times.pop(label) for label in floors)
    return times


@functools.cache
def host_probe():
    """The run's one `timing.HostProbe` (its bests span the whole run)."""
    return HostProbe()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budgets", default="64,256")
    ap.add_argument("--only", default="")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--record", type=Path)
    args = ap.parse_args(argv)
    benches = suite_benches() + corpus_chains()
    if args.only:
        # a workload's whole name picks it alone (layer_norm, not layer_norm_backward), else a
        # prefix picks every workload it starts (corpus)
        names = {b.name for b in benches}
        wanted = args.only.split(",")
        benches = [b for b in benches if any(b.name == w or (w not in names and b.name.startswith(w)) for w in wanted)]
    target = peers.detect_target()
    work = Path(tempfile.mkdtemp(prefix="akg-bench-tuning-"))
    rows = []
    for bench in benches:
        program, ins, outs = arrays_for(bench.graph)
        numpy_s = peers.numpy_baseline(bench.numpy_fn, ins)
        for budget in [int(b) for b in args.budgets.split(",")]:
            print(f"== {bench.name} @ {budget}", flush=True)
            row = {"name": bench.name, "budget": budget, "numpy_s": numpy_s, "bound": bench.bound,
                   "flops": bench.flops, "bytes": bench.bytes}
            akg_row, modules = akg_side(bench, budget, str(work / f"{bench.name.replace(':', '_')}-{budget}.db"))
            ms_row, ms_module = ms_side(bench, budget, str(work / f"ms-{bench.name.replace(':', '_')}-{budget}"),
                                        target, program)
            row.update(akg_row)
            row.update(ms_row)
            floor = stream_floor(bench, ins, outs)
            row.update(final_times({**modules, **ms_module}, ins, outs, floor))
            if row["akg_same_config"]:
                row["akg_s"] = row["akg_default_s"]
            row["floor_bytes"] = sum(a.nbytes for a in floor[1])
            rows.append(row)
            print(table([row]).splitlines()[-1], flush=True)
            if args.json:  # after every row: a crash later in the run loses nothing measured
                args.json.write_text(json.dumps(rows, indent=1, default=str))
    text = table(rows) + "\n\n" + summary(rows)
    print(text)
    if args.record:
        with open(args.record, "a") as f:
            f.write(f"\n## Tuning, akg vs MetaSchedule at equal trials ({dt.date.today()})\n\n")
            f.write(f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores ({target}). "
                    f"Command: `python scripts/bench/tuning.py {' '.join(argv or sys.argv[1:])}`.\n\n{text}\n")
    return 0


def _ms(s):
    return f"{s * 1e3:.3f} ms" if s else "n/a"


def stream_fraction(r, label: str = "akg_s") -> float | None:
    """The bandwidth of a contender (the bytes its workload must move at least, over its time)
    over the stream floor's in the same rounds; None where the row has no floor."""
    if not (r.get("stream_floor_s") and r.get(label) and r.get("floor_bytes")):
        return None
    return (r["bytes"] / r[label]) / (r["floor_bytes"] / r["stream_floor_s"])


def _pct(x):
    return f"{x:.0%}" if x is not None else "—"


def table(rows) -> str:
    lines = ["| workload | trials | akg default | akg tuned | MetaSchedule | tuned vs MS | default vs MS | tuned vs default "
             "| tuned vs NumPy | stream floor | of floor bandwidth, tuned (default) | akg tune s (per trial) "
             "| MS tune s (per trial) | 95% at trial akg / MS | 2nd run new |",
             "|" + "---|" * 15]
    for r in rows:
        speed = f"{r['ms_s'] / r['akg_s']:.2f}x" if r.get("ms_s") and r.get("akg_s") else "n/a"
        dspeed = f"{r['ms_s'] / r['akg_default_s']:.2f}x" if r.get("ms_s") and r.get("akg_default_s") else "n/a"
        vs_default = f"{r['akg_default_s'] / r['akg_s']:.2f}x" if r.get("akg_default_s") and r.get("akg_s") else "n/a"
        vs_np = f"{r['numpy_s'] / r['akg_s']:.2f}x" if r.get("numpy_s") and r.get("akg_s") else "n/a"
        fraction = stream_fraction(r)
        of_floor = "—" if fraction is None else f"{_pct(fraction)} ({_pct(stream_fraction(r, 'akg_default_s'))})"
        tuned = _ms(r["akg_s"])
        if r.get("akg_same_config"):  # older rows lack the field
            tuned += (" (default config)" if r.get("akg_tuned_kernels", 1) == 1 else
                      f" (default config: tuned as {r['akg_tuned_kernels']} kernels, not this one)")
        lines.append(
            f"| {r['name']} | {r['budget']} | {_ms(r['akg_default_s'])} | {tuned} "
            f"| {'failed' if r.get('ms_error') else _ms(r.get('ms_s'))} "
            f"| {speed} | {dspeed} | {vs_default} | {vs_np} | {_ms(r.get('stream_floor_s'))} | {of_floor} "
            f"| {r['akg_tune_s']:.0f} ({r['akg_tune_s'] / max(r['akg_trials'], 1):.2f}) "
            f"| {r['ms_tune_s']:.0f} ({r['ms_tune_s'] / max(r['ms_trials'], 1):.2f}) "
            f"| {r['akg_reach95']} / {r['ms_reach95']} | {r['akg_second_run_new']} |")
    return "\n".join(lines)


def summary(rows) -> str:
    out = []
    for budget in sorted({r["budget"] for r in rows}):
        ratios = [r["ms_s"] / r["akg_s"] for r in rows if r["budget"] == budget and r.get("ms_s") and r.get("akg_s")]
        if ratios:
            geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
            out.append(f"geometric mean akg speed vs MetaSchedule at {budget} trials: {geo:.2f}x over {len(ratios)} kernels")
        failed = [r["name"] for r in rows if r["budget"] == budget and r.get("ms_error")]
        if failed:
            out.append(f"MetaSchedule failed at {budget} trials on {', '.join(failed)} (not in the mean): "
                       + "; ".join(sorted({r['ms_error'] for r in rows if r['budget'] == budget and r.get('ms_error')})))
    for r in rows:  # the memory-bound multi-pass kernels: >= 80% of the floor's bandwidth
        fraction = stream_fraction(r)
        if fraction is not None and r["name"] in MULTI_PASS:
            verdict = "met" if fraction >= FLOOR_TARGET else "NOT met"
            out.append(f"{r['name']} @ {r['budget']}: tuned at {_pct(fraction)} of the stream floor's bandwidth, default "
                       f"at {_pct(stream_fraction(r, 'akg_default_s'))} (>= {FLOOR_TARGET:.0%}: {verdict})")
    slower = [f"{r['name']} @ {r['budget']} ({r['akg_default_s'] / r['akg_s']:.2f}x)" for r in rows
              if r.get("akg_s") and r.get("akg_default_s") and r["akg_s"] > r["akg_default_s"] * (1 + NOISE)
              and not r.get("akg_same_config")]
    untuned = [f"{r['name']} @ {r['budget']} ({r['akg_tuned_kernels']} kernels)" for r in rows
               if r.get("akg_same_config") and r.get("akg_tuned_kernels", 1) > 1]
    if untuned:
        out.append("tuned as several kernels (akg compile's), timed as akg.build's one kernel with its default "
                   "config: " + ", ".join(untuned))
    out.append(f"tuned slower than default beyond {NOISE:.0%}: " + (", ".join(slower) if slower else "none"))
    return "\n".join(out)


MULTI_PASS = ("layer_norm", "softmax", "rms_norm", "layer_norm_backward")
FLOOR_TARGET = 0.8  # of the stream floor's bandwidth, issue 15
NOISE = TOLERANCE  # a gap the final rounds cannot tell from noise


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""akg at a base commit against akg in the working tree, in one run: for the kernel suite
and the example models, each tree builds the default kernels (compile time per kernel) and
compiles the whole models in its own worker process (kernels that only one tree cuts, after a
fusion change, count only in their models' calls), and each tree tunes every suite kernel
(the same trials and seed, a fresh SQLite database each, who goes first alternating); the
workers then time every default kernel, every tuned kernel (time_evaluator) and every
compiled model (Python calls) in alternating rounds, each reporting its best round. For
refactors that must leave speed alone: "same TIR" and "same code" (the default kernel's
machine code without labels and directives) say which kernels can differ at all.

    python scripts/bench/ab_trees.py --base HEAD~3 [--rounds 9] [--seconds 0.25] [--tune-trials 32]
                                     [--models mlp,resnet_block,transformer_block] [--json out.json]

The base tree is `git archive`d and, like the working tree, staged as one package (as
scripts/lint_imports.py does); both workers run with this interpreter and its packages.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "scripts"))

import lint_imports  # noqa: E402  (stage)

SUITE = ("matmul", "batch_matmul", "conv2d", "softmax", "layer_norm", "bias_gelu", "reduce_sum")
MODELS = ("mlp", "resnet_block", "transformer_block")

# --- the worker: one per tree, commands as JSON lines on stdin ----------------------------------

WORKER = r'''
import json, statistics, sys, time
import numpy as np
sys.path.insert(0, sys.argv[1])
import kernels
import akg
from akg.graph.io import load_model
from akg.graph.interpreter import random_inputs
from akg.graph.compute.lower import lower_graph
from akg.target import get_target

def partition(graph, target):
    try:
        from akg.graph.pipeline import plan_model
        return plan_model(graph, target)
    except ImportError:
        from akg.graph.fuse import partition as p
        return p(graph, target=target)

def compile_model(graph):
    try:
        from akg.api import compile_model as c
    except ImportError:
        from akg.runtime import compile_model as c
    return c(graph)

def module(kernel):
    exe = kernel.executable
    return getattr(exe, "mod", exe)

def code(kernel):
    """The kernel's machine code as text without labels and directives: two TIRs that differ
    only in how they say it (a select for a max) often compile to the same instructions."""
    import re
    try:
        asm = kernel.source("asm")
    except Exception:
        return None
    lines = (l.strip() for l in asm.splitlines())
    return "\n".join(re.sub(r"\.L\w+", "L", l) for l in lines
                     if l and not l.startswith((".", "#")) and not re.fullmatch(r"\S+:", l))

target = get_target("cpu")
graphs = {b.name: b.graph for b in kernels.suite_benches()}
examples = sys.argv[2]
models = {}

def load(name):
    """An example (.mir), a shared MindIR model or a model torch_models.py builds."""
    from pathlib import Path
    for path in (Path(examples) / f"{name}.mir", Path(examples).parents[1] / "shared" / "corpus" / "mindir" / f"{name}.mindir"):
        if path.exists():
            return load_model(path)
    import torch_models
    return torch_models.BUILT_MODELS[name]()

for name in sys.argv[3].split(","):
    models[name] = load(name)
    seen = set()
    for k, fk in enumerate(partition(models[name], target).kernels):
        if fk.subgraph.workload_key not in seen:
            seen.add(fk.subgraph.workload_key)
            graphs[f"{name}:{fk.name.split('.')[-1]}"] = fk.subgraph.graph
built, compiled = {}, {}
import tvm
dev = tvm.cpu()

def timed(kernel, graph, seconds):
    """(time_evaluator, its arguments) for a built kernel on the graph's seeded inputs."""
    program = lower_graph(graph)
    inputs = random_inputs(graph, 0)
    args = [tvm.runtime.tensor(inputs[t.name], dev) for t in program.inputs]
    args += [tvm.runtime.tensor(np.asarray(a), dev) for a in program.params.values()]
    args += [tvm.runtime.tensor(np.zeros(t.shape, t.dtype), dev) for t in program.outputs]
    mod = module(kernel)
    mod["main"](*args)
    t0 = time.perf_counter(); mod["main"](*args); once = time.perf_counter() - t0
    number = max(1, int(seconds / max(once, 1e-6)))
    return mod.time_evaluator("main", dev, number=number, repeat=1), args

for line in sys.stdin:
    cmd = json.loads(line)
    out = {}
    if cmd["op"] == "list":
        out = {"kernels": list(graphs), "models": list(models)}
    elif cmd["op"] == "build":
        best = None
        for _ in range(2):
            t0 = time.perf_counter()
            kernel = akg.build(graphs[cmd["name"]])
            best = min(best or 1e9, time.perf_counter() - t0)
        built[cmd["name"]] = timed(kernel, graphs[cmd["name"]], cmd["seconds"])
        out = {"build_s": best, "tir": kernel.func.script().replace(kernel.name, "kernel"), "code": code(kernel)}
    elif cmd["op"] == "tune":
        from akg.tuner.tune import tune
        t0 = time.perf_counter()
        result = tune(graphs[cmd["name"]], trials=cmd["trials"], db=cmd["db"], seed=0)
        seconds = time.perf_counter() - t0
        k = result.kernels[0]
        kernel = akg.build(graphs[cmd["name"]], config=k.best_config)
        built["tuned:" + cmd["name"]] = (timed(kernel, graphs[cmd["name"]], cmd["seconds"]))
        out = {"tune_s": seconds, "measured": result.new_measurements, "best_cost": k.best_cost,
               "tir": kernel.func.script().replace(kernel.name, "kernel")}
    elif cmd["op"] == "time_kernel":
        evaluate, args = built[cmd["name"]]
        out = {"s": float(evaluate(*args).mean)}
    elif cmd["op"] == "compile_model":
        t0 = time.perf_counter()
        m = compile_model(models[cmd["name"]])
        inputs = m.random_inputs(0)
        compiled[cmd["name"]] = (m, inputs)
        m(**inputs)
        out = {"compile_s": time.perf_counter() - t0}
    elif cmd["op"] == "time_model":
        m, inputs = compiled[cmd["name"]]
        samples, start = [], time.perf_counter()
        while time.perf_counter() - start < cmd["seconds"] or len(samples) < 3:
            t0 = time.perf_counter(); m(**inputs); samples.append(time.perf_counter() - t0)
        out = {"s": statistics.median(samples)}
    print(json.dumps(out), flush=True)
'''


class Worker:
    def __init__(self, label: str, staged: Path, env_extra: dict, models=MODELS):
        self.label = label
        env = {**os.environ, "PYTHONPATH": str(staged), **env_extra}
        self.proc = subprocess.Popen([sys.executable, "-c", WORKER, str(HERE), str(ROOT / "examples"), ",".join(models)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=staged)

    def ask(self, **cmd) -> dict:
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.label} worker died (exit code {self.proc.poll()})")
        return json.loads(line)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(30)


def stage_base(rev: str, into: Path) -> Path:
    src = into / "src"
    src.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    staged = into / "staged"
    old_root, lint_imports.ROOT = lint_imports.ROOT, src
    try:
        return lint_imports.stage(staged, migrations=True)
    finally:
        lint_imports.ROOT = old_root


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="git revision of the base tree")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--seconds", type=float, default=0.25)
    ap.add_argument("--tune-trials", type=int, default=32,
                    help="tune each suite kernel this many trials in each tree (0: no tuning rows)")
    ap.add_argument("--models", default=",".join(MODELS),
                    help="models whose distinct kernels and whole calls are timed: examples (examples/*.mir), "
                         "shared MindIR models (mlp, lenet5, ...) or torch_models.py's (resnet18_w16_32, ...)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    with tempfile.TemporaryDirectory(prefix="akg-ab-") as tmp:
        tmp = Path(tmp)
        base = Worker("base", stage_base(args.base, tmp / "base"), {}, models)
        new = Worker("new", lint_imports.stage(tmp / "new", migrations=True), {}, models)
        workers = (base, new)
        names, new_names = base.ask(op="list"), new.ask(op="list")
        assert names["models"] == new_names["models"]
        # a tree that cuts a model into other kernels (a fusion change): the kernels both trees
        # have are compared one by one, the others only through their models' whole calls
        only = {"base": [k for k in names["kernels"] if k not in new_names["kernels"]],
                "new": [k for k in new_names["kernels"] if k not in names["kernels"]]}
        names["kernels"] = [k for k in names["kernels"] if k in new_names["kernels"]]
        rows = {}
        for name in names["kernels"]:
            b, n = base.ask(op="build", name=name, seconds=args.seconds), new.ask(op="build", name=name,
                                                                                seconds=args.seconds)
            rows[name] = {"build_base_s": b["build_s"], "build_new_s": n["build_s"], "same_tir": b["tir"] == n["tir"],
                          "same_code": b["code"] == n["code"] if b.get("code") is not None else "-"}
            print(f"built {name}", file=sys.stderr, flush=True)
        for k, name in enumerate(n for n in names["kernels"] if ":" not in n and args.tune_trials):
            tuned = {}
            for w in workers if k % 2 == 0 else workers[::-1]:  # who tunes first alternates
                tuned[w.label] = w.ask(op="tune", name=name, trials=args.tune_trials, seconds=args.seconds,
                                       db=f"sqlite:///{tmp}/{w.label}-{name}.db")
            rows[f"tuned:{name}"] = {"build_base_s": tuned["base"]["tune_s"], "build_new_s": tuned["new"]["tune_s"],
                                     "same_tir": tuned["base"]["tir"] == tuned["new"]["tir"],
                                     "measured": [tuned["base"]["measured"], tuned["new"]["measured"]]}
            print(f"tuned {name}", file=sys.stderr, flush=True)
        for name in names["models"]:
            rows[f"model:{name}"] = {f"build_{w.label}_s": w.ask(op="compile_model", name=name)["compile_s"]
                                     for w in workers}
        best = {key: {w.label: float("inf") for w in workers} for key in rows}
        for r in range(args.rounds):
            for key in rows:
                for w in workers if r % 2 == 0 else workers[::-1]:
                    op, name = ("time_model", key[6:]) if key.startswith("model:") else ("time_kernel", key)
                    best[key][w.label] = min(best[key][w.label], w.ask(op=op, name=name, seconds=args.seconds)["s"])
            print(f"round {r + 1}/{args.rounds}", file=sys.stderr, flush=True)
        for w in workers:
            w.close()
    # build s: one default build (best of 2); for tuned: rows the whole tune (trials measured
    # in each tree) then the build of its best config
    lines = ["| workload | base ms | new ms | new / base | build (tune) base s | build (tune) new s | same TIR "
             "| same code |", "|---|---|---|---|---|---|---|---|"]
    for key, row in rows.items():
        row["base_ms"], row["new_ms"] = best[key]["base"] * 1e3, best[key]["new"] * 1e3
        lines.append(f"| {key} | {row['base_ms']:.4f} | {row['new_ms']:.4f} | {row['new_ms'] / row['base_ms']:.3f} "
                     f"| {row['build_base_s']:.3f} | {row['build_new_s']:.3f} | {row.get('same_tir', '-')} "
                     f"| {row.get('same_code', '-')} |")
    for label, kernels in only.items():
        if kernels:
            lines.append(f"\nkernels only the {label} tree cuts (timed within their models): {', '.join(kernels)}")
    print("\n".join(lines))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

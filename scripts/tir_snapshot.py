#!/usr/bin/env python
"""Snapshot of what akg generates, for refactors that must not change it: for a fixed set of
workloads (the benchmark suite, the example models' kernels, the MindIR fixtures' kernels and
every 4th file of the AKG composite corpus) the hash of the imported graph's `.mir` text, and
for the default config and a few sampled configs the TIR text's hash and the tuner's feature
vector. `--write FILE` records a snapshot; `--compare FILE` rebuilds every entry (configs read
back from their JSON, so old-form configs go through the reader) and lists what differs.

    python scripts/tir_snapshot.py --write before.json [--jobs 2]
    python scripts/tir_snapshot.py --compare before.json [--jobs 2]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
SAMPLES = 3  # sampled configs per kernel


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _sources() -> list[tuple[str, str]]:
    """(kind, name) of every workload source: a model file or a benchmark name."""
    out = [("bench", name) for name in
           ("matmul", "batch_matmul", "conv2d", "softmax", "layer_norm", "bias_gelu", "reduce_sum")]
    out += [("model", str(p)) for p in sorted((ROOT / "examples").glob("*.mir"))]
    out += [("model", str(p)) for p in sorted((CORPUS / "mindir").glob("*.mindir"))]
    files = sorted(p for p in (CORPUS / "akg-composite").rglob("*") if p.suffix in (".info", ".json"))
    out += [("model", str(p)) for p in files[::4]]
    return out


def _graphs(kind: str, name: str):
    """(import hash, [(kernel name, subgraph graph)]) of one source."""
    from akg.graph.io import emit_mir, load_model

    if kind == "bench":
        sys.path.insert(0, str(ROOT / "scripts" / "bench"))
        import kernels  # noqa: PLC0415

        bench = next(b for b in kernels.suite_benches() if b.name == name)
        return "", [(name, bench.graph)]
    graph = load_model(name)
    text, weights = emit_mir(graph)
    text += "".join(f"{k}:{_sha(a.tobytes().hex())}" for k, a in sorted(weights.items()))
    from akg.target import get_target

    try:
        from akg.graph.pipeline import plan_model

        parts = plan_model(graph, get_target("cpu"))
    except ImportError:
        from akg.graph.fuse import partition

        parts = partition(graph, target=get_target("cpu"))
    seen, out = set(), []
    for fk in parts.kernels:
        sg = fk.subgraph
        if sg.workload_key not in seen:
            seen.add(sg.workload_key)
            out.append((fk.name, sg.graph))
    return _sha(text), out


def _kernel_entry(graph, configs: list[str] | None) -> dict:
    """TIR hash and features of the default config and of `configs` (sampled when None)."""
    from akg.compiler import pipeline_for
    from akg.errors import AkgError
    from akg.schedules.space import Config
    from akg.target import get_target
    from akg.tuner.task import TuningTask
    from akg.graph.subgraph import Subgraph

    target = get_target("cpu")
    entry: dict = {"configs": []}
    try:
        pipe = pipeline_for(graph, target, "smart")
        default = pipe.default_config()
        if configs is None:
            space = pipe.space()
            rng = random.Random(0)
            picked, tries = [default], 0
            while len(picked) < 1 + SAMPLES and tries < 50:
                tries += 1
                c = space.sample(rng)
                if space.is_legal(c):
                    picked.append(c)
        else:
            picked = [Config.from_json(c) for c in configs]
        task = TuningTask(Subgraph(graph), target)
        for c in picked:
            row = {"config": c.to_json()}
            try:
                func, _ = pipe.lower(c)
                # named apart from the kernel: pipelines are shared by workload, so a kernel of
                # another name with the same workload may have been lowered first
                row["tir"] = _sha(func.script().replace(pipe.program.name, "kernel"))
                feats = task.features(c)
                row["features"] = None if feats is None else [round(float(x), 5) for x in feats]
            except AkgError as e:
                row["error"] = type(e).__name__
            entry["configs"].append(row)
        entry["default_tir"] = entry["configs"][0].get("tir")
    except AkgError as e:
        entry["error"] = f"{type(e).__name__}: {str(e)[:200]}"
    return entry


def snapshot_one(kind: str, name: str, previous: dict | None) -> dict:
    from akg.errors import AkgError

    t0 = time.perf_counter()
    try:
        imported, graphs = _graphs(kind, name)
    except AkgError as e:
        return {"import_error": type(e).__name__}
    out = {"import": imported, "kernels": {}}
    for kname, g in graphs:
        configs = None
        if previous is not None:
            prev = previous.get("kernels", {}).get(kname)
            configs = [c["config"] for c in prev["configs"]] if prev and "configs" in prev else None
            if prev is not None and "configs" not in prev:
                configs = []
        out["kernels"][kname] = _kernel_entry(g, configs)
    out["seconds"] = round(time.perf_counter() - t0, 2)
    return out


def _diff(before: dict, after: dict) -> list[str]:
    problems = []
    for key, b in before.items():
        a = after.get(key)
        if a is None:
            problems.append(f"{key}: missing")
            continue
        if b.get("import") != a.get("import") or b.get("import_error") != a.get("import_error"):
            problems.append(f"{key}: imported graph differs")
        for kname, bk in b.get("kernels", {}).items():
            ak = a.get("kernels", {}).get(kname)
            if ak is None:
                problems.append(f"{key}/{kname}: kernel missing")
                continue
            if bk.get("error") != ak.get("error"):
                problems.append(f"{key}/{kname}: error {bk.get('error')} -> {ak.get('error')}")
            for bc, ac in zip(bk.get("configs", []), ak.get("configs", [])):
                for field in ("tir", "features", "error"):
                    if bc.get(field) != ac.get(field):
                        problems.append(f"{key}/{kname}: {field} differs for {bc['config'][:120]}")
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", type=Path)
    group.add_argument("--compare", type=Path)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--only", default="", help="substring of the source names to keep")
    args = ap.parse_args(argv)
    previous = json.loads(args.compare.read_text()) if args.compare else None
    sources = [s for s in _sources() if args.only in s[1]]
    if previous is not None:
        sources = [s for s in sources if f"{s[0]}:{Path(s[1]).name if s[0] == 'model' else s[1]}" in previous]
    keys = [f"{k}:{Path(n).name if k == 'model' else n}" for k, n in sources]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(snapshot_one, k, n, previous.get(key) if previous else None)
                   for (k, n), key in zip(sources, keys)]
        result = {}
        for i, (key, fut) in enumerate(zip(keys, futures)):
            result[key] = fut.result()
            print(f"[{i + 1}/{len(keys)}] {key} {result[key].get('seconds', '')}", file=sys.stderr, flush=True)
    print(f"{len(result)} sources in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    if args.write:
        args.write.write_text(json.dumps(result, indent=1, sort_keys=True))
        return 0
    problems = _diff({k: v for k, v in previous.items() if k in result or not args.only}, result)
    for p in problems:
        print(p)
    kernels = sum(len(v.get("kernels", {})) for v in result.values())
    configs = sum(len(k.get("configs", [])) for v in result.values() for k in v.get("kernels", {}).values())
    print(f"{len(result)} sources, {kernels} kernels, {configs} configs: {len(problems)} differences")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

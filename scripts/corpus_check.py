#!/usr/bin/env python
"""Compile every AKG composite kernel of the shared corpus for a target (cpu by default) and
check it against the reference interpreter; print one line per file, the failures grouped by
reason, and the scheduling + code generation time distribution.

    python scripts/corpus_check.py [--target npu] [--corpus DIR] [--every N] [--jobs J] [--max-gb G] [--json out.json]

Kernels with more than --max-gb of tensors (inputs and every node's output; 0.25 by default)
are skipped: the check holds them several times over (the inputs, the reference in declared
precision and in float64, the outputs; on npu the simulator's copy of GM), about 5x their size,
and the float64 reference takes most of the time. `--max-gb 1` checks the corpus's kernels up
to 1 GB in about 10-90 s each on one core; `--all-sizes` lifts the limit (on npu the whole
corpus so takes ~10 minutes: its largest kernels are refused at compile time or pass in 90 s).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np

DEFAULT_CORPUS = next((p for p in (Path(os.environ.get("AKG_CORPUS", "/nonexistent")) / "akg-composite",
                                    Path(__file__).resolve().parents[1].parent / "shared" / "corpus" / "akg-composite",
                                    Path("/work/shared/corpus/akg-composite")) if p.is_dir()),
                      Path(__file__).resolve().parents[1].parent / "shared" / "corpus" / "akg-composite")
MAX_BYTES = 256 * 1024 * 1024  # kernels with more tensor data are checked by the slow run only


def corpus_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.suffix in (".info", ".json") and p.is_file())


def tensor_bytes(graph) -> int:
    values = [*graph.inputs, *(v for n in graph.nodes for v in n.outputs)]
    return sum(v.type.nbytes for v in values)


def check_file(path: str, max_bytes: int | None = MAX_BYTES, target: str = "cpu") -> dict:
    """Status of one file: ok | unsupported | import_error | compile_error | mismatch | skipped."""
    from akg.errors import AkgError, ImportFormatError, UnsupportedError
    from akg.graph.interpreter import random_inputs
    from akg.graph.io import load_model
    from akg.verify import Reference, compare

    out = {"file": path, "status": "ok", "reason": "", "schedule_codegen_s": None, "compile_s": None}
    try:
        graph = load_model(path)
    except ImportFormatError as e:
        return {**out, "status": "import_error", "reason": str(e)}
    except UnsupportedError as e:
        return {**out, "status": "unsupported", "reason": str(e)}
    if max_bytes is not None and tensor_bytes(graph) > max_bytes:
        return {**out, "status": "skipped", "reason": f"{tensor_bytes(graph) / 2**30:.1f} GB of tensors"}
    import akg

    try:
        kernel = akg.build(graph, target=target)
    except UnsupportedError as e:
        return {**out, "status": "unsupported", "reason": str(e)}
    except AkgError as e:
        return {**out, "status": "compile_error", "reason": str(e)}
    out["schedule_codegen_s"] = kernel.stats.schedule_and_codegen_s
    out["compile_s"] = kernel.stats.compile_s
    out["fallback"] = kernel.stats.fallback
    inputs = random_inputs(graph, seed=0)
    try:
        got = kernel(**inputs)
    except Exception as e:  # a crash here is a bug to report, not a reason to stop the run
        return {**out, "status": "run_error", "reason": f"{type(e).__name__}: {str(e).splitlines()[0]}"}
    problems = compare(graph, got, Reference.of(graph, inputs))
    if problems:
        return {**out, "status": "mismatch", "reason": "; ".join(map(str, problems))}
    return out


def _reason_kind(reason: str) -> str:
    """A failure's reason without what names the file or kernel (shapes, names, numbers), so
    that equal causes group together."""
    text = re.sub(r"\S*(Fused_|/)\S*", "<kernel>", reason.split(";")[0].splitlines()[0] if reason else "")
    text = re.sub(r"\[[^\]]*\]|\d+(\.\d+)?(e-?\d+)?", "#", text)
    return text[:160]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="cpu", help="the target to compile for (cpu, npu, ...)")
    parser.add_argument("--pass-rate", type=float, default=0.95, help="exit 1 below this fraction of kernels passing")
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--every", type=int, default=1, help="check every N-th file")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--all-sizes", action="store_true", help="also the largest kernels")
    parser.add_argument("--max-gb", type=float, default=MAX_BYTES / 2**30,
                        help="skip kernels with more GB of tensors than this (default %(default)s)")
    parser.add_argument("--json", type=Path, help="write per-file results here")
    args = parser.parse_args(argv)
    files = [str(p) for p in corpus_files(args.corpus)][:: args.every]
    t0 = time.time()
    limit = None if args.all_sizes else int(args.max_gb * 2**30)
    results = []
    with ProcessPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(check_file, f, limit, args.target) for f in files]
        for fut in as_completed(futures):
            r = fut.result()
            results.append(r)
            rel = os.path.relpath(r["file"], args.corpus)
            extra = f"  ({r['reason']})" if r["reason"] else ""
            t = f"{r['schedule_codegen_s']:.3f}s" if r["schedule_codegen_s"] is not None else "-"
            print(f"{r['status']:13s} {t:>8s}  {rel}{extra}", flush=True)
    counts: dict[str, int] = {}
    for r in results:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    kernels = [r for r in results if r["status"] != "import_error"]
    ok = counts.get("ok", 0)
    times = np.array([r["schedule_codegen_s"] for r in results if r["schedule_codegen_s"] is not None])
    reasons: dict[tuple[str, str], int] = {}
    for r in results:
        if r["status"] != "ok":
            key = (r["status"], _reason_kind(r["reason"]))
            reasons[key] = reasons.get(key, 0) + 1
    if reasons:
        print("\nnot passing, by reason:")
        for (status, why), n in sorted(reasons.items(), key=lambda kv: -kv[1]):
            print(f"  {n:4d}  {status}: {why}")
    print(f"\n{ok}/{len(kernels)} kernels pass on {args.target} ({100 * ok / max(1, len(kernels)):.1f}%); " +
          ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())))
    if times.size:
        q = np.percentile(times, [50, 90, 99])
        print(f"schedule + codegen per kernel: median {q[0]:.3f}s, p90 {q[1]:.3f}s, p99 {q[2]:.3f}s, "
              f"max {times.max():.3f}s; fallbacks: {sum(1 for r in results if r.get('fallback'))}")
    print(f"wall time {time.time() - t0:.0f}s")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0 if ok >= args.pass_rate * len(kernels) else 1


if __name__ == "__main__":
    sys.exit(main())

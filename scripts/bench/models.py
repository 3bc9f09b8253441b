#!/usr/bin/env python
"""End-to-end model benchmark on CPU: akg (default configs, and tuned) against the reference
interpreter, PyTorch eager, torch.compile (Inductor) and ONNX Runtime, with the same weights,
in one process.

Models: the examples (examples/*.mir), the shared MindIR models (`mindir`: mlp, lenet5,
resnet_block, transformer_layer) and the models `torch_models.py` builds in akg's graph form
(ResNet-18 at 224x224 and at width 16 on 32x32, MobileNetV2 blocks, a BERT-base layer, a
2-layer BERT of hidden 128). PyTorch runs a torch function made from the same graph
(`torch_function`), Inductor compiles that function and ONNX Runtime runs the ONNX file this
script exports from it. Every contender's output is checked against the reference interpreter
(`akg.verify.compare`); a contender that fails the check is named in the table's last column.

The contenders are timed in alternating rounds, each reporting the median call of its best
round (`timing.timeit_interleaved`: 9 rounds or more, until every contender's best settles).
`timing.HostProbe` runs in the rounds too: while its kernels run slower than their best in
this process the host is in a slow spell and the rounds go on (the table's `rounds (host)`
column). akg's model time is split into kernel time (the sum of every kernel call timed alone
with TVM's time_evaluator on the model's own values, best of `--kernel-rounds` rounds or more)
and call-path time (model call minus kernel time).

Needs the benchmark extras: `pip install torch==2.13.0 onnx onnxruntime` (a CPU wheel).

    python scripts/bench/models.py [--models resnet18_w16_32,bert2_h128,examples,mindir]
                                   [--trials 64] [--per-kernel] [--record FILE]
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TVM_NUM_THREADS", str(os.cpu_count() or 1))

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import HostProbe, best_rounds, timeit_interleaved  # noqa: E402
from torch_models import BUILT_MODELS  # noqa: E402

from akg.graph import evaluate, random_inputs  # noqa: E402
from akg.graph.io import load_model  # noqa: E402
from akg.verify import Reference, compare  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
MINDIR = ROOT.parent / "shared" / "corpus" / "mindir"
MINDIR_MODELS = ("mlp", "lenet5", "resnet_block", "transformer_layer")
DEFAULT_MODELS = "examples,mindir," + ",".join(BUILT_MODELS)


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


def load_graphs(names: str) -> list[tuple[str, object]]:
    """(name, Graph) per entry of `--models`: `examples`, `mindir`, a built model's name
    (`torch_models.BUILT_MODELS`), an example's name or a shared MindIR model's (an example's
    name wins: both have an mlp and a resnet_block)."""
    graphs = []
    for name in (n.strip() for n in names.split(",") if n.strip()):
        if name == "mindir":
            graphs += [(p.stem, load_model(p)) for p in sorted(MINDIR.glob("*.mindir")) if p.stem in MINDIR_MODELS]
        elif name == "examples":
            graphs += [(p.stem, load_model(p)) for p in sorted(EXAMPLES.glob("*.mir"))]
        elif name in BUILT_MODELS:
            graphs.append((name, BUILT_MODELS[name]()))
        elif (EXAMPLES / f"{name}.mir").exists():
            graphs.append((name, load_model(EXAMPLES / f"{name}.mir")))
        elif name in MINDIR_MODELS and (MINDIR / f"{name}.mindir").exists():
            graphs.append((name, load_model(MINDIR / f"{name}.mindir")))
        else:
            known = ", ".join(["examples", "mindir", *BUILT_MODELS, *(p.stem for p in sorted(EXAMPLES.glob("*.mir"))),
                               *MINDIR_MODELS])
            raise SystemExit(f"unknown model '{name}' (known: {known})")
    return graphs


# --- the same graph as a PyTorch function ------------------------------------------------------


def torch_function(graph):
    """A torch.nn.Module computing `graph` with torch ops (same weights; `_module`)."""
    import torch
    import torch.nn.functional as F

    def conv2d(x, w, strides, padding, dilation, groups):
        top, left, bottom, right = padding if len(padding) == 4 else (*padding, *padding)
        if top == bottom and left == right:  # one conv call, as a torch model writes it
            return F.conv2d(x, w, None, tuple(strides), (top, left), tuple(dilation), groups)
        return F.conv2d(F.pad(x, (left, right, top, bottom)), w, None, tuple(strides), 0, tuple(dilation), groups)

    ops = {
        "matmul": lambda a, b, transpose_a, transpose_b: (a.T if transpose_a else a) @ (b.T if transpose_b else b),
        "batch_matmul": lambda a, b, transpose_a, transpose_b: torch.matmul(
            a.transpose(-1, -2) if transpose_a else a, b.transpose(-1, -2) if transpose_b else b),
        "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
        "relu": torch.relu, "relu6": F.relu6, "exp": torch.exp, "tanh": torch.tanh, "sigmoid": torch.sigmoid,
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
        "cross_entropy": lambda x, labels, reduction, ignore_index=None: F.cross_entropy(
            x, labels.long(), reduction=reduction, ignore_index=-100 if ignore_index is None else ignore_index),
        "dropout": lambda x, rate: x,
    }
    missing = sorted({n.op for n in graph.nodes} - set(ops))
    if missing:
        raise NotImplementedError(f"{graph.name}: no torch mapping for {', '.join(missing)}")

    return _module(graph, ops)


def _literal(value) -> str | None:
    """`value` as Python source that evaluates back to it, or None."""
    try:
        text = repr(value)
        return text if eval(text, {"inf": math.inf, "nan": math.nan}) == value else None  # noqa: S307
    except Exception:  # noqa: BLE001
        return None


def _module(graph, ops: dict):
    """`graph` as a torch.nn.Module as a PyTorch user writes one: the weights are its parameters
    (buffers when not floating point) and `forward` is straight-line code, one torch call per
    node (generated source), so dynamo traces and guards a model, not an interpreter of one."""
    import torch

    class Model(torch.nn.Module):
        pass

    model = Model()
    names: dict[str, str] = {}
    for i, (v, a) in enumerate(graph.constants.items()):
        t = torch.from_numpy(np.ascontiguousarray(a))
        if t.is_floating_point():
            model.register_parameter(f"w{i}", torch.nn.Parameter(t))
        else:
            model.register_buffer(f"w{i}", t)
        names[v.name] = f"self.w{i}"
    args = []
    for i, v in enumerate(graph.inputs):
        names[v.name] = f"x{i}"
        args.append(f"x{i}")
    attrs: list[dict] = []
    lines = [f"def forward(self, {', '.join(args)}):"]
    for n in graph.nodes:
        outs = []
        for v in n.outputs:
            names[v.name] = f"t{len(names)}"
            outs.append(names[v.name])
        kwargs = []
        for key, value in n.attrs.items():
            text = _literal(value)
            if text is None:  # not a literal: read from a table (dynamo guards it)
                attrs.append(value)
                text = f"ATTRS[{len(attrs) - 1}]"
            kwargs.append(f"{key}={text}")
        call = f"OPS[{n.op!r}]({', '.join([*(names[v.name] for v in n.inputs), *kwargs])})"
        target = outs[0] if len(outs) == 1 else f"({', '.join(outs)},)"
        lines.append(f"    {target} = {call}")
    lines.append(f"    return ({''.join(names[v.name] + ', ' for v in graph.outputs)})")
    namespace = {"OPS": ops, "ATTRS": attrs}
    exec(compile("\n".join(lines) + "\n", f"<{graph.name} as torch>", "exec"), namespace)  # noqa: S102
    Model.forward = namespace["forward"]
    return model


def onnx_session(fn, tensors, path: Path):
    """An ONNX Runtime session of `fn` exported to `path` with example inputs `tensors`, and
    a function of no arguments that runs it on them."""
    import onnxruntime as ort
    import torch

    torch.onnx.export(fn, tuple(tensors), str(path), dynamo=False)
    options = ort.SessionOptions()
    options.intra_op_num_threads = int(os.environ["TVM_NUM_THREADS"])  # the threads akg's kernels get
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    feeds = {i.name: t.numpy() for i, t in zip(session.get_inputs(), tensors)}
    return lambda: session.run(None, feeds)


# --- akg's kernel time ------------------------------------------------------------------------


def kernel_times(model, inputs: dict, rounds: int) -> list[float]:
    """Seconds of every kernel call of `model`, each timed alone on the model's own values (its
    inputs, weights and the outputs of the calls before), best of `rounds` rounds or more
    (`timing.best_rounds`: until the bests settle)."""
    from call_path import kernel_timers

    timers = kernel_timers(model, inputs)

    def run_round(i):
        timer, args = timers[i]
        return statistics.median(timer(*args).results)

    best, _ = best_rounds(range(len(timers)), run_round, rounds)
    return [best[i] for i in range(len(timers))]


def kernel_flops(graph) -> list[int]:
    """Floating-point operations of every kernel call, in call order."""
    from akg.graph.pipeline import plan_model
    from akg.graph.stats import graph_stats
    from akg.target import get_target

    return [graph_stats(k.subgraph.graph).flops for k in plan_model(graph, get_target("cpu")).kernels]


def _check(graph, outputs, reference: Reference) -> str | None:
    """None when `outputs` match the reference interpreter, else what differs."""
    bad = compare(graph, [np.asarray(o) for o in outputs], reference)
    return "; ".join(map(str, bad)) or None


def door_contenders(row: dict, graph, tensors, ordered, onnx_path: Path, checked, graph_model) -> dict:
    """The same model through akg's other doors, default configs: the ONNX file exported for
    ONNX Runtime imported by akg (`akg.compile(path)`), and the graph's torch module
    (`torch_function`) compiled by `torch.compile(backend="akg")`. Each must be as fast as the graph loaded directly (same
    kernels, same memory plan): the table reports the ratio. A torch.compile door also pays
    dynamo's own per-call work (guards, the compiled frame, aot_autograd's wrapper, NumPy views
    of torch's tensors) that no backend avoids: `graph_behind_torch_compile` measures that
    floor around the graph's own compiled model in the same rounds."""
    import akg

    out = {}
    if onnx_path.exists():
        try:
            via_onnx = akg.compile(onnx_path, target="cpu")
            checked("akg via ONNX", via_onnx(*ordered))
            row["onnx_kernels"] = len(via_onnx.calls)
            row["onnx_workloads"] = [c.kernel for c in via_onnx.calls]
            row["onnx_peak_bytes"] = via_onnx.plan.peak_bytes
            out["akg_onnx_s"] = lambda: via_onnx(*ordered)
        except Exception as e:  # noqa: BLE001  (reported in the row, the run goes on)
            row["akg_onnx_error"] = str(e).splitlines()[0][:120]
    try:
        import torch

        from akg.dynamo import STATS

        before, compiled = STATS.fallbacks, len(STATS.compiled)
        # a module of its own per torch.compile: each compiles its own forward's code
        via_torch = torch.compile(torch_function(graph), backend="akg", dynamic=False)
        checked("akg via torch.compile", [t.numpy() for t in via_torch(*tensors)])
        row["akg_torch_fallback"] = STATS.fallbacks != before
        graphs = STATS.compiled[compiled:]
        row["torch_kernels"] = sum(len(g.calls) for g in graphs)
        row["torch_workloads"] = [k for g in graphs for k in g.calls]
        row["torch_peak_bytes"] = sum(g.peak_bytes for g in graphs)
        out["akg_torch_s"] = lambda: via_torch(*tensors)
        floor = torch.compile(torch_function(graph), backend=graph_behind_torch_compile(graph_model, tensors), dynamic=False)
        checked("the graph behind torch.compile", [t.numpy() for t in floor(*tensors)])
        out["torch_floor_s"] = lambda: floor(*tensors)
    except Exception as e:  # noqa: BLE001
        row["akg_torch_error"] = str(e).splitlines()[0][:120]
    return out


def graph_behind_torch_compile(model, tensors):
    """A torch.compile backend that runs `model` (the graph loaded directly, compiled by akg)
    for the graph dynamo captures, the weights left to `model`'s own constants: what wrapping
    the same kernels and memory plan in torch.compile costs (dynamo's guards and compiled
    frame, aot_autograd's inference wrapper, NumPy views in and torch tensors out), the floor
    of akg's torch.compile door. `tensors` are the model's inputs, in `model`'s order."""
    import torch
    from torch._dynamo.backends.common import aot_autograd

    from akg.graph.io.torch_fx import decompositions

    def backend(gm, example_inputs):
        position = {id(t): j for j, t in enumerate(tensors)}
        taken = sorted((position[id(x)], i) for i, x in enumerate(example_inputs) if id(x) in position)
        if [j for j, _ in taken] != list(range(len(tensors))):
            raise RuntimeError("dynamo's graph does not take every model input once")
        picks = [i for _, i in taken]

        def compiler(g, inputs):
            def run(args):
                arrays = [args[i].detach().numpy() for i in picks]
                args.clear()
                return [torch.from_numpy(r) for r in model(*arrays)]

            run._boxed_call = True
            return run

        return aot_autograd(fw_compiler=compiler, inference_compiler=compiler,
                            decompositions=decompositions())(gm, example_inputs)

    return backend


def bench_model(name: str, graph, trials: int, workdir: Path, kernel_rounds: int = 3, doors: bool = True,
                probe: HostProbe | None = None) -> dict:
    import torch

    from akg.api import compile_model
    from akg.tuner.tune import tune

    torch.set_num_threads(int(os.environ["TVM_NUM_THREADS"]))  # the threads akg's kernels get
    torch._dynamo.reset()  # each model starts from dynamo's empty caches
    inputs = random_inputs(graph, 0)
    ordered = [inputs[v.name] for v in graph.inputs]
    row = {"model": name, "failed": {}}
    reference = Reference.of(graph, inputs)
    row["interpreter_s"] = timeit(lambda: evaluate(graph, inputs), min_seconds=0.5, min_runs=3)

    def checked(label: str, outputs) -> None:
        problem = _check(graph, outputs, reference)
        if problem:
            row["failed"][label] = problem
            print(f"   {label} does not match the reference interpreter: {problem}", flush=True)

    default = compile_model(graph)
    row["kernels"] = len(default.calls)
    row["distinct_kernels"] = len(default.kernels)
    row["call_names"] = [c.name for c in default.calls]
    row["workloads"] = [c.kernel for c in default.calls]
    row["flops"] = kernel_flops(graph)
    row["peak_bytes"], row["naive_bytes"] = default.plan.peak_bytes, default.plan.naive_bytes
    checked("akg default", default(**inputs))
    contenders = {"akg_default_s": lambda: default(**inputs)}
    models = {"akg_default": default}

    if trials:
        db = str(workdir / f"{name}.db")
        t0 = time.perf_counter()
        result = tune(graph, trials=trials, db=db)
        row["tune_s"] = time.perf_counter() - t0
        row["tune_trials"] = sum(k.trials for k in result.kernels)
        tuned = compile_model(graph, db=db)
        checked("akg tuned", tuned(**inputs))
        contenders["akg_tuned_s"] = lambda: tuned(**inputs)
        models["akg_tuned"] = tuned

    fn = torch_function(graph)
    tensors = [torch.from_numpy(a) for a in ordered]
    with torch.no_grad():
        checked("PyTorch eager", [t.numpy() for t in fn(*tensors)])
        contenders["torch_eager_s"] = lambda: fn(*tensors)
        try:
            compiled = torch.compile(torch_function(graph))  # a module of its own, as every torch.compile here
            checked("Inductor", [t.numpy() for t in compiled(*tensors)])
            contenders["torch_compile_s"] = lambda: compiled(*tensors)
        except Exception as e:  # noqa: BLE001  (Inductor needs a working C++ toolchain)
            row["torch_compile_error"] = str(e).splitlines()[0][:120]
        try:
            run_ort = onnx_session(fn, tensors, workdir / f"{name}.onnx")
            checked("ONNX Runtime", run_ort())
            contenders["onnxruntime_s"] = run_ort
        except ImportError:
            pass
        except Exception as e:  # noqa: BLE001
            row["onnxruntime_error"] = str(e).splitlines()[0][:120]
        if doors:
            contenders.update(door_contenders(row, graph, tensors, ordered, workdir / f"{name}.onnx", checked, default))
        timing = {}
        row.update(timeit_interleaved(contenders, probe=probe, report=timing))
        row["rounds"], row["host"] = timing["rounds"], timing.get("host")
    for label, model in models.items():
        row[f"{label}_kernel_times"] = kernel_times(model, inputs, kernel_rounds)
        row[f"{label}_kernels_s"] = sum(row[f"{label}_kernel_times"])
    return row


# --- the report ------------------------------------------------------------------------------


def fmt_ms(s):
    return f"{s * 1e3:.3f}" if s else "n/a"


def ratio(a, b):
    """How many times faster a is than b ("2.00x": a takes half b's time)."""
    return f"{b / a:.2f}x" if a and b else "n/a"


def rounds(row) -> str:
    """The rounds the contenders were timed in, and the host probe's best round in them over its
    best in the run (stream / compute; 1.00: the host was as fast as it ever was)."""
    host = row.get("host")
    if not host:
        return str(row.get("rounds", "-"))
    return f"{row['rounds']} ({host['stream']:.2f} / {host['compute']:.2f})"


def table(rows) -> str:
    head = ("| model | kernel calls | akg default ms (kernels + call path) | akg tuned ms (kernels + call path) "
            "| interpreter ms | eager ms | Inductor ms | ONNX Runtime ms | tuned vs eager | tuned vs Inductor "
            "| tuned vs ORT | rounds (host) | fails the check |")
    lines = [head, "|" + "---|" * 13]

    def split(r, label):
        total, kernels = r.get(f"{label}_s"), r.get(f"{label}_kernels_s")
        if not total:
            return "n/a"
        return f"{fmt_ms(total)} ({fmt_ms(kernels)} + {fmt_ms(total - kernels)})"

    for r in rows:
        best = r.get("akg_tuned_s") or r["akg_default_s"]
        lines.append(
            f"| {r['model']} | {r['kernels']} ({r['distinct_kernels']} distinct) | {split(r, 'akg_default')} "
            f"| {split(r, 'akg_tuned')} | {fmt_ms(r['interpreter_s'])} | {fmt_ms(r['torch_eager_s'])} "
            f"| {fmt_ms(r.get('torch_compile_s'))} | {fmt_ms(r.get('onnxruntime_s'))} "
            f"| {ratio(best, r['torch_eager_s'])} | {ratio(best, r.get('torch_compile_s'))} "
            f"| {ratio(best, r.get('onnxruntime_s'))} | {rounds(r)} | {', '.join(r['failed']) or 'none'} |")
    return "\n".join(lines)


def doors_table(rows) -> str:
    """akg's default-config model time through each door, and each door against the graph
    loaded directly (1.00x: as fast); the torch.compile door also against the same graph
    behind torch.compile (dynamo's per-call floor; 1.00x: akg's import adds nothing)."""
    lines = ["| model | akg .mir/graph ms | akg via ONNX ms | ONNX vs graph | akg via torch.compile ms "
             "| torch.compile vs graph | graph behind torch.compile ms | torch.compile vs graph behind it "
             "| kernel calls (graph / ONNX / torch.compile) | notes |", "|" + "---|" * 10]
    for r in rows:
        base = r["akg_default_s"]
        notes = [f"{k}: {r[k]}" for k in ("akg_onnx_error", "akg_torch_error") if r.get(k)]
        if r.get("akg_torch_fallback"):
            notes.append("torch.compile fell back to torch for part of the graph")
        for door in ("onnx", "torch"):
            peak = r.get(f"{door}_peak_bytes")
            if peak is not None and peak != r["peak_bytes"]:
                notes.append(f"{door} peak {peak / 1e6:.2f} MB, the graph {r['peak_bytes'] / 1e6:.2f} MB")
            keys = r.get(f"{door}_workloads")
            if keys is not None and keys != r["workloads"]:  # a kernel's workload key: ops, shapes, dtypes, no names
                differ = sum(a != b for a, b in zip(keys, r["workloads"])) + abs(len(keys) - len(r["workloads"]))
                notes.append(f"{door}: {differ} kernel call(s) differ from the graph's")
        calls = " / ".join(str(r.get(k, "-")) for k in ("kernels", "onnx_kernels", "torch_kernels"))
        lines.append(f"| {r['model']} | {fmt_ms(base)} | {fmt_ms(r.get('akg_onnx_s'))} "
                     f"| {ratio(r.get('akg_onnx_s'), base)} | {fmt_ms(r.get('akg_torch_s'))} "
                     f"| {ratio(r.get('akg_torch_s'), base)} | {fmt_ms(r.get('torch_floor_s'))} "
                     f"| {ratio(r.get('akg_torch_s'), r.get('torch_floor_s'))} | {calls} | {'; '.join(notes) or '-'} |")
    return "\n".join(lines)


def kernel_table(rows) -> str:
    """Every kernel call of every model: default and tuned time and the tuned GFLOP/s."""
    lines = ["| model | # | kernel | MFLOP | default us | tuned us | tuned GFLOP/s |", "|" + "---|" * 7]
    for r in rows:
        tuned = r.get("akg_tuned_kernel_times") or r["akg_default_kernel_times"]
        for i, (label, flops, d, t) in enumerate(zip(r["call_names"], r["flops"], r["akg_default_kernel_times"],
                                                     tuned)):
            lines.append(f"| {r['model']} | {i} | {label} | {flops / 1e6:.2f} | {d * 1e6:.1f} | {t * 1e6:.1f} "
                         f"| {flops / t / 1e9:.1f} |")
    return "\n".join(lines)


def machine() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    except OSError:
        return "unknown"
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    return f"{fields.get('Model name', '?').strip()}, {fields.get('CPU(s)', '?').strip()} CPUs"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=DEFAULT_MODELS,
                    help=f"comma-separated: examples, mindir, an example's or a built model's name "
                         f"({', '.join(BUILT_MODELS)}); default: {DEFAULT_MODELS}")
    ap.add_argument("--trials", type=int, default=64, help="tuning trials per model (0: default configs only)")
    ap.add_argument("--kernel-rounds", type=int, default=3, help="rounds of timing every kernel call alone")
    ap.add_argument("--per-kernel", action="store_true", help="also print every kernel call's time")
    ap.add_argument("--record", type=Path, help="append the tables to this markdown file")
    ap.add_argument("--no-doors", action="store_true",
                    help="skip akg through its ONNX importer and its torch.compile backend")
    args = ap.parse_args(argv)
    graphs = load_graphs(args.models)
    workdir = Path(tempfile.mkdtemp(prefix="akg-bench-models-"))
    probe = HostProbe()
    rows = []
    for name, g in graphs:
        print(f"== {name}", flush=True)
        rows.append(bench_model(name, g, args.trials, workdir, args.kernel_rounds, doors=not args.no_doors,
                                probe=probe))
        print(table(rows[-1:]).splitlines()[-1], flush=True)
    load = os.getloadavg()
    text = "\n".join([
        f"date: {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC; machine: {machine()}; "
        f"TVM_NUM_THREADS={os.environ['TVM_NUM_THREADS']}; load average at the end {load[0]:.2f}, {load[1]:.2f}",
        f"command: `python scripts/bench/models.py {' '.join(argv if argv is not None else sys.argv[1:])}` "
        f"(tuned: {args.trials} trials per model)", "", table(rows), ""])
    if not args.no_doors:
        text += "\n" + doors_table(rows) + "\n"
    if args.per_kernel:
        text += "\n" + kernel_table(rows) + "\n"
    print(text)
    if args.record:
        with open(args.record, "a") as f:
            f.write(f"\n## Models, end to end on CPU\n\n{text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The CUDA runner on a real GPU, in one prepared run (issue 18): every kernel of the kernel
suite and the issue's kernel families checked against the NumPy reference on the GPU, the
tuner's measurement (verify, then time with CUDA events) over a few candidate configs of a
matmul, a softmax and a row sum, and the runner's error paths (a launch over the limits, a
kernel that faults and the context reset after it).

The GPU machines lent here have the NVIDIA driver, nvcc, NumPy, SciPy and pytest, but no TVM
or islpy (akg's compiler) and no network, and only 64 MiB travel with the working tree. So the
check runs in two steps:

1. here, with akg's compiler and nvcc (no GPU needed):

       .venv/bin/python scripts/gpu_check.py prepare            # -> build/gpu_check (ignored by git)

   builds every case for the GPU's target (`--target cuda-sm90`: the H100 and H200) and
   stores its artifact (cubin, launches, launch plan), its graph and inputs;

2. on the GPU machine (the device tool's `run`, carrying `build/gpu_check`, ~1-2 minutes):

       python3 scripts/gpu_check.py run 2>&1 | tee $OUT/gpu_check.log

   prints nvidia-smi, runs the `gpu`-marked tests where akg's compiler is importable (not on
   the lent machines), then loads each artifact through the CUDA backend (`driver.py` over
   libcuda, nothing else of NVIDIA's), checks it against the reference computed there by akg's
   interpreter, and times the candidates. The exit status is 0 when every check passed.

`run --dry` (any machine) loads every case and computes its reference without a GPU."""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.util
import os
import pickle
import shutil
import statistics
import subprocess
import sys
import time
import traceback
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DIR = ROOT / "build" / "gpu_check"
FOLDERS = {"akg.graph": "graph", "akg.db": "db", "akg.polyhedral": "polyhedral", "akg.schedules": "schedules",
           "akg.tuner": "tuner"}  # top-level folders that install as subpackages of akg (setup.py)

# the tuner's measurement (akg/tuner/runner/evaluate.py): repeats of at least MIN_SECONDS each
MIN_SECONDS, REPEATS = 0.01, 5
TIMING = {  # name -> (graph builder, flops, bytes moved at least)
    "matmul_f32_1024": (lambda b: b.output(b.matmul(b.input("a", (1024, 1024)), b.input("w", (1024, 1024)))),
                        2 * 1024 ** 3, 3 * 1024 * 1024 * 4),
    "softmax_4096x1024": (lambda b: b.output(b.softmax(b.input("x", (4096, 1024)), axis=-1)), 0,
                          2 * 4096 * 1024 * 4),
    "row_sum_4096x1024": (lambda b: b.output(b.sum(b.input("x", (4096, 1024)), axes=[1])), 0,
                          4096 * 1024 * 4 + 4096 * 4),
}
# a kernel that writes a TiB past its buffer: an illegal address, which the driver reports as
# a sticky error after the launch
FAULT_SOURCE = """extern "C" __global__ void __launch_bounds__(32) fault_kernel(float* __restrict__ x_ptr) {
  x_ptr[(1ULL << 38) + threadIdx.x] = x_ptr[0];
}
"""


# --- imports without installing akg and without TVM -----------------------------------------


class _Folders(importlib.abc.MetaPathFinder):
    """akg.graph -> graph/ and the like, as `pip install -e .` maps them."""

    def find_spec(self, name, path=None, target=None):
        folder = FOLDERS.get(name)
        if folder is None:
            return None
        where = ROOT / folder
        return importlib.util.spec_from_file_location(name, where / "__init__.py",
                                                      submodule_search_locations=[str(where)])


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def setup_imports() -> bool:
    """Make akg importable from this checkout; where TVM is missing, the CUDA plug-in's
    package is entered without its __init__ (which registers the TVM-based backends) and
    `bind.Launch` is given without bind.py (which needs TVM). True: TVM and islpy are here."""
    sys.path.insert(0, str(ROOT))
    if not _has("akg.graph"):
        sys.meta_path.insert(0, _Folders())
    compiler = _has("tvm") and _has("islpy")
    if not compiler:
        import dataclasses
        import math

        for name, folder in (("akg.backends", ROOT / "akg" / "backends"),
                             ("akg.backends.cuda", ROOT / "akg" / "backends" / "cuda")):
            package = types.ModuleType(name)
            package.__path__ = [str(folder)]
            sys.modules[name] = package
        bind = types.ModuleType("akg.backends.cuda.bind")

        @dataclasses.dataclass(frozen=True)
        class Launch:  # what akg/backends/cuda/bind.py's Launch holds
            grid: tuple
            block: tuple

            @property
            def threads(self) -> int:
                return math.prod(self.block)

            def to_list(self) -> list:
                return [list(self.grid), list(self.block)]

        bind.Launch = Launch
        sys.modules["akg.backends.cuda.bind"] = bind
    return compiler


# --- prepare (here: akg's compiler and nvcc) ----------------------------------------------------


def _case(group: str, name: str, graph, kernel, inputs=None, config: str = "default", **extra) -> dict:
    program = kernel.program
    if program.complex_io:
        return {}
    backend = kernel.target.backend()
    artifact = backend.export(kernel.executable)
    return {"group": group, "name": name, "graph": graph, "kind": artifact.kind, "artifact": artifact.data,
            "inputs": inputs, "input_names": [t.name for t in program.inputs],
            "params": [v for v in program.params.values()],
            "outputs": [(tuple(t.shape), str(t.dtype)) for t in program.outputs], "config": config, **extra}


def _parameters(fn) -> list[dict]:
    """The keyword arguments of each case of a test's `pytest.mark.parametrize` marks."""
    import itertools

    grids = []
    for mark in getattr(fn, "pytestmark", []):
        if mark.name != "parametrize":
            continue
        names, values = mark.args[0], mark.args[1]
        names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
        rows = []
        for v in values:
            if hasattr(v, "marks") and hasattr(v, "values"):  # pytest.param(...)
                v = v.values
            elif len(names) == 1:
                v = (v,)
            rows.append(dict(zip(names, v)))
        grids.append(rows)
    return [dict(itertools.chain.from_iterable(d.items() for d in combo)) for combo in itertools.product(*grids)]


def prepare(out: Path, target: str, candidates: int, quick: bool = False) -> None:
    """`quick`: two families and one timed kernel, no suite (the tests' check of this script)."""
    import random

    import akg
    from akg.compiler import pipeline_for
    from akg.graph import GraphBuilder

    sys.path.insert(0, str(ROOT / "tests" / "akg" / "backends" / "cuda"))
    sys.path.insert(0, str(ROOT / "tests"))
    import cuda_suite
    from test_emulate import FAMILIES

    cases: list[dict] = []
    t0 = time.time()

    def graph_of(body):
        b = GraphBuilder("k")
        body(b)
        return b.build()

    for test, fn in ({} if quick else cuda_suite.suite_tests()).items():
        count = [0]

        def check(graph, kernel=None, seed: int = 0, inputs=None, test=test, count=count):
            from akg.graph import random_inputs

            kernel = kernel or akg.build(graph, target=target)
            inputs = inputs if inputs is not None else random_inputs(graph, seed)
            case = _case("suite", f"{test}[{count[0]}]", graph, kernel, dict(inputs))
            count[0] += 1
            if case:
                cases.append(case)
            return kernel

        try:
            for kwargs in _parameters(fn):
                fn(check_kernel=check, **kwargs)
        except Exception as e:  # noqa: BLE001  (a kernel that does not build for the GPU: reported)
            print(f"prepare: {test}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    for family, body in sorted(FAMILIES.items()):
        if quick and family not in ("full_sum", "softmax"):
            continue
        graph = graph_of(body)
        cases.append(_case("family", family, graph, akg.build(graph, target=target)))
    for name, (body, flops, nbytes) in TIMING.items():
        if quick and name != "row_sum_4096x1024":
            continue
        graph = graph_of(body)
        pipeline = pipeline_for(graph, target)
        cases.append(_case("timing", name, graph, pipeline.build(None), flops=flops, bytes=nbytes))
        rng, seen, tries, space = random.Random(0), set(), 0, pipeline.space()
        while len(seen) < candidates and tries < 20 * candidates:
            tries += 1
            config = space.sample(rng)
            if str(config) in seen:
                continue
            try:
                kernel = pipeline.build(config, config_source="sampled")
            except Exception:  # noqa: BLE001  (illegal configs: the tuner's builder skips them too)
                continue
            seen.add(str(config))
            cases.append(_case("timing", name, graph, kernel, config=str(config), flops=flops, bytes=nbytes))
    from akg.backends.cuda.nvcc import compile_cubin
    from akg.target import get_target

    cubin, _ = compile_cubin(FAULT_SOURCE, get_target(target).arch, "fault_kernel")
    out.mkdir(parents=True, exist_ok=True)
    data = {"target": target, "arch": get_target(target).arch, "cases": [c for c in cases if c],
            "fault_cubin": cubin}
    with open(out / "cases.pkl", "wb") as f:
        pickle.dump(data, f, protocol=4)
    size = (out / "cases.pkl").stat().st_size
    print(f"prepared {len(data['cases'])} cases for {target} in {time.time() - t0:.0f} s: "
          f"{out / 'cases.pkl'} ({size / 2 ** 20:.1f} MiB)")


# --- run (the GPU machine) ----------------------------------------------------------------------


def _sh(cmd: list[str]) -> None:
    exe = shutil.which(cmd[0])
    if exe is None:
        print(f"$ {' '.join(cmd)}: not found")
        return
    proc = subprocess.run([exe, *cmd[1:]], capture_output=True, text=True, timeout=60)
    print(f"$ {' '.join(cmd)}\n{(proc.stdout + proc.stderr).rstrip()}")


def _reference(case: dict):
    from akg.graph import random_inputs
    from akg.verify import Reference

    graph = case["graph"]
    inputs = case["inputs"] if case["inputs"] is not None else random_inputs(graph, 0)
    return inputs, Reference.of(graph, inputs)


def _verify(backend, exe, case: dict, inputs, reference) -> tuple[list, list[str]]:
    """(device tensors in call order, problems) of one call on the GPU, as
    tests/conftest.py's assert_matches_reference checks it."""
    import numpy as np

    from akg.verify import compare

    args = [np.asarray(inputs[n]) for n in case["input_names"]] + [np.asarray(p) for p in case["params"]]
    tensors = [backend.to_device(a) for a in args] + [backend.empty(s, d) for s, d in case["outputs"]]
    backend.entry(exe)(*tensors)
    got = [backend.to_numpy(t) for t in tensors[len(args):]]
    return tensors, [str(p) for p in compare(case["graph"], got, reference)]


def _time(backend, exe, tensors) -> float:
    """Seconds per call as the tuner's runner takes them (evaluate.run_artifact)."""
    kernel = backend.entry(exe)
    t0 = time.perf_counter()
    kernel(*tensors)
    once = max(time.perf_counter() - t0, 1e-7)
    repeats = min(REPEATS, 3) if once > MIN_SECONDS else REPEATS
    number = max(1, int(MIN_SECONDS / once))
    return float(statistics.median(backend.measure(exe, tensors, number=number, repeat=repeats)))


def run(folder: Path, dry: bool, pytest_too: bool) -> int:
    compiler = setup_imports()
    with open(folder / "cases.pkl", "rb") as f:
        data = pickle.load(f)
    cases = data["cases"]
    print(f"{len(cases)} cases for {data['target']} ({data['arch']}); Python {sys.version.split()[0]}; "
          f"akg's compiler {'here' if compiler else 'not here (no TVM/islpy): the prepared artifacts run'}")
    failures: list[str] = []
    if dry:
        for case in cases:
            _reference(case)
        from akg.backends.cuda.backend import CudaBackend
        from akg.target import Artifact

        backend = CudaBackend()
        plans = sum(backend.load(Artifact(c["kind"], c["artifact"])).plan is not None for c in cases)
        print(f"dry run: {len(cases)} references computed, {plans} artifacts with launch plans loaded")
        return 0 if plans == len(cases) else 1
    _sh(["nvidia-smi"])
    _sh(["nvcc", "--version"])
    if pytest_too and compiler:
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider",
                               "tests/akg/backends/cuda/test_driver.py", "tests/akg/backends/cuda/test_backend.py"],
                              cwd=ROOT, timeout=900)
        if proc.returncode:
            failures.append(f"pytest -m gpu exited {proc.returncode}")
    elif pytest_too:
        print("pytest -m gpu: skipped, akg's compiler (TVM, islpy) is not installed here")

    from akg.backends.cuda.backend import CudaBackend, CudaExecutable
    from akg.backends.cuda.driver import get_driver
    from akg.backends.cuda.errors import CudaError
    from akg.backends.cuda.plan import LaunchPlan, PlanBuffer
    from akg.target import Artifact

    driver = get_driver()
    print(f"GPU: {driver.name}, compute capability {driver.capability[0]}.{driver.capability[1]}")
    backend = CudaBackend()
    t0 = time.time()
    checked = 0
    timings: dict[str, list] = {}
    for case in cases:
        label = f"{case['group']} {case['name']}" + (f" [{case['config']}]" if case["group"] == "timing" else "")
        try:
            exe = backend.load(Artifact(case["kind"], case["artifact"]))
            inputs, reference = _reference(case)
            tensors, problems = _verify(backend, exe, case, inputs, reference)
            checked += 1
            if problems:
                failures.append(f"{label}: wrong result: {'; '.join(problems)[:300]}")
                continue
            if case["group"] == "timing":
                timings.setdefault(case["name"], []).append((case["config"], _time(backend, exe, tensors), exe,
                                                             tensors))
        except Exception as e:  # noqa: BLE001  (every case is reported)
            failures.append(f"{label}: {type(e).__name__}: {e}")
            traceback.print_exc(limit=3)
    print(f"checked {checked} of {len(cases)} kernels against the reference in {time.time() - t0:.1f} s")

    for name, rows in timings.items():
        _, flops, nbytes = TIMING[name]
        default = rows[0][1] if rows and rows[0][0] == "default" else None
        print(f"\n{name}: {len(rows)} configs verified and timed (median of {REPEATS} repeats, CUDA events)")
        for config, cost, exe, _ in sorted(rows, key=lambda r: r[1]):
            rate = f"{flops / cost / 1e9:8.0f} GFLOP/s" if flops else f"{nbytes / cost / 1e9:8.0f} GB/s"
            launches = " ".join(f"{lnch.grid}x{lnch.block}" for lnch in exe.launches)
            print(f"  {cost * 1e6:10.1f} us  {rate}  {config[:70]}  {launches}")
        if default:
            best = min(r[1] for r in rows)
            print(f"  best / default: {default / best:.2f}x")
        # the events against the wall clock: `number` synchronised calls take at least as long
        config, cost, exe, tensors = rows[0]
        kernel = backend.entry(exe)
        t1 = time.perf_counter()
        for _ in range(10):
            kernel(*tensors)
        wall = (time.perf_counter() - t1) / 10
        print(f"  events {cost * 1e6:.1f} us per call, wall clock {wall * 1e6:.1f} us per synchronised call")
        if cost > 1.5 * wall:
            failures.append(f"{name}: event time {cost} s above the wall clock's {wall} s")

    # the error paths: a launch over the GPU's limits names its kernel; a fault resets the
    # context, and the next kernel runs in a fresh one
    case = next(c for c in cases if c["group"] == "family")
    exe = backend.load(Artifact(case["kind"], case["artifact"]))
    launch = type(exe.launches[0])
    too_big = CudaExecutable(exe.name, exe.arch, exe.source, exe.cubin, exe.kernels,
                             tuple(launch(lnch.grid, (4096, 1, 1)) for lnch in exe.launches), exe.resources, exe.plan)
    inputs, reference = _reference(case)
    try:
        _verify(backend, too_big, case, inputs, reference)
        failures.append("a launch of 4096 threads per block did not fail")
    except CudaError as e:
        print(f"\nlaunch over the limits: {e}")
        if e.call != "cuLaunchKernel" or e.kernel != exe.kernels[0] or e.sticky:
            failures.append(f"the launch error is not cuLaunchKernel of {exe.kernels[0]}: {e}")
    import numpy as np

    plan = LaunchPlan((PlanBuffer("x", (1,), "float32"),), (), ((0,),), (0,))
    fault = CudaExecutable("fault", data["arch"], FAULT_SOURCE, data["fault_cubin"], ("fault_kernel",),
                           (launch((1, 1, 1), (32, 1, 1)),), {}, plan)
    try:
        backend.entry(fault)(backend.to_device(np.ones(1, "float32")))
        failures.append("a kernel writing outside its memory did not fault")
    except CudaError as e:
        print(f"a faulting kernel: {e}")
        if not e.sticky:
            failures.append(f"the fault did not reset the context: {e}")
    try:
        _, problems = _verify(backend, exe, case, inputs, reference)
        print(f"after the reset: {case['name']} {'wrong' if problems else 'matches the reference'}")
        if problems:
            failures.append("a kernel after the context reset is wrong")
    except Exception as e:  # noqa: BLE001
        failures.append(f"a kernel after the context reset failed: {type(e).__name__}: {e}")

    print(f"\n{len(failures)} failure(s)")
    for f in failures:
        print(f"FAIL {f}")
    out = os.environ.get("OUT")
    if out:
        Path(out, "gpu_check_failures.txt").write_text("\n".join(failures) + "\n")
    return 1 if failures else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="build the cases here (akg's compiler, nvcc)")
    p.add_argument("dir", nargs="?", type=Path, default=DEFAULT_DIR)
    p.add_argument("--target", default="cuda-sm90", help="the GPU's target (cuda-sm90: H100, H200)")
    p.add_argument("--candidates", type=int, default=6, help="sampled configs per timed kernel")
    p.add_argument("--quick", action="store_true", help="two families and the row sum only")
    r = sub.add_parser("run", help="check and time the prepared cases on the GPU")
    r.add_argument("dir", nargs="?", type=Path, default=DEFAULT_DIR)
    r.add_argument("--dry", action="store_true", help="load the cases and their references, no GPU")
    r.add_argument("--no-pytest", action="store_true", help="skip the gpu-marked tests")
    args = parser.parse_args(argv)
    if args.command == "prepare":
        setup_imports()
        prepare(args.dir, args.target, args.candidates, args.quick)
        return 0
    return run(args.dir, args.dry, not args.no_pytest)


if __name__ == "__main__":
    sys.exit(main())

"""Measurement of candidate configs: build in a process pool, run each candidate in an
isolated worker with a timeout, verify its output against the reference before its time
counts. A candidate that fails to build, crashes, hangs or computes a wrong answer becomes a
failed result and measurement goes on.

Builders and runners are interfaces with local implementations; tests use the in-process
pair (no subprocess) or plant faulty artifacts through a custom builder.
"""

from __future__ import annotations

import abc
import multiprocessing as mp
import os
import shutil
import signal
import statistics
import tempfile
import time
import traceback
from concurrent.futures import ProcessPoolExecutor, TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from akg.db.record import Status
from akg.graph.interpreter import random_inputs
from akg.graph.ir import Graph
from akg.schedules.space import Config

DEFAULT_MIN_SECONDS = 0.05  # each timing repeat runs the kernel at least this long
DEFAULT_REPEATS = 5


@dataclass
class BuildResult:
    config: Config
    artifact: str | None = None  # path of a shared library exporting `main`
    status: Status = Status.OK
    error: str = ""
    seconds: float = 0.0
    features: np.ndarray | None = None


@dataclass
class MeasureResult:
    config: Config
    status: Status
    cost: float | None = None  # seconds
    error: str = ""
    build_seconds: float = 0.0
    run_seconds: float = 0.0
    features: np.ndarray | None = None


@dataclass
class TaskData:
    """What a runner needs to check a candidate of one task: inputs (kernel argument order,
    parameters included) and the reference outputs, in declared precision and float64."""

    graph: Graph
    directory: Path
    seed: int = 0
    _path: Path | None = field(default=None, init=False)

    @property
    def path(self) -> Path:
        if self._path is None:
            from akg.graph.compute.lower import lower_graph
            from akg.verify import Reference

            program = lower_graph(self.graph)
            inputs = random_inputs(self.graph, self.seed)
            reference = Reference.of(self.graph, inputs)
            arrays = {f"in{k}": inputs[t.name] for k, t in enumerate(program.inputs)}
            arrays.update({f"param{k}": np.asarray(a) for k, a in enumerate(program.params.values())})
            arrays.update({f"ref{k}": a for k, a in enumerate(reference.declared)})
            arrays.update({f"exact{k}": a for k, a in enumerate(reference.exact)})
            path = self.directory / f"task-{id(self):x}.npz"
            np.savez(path, names=np.array([v.name for v in self.graph.outputs]), **arrays)
            self._path = path
        return self._path


# --- builders ---------------------------------------------------------------------------------


class Builder(abc.ABC):
    @abc.abstractmethod
    def build(self, graph: Graph, target, configs: list[Config]) -> list[BuildResult]:
        """One result per config, in order."""


def build_one(graph: Graph, target, config: Config, directory: str) -> BuildResult:
    """Compile one candidate and export it as a shared library (runs in a builder worker)."""
    from akg.compiler import pipeline_for
    from akg.errors import AkgError, ScheduleError
    from akg.tuner.features import extract_features

    t0 = time.perf_counter()
    try:
        pipeline = pipeline_for(graph, target, config.fusion)
        kernel = pipeline.build(config)
        fd, path = tempfile.mkstemp(suffix=".so", dir=directory)
        os.close(fd)
        kernel.executable.export_library(path)
        feats = extract_features(pipeline, config, kernel)
        return BuildResult(config, path, Status.OK, "", time.perf_counter() - t0, feats)
    except ScheduleError as e:  # an illegal config: the search counts and skips it
        return BuildResult(config, None, Status.BUILD_ERROR, f"illegal config: {e}", time.perf_counter() - t0)
    except AkgError as e:
        return BuildResult(config, None, Status.BUILD_ERROR, str(e), time.perf_counter() - t0)
    except Exception as e:  # noqa: BLE001  (a bug while building one candidate must not stop tuning)
        return BuildResult(config, None, Status.BUILD_ERROR, f"{type(e).__name__}: {e}",
                           time.perf_counter() - t0)


class LocalBuilder(Builder):
    """Builds candidates in a pool of worker processes (each keeps its front end warm)."""

    def __init__(self, workers: int | None = None, timeout: float = 120.0, directory: str | None = None):
        self.workers = workers or max(1, os.cpu_count() or 1)
        self.timeout = timeout
        self._own_directory = directory is None  # a temporary one, removed by close()
        self.directory = directory or tempfile.mkdtemp(prefix="akg-build-")
        self._pool: ProcessPoolExecutor | None = None

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(self.workers, mp_context=mp.get_context("spawn"),
                                             initializer=_ignore_interrupts)
        return self._pool

    def build(self, graph: Graph, target, configs: list[Config]) -> list[BuildResult]:
        pool = self._executor()
        futures = [pool.submit(build_one, graph, target, c, self.directory) for c in configs]
        out = []
        for config, fut in zip(configs, futures):
            try:
                out.append(fut.result(timeout=self.timeout))
            except FutureTimeout:
                out.append(BuildResult(config, None, Status.BUILD_ERROR, f"build took over {self.timeout:.0f}s"))
                self._kill_pool()  # the stuck worker goes with the pool
                pool = self._executor()
            except Exception as e:  # noqa: BLE001  (a worker that died)
                out.append(BuildResult(config, None, Status.BUILD_ERROR, f"builder crashed: {e}"))
                self._kill_pool()
                pool = self._executor()
        return out

    def close(self) -> None:
        self._kill_pool()
        _remove_own(self)

    def _kill_pool(self) -> None:
        if self._pool is not None:
            processes = list((getattr(self._pool, "_processes", None) or {}).values())
            self._pool.shutdown(wait=False, cancel_futures=True)
            for proc in processes:
                proc.kill()
            self._pool = None


class InProcessBuilder(Builder):
    """Builds in this process (for tests and debugging)."""

    def __init__(self, directory: str | None = None):
        self._own_directory = directory is None
        self.directory = directory or tempfile.mkdtemp(prefix="akg-build-")

    def build(self, graph: Graph, target, configs: list[Config]) -> list[BuildResult]:
        return [build_one(graph, target, c, self.directory) for c in configs]

    def close(self) -> None:
        _remove_own(self)


def _remove_own(builder) -> None:
    """Remove a builder's temporary directory (its built candidates) if it made one."""
    if getattr(builder, "_own_directory", False):
        shutil.rmtree(builder.directory, ignore_errors=True)
        builder._own_directory = False


# --- running ----------------------------------------------------------------------------------


def _load_task(path: str):
    with np.load(path, allow_pickle=False) as npz:
        data = {k: npz[k] for k in npz.files}
    names = [str(n) for n in data.pop("names")]
    ins = [data[f"in{k}"] for k in range(sum(1 for n in data if n.startswith("in")))]
    params = [data[f"param{k}"] for k in range(sum(1 for n in data if n.startswith("param")))]
    ref = [data[f"ref{k}"] for k in range(len(names))]
    exact = [data[f"exact{k}"] for k in range(len(names))]
    return names, ins + params, ref, exact


def run_artifact(artifact: str, task_path: str, min_seconds: float = DEFAULT_MIN_SECONDS,
                 repeats: int = DEFAULT_REPEATS, best: float | None = None) -> tuple[Status, float | None, str]:
    """Load, run, verify and time one candidate (runs in the runner worker). A candidate
    whose verification run alone is far slower than `best` is recorded with that one time."""
    import tvm

    from akg.verify import Reference, compare

    names, args, ref, exact = _load_task(task_path)
    dev = tvm.cpu()
    module = tvm.runtime.load_module(artifact)
    tensors = [tvm.runtime.tensor(a, dev) for a in args]
    outs = [tvm.runtime.tensor(np.zeros(r.shape, r.dtype), dev) for r in ref]
    t0 = time.perf_counter()
    module["main"](*tensors, *outs)
    first = time.perf_counter() - t0
    problems = compare(names, [o.numpy() for o in outs], Reference(ref, exact))
    if problems:
        return Status.WRONG_RESULT, None, "; ".join(map(str, problems))
    if best is not None and first > SLOWDOWN_LIMIT * best and first > 0.01:
        return Status.OK, first, ""
    t0 = time.perf_counter()
    module["main"](*tensors, *outs)
    once = max(time.perf_counter() - t0, 1e-7)
    if once > min_seconds:  # a long kernel: a few single runs are accurate enough
        repeats = min(repeats, 3)
    number = max(1, int(min_seconds / once))
    timer = module.time_evaluator("main", dev, number=number, repeat=repeats)
    return Status.OK, float(statistics.median(timer(*tensors, *outs).results)), ""


def _ignore_interrupts() -> None:
    """Workers leave Ctrl-C to the tuner, which stops between rounds."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _runner_worker(conn, min_seconds: float, repeats: int) -> None:
    _ignore_interrupts()
    os.environ.setdefault("TVM_NUM_THREADS", str(os.cpu_count() or 1))
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message is None:
            return
        artifact, task_path, best = message
        try:
            conn.send(run_artifact(artifact, task_path, min_seconds, repeats, best))
        except Exception as e:  # noqa: BLE001
            conn.send((Status.RUN_ERROR, None, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"))


class Runner(abc.ABC):
    @abc.abstractmethod
    def run(self, task: TaskData, builds: list[BuildResult], best: float | None = None) -> list[MeasureResult]:
        """One result per build, in order. `best` (seconds, the task's best so far) lets a
        runner give up early on candidates that are far slower."""


SLOWDOWN_LIMIT = 30.0  # a candidate this many times slower than the best is not worth timing
MIN_TIMEOUT = 1.0


class LocalRunner(Runner):
    """Runs candidates one at a time in a separate worker process. A crash (the worker dies)
    is a run_error, a candidate over `timeout` seconds is killed and is a timeout; either way
    a fresh worker takes over."""

    def __init__(self, timeout: float = 10.0, min_seconds: float = DEFAULT_MIN_SECONDS,
                 repeats: int = DEFAULT_REPEATS):
        self.timeout, self.min_seconds, self.repeats = timeout, min_seconds, repeats
        self._proc = None
        self._conn = None
        self._fresh = True

    def _exit(self) -> str:
        if self._proc is None:
            return "no worker"
        self._proc.join(2)
        return f"exit code {self._proc.exitcode}"

    def _worker(self):
        if self._proc is None or not self._proc.is_alive():
            self._fresh = True
            ctx = mp.get_context("spawn")
            parent, child = ctx.Pipe()
            self._proc = ctx.Process(target=_runner_worker, args=(child, self.min_seconds, self.repeats),
                                     daemon=True)
            self._proc.start()
            child.close()
            self._conn = parent
        return self._conn

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.join(5)
        self._proc = self._conn = None

    def run(self, task: TaskData, builds: list[BuildResult], best: float | None = None) -> list[MeasureResult]:
        out = []
        for b in builds:
            if b.status != Status.OK:
                out.append(MeasureResult(b.config, b.status, None, b.error, b.seconds, 0.0, b.features))
                continue
            conn = self._worker()
            t0 = time.perf_counter()
            conn.send((b.artifact, str(task.path), best))
            # far slower than the best is hopeless: a shorter limit (timing takes ~10 runs)
            limit = self.timeout if best is None else min(self.timeout, max(MIN_TIMEOUT, 10 * SLOWDOWN_LIMIT * best))
            # the first candidate of a worker also pays its start-up (importing TVM)
            if conn.poll(limit + (30.0 if self._fresh else 0.0)):
                try:
                    status, cost, error = conn.recv()
                except EOFError:  # the worker died: a segfault or abort in the kernel
                    status, cost, error = Status.RUN_ERROR, None, f"the kernel crashed the runner ({self._exit()})"
                    self._kill()
            else:
                status, cost, error = Status.TIMEOUT, None, f"no result within {limit:.0f}s"
                self._kill()
            self._fresh = False
            out.append(MeasureResult(b.config, Status(status), cost, error, b.seconds,
                                     time.perf_counter() - t0, b.features))
            if Status(status) == Status.OK and cost is not None:
                best = cost if best is None else min(best, cost)  # later candidates are judged by it
            _remove(b.artifact)
        return out

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.send(None)
            except (BrokenPipeError, OSError):
                pass
        self._kill()


class InProcessRunner(Runner):
    """Runs candidates in this process (tests; no protection from crashes)."""

    def __init__(self, min_seconds: float = 0.01, repeats: int = 3):
        self.min_seconds, self.repeats = min_seconds, repeats

    def run(self, task: TaskData, builds: list[BuildResult], best: float | None = None) -> list[MeasureResult]:
        out = []
        for b in builds:
            if b.status != Status.OK:
                out.append(MeasureResult(b.config, b.status, None, b.error, b.seconds, 0.0, b.features))
                continue
            t0 = time.perf_counter()
            try:
                status, cost, error = run_artifact(b.artifact, str(task.path), self.min_seconds, self.repeats, best)
            except Exception as e:  # noqa: BLE001
                status, cost, error = Status.RUN_ERROR, None, "".join(traceback.format_exception_only(e)).strip()
            out.append(MeasureResult(b.config, status, cost, error, b.seconds, time.perf_counter() - t0, b.features))
            if status == Status.OK and cost is not None:
                best = cost if best is None else min(best, cost)
        return out


def _remove(path: str | None) -> None:
    if path:
        try:
            os.remove(path)
        except OSError:
            pass

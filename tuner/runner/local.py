"""LocalRunner: candidates run one at a time in a separate worker process, fed by a thread of
the tuner's process so that `submit` returns at once. A crash (the worker dies) is a
run_error, a candidate over the time limit is killed and is a timeout; either way a fresh
worker takes over."""

from __future__ import annotations

import multiprocessing as mp
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Sequence

from akg.db.record import Status
from akg.tuner.builder.builder import BuildResult
from akg.tuner.builder.local import ignore_interrupts
from akg.tuner.runner.evaluate import load_task, run_artifact
from akg.tuner.runner.runner import (DEFAULT_MIN_SECONDS, DEFAULT_REPEATS, MIN_TIMEOUT, SLOWDOWN_LIMIT, BestSoFar,
                                     MeasureResult, Runner, TaskData, done)

TASKS_KEPT = 8  # task payloads a worker keeps loaded
STARTUP_SECONDS = 30.0  # the first candidate of a worker also pays its start-up (importing TVM)


def runner_worker(conn, min_seconds: float, repeats: int) -> None:
    """The worker's loop: (task key, payload or None if sent before, unit, artifact, best)
    in, (status, cost, error) out; None or a closed pipe ends it."""
    ignore_interrupts()
    tasks: OrderedDict = OrderedDict()
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message is None:
            return
        key, payload, unit, artifact, best = message
        try:
            if payload is not None:
                tasks[key] = load_task(payload)
                while len(tasks) > TASKS_KEPT:
                    tasks.popitem(last=False)
            conn.send(run_artifact(artifact, tasks[key], unit, min_seconds, repeats, best))
        except Exception as e:  # noqa: BLE001
            conn.send((Status.RUN_ERROR, None, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"))


class LocalRunner(Runner):
    """Measures in one worker process, each candidate limited to `timeout` seconds (less when
    far slower than the best would already show)."""

    def __init__(self, timeout: float = 10.0, min_seconds: float = DEFAULT_MIN_SECONDS,
                 repeats: int = DEFAULT_REPEATS):
        self.timeout, self.min_seconds, self.repeats = timeout, min_seconds, repeats
        self._proc = None
        self._conn = None
        self._fresh = True
        self._sent: set[str] = set()  # task payloads the current worker has
        self._lock = threading.Lock()
        self._feeder: ThreadPoolExecutor | None = None

    def submit(self, task: TaskData, builds: Sequence[BuildResult],
               best: float | None = None) -> list[Future[MeasureResult]]:
        if self._feeder is None:
            self._feeder = ThreadPoolExecutor(1, thread_name_prefix="akg-runner")
        batch = BestSoFar(best)
        return [self._feeder.submit(self._measure, task, b, batch) if b.status == Status.OK
                else done(MeasureResult.unbuilt(b, task.unit)) for b in builds]

    def _measure(self, task: TaskData, build: BuildResult, best: BestSoFar) -> MeasureResult:
        conn = self._worker()
        t0 = time.perf_counter()
        payload = None if task.key in self._sent else task.payload
        self._sent.add(task.key)
        conn.send((task.key, payload, task.unit, build.artifact, best.value))
        limit = self.timeout
        if best.value is not None and task.unit == "s":  # far slower than the best is hopeless (timing takes ~10 runs)
            limit = min(self.timeout, max(MIN_TIMEOUT, 10 * SLOWDOWN_LIMIT * best.value))
        if conn.poll(limit + (STARTUP_SECONDS if self._fresh else 0.0)):
            try:
                status, cost, error = conn.recv()
            except EOFError:  # the worker died: a segfault or abort in the kernel
                status, cost, error = Status.RUN_ERROR, None, f"the kernel crashed the runner ({self._exit()})"
                self._kill()
        else:
            status, cost, error = Status.TIMEOUT, None, f"no result within {limit:.0f}s"
            self._kill()
        self._fresh = False
        result = MeasureResult(build.config, Status(status), cost, task.unit, error, build.seconds,
                               time.perf_counter() - t0, build.features)
        best.update(result)
        return result

    def _exit(self) -> str:
        proc = self._proc
        if proc is None:
            return "no worker"
        proc.join(2)
        return f"exit code {proc.exitcode}"

    def _worker(self):
        with self._lock:
            if self._proc is None or not self._proc.is_alive():
                self._fresh = True
                self._sent.clear()
                ctx = mp.get_context("spawn")
                parent, child = ctx.Pipe()
                self._proc = ctx.Process(target=runner_worker, args=(child, self.min_seconds, self.repeats),
                                         daemon=True)
                self._proc.start()
                child.close()
                self._conn = parent
            return self._conn

    def _kill(self) -> None:
        with self._lock:
            if self._proc is not None:
                self._proc.kill()
                self._proc.join(5)
            self._proc = self._conn = None

    def close(self) -> None:
        if self._feeder is not None:
            self._feeder.shutdown(wait=False, cancel_futures=True)
            self._feeder = None
        if self._conn is not None:
            try:
                self._conn.send(None)
            except (BrokenPipeError, OSError):
                pass
        self._kill()

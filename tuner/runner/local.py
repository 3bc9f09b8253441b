"""LocalRunner: candidates run one at a time in a separate worker process (`akg.tuner.worker`:
it dies with the tuner), fed by a thread of the tuner's process so that `submit` returns at
once. Whatever goes wrong with the worker is a failed result, never an exception: a crash
(the worker dies, or its pipe breaks, also before it read the request) is a run_error whose
error text holds what the worker printed (a native stack dump), a candidate over the time
limit is killed and is a timeout; either way a fresh worker takes over. A final comparison
(`compare`) runs its contenders in the same worker, interleaved; a crash or a hang there is a
failed comparison.

The limit is shortened to max(1 s, 300 x the best so far) once a best is known; a candidate
that runs out of that shortened limit is measured once more with the full limit before it
counts as a timeout, since a loaded host can slow a good candidate past it."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future
from typing import Sequence

from akg.db.record import Status
from akg.tuner.builder.builder import BuildResult
from akg.tuner.runner.runner import (DEFAULT_MIN_SECONDS, DEFAULT_REPEATS, DEFAULT_ROUNDS, MIN_TIMEOUT,
                                     SLOWDOWN_LIMIT, BestSoFar, CompareResult, MeasureResult, Runner, TaskData,
                                     compare_builds, done)
from akg.tuner.worker import Worker, WorkerDied, WorkerError

log = logging.getLogger(__name__)

TASKS_KEPT = 8  # task payloads a worker keeps loaded (the least recently used go first)
LOST = "the runner worker lost the task's inputs"
WORKER_MODULES = ("akg.verify", "akg.tuner.runner.local", "akg.target:load_plugins")

_tasks: OrderedDict = OrderedDict()  # in a worker: task key -> TaskArrays


def _task_arrays(key: str, payload: bytes | None):
    """In the worker: the task's arrays (`payload` None: sent before), or None if lost."""
    from akg.target import load_plugins
    from akg.tuner.runner.evaluate import load_task

    load_plugins()
    if payload is not None:
        _tasks[key] = load_task(payload)
    if key not in _tasks:
        return None
    _tasks.move_to_end(key)
    while len(_tasks) > TASKS_KEPT:
        _tasks.popitem(last=False)
    return _tasks[key]


def measure_request(key: str, payload: bytes | None, unit: str, artifact, best: float | None, min_seconds: float,
                    repeats: int):
    """In the worker: (status, cost, error) of one candidate; `payload` None: the task was
    sent before."""
    from akg.tuner.runner.evaluate import run_artifact

    task = _task_arrays(key, payload)
    if task is None:
        return Status.RUN_ERROR, None, LOST
    try:
        return run_artifact(artifact, task, unit, min_seconds, repeats, best)
    except Exception as e:  # noqa: BLE001
        first = str(e).splitlines()[0] if str(e) else ""
        return Status.RUN_ERROR, None, f"{type(e).__name__}: {first}"


def compare_request(key: str, payload: bytes | None, unit: str, artifacts: list, rounds: int, min_seconds: float):
    """In the worker: (status, [(status, rounds, error) per artifact], error) of a final
    comparison (`akg.tuner.runner.evaluate.compare_artifacts`)."""
    from akg.tuner.runner.evaluate import compare_artifacts

    task = _task_arrays(key, payload)
    if task is None:
        return Status.RUN_ERROR, None, LOST
    try:
        return Status.OK, compare_artifacts(artifacts, task, unit, rounds, min_seconds), ""
    except Exception as e:  # noqa: BLE001
        first = str(e).splitlines()[0] if str(e) else ""
        return Status.RUN_ERROR, None, f"{type(e).__name__}: {first}"


class _ComparisonFailed(Exception):
    pass


class LocalRunner(Runner):
    """Measures in one worker process, each candidate limited to `timeout` seconds (less when
    far slower than the best would already show; see the module's note)."""

    def __init__(self, timeout: float = 10.0, min_seconds: float = DEFAULT_MIN_SECONDS,
                 repeats: int = DEFAULT_REPEATS):
        self.timeout, self.min_seconds, self.repeats = timeout, min_seconds, repeats
        self._worker: Worker | None = None
        self._using: Worker | None = None  # the worker the feeder thread is talking to
        # task payloads the current worker has, least recently used first, as the worker keeps them
        self._sent: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()
        self._closed = False
        self._queue: queue.Queue | None = None
        self._feeder: threading.Thread | None = None

    # --- the tuner's side ------------------------------------------------------------------

    def _start_feeder(self) -> None:
        if self._feeder is None or not self._feeder.is_alive():
            # a daemon thread: a tuner stopped at once does not wait for it at exit
            self._queue = queue.Queue()
            self._closed = False
            self._feeder = threading.Thread(target=self._feed, args=(self._queue,), daemon=True,
                                            name="akg-runner")
            self._feeder.start()

    def submit(self, task: TaskData, builds: Sequence[BuildResult],
               best: float | None = None) -> list[Future[MeasureResult]]:
        self._start_feeder()
        batch = BestSoFar(best)
        out = []
        for b in builds:
            if b.status != Status.OK:
                out.append(done(MeasureResult.unbuilt(b, task.unit)))
                continue
            future: Future[MeasureResult] = Future()
            self._queue.put((future, lambda b=b: self._measure(task, b, batch)))
            out.append(future)
        return out

    def compare(self, task: TaskData, builds: Sequence[BuildResult],
                rounds: int = DEFAULT_ROUNDS) -> Future[CompareResult]:
        """The builds timed interleaved in the worker, within a limit of the per-candidate
        `timeout` per build (more with many rounds)."""
        self._start_feeder()
        future: Future[CompareResult] = Future()
        self._queue.put((future, lambda: self._compare(task, list(builds), rounds)))
        return future

    def _feed(self, requests: queue.Queue) -> None:
        while True:
            item = requests.get()
            if item is None:
                return
            future, work = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(work())
            except BaseException as e:  # noqa: BLE001  (handed to whoever waits on the future)
                future.set_exception(e)

    def close(self) -> None:
        self._closed = True
        if self._queue is not None:
            while True:  # cancel what has not started
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    item[0].cancel()
            self._queue.put(None)
            self._queue = None
        self._feeder = None
        with self._lock:
            worker, self._worker = self._worker, None
            if worker is None:
                return
            in_use = worker is self._using
        if in_use:  # the feeder thread waits on it: wake it up, it releases the worker
            worker.stop()
        else:
            worker.close()

    # --- the feeder thread's side ----------------------------------------------------------

    def _measure(self, task: TaskData, build: BuildResult, best: BestSoFar) -> MeasureResult:
        t0 = time.perf_counter()
        limit = self.timeout
        if best.value is not None and task.unit == "s":  # far slower than the best is hopeless (timing takes ~10 runs)
            limit = min(self.timeout, max(MIN_TIMEOUT, 10 * SLOWDOWN_LIMIT * best.value))
        args = (build.artifact, best.value, self.min_seconds, self.repeats)
        status, cost, error = self._attempt(task, measure_request, args, limit)
        if status == Status.TIMEOUT and limit < self.timeout and not self._closed:
            # a loaded host can push a good candidate past the shortened limit: no verdict yet
            log.info("%s: no result within the shortened limit of %.1fs; measuring again with %gs",
                     task.graph.name, limit, self.timeout)
            status, cost, error = self._attempt(task, measure_request, args, self.timeout)
            if status == Status.TIMEOUT:
                error = f"{error} (and within {limit:.1f}s before)"
        result = MeasureResult(build.config, Status(status), cost, task.unit, error, build.seconds,
                               time.perf_counter() - t0, build.features)
        best.update(result)
        return result

    def _compare(self, task: TaskData, builds: list[BuildResult], rounds: int) -> CompareResult:
        limit = max(MIN_TIMEOUT, self.timeout) * max(1, len(builds)) * max(1.0, (rounds + 2) / 10)

        def run(artifacts):
            status, value, error = self._attempt(task, compare_request, (artifacts, rounds, self.min_seconds), limit)
            if status != Status.OK:
                raise _ComparisonFailed(f"{status}: {error}" if status == Status.TIMEOUT else error)
            return value

        try:
            return compare_builds(builds, task.unit, run)
        except _ComparisonFailed as e:
            log.warning("%s: the final comparison failed: %s", task.graph.name, str(e).splitlines()[0])
            return CompareResult.failed(len(builds), task.unit, str(e))

    def _attempt(self, task: TaskData, fn, args: tuple, limit: float):
        """(status, value, error) of one request in the worker: `fn(task key, payload, unit,
        *args)`, `measure_request` (value: the cost) or `compare_request`."""
        try:
            return self._attempt_in_worker(task, fn, args, limit)
        finally:
            with self._lock:
                self._using = None

    def _attempt_in_worker(self, task: TaskData, fn, args: tuple, limit: float):
        try:
            worker = self._ready_worker()
        except WorkerDied as e:
            if self._closed:
                return Status.RUN_ERROR, None, "the runner was closed"
            log.warning("%s: the runner's worker failed to start (%s)", task.graph.name, e.cause)
            return Status.RUN_ERROR, None, e.describe("the runner's worker failed to start")
        if worker is None:
            return Status.RUN_ERROR, None, "the runner was closed"
        try:
            resend = False
            while True:
                payload = None if task.key in self._sent and not resend else task.payload
                worker.send(fn, task.key, payload, task.unit, *args)
                self._used(task.key)
                if not worker.poll(limit):
                    self._retire(worker)
                    return Status.TIMEOUT, None, f"no result within {limit:.1f}s"
                status, cost, error = worker.receive()
                if status == Status.RUN_ERROR and error == LOST and payload is None:
                    # the worker dropped the task's arrays after all (it keeps TASKS_KEPT):
                    # once more with them, not a verdict on the candidate
                    resend = True
                    continue
                return status, cost, error
        except WorkerDied as e:
            self._retire(worker)
            if self._closed:
                return Status.RUN_ERROR, None, "the runner was closed"
            log.warning("%s: a candidate crashed the runner (%s); the crash report is in its record",
                        task.graph.name, e.cause)
            return Status.RUN_ERROR, None, e.describe("the kernel crashed the runner")
        except WorkerError as e:
            return Status.RUN_ERROR, None, str(e)

    def _used(self, key: str) -> None:
        """Note that the worker has the task `key` and used it last, forgetting the tasks it
        drops as it does (`_task_arrays`), so that their payloads are sent again."""
        self._sent[key] = None
        self._sent.move_to_end(key)
        while len(self._sent) > TASKS_KEPT:
            self._sent.popitem(last=False)

    def _ready_worker(self) -> Worker | None:
        with self._lock:
            if self._closed:
                return None
            if self._worker is None or not self._worker.alive():
                if self._worker is not None:
                    self._worker.kill()
                self._worker = Worker("runner", WORKER_MODULES)
                self._sent.clear()
            worker = self._using = self._worker
        worker.wait_ready()
        return worker

    def _retire(self, worker: Worker) -> None:
        """Kill a worker that crashed or hung; start its successor now, so that its start-up
        overlaps what the tuner does next."""
        worker.kill()
        with self._lock:
            if self._worker is worker:
                self._worker = None
                self._sent.clear()
                if not self._closed:
                    self._worker = Worker("runner", WORKER_MODULES)

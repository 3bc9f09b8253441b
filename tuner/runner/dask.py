"""DaskRunner (tuning: built candidates -> verified costs, on the workers of a Dask cluster):
each built candidate is one job of a `DaskCluster` (dask_cluster.py: which workers, pinning,
worker loss), measured by that worker's own `LocalRunner`, which isolates it in a subprocess
exactly as on the tuner's machine: a crash, hang or wrong result there is the same failed
result as locally, and the result says which host and target key measured it. A task's
inputs and reference outputs go to a worker with its first candidate of that task only; the
final comparison runs as one job, interleaved in one worker process. A candidate whose worker
is lost twice is a run_error that says so."""

from __future__ import annotations

import collections
import copy
import functools
import threading
from concurrent.futures import Future
from typing import Callable, Sequence

from akg.db.record import Status
from akg.target import Target, get_target
from akg.tuner.builder.builder import BuildResult
from akg.tuner.runner.dask_cluster import DaskCluster, FarmWorker, Job, factory_spec, worker_identity, worker_pool
from akg.tuner.runner.local import LocalRunner
from akg.tuner.runner.runner import (DEFAULT_MIN_SECONDS, DEFAULT_REPEATS, DEFAULT_ROUNDS, BestSoFar, CompareResult,
                                     MeasureResult, Runner, TaskData, done)

TASKS_KEPT = 8  # task payloads a worker keeps

# --- on a Dask worker ------------------------------------------------------------------------

_lock = threading.Lock()
_measuring = threading.Lock()  # one measurement at a time per worker process, whichever tuner sent it
_tasks: collections.OrderedDict = collections.OrderedDict()  # task key -> TaskData with its payload


def _task(task: TaskData) -> TaskData:
    """The task with its payload: as sent, or as sent before (else it is made here from the graph)."""
    with _lock:
        if task._payload is not None:
            _tasks[task.key] = task
            _tasks.move_to_end(task.key)
            while len(_tasks) > TASKS_KEPT:
                _tasks.popitem(last=False)
            return task
        return _tasks.get(task.key, task)


def measure_on_worker(session: str, spec: bytes, identity: tuple, task: TaskData, build: BuildResult,
                      best: float | None) -> MeasureResult:
    host, target_key = worker_identity(*identity)
    with _measuring:
        (result,) = worker_pool(session, "runner", spec, False).run(_task(task), [build], best)
    result.host, result.target_key = host, target_key
    return result


def compare_on_worker(session: str, spec: bytes, task: TaskData, builds: list, rounds: int) -> CompareResult:
    with _measuring:
        return worker_pool(session, "runner", spec, False).compare(_task(task), builds, rounds).result()


# --- the tuner's side ------------------------------------------------------------------------


class DaskRunner(Runner):
    """Measures on the workers of a Dask cluster (`cluster`, else one made from `workers` or
    `scheduler`, which `close()` then shuts). On each worker the candidates go to
    `local()`, a `LocalRunner` with this runner's limits unless given."""

    def __init__(self, target: Target | str = "cpu", *, workers: int | None = None, scheduler: str | None = None,
                 cluster: DaskCluster | None = None, timeout: float = 10.0, min_seconds: float = DEFAULT_MIN_SECONDS,
                 repeats: int = DEFAULT_REPEATS, local: Callable[[], Runner] | None = None,
                 target_name: str | None = None):
        if cluster is None:
            if isinstance(target, str) and target_name is None:
                target_name = target
            cluster = DaskCluster(get_target(target), workers=workers, scheduler=scheduler, target_name=target_name)
            self._own = True
        else:
            self._own = False
        self.cluster = cluster
        self._spec = factory_spec(local or functools.partial(LocalRunner, timeout=timeout, min_seconds=min_seconds,
                                                              repeats=repeats))

    def builder(self, timeout: float = 120.0, local: Callable | None = None):
        """A `DaskBuilder` on this runner's cluster."""
        from akg.tuner.builder.dask import DaskBuilder

        return DaskBuilder(self.cluster, timeout=timeout, local=local)

    def submit(self, task: TaskData, builds: Sequence[BuildResult],
               best: float | None = None) -> list[Future[MeasureResult]]:
        batch = BestSoFar(best)
        out: list[Future[MeasureResult]] = []
        jobs = []
        if any(b.status == Status.OK for b in builds):
            task.payload  # made once, here; each worker gets it with its first candidate of the task
        for b in builds:
            if b.status != Status.OK:
                out.append(done(MeasureResult.unbuilt(b, task.unit)))
                continue
            job = Job("measure", measure_on_worker,
                      lambda address, b=b: (self.cluster.session, self._spec, self.cluster.identity,
                                            self._task_for(address, task), b, batch.value),
                      lambda reason, worker, b=b: self._failed(task, b, reason, worker))
            job.future.add_done_callback(lambda f: None if f.cancelled() or f.exception() else batch.update(f.result()))
            jobs.append(job)
            out.append(job.future)
        self.cluster.submit(jobs)
        return out

    def _task_for(self, address: str, task: TaskData) -> TaskData:
        """The task as a worker needs it: with its payload the first time, without afterwards."""
        if self.cluster.first_time(address, task.key):
            return task
        light = copy.copy(task)
        light._payload = None
        return light

    def _failed(self, task: TaskData, build: BuildResult, reason: str, worker: FarmWorker | None) -> MeasureResult:
        return MeasureResult(build.config, Status.RUN_ERROR, None, task.unit, reason, build.seconds, 0.0,
                             build.features, worker.host if worker else "", self.cluster.target.key)

    def compare(self, task: TaskData, builds: Sequence[BuildResult],
                rounds: int = DEFAULT_ROUNDS) -> Future[CompareResult]:
        """The builds timed interleaved by one worker's runner."""
        builds = list(builds)
        task.payload
        job = Job("measure", compare_on_worker,
                  lambda address: (self.cluster.session, self._spec, self._task_for(address, task), builds,
                                   rounds),
                  lambda reason, worker: CompareResult.failed(len(builds), task.unit, reason))
        self.cluster.submit([job])
        return job.future

    def close(self) -> None:
        if self._own:
            self.cluster.close()

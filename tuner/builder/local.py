"""LocalBuilder: candidates built in a pool of worker processes (`akg.tuner.worker`: they die
with the tuner), each keeping its front end (the subgraph's Pipeline) warm. Whatever goes
wrong with a worker is a build_error of the candidate it was building, never an exception
and never the other candidates' failure: a build over the time limit is killed, a worker that
dies (or whose pipe breaks) has what it printed (a native stack dump) in the error text; a
fresh worker takes its place."""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from multiprocessing.connection import wait
from typing import Sequence

from akg.db.record import Status
from akg.graph.ir import Graph
from akg.schedules.space import Config
from akg.tuner.builder.builder import Builder, BuildInput, BuildResult, as_build_input
from akg.tuner.builder.compile import ScratchDirectory, build_candidate
from akg.tuner.worker import STARTUP_LIMIT, Worker, WorkerDied, WorkerError

log = logging.getLogger(__name__)

WORKER_MODULES = ("akg.compiler", "akg.tuner.builder.compile", "akg.tuner.features", "akg.target:load_plugins")
STARTUP_FAILURES = 2  # workers that die while starting, in one build, before its candidates fail


class LocalBuilder(ScratchDirectory, Builder):
    """Builds candidates in a pool of `workers` processes, each build limited to `timeout` s."""

    def __init__(self, workers: int | None = None, timeout: float = 120.0, directory: str | None = None):
        super().__init__(directory)
        self.workers = workers or max(1, os.cpu_count() or 1)
        self.timeout = timeout
        self._pool: list[Worker] = []

    def build(self, graph: Graph, target, candidates: Sequence[BuildInput | Config]) -> list[BuildResult]:
        inputs = [as_build_input(c) for c in candidates]
        out: list[BuildResult | None] = [None] * len(inputs)
        waiting = deque(range(len(inputs)))
        busy: dict[Worker, int] = {}
        startup_failures = 0
        no_worker = "no builder worker could start"
        for worker in [w for w in self._pool if not w.alive() or w.busy_since is not None]:
            worker.kill()  # dead, or left busy by an interrupted build: its answer is stale
            self._pool.remove(worker)
        while len(self._pool) < min(self.workers, len(inputs)):
            self._pool.append(Worker("builder", WORKER_MODULES))

        def failed(index: int, error: str) -> None:
            out[index] = BuildResult(inputs[index].config, None, Status.BUILD_ERROR, error)

        def replace(worker: Worker) -> None:
            """A worker that died, hung or failed to start goes; a fresh one takes its place
            while there is work (unless workers keep failing to start)."""
            worker.kill()
            self._pool.remove(worker)
            if waiting and startup_failures < STARTUP_FAILURES:
                self._pool.append(Worker("builder", WORKER_MODULES))

        while (waiting or busy) and self._pool:
            for worker in [w for w in self._pool if w.ready and w not in busy]:
                if not waiting:
                    break
                index = waiting.popleft()
                try:
                    worker.send(build_candidate, graph, target, inputs[index], self.directory)
                    busy[worker] = index
                except WorkerDied as e:  # it died before it read the request
                    failed(index, e.describe("the builder's worker died"))
                    replace(worker)
                except WorkerError as e:  # the candidate cannot be sent; the worker is fine
                    failed(index, str(e))
            deadlines = [w.busy_since + self.timeout for w in busy] + \
                        [w.started + STARTUP_LIMIT for w in self._pool if not w.ready]
            if not deadlines:
                continue
            for worker in wait(self._pool, timeout=max(0.0, min(deadlines) - time.monotonic())):
                if not worker.ready:
                    try:
                        worker.receive_ready()
                    except WorkerDied as e:
                        startup_failures += 1
                        log.warning("a builder worker failed to start (%s)", e.cause)
                        no_worker = e.describe("the builder's worker failed to start")
                        replace(worker)
                    continue
                index = busy.pop(worker, None)
                if index is None:  # an idle worker that exited
                    replace(worker)
                    continue
                try:
                    out[index] = worker.receive()
                except WorkerDied as e:
                    log.warning("%s: a candidate crashed the builder (%s); the crash report is in its record",
                                graph.name, e.cause)
                    failed(index, e.describe("the candidate crashed the builder"))
                    replace(worker)
                except WorkerError as e:
                    failed(index, f"builder failed: {e}")
            now = time.monotonic()
            for worker, index in list(busy.items()):
                if now - worker.busy_since >= self.timeout:
                    del busy[worker]
                    failed(index, f"build took over {self.timeout:.0f}s")
                    replace(worker)
            for worker in [w for w in self._pool if not w.ready and now - w.started >= STARTUP_LIMIT]:
                startup_failures += 1
                no_worker = f"the builder's worker did not start within {STARTUP_LIMIT:.0f}s"
                replace(worker)
        for index in waiting:
            failed(index, no_worker)
        return [r if r is not None else BuildResult(inputs[k].config, None, Status.BUILD_ERROR, no_worker)
                for k, r in enumerate(out)]

    def close(self) -> None:
        self._kill_pool()
        super().close()

    def _kill_pool(self) -> None:
        pool, self._pool = self._pool, []
        idle = [w for w in pool if w.ready and w.busy_since is None]
        for worker in idle:
            worker.ask_to_exit()
        for worker in pool:
            if worker in idle:
                worker.close()
            else:
                worker.kill()

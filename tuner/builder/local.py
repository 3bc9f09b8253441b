"""LocalBuilder: candidates built in a pool of worker processes, each keeping its front end
(the subgraph's Pipeline) warm; a build over the time limit or a worker that dies is a
build_error and the pool is replaced."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
from concurrent.futures import ProcessPoolExecutor, TimeoutError as FutureTimeout
from typing import Sequence

from akg.db.record import Status
from akg.graph.ir import Graph
from akg.schedules.space import Config
from akg.tuner.builder.builder import Builder, BuildInput, BuildResult, as_build_input
from akg.tuner.builder.compile import ScratchDirectory, build_candidate


def ignore_interrupts() -> None:
    """Workers leave Ctrl-C to the tuner, which stops between rounds."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class LocalBuilder(ScratchDirectory, Builder):
    """Builds candidates in a pool of `workers` processes, each build limited to `timeout` s."""

    def __init__(self, workers: int | None = None, timeout: float = 120.0, directory: str | None = None):
        super().__init__(directory)
        self.workers = workers or max(1, os.cpu_count() or 1)
        self.timeout = timeout
        self._pool: ProcessPoolExecutor | None = None

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(self.workers, mp_context=mp.get_context("spawn"),
                                             initializer=ignore_interrupts)
        return self._pool

    def build(self, graph: Graph, target, candidates: Sequence[BuildInput | Config]) -> list[BuildResult]:
        inputs = [as_build_input(c) for c in candidates]
        pool = self._executor()
        futures = [pool.submit(build_candidate, graph, target, c, self.directory) for c in inputs]
        out = []
        for candidate, fut in zip(inputs, futures):
            try:
                out.append(fut.result(timeout=self.timeout))
                continue
            except FutureTimeout:
                error = f"build took over {self.timeout:.0f}s"
            except Exception as e:  # noqa: BLE001  (a worker that died)
                error = f"builder crashed: {e}"
            out.append(BuildResult(candidate.config, None, Status.BUILD_ERROR, error))
            self._kill_pool()  # a stuck worker goes with the pool
            pool = self._executor()
        return out

    def close(self) -> None:
        self._kill_pool()
        super().close()

    def _kill_pool(self) -> None:
        if self._pool is not None:
            processes = list((getattr(self._pool, "_processes", None) or {}).values())
            self._pool.shutdown(wait=False, cancel_futures=True)
            for proc in processes:
                proc.kill()
            self._pool = None

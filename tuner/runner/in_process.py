"""InProcessRunner: candidates run in the tuner's own process (tests; no protection from
crashes or hangs). Its futures are done when `submit` returns."""

from __future__ import annotations

import time
import traceback
from concurrent.futures import Future
from typing import Sequence

from akg.db.record import Status
from akg.tuner.builder.builder import BuildResult
from akg.tuner.runner.evaluate import compare_artifacts, load_task, run_artifact
from akg.tuner.runner.runner import (DEFAULT_ROUNDS, BestSoFar, CompareResult, MeasureResult, Runner, TaskData,
                                     compare_builds, done)


class InProcessRunner(Runner):
    def __init__(self, min_seconds: float = 0.01, repeats: int = 3):
        self.min_seconds, self.repeats = min_seconds, repeats

    def submit(self, task: TaskData, builds: Sequence[BuildResult],
               best: float | None = None) -> list[Future[MeasureResult]]:
        arrays = None
        batch = BestSoFar(best)
        out = []
        for b in builds:
            if b.status != Status.OK:
                out.append(done(MeasureResult.unbuilt(b, task.unit)))
                continue
            t0 = time.perf_counter()
            try:
                arrays = arrays or load_task(task.payload)
                status, cost, error = run_artifact(b.artifact, arrays, task.unit, self.min_seconds, self.repeats,
                                                   batch.value)
            except Exception as e:  # noqa: BLE001
                status, cost, error = Status.RUN_ERROR, None, "".join(traceback.format_exception_only(e)).strip()
            result = MeasureResult(b.config, status, cost, task.unit, error, b.seconds, time.perf_counter() - t0,
                                   b.features)
            batch.update(result)
            out.append(done(result))
        return out

    def compare(self, task: TaskData, builds: Sequence[BuildResult],
                rounds: int = DEFAULT_ROUNDS) -> Future[CompareResult]:
        try:
            result = compare_builds(builds, task.unit, lambda artifacts: compare_artifacts(
                artifacts, load_task(task.payload), task.unit, rounds, self.min_seconds))
        except Exception as e:  # noqa: BLE001  (a failed comparison, not a failed tuner)
            result = CompareResult.failed(len(builds), task.unit,
                                          "".join(traceback.format_exception_only(e)).strip())
        return done(result)


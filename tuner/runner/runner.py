"""The runner interface (tuning: built candidate -> verified cost): what a runner needs of a
task (`TaskData`: inputs and reference outputs, as bytes that can cross a process or a
network), what comes out (`MeasureResult`: a cost in the target's unit, or why there is
none), and `Runner`, whose `submit` returns futures so that runners may measure elsewhere
(another process, a cluster) while the tuner records results as they arrive."""

from __future__ import annotations

import abc
import io
import uuid
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from akg.db.record import Status
from akg.graph.interpreter import random_inputs
from akg.graph.ir import Graph
from akg.schedules.space import Config
from akg.tuner.builder.builder import BuildResult

DEFAULT_MIN_SECONDS = 0.05  # each timing repeat runs the kernel at least this long
DEFAULT_REPEATS = 5
DEFAULT_ROUNDS = 7  # rounds of a final comparison (each round: one timing of every contender)
SLOWDOWN_LIMIT = 30.0  # a candidate this many times slower than the best is not worth timing
MIN_TIMEOUT = 1.0


@dataclass
class MeasureResult:
    config: Config
    status: Status
    cost: float | None = None  # in `unit`
    unit: str = "s"
    error: str = ""
    build_seconds: float = 0.0
    run_seconds: float = 0.0
    features: np.ndarray | None = None
    host: str = ""  # the machine that measured it ("": the tuner's own)
    target_key: str = ""  # the target key of the machine that measured it ("": the tuner's target)

    @classmethod
    def unbuilt(cls, build: BuildResult, unit: str) -> MeasureResult:
        """The result of a candidate that failed to build."""
        return cls(build.config, build.status, None, unit, build.error, build.seconds, 0.0, build.features)


@dataclass
class CompareResult:
    """The outcome of a final comparison (`Runner.compare`): per build, in order, how it ended
    (`statuses`, with `errors`), each round's time (`rounds`, in `unit`) and its cost, the
    best round (interference only ever adds time). `error` set: the comparison as a whole
    failed (the worker crashed or hung): no verdict."""

    statuses: list[Status]
    rounds: list[list[float]]
    unit: str = "s"
    errors: list[str] = field(default_factory=list)
    error: str = ""
    interleaved: bool = True  # False: measured one after the other (a runner without interleaving)

    @property
    def ok(self) -> bool:
        return not self.error

    @property
    def costs(self) -> list[float | None]:
        return [min(r) if s == Status.OK and r else None for s, r in zip(self.statuses, self.rounds)]

    @classmethod
    def failed(cls, count: int, unit: str, error: str) -> CompareResult:
        return cls([Status.RUN_ERROR] * count, [[] for _ in range(count)], unit, [error] * count, error)


@dataclass
class TaskData:
    """What a runner needs to check a candidate of one task: inputs (kernel argument order,
    parameters included) and the reference outputs, in declared precision and float64, made
    once and kept as npz bytes (`payload`); `unit` is the target's cost unit."""

    graph: Graph
    seed: int = 0
    unit: str = "s"
    key: str = field(default_factory=lambda: uuid.uuid4().hex, init=False)  # names the payload in workers
    _payload: bytes | None = field(default=None, init=False, repr=False)

    @property
    def payload(self) -> bytes:
        if self._payload is None:
            from akg.graph.compute.lower import lower_graph
            from akg.verify import Reference

            program = lower_graph(self.graph)
            inputs = random_inputs(self.graph, self.seed)
            reference = Reference.of(self.graph, inputs)
            arrays = {f"in{k}": inputs[t.name] for k, t in enumerate(program.inputs)}
            arrays.update({f"param{k}": np.asarray(a) for k, a in enumerate(program.params.values())})
            arrays.update({f"ref{k}": a for k, a in enumerate(reference.declared)})
            arrays.update({f"exact{k}": a for k, a in enumerate(reference.exact)})
            buffer = io.BytesIO()
            np.savez(buffer, names=np.array([v.name for v in self.graph.outputs]),
                     narrowest=np.array(reference.narrowest), **arrays)
            self._payload = buffer.getvalue()
        return self._payload


class Runner(abc.ABC):
    """Loads, verifies and times built candidates of one task."""

    @abc.abstractmethod
    def submit(self, task: TaskData, builds: Sequence[BuildResult],
               best: float | None = None) -> list[Future[MeasureResult]]:
        """One future per build, in order. `best` (the task's best cost so far, in its unit)
        lets a runner give up early on candidates that are far slower."""

    def run(self, task: TaskData, builds: Sequence[BuildResult], best: float | None = None) -> list[MeasureResult]:
        """`submit` and wait for every result."""
        return [f.result() for f in self.submit(task, builds, best)]

    def compare(self, task: TaskData, builds: Sequence[BuildResult],
                rounds: int = DEFAULT_ROUNDS) -> Future[CompareResult]:
        """Time the builds against each other in `rounds` alternating rounds in one process
        (each round one timing of each), after checking each one's outputs; a failure of the
        whole (a crash) is a `CompareResult` with `error`, never an exception. This fallback,
        for runners without an interleaved comparison, measures them one after the other."""
        results = self.run(task, builds)
        return done(CompareResult([r.status for r in results], [[r.cost] if r.cost is not None else []
                                                               for r in results],
                                  task.unit, [r.error for r in results], interleaved=False))

    def close(self) -> None:
        """Stop workers; futures not done yet are cancelled."""


class BestSoFar:
    """The best cost of one submitted batch so far: later candidates are judged by it."""

    def __init__(self, value: float | None):
        self.value = value

    def update(self, result: MeasureResult) -> None:
        if result.status == Status.OK and result.cost is not None:
            self.value = result.cost if self.value is None else min(self.value, result.cost)


def done(result: MeasureResult) -> Future[MeasureResult]:
    """A future that already holds `result`."""
    future: Future[MeasureResult] = Future()
    future.set_result(result)
    return future


def compare_builds(builds: Sequence[BuildResult], unit: str, run) -> CompareResult:
    """A CompareResult of `builds` from `run(artifacts)` (the (status, rounds, error) of each
    built one); builds that failed keep their status."""
    built = [k for k, b in enumerate(builds) if b.status == Status.OK]
    statuses = [b.status for b in builds]
    rounds: list[list[float]] = [[] for _ in builds]
    errors = [b.error for b in builds]
    if built:
        for k, (status, times, error) in zip(built, run([builds[k].artifact for k in built])):
            statuses[k], rounds[k], errors[k] = Status(status), list(times), error
    return CompareResult(statuses, rounds, unit, errors)

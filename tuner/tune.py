"""akg.tune: tune every kernel of a model (or one kernel) on a target, recording every
measurement in the tuning database as it happens.

The trial budget is the total number of measured configs for the model's kernels, counting
those already in the database: running the same tune again resumes where it stopped and,
once the budget is spent, measures nothing. `TuneLoop` holds a session's parts (tasks,
scheduler, search, cost model, builder, runner, database); each `step()` is one round: the
scheduler picks a kernel (`akg.tuner.scheduler`), the search proposes a batch, the builder
compiles it (reusing the lowerings the search made to rank candidates), the runner measures
it, and each result goes into the database as it arrives.
"""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from akg.db import Database, Record, Status, TargetInfo, Workload, open_database
from akg.graph.ir import Graph
from akg.graph.subgraph import Subgraph
from akg.schedules.space import Config
from akg.target import Target, get_target
from akg.tuner.builder import Builder, BuildInput, LocalBuilder, Lowered
from akg.tuner.cost_model import CostModel, make_cost_model
from akg.tuner.runner import LocalRunner, MeasureResult, Runner, TaskData
from akg.tuner.scheduler import TaskScheduler
from akg.tuner.search import SearchStrategy, make_search
from akg.tuner.task import Trial, TuningTask

log = logging.getLogger(__name__)

__all__ = ["KernelResult", "TaskScheduler", "TuneLoop", "TuneResult", "kernels_of", "tune"]

WARM_START_LIMIT = 256  # records of other workloads used to warm-start the cost model
ERROR_CHARS = 2000  # of a failed candidate's error text kept in its record (a crash report's top)


@dataclass
class KernelResult:
    name: str
    workload_key: str
    occurrences: int
    trials: int
    failures: int
    best_cost: float | None
    best_config: Config | None


@dataclass
class TuneResult:
    kernels: list[KernelResult]
    new_measurements: int
    seconds: float
    interrupted: bool = False
    curve: list[tuple[int, float, float]] = field(default_factory=list)  # (trial, seconds, weighted best)
    stopped_by: int | None = None  # the signal that stopped tuning (SIGINT, SIGTERM), if one did

    @property
    def weighted_cost(self) -> float | None:
        """Sum over kernels of occurrences x best time (None until every kernel has one)."""
        if any(k.best_cost is None for k in self.kernels):
            return None
        return sum(k.occurrences * k.best_cost for k in self.kernels)


def kernels_of(graph: Graph, target: Target | None = None) -> list[Subgraph]:
    """The model's kernels for `target` (`akg.graph.pipeline.plan_model`), deduplicated by
    workload key with their occurrence counts."""
    from akg.graph.pipeline import plan_model

    unique: dict[str, Subgraph] = {}
    counts: dict[str, int] = {}
    for sg in plan_model(graph, target).subgraphs:
        counts[sg.workload_key] = counts.get(sg.workload_key, 0) + 1
        unique.setdefault(sg.workload_key, sg)
    return [Subgraph(sg.graph, sg.name, counts[key]) for key, sg in unique.items()]


def tasks_of(graph: Graph, target: Target, database: Database, seed: int = 0) -> list[TuningTask]:
    """The model's tuning tasks, each with what the database has measured for it."""
    database.register_target(TargetInfo.of(target))
    tasks = []
    for sg in kernels_of(graph, target):
        database.register_workload(Workload.of(sg))
        task = TuningTask(sg, target, sg.occurrences, seed)
        for rec in database.history(sg.workload_key, target.key):
            config = Config.from_json(rec.config)
            task.trials.append(Trial(config, str(rec.status), rec.cost))
            task.measured.add(config.to_json())
        tasks.append(task)
    return tasks


class TuneLoop:
    """A tuning session: `trials` measurements in all (those already in the tasks count),
    `batch` per round; `step()` runs one round."""

    def __init__(self, tasks: list[TuningTask], target: Target, database: Database, builder: Builder,
                 runner: Runner, cost_model: CostModel, search: SearchStrategy, *, trials: int, batch: int = 16,
                 seed: int = 0, progress: Callable | None = None, started: float | None = None,
                 writing: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext):
        self.tasks, self.target, self.database = tasks, target, database
        self.builder, self.runner, self.cost_model, self.search = builder, runner, cost_model, search
        self.trials, self.batch, self.progress = trials, batch, progress
        self.writing = writing  # wraps each database write (an immediate stop waits for it)
        self.scheduler = TaskScheduler(tasks)
        self.data = {id(t): TaskData(t.subgraph.graph, seed, target.cost_unit) for t in tasks}
        self.done = sum(len(t.trials) for t in tasks)
        self.new = 0
        self.curve: list[tuple[int, float, float]] = []
        self.started = time.perf_counter() if started is None else started

    def step(self) -> bool:
        """One round for the scheduler's next task; False when the budget is spent or no
        task has anything left to propose."""
        if self.done >= self.trials:
            return False
        task = self.scheduler.next()
        if task is None:
            return False
        configs = self.search.propose(task, self.cost_model, min(self.batch, self.trials - self.done))
        if not configs:
            self.scheduler.exhaust(task)
            return True
        best = task.best
        builds = self.builder.build(task.subgraph.graph, self.target, [candidate(task, c) for c in configs])
        futures = self.runner.submit(self.data[id(task)], builds, best.cost if best else None)
        results = [self._record(task, f.result()) for f in futures]
        self.cost_model.update([r.features for r in results], [r.cost for r in results], [task.key] * len(results))
        weighted = _weighted(self.tasks)
        self.curve.append((self.done, time.perf_counter() - self.started,
                           weighted if weighted is not None else float("nan")))
        if self.progress is not None:
            self.progress(self.done, self.trials, task, results)
        return True

    def _record(self, task: TuningTask, r: MeasureResult) -> MeasureResult:
        with self.writing():
            self.database.add(Record(task.key, self.target.key, r.config, r.status, r.cost, unit=r.unit,
                                     error=r.error[:ERROR_CHARS]))
            task.trials.append(Trial(r.config, str(r.status), r.cost))
            task.measured.add(r.config.to_json())
            self.done += 1
            self.new += 1
        if r.status != Status.OK:
            log.info("%s: %s: %s", task.name, r.status, r.error.splitlines()[0] if r.error else "")
        return r

    def result(self, interrupted: bool = False) -> TuneResult:
        kernels = []
        for t in self.tasks:
            best = t.best
            kernels.append(KernelResult(t.name, t.key, t.occurrences, len(t.trials),
                                        sum(1 for x in t.trials if x.status != "ok"),
                                        best.cost if best else None, best.config if best else None))
        return TuneResult(kernels, self.new, time.perf_counter() - self.started, interrupted, self.curve)


def candidate(task: TuningTask, config: Config) -> BuildInput:
    """What the builder gets for `config`: with the task's lowering of it, if it has one."""
    lowered = task.lowered(config)
    return BuildInput(config, Lowered.of(*lowered) if lowered is not None else None)


def _load(model) -> Graph:
    if isinstance(model, Graph):
        return model
    if isinstance(model, Subgraph):
        return model.graph
    from akg.graph.io import load_model

    return load_model(Path(model))


def tune(model, target: str | Target = "cpu", trials: int = 64, db: str | Database | None = None,
         timeout: float = 10.0, seed: int = 0, cost_model: str | CostModel = "xgb",
         search: str | SearchStrategy = "evolutionary", batch: int = 16, builder: Builder | None = None,
         runner: Runner | None = None, progress: Callable | None = None) -> TuneResult:
    """Tune a model (Graph, Subgraph or file path) on `target` with at most `trials`
    measurements in total (those already in the database count)."""
    started = time.perf_counter()
    target = get_target(target)
    database = open_database(db) if not isinstance(db, Database) else db
    tasks = tasks_of(_load(model), target, database, seed)
    model_ = make_cost_model(cost_model, seed)
    _warm_start(model_, database, target, tasks)
    own_builder, own_runner = builder is None, runner is None
    builder = builder or LocalBuilder()
    runner = runner or LocalRunner(timeout=timeout)
    loop = TuneLoop(tasks, target, database, builder, runner, model_, make_search(search), trials=trials,
                    batch=batch, seed=seed, progress=progress, started=started)
    interrupted = False
    stop = _StopOnInterrupt()
    loop.writing = stop.writing
    try:
        while not stop.requested and loop.step():
            pass
    except KeyboardInterrupt:
        interrupted = True
    finally:
        stop.closing = True  # more signals while the workers are stopped change nothing
        interrupted = interrupted or stop.requested
        if interrupted:
            log.warning("tuning interrupted; every measurement so far is in the database")
        try:
            if own_builder:
                builder.close()
        finally:
            if own_runner:
                runner.close()
            stop.restore()
    result = loop.result(interrupted)
    result.stopped_by = stop.signum if interrupted else None
    return result


class _StopOnInterrupt:
    """The first Ctrl-C asks the tuning loop to stop after the round in flight (so nothing
    half-measured is lost and no worker is killed mid-write); a second one, or a SIGTERM,
    stops at once (KeyboardInterrupt) — though never in the middle of writing a record
    (`writing`): then it stops right after that write. Either way every record written so
    far is in the database."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.requested = False
        self.signum: int | None = None  # what stopped tuning
        self._previous: dict = {}
        self._writing = 0
        self._pending = False
        self.closing = False
        if threading.current_thread() is threading.main_thread():
            for signum in self.SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)

    def _handle(self, signum, frame) -> None:
        if self.closing:
            return
        first = not self.requested
        self.requested = True
        self.signum = signum
        if signum == signal.SIGINT and first:
            log.warning("stopping after the current round (Ctrl-C again to stop now)")
            return
        if self._writing:
            self._pending = True
            return
        raise KeyboardInterrupt

    @contextlib.contextmanager
    def writing(self):
        """A record being written: an immediate stop waits until it is written."""
        self._writing += 1
        try:
            yield
        finally:
            self._writing -= 1
            if not self._writing and self._pending:
                self._pending = False
                raise KeyboardInterrupt

    def restore(self) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        self._previous = {}


def _weighted(tasks: list[TuningTask]) -> float | None:
    bests = [t.best for t in tasks]
    if any(b is None for b in bests):
        return None
    return sum(t.occurrences * b.cost for t, b in zip(tasks, bests))


def _warm_start(model: CostModel, database: Database, target: Target, tasks: list[TuningTask]) -> None:
    """Train the model on what the database knows: this model's kernels' history and recent
    records of other workloads on the same target (features recomputed by lowering)."""
    if not model.informative and getattr(model, "name", "") == "random":
        return
    own = {t.key for t in tasks}
    feats, costs, groups = [], [], []
    for t in tasks:
        for trial in t.trials:
            feats.append(t.features(trial.config))
            costs.append(trial.cost if trial.status == "ok" else None)
            groups.append(t.key)
    others = [r for r in database.records_for_target(target.key) if r.workload_key not in own]
    others = others[-WARM_START_LIMIT:]
    graphs: dict[str, TuningTask | None] = {}
    for rec in others:
        if rec.workload_key not in graphs:
            graphs[rec.workload_key] = _task_from_db(database, rec.workload_key, target)
        task = graphs[rec.workload_key]
        if task is None:
            continue
        feats.append(task.features(Config.from_json(rec.config)))
        costs.append(rec.cost if rec.status == Status.OK else None)
        groups.append(rec.workload_key)
    if feats:
        model.update(feats, costs, groups)


def _task_from_db(database: Database, key: str, target: Target) -> TuningTask | None:
    from akg.graph.subgraph import graph_from_canonical

    for w in database.workloads():
        if w.key == key:
            try:
                return TuningTask(Subgraph(graph_from_canonical(json.loads(w.description), w.name or "w")), target)
            except Exception as e:  # noqa: BLE001  (an old or foreign description: skip it)
                log.debug("cannot rebuild workload %s: %s", key, e)
                return None
    return None

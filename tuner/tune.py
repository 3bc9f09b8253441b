"""akg.tune: tune every kernel of a model (or one kernel) on a target, recording every
measurement in the tuning database as it happens.

The trial budget is the total number of measured configs for the model's kernels, counting
those already in the database: running the same tune again resumes where it stopped and,
once the budget is spent, measures nothing. A task scheduler gives each round to the
kernel with the largest expected gain (occurrences x best time so far, discounted by the
trials it already had), as Ansor's task scheduler does.
"""

from __future__ import annotations

import logging
import math
import shutil
import signal
import threading
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from akg.db import Database, Record, Status, TargetInfo, Workload, open_database
from akg.graph.ir import Graph
from akg.graph.subgraph import Subgraph
from akg.schedules.space import Config
from akg.target import Target, get_target
from akg.tuner.cost_model import CostModel, make_cost_model
from akg.tuner.measure import Builder, LocalBuilder, LocalRunner, Runner, TaskData
from akg.tuner.search import SearchStrategy, make_search
from akg.tuner.task import Trial, TuningTask

log = logging.getLogger(__name__)

WARM_START_LIMIT = 256  # records of other workloads used to warm-start the cost model


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

    @property
    def weighted_cost(self) -> float | None:
        """Sum over kernels of occurrences x best time (None until every kernel has one)."""
        if any(k.best_cost is None for k in self.kernels):
            return None
        return sum(k.occurrences * k.best_cost for k in self.kernels)


def kernels_of(graph: Graph, target: Target | None = None) -> list[Subgraph]:
    """The model's kernels for `target`, deduplicated by workload key with their occurrence
    counts."""
    try:
        from akg.graph.fuse import partition
    except ImportError:  # before fusion partitioning exists, the whole graph is one kernel
        return [Subgraph(graph)]
    parts = partition(graph, target=target)
    subgraphs = getattr(parts, "subgraphs", parts)
    unique: dict[str, Subgraph] = {}
    counts: dict[str, int] = {}
    for sg in subgraphs:
        counts[sg.workload_key] = counts.get(sg.workload_key, 0) + 1
        unique.setdefault(sg.workload_key, sg)
    return [Subgraph(sg.graph, sg.name, counts[key]) for key, sg in unique.items()]


class TaskScheduler:
    """Picks the task for the next round: every task once, then the largest expected gain."""

    def __init__(self, tasks: list[TuningTask]):
        self.tasks = tasks
        self.exhausted: set[int] = set()

    def next(self) -> TuningTask | None:
        live = [t for t in self.tasks if id(t) not in self.exhausted]
        if not live:
            return None
        untried = [t for t in live if not t.trials]
        if untried:
            return untried[0]
        return max(live, key=self.gain)

    @staticmethod
    def gain(task: TuningTask) -> float:
        best = task.best
        cost = best.cost if best is not None else 1.0  # a kernel that never ran is worth trying
        return task.occurrences * cost / math.sqrt(1 + len(task.trials))

    def exhaust(self, task: TuningTask) -> None:
        self.exhausted.add(id(task))


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
    t0 = time.perf_counter()
    target = get_target(target)
    graph = _load(model)
    database = open_database(db) if not isinstance(db, Database) else db
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
    model_ = make_cost_model(cost_model, seed)
    search_ = make_search(search)
    _warm_start(model_, database, target, tasks)
    own_builder, own_runner = builder is None, runner is None
    builder = builder or LocalBuilder()
    runner = runner or LocalRunner(timeout=timeout)
    workdir = Path(tempfile.mkdtemp(prefix="akg-tune-"))
    data = {id(t): TaskData(t.subgraph.graph, workdir, seed) for t in tasks}
    scheduler = TaskScheduler(tasks)
    done = sum(len(t.trials) for t in tasks)
    new = 0
    interrupted = False
    curve: list[tuple[int, float, float]] = []
    stop = _StopOnInterrupt()
    try:
        while done < trials and not stop.requested:
            task = scheduler.next()
            if task is None:
                break
            configs = search_.propose(task, model_, min(batch, trials - done))
            if not configs:
                scheduler.exhaust(task)
                continue
            best = task.best
            results = runner.run(data[id(task)], builder.build(task.subgraph.graph, target, configs),
                                 best.cost if best else None)
            for r in results:
                record = Record(task.key, target.key, r.config, r.status, r.cost, error=r.error[:2000])
                database.add(record)
                task.trials.append(Trial(r.config, str(r.status), r.cost))
                task.measured.add(r.config.to_json())
                if r.status != Status.OK:
                    log.info("%s: %s: %s", task.name, r.status, r.error)
            model_.update([r.features for r in results], [r.cost for r in results], [task.key] * len(results))
            done += len(results)
            new += len(results)
            weighted = _weighted(tasks)
            curve.append((done, time.perf_counter() - t0, weighted if weighted is not None else float("nan")))
            if progress is not None:
                progress(done, trials, task, results)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        stop.restore()
        interrupted = interrupted or stop.requested
        if interrupted:
            log.warning("tuning interrupted; every measurement so far is in the database")
        if own_builder and hasattr(builder, "close"):
            builder.close()
        if own_runner and hasattr(runner, "close"):
            runner.close()
        shutil.rmtree(workdir, ignore_errors=True)
    kernels = []
    for t in tasks:
        best = t.best
        kernels.append(KernelResult(t.name, t.key, t.occurrences, len(t.trials),
                                    sum(1 for x in t.trials if x.status != "ok"),
                                    best.cost if best else None, best.config if best else None))
    return TuneResult(kernels, new, time.perf_counter() - t0, interrupted, curve)


class _StopOnInterrupt:
    """The first Ctrl-C asks the tuning loop to stop after the round in flight (so nothing
    half-measured is lost and no worker is killed mid-write); a second one interrupts at once."""

    def __init__(self):
        self.requested = False
        self._previous = None
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)

    def _handle(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        log.warning("stopping after the current round (Ctrl-C again to stop now)")

    def restore(self) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None


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
    import json

    from akg.graph.subgraph import graph_from_canonical

    for w in database.workloads():
        if w.key == key:
            try:
                return TuningTask(Subgraph(graph_from_canonical(json.loads(w.description), w.name or "w")), target)
            except Exception as e:  # noqa: BLE001  (an old or foreign description: skip it)
                log.debug("cannot rebuild workload %s: %s", key, e)
                return None
    return None

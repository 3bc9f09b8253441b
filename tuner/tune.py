"""akg.tune: tune every kernel of a model (or one kernel) on a target, recording every
measurement in the tuning database as it happens.

The trial budget is the total number of measured configs for the model's kernels, counting
those already in the database: running the same tune again resumes where it stopped and,
once the budget is spent, measures nothing. `TuneLoop` holds a session's parts (tasks,
scheduler, search, cost model, builder, runner, database); each `step()` is one round: the
scheduler picks a kernel (`akg.tuner.scheduler`), the search proposes a batch (smaller while
kernels still wait for their first round, so that the budget reaches every kernel), the
builder compiles it (reusing the lowerings the search made to rank candidates), the runner
measures it, and each result goes into the database as it arrives.

When the tuning ends (not when it is interrupted), `confirm` re-times each kernel's pick
against its runner-up and the default config, in alternating rounds in one runner process
(`Runner.compare`), and stores the verdict: `akg compile` builds the winner, the default
config when that won (`Database.choice`). A kernel whose latest verdict judged its current
pick is not compared again; a failed comparison (a crash) stores nothing and is tried again
by the next tune.
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

from akg.db import (Contender, Database, Record, Status, TargetInfo, Verdict, Workload, canonical_config, lease_owner,
                    open_database, owner_is_gone)
from akg.errors import AkgError, DatabaseError
from akg.graph.ir import Graph
from akg.graph.subgraph import Subgraph
from akg.schedules.space import Config
from akg.target import Target, get_target
from akg.tuner.builder import Builder, BuildInput, LocalBuilder, Lowered
from akg.tuner.cost_model import CostModel, make_cost_model
from akg.tuner.runner import CompareResult, LocalRunner, MeasureResult, Runner, TaskData
from akg.tuner.runner.runner import DEFAULT_ROUNDS
from akg.tuner.scheduler import TaskScheduler
from akg.tuner.search import SearchStrategy, make_search
from akg.tuner.task import Trial, TuningTask

log = logging.getLogger(__name__)

__all__ = ["KernelResult", "TaskScheduler", "TuneLoop", "TuneResult", "describe_verdict", "kernels_of", "model_name",
           "tune"]

WARM_START_LIMIT = 256  # records of other workloads used to warm-start the cost model
ERROR_CHARS = 2000  # of a failed candidate's error text kept in its record (a crash report's top)
# A timed contender must beat the default by more than this fraction in the final comparison
# to replace it: a tuned config within the noise of alternating rounds is no gain, and a loaded
# host's spell should never make a kernel slower. Simulated cycles are exact: no margin there.
NOISE_MARGIN = 0.02
# Tuners sharing a database lease the configs of a round while they measure them. A lease
# outlives a round (tune() stretches it to twice the batch's timeouts); a crashed tuner's
# leases come back after it. Configs another tuner holds are set aside as long, and the
# search proposes others (CLAIM_TRIES times a round at most).
LEASE_SECONDS = 300.0
CLAIM_TRIES = 4
WAIT_SECONDS = 2.0  # a tuner whose budget is left to other tuners' leases looks again after this


@dataclass
class KernelResult:
    """One kernel's tuning: `trials` measured in all (`new_trials` of them by this tune), the
    best measured config, and the final comparison: `verdict` (None when none ran or it
    failed; `confirmation` says why in one line) and `chosen_config`, what `akg compile`
    builds (the default config when it won the comparison)."""

    name: str
    workload_key: str
    occurrences: int
    trials: int
    failures: int
    best_cost: float | None
    best_config: Config | None
    new_trials: int = 0
    verdict: Verdict | None = None
    confirmation: str = ""
    chosen_config: Config | None = None

    @property
    def uses_default(self) -> bool:
        """The default config won the final comparison: compile builds the default."""
        return self.verdict is not None and self.verdict.uses_default


@dataclass
class TuneResult:
    kernels: list[KernelResult]
    new_measurements: int
    seconds: float
    interrupted: bool = False
    curve: list[tuple[int, float, float]] = field(default_factory=list)  # (trial, seconds, weighted best)
    stopped_by: int | None = None  # the signal that stopped tuning (SIGINT, SIGTERM), if one did

    @property
    def untuned(self) -> list[str]:
        """Kernels that got no trials at all (a budget below the number of kernels)."""
        return [k.name for k in self.kernels if k.trials == 0]

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
                 writing: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
                 rounds: int = DEFAULT_ROUNDS, owner: str | None = None, lease_seconds: float = LEASE_SECONDS,
                 wait_seconds: float = WAIT_SECONDS):
        self.tasks, self.target, self.database = tasks, target, database
        self.builder, self.runner, self.cost_model, self.search = builder, runner, cost_model, search
        self.trials, self.batch, self.progress = trials, batch, progress
        self.writing = writing  # wraps each database write (an immediate stop waits for it)
        self.scheduler = TaskScheduler(tasks)
        self.data = {id(t): TaskData(t.subgraph.graph, seed, target.cost_unit) for t in tasks}
        self.done = sum(len(t.trials) for t in tasks)
        self.new = 0
        self.rounds = rounds  # of each final comparison
        self.before = {id(t): len(t.trials) for t in tasks}
        self.verdicts: dict[int, tuple[Verdict | None, str]] = {}  # task id -> (verdict, one line)
        self.curve: list[tuple[int, float, float]] = []
        self.started = time.perf_counter() if started is None else started
        self.owner = owner or lease_owner()  # this tuner, in the leases it takes
        self.lease_seconds, self.wait_seconds = lease_seconds, wait_seconds
        self.held: dict[int, dict[str, float]] = {}  # task id -> {config held elsewhere: until (monotonic)}

    def step(self) -> bool:
        """One round for the scheduler's next task; False when the budget is spent or no
        task has anything left to propose. Other tuners sharing the database first: their
        records of these tasks join them and count toward the budget, and so do the configs
        they are measuring (when those are all that is left, this round only waits)."""
        if self.done >= self.trials:
            return False
        elsewhere = self._sync()
        remaining = self.trials - self.done - elsewhere
        if remaining <= 0:
            if self.done < self.trials:
                time.sleep(self.wait_seconds)
            return self.done < self.trials
        task = self.scheduler.next()
        if task is None:
            return False
        size = self.scheduler.batch_for(task, self.batch, remaining)
        configs = self._claim(task, size)
        if not configs:
            if task.busy:  # what is left of this task is being measured elsewhere
                time.sleep(self.wait_seconds)
            else:
                self.scheduler.exhaust(task)
            return True
        best = task.best
        builds = self.builder.build(task.subgraph.graph, self.target, [candidate(task, c) for c in configs])
        futures = self.runner.submit(self.data[id(task)], builds, best.cost if best else None)
        results = [self._record(task, f.result()) for f in futures]
        self.database.release(self.owner, task.key, self.target.key, configs)  # moot once recorded
        ours = [r for r in results if not _foreign(r, self.target)]  # never another machine's timings
        self.cost_model.update([r.features for r in ours], [r.cost for r in ours], [task.key] * len(ours))
        weighted = _weighted(self.tasks)
        self.curve.append((self.done, time.perf_counter() - self.started,
                           weighted if weighted is not None else float("nan")))
        if self.progress is not None:
            self.progress(self.done, self.trials, task, results)
        return True

    def release(self) -> None:
        """Drop every lease this tuner holds (at the end of a tune, also an interrupted one):
        what it did not measure goes back to other tuners at once."""
        self.database.release(self.owner)

    # --- sharing the database with other tuners ---------------------------------------------

    def _sync(self) -> int:
        """Take in the records other tuners added for these tasks since the last round (one
        query when there are none); returns how many configs of these tasks they hold leases
        on (being measured, soon part of the budget)."""
        keys = [t.key for t in self.tasks]
        tally = self.database.tally(self.target.key, keys, self.owner)
        gone = {h for t in tally.values() for h in t.holders if owner_is_gone(h)}
        if gone:  # tuners of this host that died holding leases (SIGKILL, a crash): free them now
            for holder in gone:
                dropped = self.database.release(holder)
                log.info("released %d lease(s) of %s, a tuner of this host that has ended", dropped, holder)
            tally = self.database.tally(self.target.key, keys, self.owner)
        for task in self.tasks:
            if tally[task.key].measured > len(task.measured):
                self._adopt(task)
        return sum(t.leased for t in tally.values())

    def _adopt(self, task: TuningTask) -> None:
        """Another tuner's records of `task` become its trials: they count toward the budget,
        teach the cost model and are never proposed again."""
        feats, costs = [], []
        learns = getattr(self.cost_model, "name", "") != "random"
        for rec in self.database.history(task.key, self.target.key):
            config = Config.from_json(rec.config)
            if config.to_json() in task.measured:
                continue
            task.trials.append(Trial(config, str(rec.status), rec.cost))
            task.measured.add(config.to_json())
            self.done += 1
            self.before[id(task)] += 1  # not measured by this tune
            if learns:
                feats.append(task.features(config))
                costs.append(rec.cost if rec.status == Status.OK else None)
        if feats:
            self.cost_model.update(feats, costs, [task.key] * len(feats))

    def _claim(self, task: TuningTask, size: int) -> list[Config]:
        """Up to `size` proposals for `task` that this tuner now holds leases on. One that
        another tuner holds (or has just measured) is set aside for a lease's time, and the
        search proposes others in its place. One claim a round when nobody else tunes."""
        now = time.monotonic()
        held = {key: until for key, until in self.held.get(id(task), {}).items()
                if until > now and key not in task.measured}
        self.held[id(task)] = held
        task.busy = set(held)
        got: list[Config] = []
        try:
            for _ in range(CLAIM_TRIES):
                proposed = self.search.propose(task, self.cost_model, size - len(got))
                if not proposed:
                    break
                granted = set(self.database.claim(task.key, self.target.key, proposed, self.owner,
                                                  self.lease_seconds))
                for config in proposed:
                    task.busy.add(config.to_json())  # not proposed again this round
                    if canonical_config(config) in granted:
                        got.append(config)
                    else:
                        held[config.to_json()] = now + self.lease_seconds
                if len(granted) == len(proposed) or len(got) >= size:
                    break
        finally:
            task.busy = set(held)
        if held:
            log.debug("%s: %d configs left to other tuners", task.name, len(held))
        return got

    def _record(self, task: TuningTask, r: MeasureResult) -> MeasureResult:
        """Write a result under the target key and host that measured it; one measured on other
        hardware than the tuner's target (a runner that let it through) is kept under its own
        key and stays out of the task's history."""
        foreign = _foreign(r, self.target)
        measured_by = {"host": r.host} if r.host else {}
        with self.writing():
            self.database.add(Record(task.key, r.target_key or self.target.key, r.config, r.status, r.cost,
                                     unit=r.unit, error=r.error[:ERROR_CHARS], **measured_by))
            if not foreign:
                task.trials.append(Trial(r.config, str(r.status), r.cost))
                task.measured.add(r.config.to_json())
            self.done += 1
            self.new += 1
        if foreign:
            log.warning("%s: a result measured on %s (%s), not %s: recorded under its own target, not used",
                        task.name, r.host or "another machine", r.target_key, self.target.key)
        if r.status != Status.OK:
            log.info("%s: %s: %s", task.name, r.status, r.error.splitlines()[0] if r.error else "")
        return r

    # --- the final comparison ----------------------------------------------------------------

    def confirm_all(self, stop: Callable[[], bool] = lambda: False) -> None:
        """`confirm` every kernel (until `stop()` says to stop)."""
        for task in self.tasks:
            if stop():
                return
            self.confirm(task)

    def confirm(self, task: TuningTask) -> Verdict | None:
        """Re-time the task's pick against its runner-up and the default config in alternating
        rounds in one runner process, store the verdict and return it; None (nothing stored)
        when there is nothing to compare or the comparison failed. A verdict already stored
        for the current pick is reused."""
        best = task.best
        if best is None:
            self.verdicts[id(task)] = (None, "no successful measurement to confirm")
            return None
        latest = self.database.verdict(task.key, self.target.key)
        if latest is not None and latest.best_config == canonical_config(best.config):
            self.verdicts[id(task)] = (latest, describe_verdict(latest))
            return latest
        contenders = _contenders(task)
        try:
            builds = self.builder.build(task.subgraph.graph, self.target,
                                        [candidate(task, config) for _, config, _ in contenders])
            rounds = self.rounds if len(contenders) > 1 and self.target.cost_unit == "s" else 1
            result = self.runner.compare(self.data[id(task)], builds, rounds).result()
        except Exception as e:  # noqa: BLE001  (a failed comparison must not end the tune)
            result = CompareResult.failed(len(contenders), self.target.cost_unit, f"{type(e).__name__}: {e}")
        verdict = _verdict(task, self.target, best.config, contenders, result)
        if verdict is None:
            why = result.error.splitlines()[0] if result.error else "no contender ran"
            log.warning("%s: the final comparison failed (%s); its pick stays unconfirmed", task.name, why)
            self.verdicts[id(task)] = (None, f"final comparison failed: {why}")
            return None
        with self.writing():
            self.database.add_verdict(verdict)
        self.verdicts[id(task)] = (verdict, describe_verdict(verdict))
        log.info("%s: %s", task.name, describe_verdict(verdict))
        return verdict

    def result(self, interrupted: bool = False) -> TuneResult:
        kernels = []
        for t in self.tasks:
            best = t.best
            verdict, note = self.verdicts.get(id(t), (None, ""))
            if not note and best is not None:
                latest = self.database.verdict(t.key, self.target.key)
                if latest is not None and latest.best_config == canonical_config(best.config):
                    verdict, note = latest, describe_verdict(latest)
                else:
                    note = "not confirmed yet: run the same tune again to confirm"
            chosen = Config.from_json(verdict.config) if verdict is not None else (best.config if best else None)
            kernels.append(KernelResult(t.name, t.key, t.occurrences, len(t.trials),
                                        sum(1 for x in t.trials if x.status != "ok"),
                                        best.cost if best else None, best.config if best else None,
                                        len(t.trials) - self.before.get(id(t), 0), verdict, note, chosen))
        return TuneResult(kernels, self.new, time.perf_counter() - self.started, interrupted, self.curve)


def _contenders(task: TuningTask) -> list[tuple[str, Config, bool]]:
    """(role, config, is the default) of a final comparison: the task's pick ("tuned"), its
    runner-up and the default config, each once."""
    try:
        default = task.default_config()
    except AkgError:
        default = None
    default_key = default.to_json() if default is not None else None
    ranked = task.best_configs(2)
    out, seen = [], set()
    for role, config in (("tuned", ranked[0] if ranked else None),
                         ("runner-up", ranked[1] if len(ranked) > 1 else None), ("default", default)):
        if config is None or config.to_json() in seen:
            continue
        seen.add(config.to_json())
        out.append((role, config, config.to_json() == default_key))
    return out


def _verdict(task: TuningTask, target: Target, best: Config, contenders: list[tuple[str, Config, bool]],
             result: CompareResult) -> Verdict | None:
    """The verdict of a comparison (None if it failed): the cheapest contender wins, the
    default config on a tie or when the winner is cheaper by no more than the noise margin
    (`NOISE_MARGIN`, for timed costs), then the earlier role."""
    if not result.ok:
        return None
    costs = result.costs
    margin = NOISE_MARGIN if str(target.cost_unit) == "s" else 0.0
    ranked = [(costs[k] * (1 - margin) if contenders[k][2] else costs[k], not contenders[k][2], k)
              for k in range(len(contenders)) if k < len(costs) and costs[k] is not None]
    if not ranked:
        return None
    winner = min(ranked)[2]
    entries = tuple(Contender(role, config, result.statuses[k], costs[k], tuple(result.rounds[k]), is_default,
                              (result.errors[k] if k < len(result.errors) else "")[:ERROR_CHARS])
                    for k, (role, config, is_default) in enumerate(contenders))
    role, config, _ = contenders[winner]
    return Verdict(task.key, target.key, config, role, best, costs[winner], target.cost_unit, entries)


def _cost_text(cost: float | None, unit) -> str:
    if cost is None:
        return "-"
    if str(unit) == "s":
        return f"{cost * 1e6:.1f} us" if cost < 1e-3 else f"{cost * 1e3:.3f} ms"
    return f"{cost:.0f} {unit}"


def describe_verdict(verdict: Verdict) -> str:
    """One line: which config the final comparison chose, against what."""
    tuned = verdict.contender("tuned")
    default = next((c for c in verdict.contenders if c.is_default), None)
    others = ", ".join(f"{c.role} {_cost_text(c.cost, verdict.unit) if c.cost is not None else c.status}"
                       for c in verdict.contenders if c.config != verdict.config)
    against = f" vs {others}" if others else " (nothing to compare with)"
    cost = _cost_text(verdict.cost, verdict.unit)
    if verdict.uses_default and tuned is not None and not tuned.is_default:
        return f"default kept: default {cost}{against} in the final comparison"
    if tuned is not None and tuned.config == verdict.config:
        same = " (the tuned config is the default)" if default is tuned else ""
        return f"tuned config confirmed{same}: {cost}{against}"
    return f"{verdict.role} chosen in the final comparison: {cost}{against}"


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


def model_name(model) -> str:
    """The name a tuned model is registered under: a file's stem, else the graph's name."""
    if isinstance(model, (Graph, Subgraph)):
        return model.name
    return Path(model).stem


def tune(model, target: str | Target = "cpu", trials: int = 64, db: str | Database | None = None,
         timeout: float = 10.0, seed: int = 0, cost_model: str | CostModel = "xgb",
         search: str | SearchStrategy = "evolutionary", batch: int = 16, builder: Builder | None = None,
         runner: Runner | None = None, progress: Callable | None = None, confirm: bool = True,
         rounds: int = DEFAULT_ROUNDS, workers: int | None = None, scheduler: str | None = None) -> TuneResult:
    """Tune a model (Graph, Subgraph or file path) on `target` with at most `trials`
    measurements in total (those already in the database count); then, unless interrupted
    (or `confirm` is False), the final comparison of each kernel's pick (`rounds` rounds).
    `workers` (a local Dask cluster of that many processes) or `scheduler` (a Dask scheduler's
    address): candidates are built and measured on Dask workers (docs/farm.md)."""
    started = time.perf_counter()
    target = get_target(target)
    database = open_database(db) if not isinstance(db, Database) else db
    tasks = tasks_of(_load(model), target, database, seed)
    database.register_model(model_name(model), target.key, [(t.key, t.occurrences) for t in tasks])
    model_ = make_cost_model(cost_model, seed)
    _warm_start(model_, database, target, tasks)
    own_builder, own_runner = builder is None, runner is None
    if workers is not None or scheduler is not None:
        runner, builder = _dask_runner(target, runner, builder, workers, scheduler, timeout)
    builder = builder or LocalBuilder()
    runner = runner or LocalRunner(timeout=timeout)
    loop = TuneLoop(tasks, target, database, builder, runner, model_, make_search(search), trials=trials,
                    batch=batch, seed=seed, progress=progress, started=started, rounds=rounds,
                    lease_seconds=max(LEASE_SECONDS, 2.0 * batch * timeout))
    interrupted = False
    stop = _StopOnInterrupt()
    loop.writing = stop.writing
    try:
        while not stop.requested and loop.step():
            pass
        if confirm and not stop.requested:
            loop.confirm_all(stop=lambda: stop.requested)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        stop.closing = True  # more signals while the workers are stopped change nothing
        interrupted = interrupted or stop.requested
        if interrupted:
            log.warning("tuning interrupted; every measurement so far is in the database")
        try:
            loop.release()
        except DatabaseError as e:
            log.warning("this tuner's leases stay until they expire: %s", e)
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


def _dask_runner(target: Target, runner: Runner | None, builder: Builder | None, workers: int | None,
                 scheduler: str | None, timeout: float) -> tuple[Runner, Builder | None]:
    """A DaskRunner on `workers` local processes or at `scheduler`, and unless given a builder
    on the same cluster."""
    from akg.errors import InputError
    from akg.tuner.runner.dask import DaskRunner

    if runner is not None:
        raise InputError("give either a runner or Dask workers/a scheduler to tune with, not both")
    if workers is not None and scheduler is not None:
        raise InputError("give either a number of local Dask workers or a scheduler address, not both")
    runner = DaskRunner(target, workers=workers, scheduler=scheduler, timeout=timeout)
    return runner, builder or runner.builder()


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


def _foreign(result: MeasureResult, target: Target) -> bool:
    """Was `result` measured on other hardware than `target`?"""
    return bool(result.target_key) and result.target_key != target.key


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

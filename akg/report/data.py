"""What a tuning report shows, collected once from a `Database`: per kernel its best time, the
default config's time, trials, failures by status and tuning curve; per registered model the
kernels' times weighted by occurrences. The renderers (html, terminal, JSON) only read this."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone

from akg.db import Database, ModelEntry, Record, Status, Verdict
from akg.db.record import as_utc

FAILURE_STATUSES = tuple(s.value for s in Status if s is not Status.OK)


@dataclass(frozen=True)
class CurvePoint:
    """The best cost so far after `trial` measurements (1-based, every status counts), the
    record measured at `measured_at`. A curve keeps the points where the best improved and
    its last point, which drawn as steps is the whole curve."""

    trial: int
    measured_at: datetime
    best: float


@dataclass(frozen=True)
class KernelReport:
    """One kernel (workload) on one target.

    `best_cost`: the cheapest `ok` record in the database. `compile_uses`: what `akg compile`
    builds (the latest final comparison's winner, else the cheapest record, unconfirmed).
    `speedup` = `default_cost` / `chosen_cost`: the target's default config against what
    compile builds, both from the latest final comparison (`cost_source` "final
    comparison": alternating rounds in one process), else both from their records
    ("measurements"); None when the default config's cost is unknown. `trials` and
    `failures` count the records in the report's window (`--since`); `curve` is the best
    so far over those records."""

    workload_key: str
    name: str
    target_key: str
    unit: str
    best_cost: float | None
    default_cost: float | None
    chosen_cost: float | None
    cost_source: str | None
    compile_uses: str
    trials: int
    failures: dict[str, int]
    curve: tuple[CurvePoint, ...]
    first_measured: datetime | None = None
    last_measured: datetime | None = None
    best_config: str | None = None

    @property
    def speedup(self) -> float | None:
        return ratio(self.default_cost, self.chosen_cost)

    @property
    def failed(self) -> int:
        return sum(self.failures.values())


@dataclass(frozen=True)
class ModelReport:
    """A registered model on a target, as sums over its kernels of occurrences x cost:
    `best_cost` of the kernels' best costs, `chosen_cost` of what compile builds,
    `default_cost` of the default configs'; each None when a kernel lacks its number (those
    kernels are in `missing_best`, `missing_default`). `speedup` = default / chosen."""

    name: str
    target_key: str
    kernels: tuple[tuple[str, int], ...]
    unit: str
    best_cost: float | None
    chosen_cost: float | None
    default_cost: float | None
    trials: int
    failures: int
    missing_best: tuple[str, ...] = ()
    missing_default: tuple[str, ...] = ()
    updated_at: datetime | None = None

    @property
    def speedup(self) -> float | None:
        return ratio(self.default_cost, self.chosen_cost)


@dataclass(frozen=True)
class ReportData:
    """Everything a report shows. `database` names the database (URL without password);
    `since` and `target_key` are the filters it was collected with; `command` is the command
    line that made it (set by the CLI)."""

    database: str
    generated_at: datetime
    kernels: tuple[KernelReport, ...]
    models: tuple[ModelReport, ...] = ()
    since: datetime | None = None
    target_key: str | None = None
    command: str = ""
    failures: dict[str, int] = field(default_factory=dict)

    @property
    def trials(self) -> int:
        return sum(k.trials for k in self.kernels)

    @property
    def failed(self) -> int:
        return sum(self.failures.values())

    @property
    def empty(self) -> bool:
        return not self.kernels

    def kernel(self, workload_key: str, target_key: str) -> KernelReport | None:
        return next((k for k in self.kernels if k.workload_key == workload_key and k.target_key == target_key), None)


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator, None when either is unknown or the denominator is not > 0."""
    if numerator is None or denominator is None or not denominator > 0:
        return None
    value = numerator / denominator
    return value if math.isfinite(value) else None


def collect(database: Database, since: datetime | None = None, target_key: str | None = None) -> ReportData:
    """The report of `database`: every kernel with a record on `target_key` (all targets when
    None) measured at or after `since` (naive: UTC), and every registered model with such a
    kernel. Trials, failures and curves count the records from `since` on; best and default
    costs are the database's current ones (the whole history)."""
    since = as_utc(since) if since is not None else None
    names = {w.key: w.name for w in database.workloads()}
    history: dict[tuple[str, str], list[Record]] = {}
    for r in database.records(target_key=target_key):
        history.setdefault((r.workload_key, r.target_key), []).append(r)
    verdicts: dict[tuple[str, str], list[Verdict]] = {}
    for v in database.verdicts(target_key=target_key):
        verdicts.setdefault((v.workload_key, v.target_key), []).append(v)

    everything = {key: _kernel(key, names.get(key[0], ""), records, verdicts.get(key, []), since)
                  for key, records in history.items()}
    kernels = tuple(sorted((k for k in everything.values() if k.trials or since is None),
                           key=lambda k: (k.target_key, k.name, k.workload_key)))
    shown = {(k.workload_key, k.target_key) for k in kernels}
    models = []
    for entry in database.models(target_key):
        keys = [(key, entry.target_key) for key, _ in entry.kernels]
        if since is not None and not any(key in shown for key in keys):
            continue
        models.append(_model(entry, everything))
    failures = Counter()
    for k in kernels:
        failures.update(k.failures)
    return ReportData(_name(database), datetime.now(timezone.utc), kernels, tuple(models), since, target_key,
                      failures={s: failures[s] for s in FAILURE_STATUSES if failures[s]})


def _kernel(key: tuple[str, str], name: str, records: list[Record], verdicts: list[Verdict],
            since: datetime | None) -> KernelReport:
    workload_key, target_key = key
    ok = [r for r in records if r.ok and r.cost is not None]
    best = min(ok, key=lambda r: r.cost) if ok else None
    window = [r for r in records if since is None or r.timestamp >= since]
    unit = str((best or records[0]).unit)
    verdict = verdicts[-1] if verdicts else None
    default, chosen, source = _costs(ok, best, verdicts)
    failures = Counter(str(r.status) for r in window if not r.ok)
    return KernelReport(workload_key, name or workload_key[:12], target_key, unit,
                        best.cost if best else None, default, chosen, source, _compile_uses(best, verdict),
                        len(window), {s: failures[s] for s in FAILURE_STATUSES if failures[s]}, curve(window),
                        window[0].timestamp if window else None, window[-1].timestamp if window else None,
                        best.config if best else None)


def curve(records: list[Record]) -> tuple[CurvePoint, ...]:
    """The best `ok` cost so far over records in measurement order: the points where it
    improved, and the last record's point."""
    points: list[CurvePoint] = []
    best = None
    for i, r in enumerate(records, 1):
        if r.ok and r.cost is not None and (best is None or r.cost < best):
            best = r.cost
            points.append(CurvePoint(i, r.timestamp, best))
    if best is not None and points[-1].trial != len(records):
        points.append(CurvePoint(len(records), records[-1].timestamp, best))
    return tuple(points)


def _costs(ok: list[Record], best: Record | None,
           verdicts: list[Verdict]) -> tuple[float | None, float | None, str | None]:
    """(default config's cost, cost of what compile builds, where both come from): the latest
    final comparison when it timed the default config, else the records of the default config
    (known from the verdicts that timed it) and of the chosen one, so that the two are always
    measured alike."""
    verdict = verdicts[-1] if verdicts else None
    if verdict is not None:
        timed = next((c for c in verdict.contenders if c.is_default), None)
        if timed is not None and timed.status is Status.OK and timed.cost is not None and verdict.cost is not None:
            return timed.cost, verdict.cost, "final comparison"
    measured = {r.config: r.cost for r in ok}
    chosen = measured.get(verdict.config) if verdict is not None else (best.cost if best else None)
    defaults = [c.config for v in reversed(verdicts) for c in v.contenders if c.is_default]
    default = next((measured[c] for c in defaults if c in measured), None)
    return default, chosen, "measurements" if default is not None else None


def _compile_uses(best: Record | None, verdict: Verdict | None) -> str:
    """What `akg compile` builds, as `Database.choice` decides it."""
    if verdict is not None:
        if verdict.uses_default:
            tuned = verdict.contender("tuned")
            return "default (the tuned pick)" if tuned is not None and tuned.is_default else "default (won)"
        return "tuned" if verdict.role == "tuned" else verdict.role
    return "tuned, unconfirmed" if best is not None else "default (nothing tuned)"


def _model(entry: ModelEntry, kernels: dict[tuple[str, str], KernelReport]) -> ModelReport:
    best = chosen = default = 0.0
    missing_best, missing_default = [], []
    trials = failures = 0
    unit = None
    for key, occurrences in entry.kernels:
        k = kernels.get((key, entry.target_key))
        if k is None or k.best_cost is None:
            missing_best.append(key)
        else:
            best += occurrences * k.best_cost
        if k is None or k.default_cost is None or k.chosen_cost is None:
            missing_default.append(key)
        else:
            chosen += occurrences * k.chosen_cost
            default += occurrences * k.default_cost
        if k is not None:
            unit = unit or k.unit
            trials += k.trials
            failures += k.failed
    return ModelReport(entry.name, entry.target_key, tuple(entry.kernels), unit or "s",
                       None if missing_best else best, None if missing_default else chosen,
                       None if missing_default else default, trials, failures, tuple(missing_best),
                       tuple(missing_default), entry.updated_at)


def _name(database: Database) -> str:
    """The database as a user would name it: its URL without password."""
    return getattr(database, "url", None) or type(database).__name__

"""A report against a baseline: the best costs of an earlier JSON-lines export
(`Database.export_jsonl`, `akg db export`) beside today's, each kernel and model judged a
regression, an improvement or the same within a noise threshold."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from akg.db import Record, Workload
from akg.db.jsonl import parse_line
from akg.db.record import model_kernels
from akg.errors import DatabaseError
from akg.report.data import ReportData, ratio

VERDICTS = ("regression", "improvement", "missing", "new", "same")  # also the order changes are listed in


@dataclass(frozen=True)
class BaselineKernel:
    """A kernel's best `ok` cost in the baseline (None when all its records failed)."""

    workload_key: str
    target_key: str
    name: str
    best_cost: float | None
    unit: str


@dataclass(frozen=True)
class BaselineModel:
    """A model's kernels (workload key, occurrences) as the baseline registered them."""

    name: str
    target_key: str
    kernels: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class Baseline:
    """The best costs of an export, per (workload key, target key), and its models."""

    source: str
    kernels: dict[tuple[str, str], BaselineKernel] = field(default_factory=dict)
    models: dict[tuple[str, str], BaselineModel] = field(default_factory=dict)

    def best(self, workload_key: str, target_key: str) -> float | None:
        k = self.kernels.get((workload_key, target_key))
        return k.best_cost if k is not None else None

    def model_cost(self, kernels: tuple[tuple[str, int], ...], target_key: str) -> float | None:
        """Sum of occurrences x baseline best over `kernels`; None if one has no best."""
        costs = [self.best(key, target_key) for key, _ in kernels]
        if not kernels or any(c is None for c in costs):
            return None
        return sum(n * c for (_, n), c in zip(kernels, costs))


def load_baseline(path: str | os.PathLike) -> Baseline:
    """Read an export (`Database.export_jsonl`): the best `ok` cost of every (workload, target)
    and the models it registers. A malformed line is a DatabaseError naming `file:line`."""
    path = Path(path)
    names: dict[str, str] = {}
    best: dict[tuple[str, str], Record | None] = {}
    models: dict[tuple[str, str], BaselineModel] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise DatabaseError(f"cannot read the baseline {path}: {getattr(e, 'strerror', None) or e}") from None
    header = False
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            model = _model_line(line)
            item = parse_line(line) if model is None else None
            if not header and (model is not None or item is not None):
                raise DatabaseError("not an akg tuning export: it does not start with a header line")
        except DatabaseError as e:
            raise DatabaseError(f"{path}:{number}: {e}") from None
        header = True
        if model is not None:
            models[(model.name, model.target_key)] = model
        elif isinstance(item, Record):
            key = (item.workload_key, item.target_key)
            old = best.get(key)
            if item.ok and item.cost is not None and (old is None or item.cost < old.cost):
                best[key] = item
            else:
                best.setdefault(key, None)
        elif isinstance(item, Workload):
            names[item.key] = item.name
    if not best and not models:
        raise DatabaseError(f"the baseline {path} holds no records")
    kernels = {key: BaselineKernel(key[0], key[1], names.get(key[0], ""), r.cost if r else None,
                                   str(r.unit) if r else "s") for key, r in best.items()}
    return Baseline(str(path), kernels, models)


def _model_line(line: str) -> BaselineModel | None:
    """A model line of an export (`{"kind": "model", "name", "target", "kernels": [[key, n], ...]}`),
    else None."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError:
        return None  # parse_line says why
    if not isinstance(obj, dict) or obj.get("kind") != "model":
        return None
    name, target = obj.get("name"), obj.get("target", obj.get("target_key"))
    if not isinstance(name, str) or not name or not isinstance(target, str) or not target:
        raise DatabaseError("bad model: needs a name and a target")
    kernels = obj.get("kernels")
    if not isinstance(kernels, list):
        raise DatabaseError(f"bad model {name!r}: 'kernels' must be a list")
    pairs = [(k["workload"], k["occurrences"]) if isinstance(k, dict) else tuple(k) for k in kernels]
    return BaselineModel(name, target, model_kernels(pairs))


@dataclass(frozen=True)
class Change:
    """One kernel's or model's best cost against the baseline: `ratio` = after / before;
    `verdict` is "regression" (after > before x (1 + threshold)), "improvement" (before >
    after x (1 + threshold)), "same", "new" (nothing to compare with in the baseline) or
    "missing" (in the baseline, but no best cost now)."""

    kind: str
    name: str
    key: str
    target_key: str
    before: float | None
    after: float | None
    unit: str
    ratio: float | None
    verdict: str


def judge(before: float | None, after: float | None, threshold: float) -> str:
    if after is None:
        return "missing"
    if before is None:
        return "new"
    if after > before * (1 + threshold):
        return "regression"
    if before > after * (1 + threshold):
        return "improvement"
    return "same"


def compare(data: ReportData, baseline: Baseline, threshold: float = 0.05) -> list[Change]:
    """Every kernel and model of the report against the baseline, regressions first, then
    improvements, missing, new and unchanged ones; models before kernels within each.
    Baseline kernels of the report's targets that have no best cost now are "missing"."""
    if not threshold >= 0:
        raise ValueError(f"the noise threshold must be >= 0, not {threshold!r}")
    changes = []
    for m in data.models:
        found = baseline.models.get((m.name, m.target_key))
        before = baseline.model_cost(found.kernels if found is not None else m.kernels, m.target_key)
        changes.append(Change("model", m.name, m.name, m.target_key, before, m.best_cost, m.unit,
                              ratio(m.best_cost, before), judge(before, m.best_cost, threshold)))
    targets = {k.target_key for k in data.kernels} | ({data.target_key} if data.target_key else set())
    seen = set()
    for k in data.kernels:
        seen.add((k.workload_key, k.target_key))
        old = baseline.kernels.get((k.workload_key, k.target_key))
        before = old.best_cost if old is not None and old.unit == k.unit else None
        if old is None and k.best_cost is None:
            continue  # never worked, then or now: nothing to compare
        changes.append(Change("kernel", k.name, k.workload_key, k.target_key, before, k.best_cost, k.unit,
                              ratio(k.best_cost, before), judge(before, k.best_cost, threshold)))
    if data.since is None:  # with --since, kernels not measured since are simply left out
        for key, old in baseline.kernels.items():
            if key not in seen and key[1] in targets and old.best_cost is not None:
                changes.append(Change("kernel", old.name or key[0][:12], key[0], key[1], old.best_cost, None,
                                      old.unit, None, "missing"))
    order = {v: i for i, v in enumerate(VERDICTS)}
    return sorted(changes, key=lambda c: (order[c.verdict], c.kind != "model", c.target_key, c.name, c.key))

"""`InMemoryDatabase`: the null implementation of `Database`, for unit tests and dry runs."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone
from typing import Iterable

from akg.db.database import Database, Tally, check_k, check_lease, check_model
from akg.db.record import (ConfigLike, ModelEntry, Record, TargetInfo, Verdict, Workload, as_utc, canonical_config,
                           model_kernels)


class InMemoryDatabase(Database):
    """Records in a dict, with the semantics of `SqlDatabase` (first record per key stands,
    measurement order, failed records never rank). Thread-safe; not shared across processes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._workloads: dict[str, Workload] = {}
        self._targets: dict[str, TargetInfo] = {}
        # (workload, target, config) -> (arrival number, record); dicts keep arrival order
        self._records: dict[tuple[str, str, str], tuple[int, Record]] = {}
        self._verdicts: list[Verdict] = []
        self._models: dict[tuple[str, str], ModelEntry] = {}  # (name, target) -> entry
        self._leases: dict[tuple[str, str, str], tuple[str, datetime]] = {}  # key -> (owner, expires at)

    def register_workload(self, workload: Workload) -> None:
        with self._lock:
            self._workloads[workload.key] = _fill_workload(self._workloads.get(workload.key), workload)

    def register_target(self, target: TargetInfo) -> None:
        with self._lock:
            old = self._targets.get(target.key)
            if old is None or old.description == "{}":
                self._targets[target.key] = target

    def add_many(self, records: Iterable[Record]) -> int:
        records = list(records)
        new = 0
        with self._lock:
            for r in records:
                key = (r.workload_key, r.target_key, r.config)
                if key in self._records:
                    continue
                self._workloads.setdefault(r.workload_key, Workload(r.workload_key))
                self._targets.setdefault(r.target_key, TargetInfo(r.target_key))
                self._records[key] = (len(self._records), r)
                new += 1
        return new

    def add_verdict(self, verdict: Verdict) -> bool:
        with self._lock:
            if any((v.workload_key, v.target_key, v.timestamp) == (verdict.workload_key, verdict.target_key,
                                                                    verdict.timestamp) for v in self._verdicts):
                return False
            self._workloads.setdefault(verdict.workload_key, Workload(verdict.workload_key))
            self._targets.setdefault(verdict.target_key, TargetInfo(verdict.target_key))
            self._verdicts.append(verdict)
            return True

    def register_model(self, name: str, target_key: str, kernels: Iterable[tuple[str, int]], *,
                       updated_at: datetime | None = None) -> None:
        check_model(name, target_key)
        entry = ModelEntry(name, target_key, model_kernels(kernels),
                           datetime.now(timezone.utc) if updated_at is None else as_utc(updated_at))
        with self._lock:
            old = self._models.get((name, target_key))
            if updated_at is not None and old is not None and old.updated_at > entry.updated_at:
                return
            self._targets.setdefault(target_key, TargetInfo(target_key))
            for key, _ in entry.kernels:
                self._workloads.setdefault(key, Workload(key))
            self._models[(name, target_key)] = entry

    def models(self, target_key: str | None = None) -> list[ModelEntry]:
        with self._lock:
            return [m for _, m in sorted(self._models.items()) if target_key in (None, m.target_key)]

    def verdicts(self, workload_key: str | None = None, target_key: str | None = None) -> list[Verdict]:
        with self._lock:
            found = [(n, v) for n, v in enumerate(self._verdicts)
                     if workload_key in (None, v.workload_key) and target_key in (None, v.target_key)]
        found.sort(key=lambda nv: (nv[1].timestamp, nv[0]))
        return [v for _, v in found]

    def claim(self, workload_key: str, target_key: str, configs: Iterable[ConfigLike], owner: str,
              ttl_seconds: float) -> list[str]:
        check_lease(owner, ttl_seconds)
        wanted = list(dict.fromkeys(canonical_config(c) for c in configs))
        now = datetime.now(timezone.utc)
        got = []
        with self._lock:
            for config in wanted:
                key = (workload_key, target_key, config)
                held = self._leases.get(key)
                if key in self._records:
                    if held is not None and held[0] == owner:
                        del self._leases[key]  # moot: measured
                    continue
                if held is None or held[0] == owner or held[1] <= now:
                    self._leases[key] = (owner, now + timedelta(seconds=ttl_seconds))
                    got.append(config)
            if got:
                self._workloads.setdefault(workload_key, Workload(workload_key))
                self._targets.setdefault(target_key, TargetInfo(target_key))
        return got

    def release(self, owner: str, workload_key: str | None = None, target_key: str | None = None,
                configs: Iterable[ConfigLike] | None = None) -> int:
        check_lease(owner)
        only = None if configs is None else {canonical_config(c) for c in configs}
        with self._lock:
            gone = [key for key, (holder, _) in self._leases.items()
                    if holder == owner and workload_key in (None, key[0]) and target_key in (None, key[1])
                    and (only is None or key[2] in only)]
            for key in gone:
                del self._leases[key]
        return len(gone)

    def tally(self, target_key: str, workload_keys: Iterable[str], owner: str) -> dict[str, Tally]:
        keys = set(workload_keys)
        now = datetime.now(timezone.utc)
        measured = dict.fromkeys(keys, 0)
        leased = dict.fromkeys(keys, 0)
        holders: dict[str, set[str]] = {k: set() for k in keys}
        with self._lock:
            for w, t, _ in self._records:
                if t == target_key and w in keys:
                    measured[w] += 1
            for key, (holder, expires) in self._leases.items():
                if key[1] == target_key and key[0] in keys and holder != owner and expires > now \
                        and key not in self._records:
                    leased[key[0]] += 1
                    holders[key[0]].add(holder)
        return {k: Tally(measured[k], leased[k], frozenset(holders[k])) for k in keys}

    def has(self, workload_key: str, target_key: str, config: ConfigLike) -> bool:
        return (workload_key, target_key, canonical_config(config)) in self._records

    def measured_configs(self, workload_key: str, target_key: str) -> set[str]:
        with self._lock:
            return {c for (w, t, c) in self._records if (w, t) == (workload_key, target_key)}

    def top_k(self, workload_key: str, target_key: str, k: int) -> list[Record]:
        check_k(k)
        ok = [(n, r) for n, r in self._select(workload_key, target_key, None) if r.ok]
        ok.sort(key=lambda nr: (nr[1].cost, nr[1].timestamp, nr[0]))
        return [r for _, r in ok[:k]]

    def records(self, workload_key: str | None = None, target_key: str | None = None, *,
                exclude_workload: str | None = None) -> list[Record]:
        found = self._select(workload_key, target_key, exclude_workload)
        found.sort(key=lambda nr: (nr[1].timestamp, nr[0]))
        return [r for _, r in found]

    def workloads(self) -> list[Workload]:
        return [w for _, w in sorted(self._workloads.items())]

    def targets(self) -> list[TargetInfo]:
        return [t for _, t in sorted(self._targets.items())]

    def count(self, workload_key: str | None = None, target_key: str | None = None) -> int:
        return len(self._select(workload_key, target_key, None))

    def _select(self, workload_key: str | None, target_key: str | None,
                exclude_workload: str | None) -> list[tuple[int, Record]]:
        with self._lock:
            entries = list(self._records.values())
        return [(n, r) for n, r in entries
                if workload_key in (None, r.workload_key) and target_key in (None, r.target_key)
                and r.workload_key != exclude_workload]


def _fill_workload(old: Workload | None, new: Workload) -> Workload:
    """`old` with its blanks (empty name, empty description) filled from `new`."""
    if old is None:
        return new
    return Workload(old.key, old.name or new.name,
                    old.description if old.description != "{}" else new.description)

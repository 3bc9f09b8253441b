"""The `Database` interface the tuner talks to; `InMemoryDatabase` and `SqlDatabase` implement
it with the same semantics (tests run the same cases over both)."""

from __future__ import annotations

import abc
import os
import secrets
import socket
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, Iterable

from akg.db.record import ConfigLike, ModelEntry, Record, TargetInfo, Verdict, Workload
from akg.errors import DatabaseError


@dataclass(frozen=True)
class Choice:
    """What `akg compile` builds for a workload on a target (`Database.choice`): `config` (the
    canonical JSON of a tuned config; None: the target's default config), the record that
    measured it during tuning (None when the default was chosen), and the verdict of the
    final comparison that chose it (None: unconfirmed: a database written before verdicts
    existed, or a tune stopped before its final comparison)."""

    config: str | None
    record: Record | None
    verdict: Verdict | None

    @property
    def confirmed(self) -> bool:
        return self.verdict is not None


@dataclass(frozen=True)
class Tally:
    """Where a workload's tuning on a target stands for one tuner (`Database.tally`): how many
    configs are measured, and how many more other tuners hold unexpired leases on (being
    measured elsewhere: they will count toward a shared budget)."""

    measured: int = 0
    leased: int = 0
    holders: frozenset[str] = field(default=frozenset(), compare=False)  # the owners of those leases


def lease_owner() -> str:
    """A name for this tuner in the leases it takes: host:pid:random (unique per session)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


def owner_is_gone(owner: str) -> bool:
    """Whether `owner` (a `lease_owner()` name) was a process of this host that has ended, so
    its leases may go now rather than at their expiry (a tuner killed with SIGKILL, or one that
    crashed, releases nothing). Owners of other hosts, and names not of that form, are never
    judged: their leases expire. A reused pid only makes the leases wait for their expiry."""
    host, _, rest = owner.partition(":")
    pid, _, _ = rest.partition(":")
    if host != socket.gethostname() or not pid.isdigit() or int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError):
        return False
    return False


class Database(abc.ABC):
    """Tuning records keyed by (workload, target, config).

    One record per key: the first record stored for a (workload, target, config) stands, and
    adding another for the same key stores nothing and returns False, so a config is measured
    once and its history never changes behind a reader. Failed records (any status but `ok`)
    count as measured but never rank in `best`/`top_k`. Records come back in measurement order
    (timestamp, then order of arrival) unless ranked (cost, then timestamp).
    """

    # --- writing -------------------------------------------------------------------------

    @abc.abstractmethod
    def register_workload(self, workload: Workload) -> None:
        """Store a workload's name and description; blanks of an existing row are filled in,
        what is already there stays."""

    @abc.abstractmethod
    def register_target(self, target: TargetInfo) -> None:
        """Store a target's description (the first non-empty one stays)."""

    @abc.abstractmethod
    def add_many(self, records: Iterable[Record]) -> int:
        """Store records in one transaction; returns how many were new (see `add`)."""

    @abc.abstractmethod
    def add_verdict(self, verdict: Verdict) -> bool:
        """Store the verdict of a final comparison, committed before returning. False (and
        nothing changes) when the (workload, target) has a verdict with the same timestamp
        (an import of the same verdict)."""

    @abc.abstractmethod
    def register_model(self, name: str, target_key: str, kernels: Iterable[tuple[str, int]], *,
                       updated_at: datetime | None = None) -> None:
        """Store which kernels (workload key, occurrences), in the model's order, make up the
        model `name` on the target, replacing its earlier list there (a key given twice counts
        once with the occurrences added). `updated_at` (default now) is for imports: a list
        is then only replaced by one at least as new."""

    def add(self, record: Record) -> bool:
        """Store one record, committed before returning. False (and nothing changes) when its
        (workload, target, config) already has a record."""
        return self.add_many([record]) == 1

    # --- reading -------------------------------------------------------------------------

    @abc.abstractmethod
    def has(self, workload_key: str, target_key: str, config: ConfigLike) -> bool:
        """Whether this config was measured (with any status) for the workload on the target."""

    @abc.abstractmethod
    def measured_configs(self, workload_key: str, target_key: str) -> set[str]:
        """The canonical JSON of every config measured for the workload on the target."""

    @abc.abstractmethod
    def top_k(self, workload_key: str, target_key: str, k: int) -> list[Record]:
        """The k cheapest `ok` records, cheapest first (ties: earlier first)."""

    @abc.abstractmethod
    def records(self, workload_key: str | None = None, target_key: str | None = None, *,
                exclude_workload: str | None = None) -> list[Record]:
        """Records matching the given keys (all when none is given), in measurement order."""

    @abc.abstractmethod
    def workloads(self) -> list[Workload]:
        """Every workload, sorted by key."""

    @abc.abstractmethod
    def targets(self) -> list[TargetInfo]:
        """Every target, sorted by key."""

    @abc.abstractmethod
    def count(self, workload_key: str | None = None, target_key: str | None = None) -> int:
        """How many records match the given keys."""

    @abc.abstractmethod
    def verdicts(self, workload_key: str | None = None, target_key: str | None = None) -> list[Verdict]:
        """Verdicts matching the given keys (all when none is given), oldest first."""

    @abc.abstractmethod
    def models(self, target_key: str | None = None) -> list[ModelEntry]:
        """The registered models (on one target, or on all), sorted by name, then target."""

    def verdict(self, workload_key: str, target_key: str) -> Verdict | None:
        """The latest verdict of the workload on the target (the one that counts), or None."""
        found = self.verdicts(workload_key, target_key)
        return found[-1] if found else None

    def choice(self, workload_key: str, target_key: str) -> Choice | None:
        """What `akg compile` builds: the winner of the latest final comparison (None as the
        config when the default config won it), else, without a verdict (an older database,
        a tune stopped before its comparison), the cheapest `ok` record, unconfirmed; None
        when nothing succeeded yet. A verdict stands over records measured after it: a
        tuned config is only used unconfirmed when no verdict exists at all."""
        verdict = self.verdict(workload_key, target_key)
        if verdict is not None:
            if verdict.uses_default:
                return Choice(None, None, verdict)
            record = next((r for r in self.records(workload_key, target_key) if r.config == verdict.config), None)
            return Choice(verdict.config, record, verdict)
        best = self.best(workload_key, target_key)
        return Choice(best.config, best, None) if best is not None else None

    def best(self, workload_key: str, target_key: str) -> Record | None:
        """The cheapest `ok` record, or None when nothing succeeded yet."""
        top = self.top_k(workload_key, target_key, 1)
        return top[0] if top else None

    def history(self, workload_key: str, target_key: str) -> list[Record]:
        """Every record of the workload on the target, in measurement order."""
        return self.records(workload_key, target_key)

    def records_for_target(self, target_key: str, exclude_workload: str | None = None) -> list[Record]:
        """Every record on the target (all statuses), optionally leaving one workload out:
        what a cost model is warm-started from."""
        return self.records(target_key=target_key, exclude_workload=exclude_workload)

    def __len__(self) -> int:
        return self.count()

    # --- leases: tuners sharing a database split the work ---------------------------------

    @abc.abstractmethod
    def claim(self, workload_key: str, target_key: str, configs: Iterable[ConfigLike], owner: str,
              ttl_seconds: float) -> list[str]:
        """Lease configs of a workload on a target to `owner` for `ttl_seconds`, atomically:
        returns the canonical JSON of those it got, in the given order — every config with no
        record yet whose lease is free, expired or already `owner`'s (renewed). Two
        concurrent claimers never both get a config. A lease on a config that has a record
        is moot: it is dropped, never granted."""

    @abc.abstractmethod
    def release(self, owner: str, workload_key: str | None = None, target_key: str | None = None,
                configs: Iterable[ConfigLike] | None = None) -> int:
        """Drop `owner`'s leases (those of one workload, target or set of configs when given);
        returns how many were dropped. Other owners' leases are never touched."""

    @abc.abstractmethod
    def tally(self, target_key: str, workload_keys: Iterable[str], owner: str) -> dict[str, Tally]:
        """For each workload (every key given is in the result): configs measured on the
        target, and unexpired leases of owners other than `owner` on configs not measured yet.
        One query: what a tuner reads each round to see the other tuners' progress."""

    # --- JSON lines ------------------------------------------------------------------------

    def export_jsonl(self, dest: str | os.PathLike | IO[str]) -> int:
        """Write workloads, targets and records (measurement order) as JSON lines to a path or
        an open text file; returns the number of records written."""
        from akg.db.jsonl import write_jsonl

        return write_jsonl(self, dest)

    def import_jsonl(self, src: str | os.PathLike | IO[str]) -> int:
        """Read what `export_jsonl` wrote; returns how many records were new. Importing the
        same file twice stores nothing the second time."""
        from akg.db.jsonl import read_jsonl

        return read_jsonl(self, src)

    # --- lifetime ------------------------------------------------------------------------

    def close(self) -> None:
        """Release connections; the object is not used afterwards."""

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def check_model(name: str, target_key: str) -> None:
    """DatabaseError unless a model has a name and a target."""
    if not isinstance(name, str) or not name:
        raise DatabaseError(f"a model needs a name, not {name!r}")
    if not isinstance(target_key, str) or not target_key:
        raise DatabaseError(f"model {name!r} needs a target key, not {target_key!r}")


def check_lease(owner: str, ttl_seconds: float | None = None) -> None:
    """DatabaseError unless a lease has an owner (and a positive, finite time to live)."""
    if not isinstance(owner, str) or not owner:
        raise DatabaseError(f"a lease needs an owner, not {owner!r}")
    if ttl_seconds is not None and (isinstance(ttl_seconds, bool) or not isinstance(ttl_seconds, (int, float))
                                    or not 0 < ttl_seconds < float("inf")):
        raise DatabaseError(f"a lease needs a time to live > 0 seconds, not {ttl_seconds!r}")


def check_k(k: int) -> int:
    """`k` of `top_k`, refused with a DatabaseError unless it is an int >= 0."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise DatabaseError(f"top_k needs a count >= 0, not {k!r}")
    return k

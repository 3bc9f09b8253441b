"""The values the tuning database stores: `Record` (one measurement of one config), the
`Workload` and `TargetInfo` rows that records point at, verdicts of final comparisons and
`ModelEntry` (which kernels make up a tuned model)."""

from __future__ import annotations

import functools
import json
import math
import socket
from dataclasses import asdict, dataclass, field, is_dataclass
from datetime import datetime, timezone
from enum import Enum
from typing import Any, Mapping, Protocol, Union

from akg.errors import DatabaseError


class Status(str, Enum):
    """How a measurement ended. Only `ok` records have a cost that may win."""

    OK = "ok"
    BUILD_ERROR = "build_error"
    RUN_ERROR = "run_error"
    TIMEOUT = "timeout"
    WRONG_RESULT = "wrong_result"

    def __str__(self) -> str:
        return self.value


class Unit(str, Enum):
    """The unit of a record's cost: wall-clock seconds, or simulated cycles (npu-sim)."""

    SECONDS = "s"
    CYCLES = "cycles"

    def __str__(self) -> str:
        return self.value


class HasJson(Protocol):
    """Anything with a canonical JSON form, such as `akg.schedules.space.Config`."""

    def to_json(self) -> str: ...


ConfigLike = Union[str, Mapping[str, Any], HasJson]


def canonical_json(value: str | Mapping[str, Any] | list | None) -> str:
    """JSON text with sorted keys and no spaces: equal values give equal text."""
    try:
        if isinstance(value, str):
            value = json.loads(value)
        return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as e:
        raise DatabaseError(f"not JSON: {e}") from None


def canonical_config(config: ConfigLike) -> str:
    """A config's identity in the database: the canonical JSON of `Config.to_json()`, or of
    JSON text or a mapping given directly."""
    if hasattr(config, "to_json"):
        config = config.to_json()
    text = canonical_json(config)
    if not text.startswith("{"):
        raise DatabaseError(f"a config is a JSON object, not {text[:80]}")
    return text


@functools.lru_cache(maxsize=None)
def _host() -> str:
    return socket.gethostname()


@functools.lru_cache(maxsize=None)
def _tvm_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("apache-tvm")
    except PackageNotFoundError:
        return ""


def _akg_version() -> str:
    from akg._version import __version__

    return __version__


def _now() -> datetime:
    return datetime.now(timezone.utc)


def as_utc(moment: datetime) -> datetime:
    """A timezone-aware UTC datetime; naive datetimes are taken to be UTC already."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc)


@dataclass(frozen=True)
class Record:
    """One measured candidate: which config of which workload on which target, what it cost
    and how the measurement ended. `config` is stored as canonical JSON; a `Config` (or JSON
    text, or a mapping) may be passed and is converted. Host, versions and timestamp default
    to this process and now."""

    workload_key: str
    target_key: str
    config: str
    status: Status
    cost: float | None = None
    unit: Unit = Unit.SECONDS
    error: str = ""
    host: str = field(default_factory=_host)
    akg_version: str = field(default_factory=_akg_version)
    tvm_version: str = field(default_factory=_tvm_version)
    timestamp: datetime = field(default_factory=_now)

    def __post_init__(self):
        if not self.workload_key or not self.target_key:
            raise DatabaseError("a record needs a workload key and a target key")
        try:
            status, unit = Status(self.status), Unit(self.unit)
        except ValueError as e:
            raise DatabaseError(f"bad record: {e}") from None
        cost = None if self.cost is None else float(self.cost)
        if status is Status.OK and (cost is None or not math.isfinite(cost) or cost < 0):
            raise DatabaseError(f"an 'ok' record needs a finite cost >= 0, not {self.cost!r}")
        if cost is not None and math.isnan(cost):
            cost = None
        set_ = functools.partial(object.__setattr__, self)
        set_("config", canonical_config(self.config))
        set_("status", status)
        set_("unit", unit)
        set_("cost", cost)
        set_("error", self.error or "")
        set_("timestamp", as_utc(self.timestamp))

    @property
    def ok(self) -> bool:
        return self.status is Status.OK


@dataclass(frozen=True)
class Workload:
    """A tuning workload: its canonical key (`Subgraph.workload_key`), a name for display
    (the first one registered stays) and a JSON description of what it computes."""

    key: str
    name: str = ""
    description: str = "{}"

    def __post_init__(self):
        object.__setattr__(self, "description", canonical_json(self.description))

    @classmethod
    def of(cls, subgraph) -> Workload:
        """The workload of an `akg.graph.Subgraph` (described by its canonical form)."""
        from akg.graph.subgraph import canonical_form

        return cls(subgraph.workload_key, subgraph.name, canonical_json(canonical_form(subgraph.graph)))


@dataclass(frozen=True)
class TargetInfo:
    """A target as the database knows it: `Target.key` and a JSON description."""

    key: str
    description: str = "{}"

    def __post_init__(self):
        object.__setattr__(self, "description", canonical_json(self.description))

    @classmethod
    def of(cls, target) -> TargetInfo:
        """The row of an `akg.target.Target` (its dataclass fields as the description)."""
        fields = asdict(target) if is_dataclass(target) else {"kind": str(target)}
        fields.pop("extra", None)
        return cls(target.key, json.dumps(fields, sort_keys=True, default=str))


@dataclass(frozen=True)
class Contender:
    """One config of a final comparison: its role (`tuned`: the tuning's pick, `runner-up`,
    `default`: the target's default config, what `akg compile` uses untuned), whether it is
    the default config, how it ended, its cost (its best round, in the verdict's unit) and
    every round's time."""

    role: str
    config: str
    status: Status = Status.OK
    cost: float | None = None
    rounds: tuple[float, ...] = ()
    is_default: bool = False
    error: str = ""

    def __post_init__(self):
        set_ = functools.partial(object.__setattr__, self)
        set_("config", canonical_config(self.config))
        try:
            set_("status", Status(self.status))
        except ValueError as e:
            raise DatabaseError(f"bad contender: {e}") from None
        set_("cost", None if self.cost is None else float(self.cost))
        set_("rounds", tuple(float(x) for x in self.rounds))

    def to_dict(self) -> dict:
        return {"role": self.role, "config": json.loads(self.config), "status": self.status.value,
                "cost": self.cost, "rounds": list(self.rounds), "is_default": self.is_default, "error": self.error}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Contender:
        return cls(d["role"], d["config"], d.get("status", "ok"), d.get("cost"), tuple(d.get("rounds", ())),
                   bool(d.get("is_default", False)), d.get("error", ""))


@dataclass(frozen=True)
class Verdict:
    """The final comparison of one workload's tuning on one target: the tuning's pick, the
    runner-up and the default config timed in alternating rounds in one process. `config` is
    the winner's config; when the winner is the default config (`uses_default`), `akg compile`
    builds the target's default. `best_config` is the tuning pick that was judged (a later
    tune with a new pick confirms again). The latest verdict of a (workload, target) is the
    one that counts; verdicts are only ever added."""

    workload_key: str
    target_key: str
    config: str
    role: str
    best_config: str
    cost: float | None = None
    unit: Unit = Unit.SECONDS
    contenders: tuple[Contender, ...] = ()
    host: str = field(default_factory=_host)
    akg_version: str = field(default_factory=_akg_version)
    timestamp: datetime = field(default_factory=_now)

    def __post_init__(self):
        if not self.workload_key or not self.target_key:
            raise DatabaseError("a verdict needs a workload key and a target key")
        set_ = functools.partial(object.__setattr__, self)
        set_("config", canonical_config(self.config))
        set_("best_config", canonical_config(self.best_config))
        try:
            set_("unit", Unit(self.unit))
        except ValueError as e:
            raise DatabaseError(f"bad verdict: {e}") from None
        set_("cost", None if self.cost is None else float(self.cost))
        set_("contenders", tuple(c if isinstance(c, Contender) else Contender.from_dict(c)
                                 for c in self.contenders))
        set_("timestamp", as_utc(self.timestamp))

    @property
    def winner(self) -> Contender | None:
        for c in self.contenders:
            if c.config == self.config:
                return c
        return None

    @property
    def uses_default(self) -> bool:
        """The default config won: `akg compile` builds the target's default."""
        winner = self.winner
        return winner is not None and winner.is_default

    def contender(self, role: str) -> Contender | None:
        return next((c for c in self.contenders if c.role == role), None)

    def contenders_json(self) -> str:
        return json.dumps([c.to_dict() for c in self.contenders], sort_keys=True, separators=(",", ":"))

    @staticmethod
    def parse_contenders(text: str) -> tuple[Contender, ...]:
        try:
            return tuple(Contender.from_dict(d) for d in json.loads(text or "[]"))
        except (TypeError, ValueError, KeyError) as e:
            raise DatabaseError(f"bad verdict contenders: {e}") from None


@dataclass(frozen=True)
class ModelEntry:
    """A tuned model on a target (`Database.register_model`): its kernels as (workload key,
    occurrences) in the model's order, and when that list was last written."""

    name: str
    target_key: str
    kernels: tuple[tuple[str, int], ...]
    updated_at: datetime

    def __post_init__(self):
        object.__setattr__(self, "kernels", model_kernels(self.kernels))
        object.__setattr__(self, "updated_at", as_utc(self.updated_at))


def model_kernels(kernels) -> tuple[tuple[str, int], ...]:
    """A model's kernel list checked and normalised: (workload key, occurrences >= 1) pairs in
    the given order, the occurrences of a key given twice added up."""
    merged: dict[str, int] = {}
    try:
        for key, occurrences in kernels:
            if not isinstance(key, str) or not key:
                raise DatabaseError(f"a model's kernel needs a workload key, not {key!r}")
            if isinstance(occurrences, bool) or not isinstance(occurrences, int) or occurrences < 1:
                raise DatabaseError(f"kernel {key[:60]} of a model needs occurrences >= 1, not {occurrences!r}")
            merged[key] = merged.get(key, 0) + occurrences
    except (TypeError, ValueError) as e:
        raise DatabaseError(f"a model's kernels are (workload key, occurrences) pairs: {e}") from None
    return tuple(merged.items())

"""Export and import of a tuning database as JSON lines: one header line, then one object per
workload, target, record (in measurement order), verdict and model. Leases are not exported:
they only mean something to the tuners running on that database. See docs/database.md."""

from __future__ import annotations

import contextlib
import json
import os
from datetime import datetime
from typing import IO, TYPE_CHECKING, Iterator

from akg.db.record import ModelEntry, Record, TargetInfo, Verdict, Workload
from akg.errors import DatabaseError

if TYPE_CHECKING:
    from akg.db.database import Database

FORMAT = "akg-tuning-records"
VERSION = 3  # 2: verdicts of final comparisons; 3: models (older files, without them, still read)
CHUNK = 1000  # records per transaction on import

RECORD_FIELDS = ("workload", "target", "config", "status", "cost", "unit", "error", "host",
                 "akg_version", "tvm_version", "timestamp")

VERDICT_FIELDS = ("workload", "target", "config", "role", "best_config", "cost", "unit", "contenders", "host",
                  "akg_version", "timestamp")

MODEL_FIELDS = ("name", "target", "kernels", "updated_at")


def export_objects(db: Database) -> Iterator[dict]:
    """The objects of an export, one per line: header, workloads, targets, records, verdicts,
    models."""
    yield {"kind": "header", "format": FORMAT, "version": VERSION}
    for w in db.workloads():
        yield {"kind": "workload", "key": w.key, "name": w.name, "description": json.loads(w.description)}
    for t in db.targets():
        yield {"kind": "target", "key": t.key, "description": json.loads(t.description)}
    for r in db.records():
        yield {"kind": "record", "workload": r.workload_key, "target": r.target_key,
               "config": json.loads(r.config), "status": r.status.value, "cost": r.cost,
               "unit": r.unit.value, "error": r.error, "host": r.host, "akg_version": r.akg_version,
               "tvm_version": r.tvm_version, "timestamp": r.timestamp.isoformat()}
    for v in db.verdicts():
        yield {"kind": "verdict", "workload": v.workload_key, "target": v.target_key,
               "config": json.loads(v.config), "role": v.role, "best_config": json.loads(v.best_config),
               "cost": v.cost, "unit": v.unit.value, "contenders": [c.to_dict() for c in v.contenders],
               "host": v.host, "akg_version": v.akg_version, "timestamp": v.timestamp.isoformat()}
    for m in db.models():
        yield {"kind": "model", "name": m.name, "target": m.target_key, "kernels": [list(k) for k in m.kernels],
               "updated_at": m.updated_at.isoformat()}


def write_jsonl(db: Database, dest: str | os.PathLike | IO[str]) -> int:
    """Write `db` to a path or open text file; returns the number of records."""
    count = 0
    with _open(dest, "w") as out:
        for obj in export_objects(db):
            out.write(json.dumps(obj, separators=(",", ":"), allow_nan=False) + "\n")
            count += obj["kind"] == "record"
    return count


def read_jsonl(db: Database, src: str | os.PathLike | IO[str]) -> int:
    """Import a JSON-lines export into `db`; returns how many records were new (verdicts are
    imported too, those already present skipped, and models, a newer list of a model staying).
    The whole file is checked before anything is written, so a malformed file imports
    nothing."""
    workloads: list[Workload] = []
    targets: list[TargetInfo] = []
    records: list[Record] = []
    verdicts: list[Verdict] = []
    models: list[ModelEntry] = []
    with _open(src, "r") as lines:
        name = getattr(lines, "name", "<stream>")
        for number, line in enumerate(_lines(lines, name), 1):
            if not line.strip():
                continue
            try:
                if isinstance(line, bytes):
                    line = _decode(line)
                item = parse_line(line)
            except DatabaseError as e:
                raise DatabaseError(f"{name}:{number}: {e}") from None
            {Workload: workloads, TargetInfo: targets, Record: records, Verdict: verdicts,
             ModelEntry: models}.get(type(item), []).append(item)
    for w in workloads:
        db.register_workload(w)
    for t in targets:
        db.register_target(t)
    new = sum(db.add_many(records[i:i + CHUNK]) for i in range(0, len(records), CHUNK))
    for v in verdicts:
        db.add_verdict(v)
    for m in models:
        db.register_model(m.name, m.target_key, m.kernels, updated_at=m.updated_at)
    return new


def parse_line(line: str) -> Workload | TargetInfo | Record | Verdict | ModelEntry | None:
    """One line of an export as a value (None for the header); DatabaseError if malformed."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise DatabaseError(f"not JSON: {e}") from None
    if not isinstance(obj, dict):
        raise DatabaseError("expected a JSON object")
    kind = obj.get("kind")
    try:
        if kind == "header":
            if obj.get("format") != FORMAT:
                raise DatabaseError(f"not an akg tuning export (format {obj.get('format')!r})")
            version = obj.get("version")
            if isinstance(version, int) and not isinstance(version, bool) and version > VERSION:
                raise DatabaseError(f"export format version {version} is newer than this akg reads ({VERSION})")
            if not isinstance(version, int) or isinstance(version, bool) or version < 1:
                raise DatabaseError(f"unknown export format version {json.dumps(version)} (this akg reads "
                                    f"versions 1 to {VERSION}, written as a number)")
            return None
        if kind == "workload":
            return Workload(_str(obj, "key"), obj.get("name", ""), obj.get("description", {}))
        if kind == "target":
            return TargetInfo(_str(obj, "key"), obj.get("description", {}))
        if kind == "record":
            unknown = set(obj) - {"kind", *RECORD_FIELDS}
            if unknown:
                raise DatabaseError(f"unknown record fields {sorted(unknown)}")
            timestamp = datetime.fromisoformat(_str(obj, "timestamp").replace("Z", "+00:00"))
            return Record(_str(obj, "workload"), _str(obj, "target"), obj.get("config"), obj.get("status"),
                          obj.get("cost"), obj.get("unit", "s"), obj.get("error", ""), obj.get("host", ""),
                          obj.get("akg_version", ""), obj.get("tvm_version", ""), timestamp)
        if kind == "verdict":
            unknown = set(obj) - {"kind", *VERDICT_FIELDS}
            if unknown:
                raise DatabaseError(f"unknown verdict fields {sorted(unknown)}")
            timestamp = datetime.fromisoformat(_str(obj, "timestamp").replace("Z", "+00:00"))
            contenders = obj.get("contenders", [])
            if not isinstance(contenders, list):
                raise DatabaseError("'contenders' must be a list")
            return Verdict(_str(obj, "workload"), _str(obj, "target"), obj.get("config"), _str(obj, "role"),
                           obj.get("best_config"), obj.get("cost"), obj.get("unit", "s"), tuple(contenders),
                           obj.get("host", ""), obj.get("akg_version", ""), timestamp)
        if kind == "model":
            unknown = set(obj) - {"kind", *MODEL_FIELDS}
            if unknown:
                raise DatabaseError(f"unknown model fields {sorted(unknown)}")
            kernels = obj.get("kernels", [])
            if not isinstance(kernels, list) or not all(isinstance(k, list) and len(k) == 2 for k in kernels):
                raise DatabaseError("'kernels' must be a list of [workload key, occurrences] pairs")
            updated_at = datetime.fromisoformat(_str(obj, "updated_at").replace("Z", "+00:00"))
            return ModelEntry(_str(obj, "name"), _str(obj, "target"), tuple(tuple(k) for k in kernels), updated_at)
    except (KeyError, TypeError, ValueError) as e:
        raise DatabaseError(f"bad {kind}: {e}") from None
    raise DatabaseError(f"unknown kind {kind!r} (expected header, workload, target, record, verdict or model)")


def _str(obj: dict, field: str) -> str:
    value = obj.get(field)
    if not isinstance(value, str) or not value:
        raise DatabaseError(f"'{field}' must be a non-empty string, not {value!r}")
    return value


def _lines(stream: IO, name: str) -> Iterator[str | bytes]:
    """The lines of an open file; a text stream that is not valid UTF-8 is a DatabaseError
    (files opened here are read as bytes, so that the bad line is named exactly)."""
    number = 0
    try:
        for number, line in enumerate(stream, 1):
            yield line
    except UnicodeDecodeError as e:
        raise DatabaseError(f"{name}: not a UTF-8 text file (bad byte 0x{e.object[e.start]:02x} after line "
                            f"{number}); an akg tuning export is JSON lines") from None


def _decode(line: bytes) -> str:
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DatabaseError(f"not UTF-8 text (bad byte 0x{line[e.start]:02x} at column {e.start + 1}); an akg "
                            "tuning export is JSON lines") from None


@contextlib.contextmanager
def _open(target: str | os.PathLike | IO[str], mode: str):
    if hasattr(target, "read" if mode == "r" else "write"):
        yield target
        return
    try:  # read as bytes: each line is decoded on its own, so a bad one is named by number
        f = open(target, "rb") if mode == "r" else open(target, mode, encoding="utf-8")
    except OSError as e:
        raise DatabaseError(f"cannot {'read' if mode == 'r' else 'write'} {os.fspath(target)}: {e}") from e
    with f:
        yield f

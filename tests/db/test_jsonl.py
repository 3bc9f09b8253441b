"""JSON-lines export/import: round trips between every kind of database, idempotent
re-import, and clear errors (file:line) for malformed files, which import nothing."""

import io
import json

import pytest

from akg.db import InMemoryDatabase, Record, TargetInfo, Workload
from akg.errors import DatabaseError


def fill(db, rec):
    db.register_workload(Workload("w1", "matmul", {"nodes": [["matmul", {}]]}))
    db.register_target(TargetInfo("cpu-test", {"kind": "cpu", "cores": 2}))
    db.add_many([rec(1, 3e-5), rec(2, None, "build_error", error="bad\ttile"), rec(3, 1e-5, at=0.5),
                 rec(4, 7.0, workload="w2", target="npu-sim", unit="cycles")])


@pytest.mark.parametrize("into", ["memory", "sqlite", "postgres"])
def test_export_then_import_reproduces_the_database(db, make_db, tmp_path, into, rec):
    fill(db, rec)
    path = tmp_path / "records.jsonl"
    assert db.export_jsonl(path) == 4
    other = make_db(into)
    assert other.import_jsonl(path) == 4
    assert other.records() == db.records()
    assert other.workloads() == db.workloads() and other.targets() == db.targets()
    assert other.best("w1", "cpu-test") == db.best("w1", "cpu-test")


def test_import_is_idempotent(db, tmp_path, rec):
    source = InMemoryDatabase()
    fill(source, rec)
    path = tmp_path / "records.jsonl"
    source.export_jsonl(path)
    assert db.import_jsonl(path) == 4
    assert db.import_jsonl(path) == 0
    assert db.count() == 4 and db.records() == source.records()


def test_import_merges_and_keeps_existing_records(db, rec):
    db.add(rec(1, 9.0))
    source = InMemoryDatabase()
    fill(source, rec)
    buffer = io.StringIO()
    source.export_jsonl(buffer)
    buffer.seek(0)
    assert db.import_jsonl(buffer) == 3
    (kept,) = [r for r in db.history("w1", "cpu-test") if r.config == '{"tile":1}']
    assert kept.cost == 9.0  # the record already there stands


def test_export_format_is_one_object_per_line(rec):
    source = InMemoryDatabase()
    fill(source, rec)
    buffer = io.StringIO()
    source.export_jsonl(buffer)
    lines = [json.loads(line) for line in buffer.getvalue().splitlines()]
    assert lines[0] == {"kind": "header", "format": "akg-tuning-records", "version": 3}
    assert [line["kind"] for line in lines[1:]] == ["workload", "workload", "target", "target"] + ["record"] * 4
    first = lines[5]
    assert first["config"] == {"tile": 3} and first["cost"] == 1e-5 and first["status"] == "ok"
    assert first["timestamp"] == "2024-01-01T00:00:00.500000+00:00"
    assert set(first) == {"kind", "workload", "target", "config", "status", "cost", "unit", "error", "host",
                          "akg_version", "tvm_version", "timestamp"}


BAD_LINES = [
    ('{"kind": "record", "workload": "w"', "not JSON"),
    ("[1, 2]", "JSON object"),
    ('{"kind": "recrod"}', "unknown kind 'recrod'"),
    ('{"kind": "record", "target": "t", "config": {}, "status": "ok", "cost": 1, "timestamp": "2024-01-01"}',
     "'workload'"),
    ('{"kind": "record", "workload": "w", "target": "t", "config": {}, "status": "fine", "cost": 1,'
     ' "timestamp": "2024-01-01T00:00:00"}', "fine"),
    ('{"kind": "record", "workload": "w", "target": "t", "config": {}, "status": "ok", "cost": 1,'
     ' "timestamp": "yesterday"}', "yesterday"),
    ('{"kind": "record", "workload": "w", "target": "t", "config": {}, "status": "ok", "cost": 1,'
     ' "timestamp": "2024-01-01T00:00:00", "colour": "red"}', "colour"),
    ('{"kind": "header", "format": "akg-tuning-records", "version": 4}', "newer"),
    ('{"kind": "model", "name": "m", "target": "t", "kernels": [["w1"]], "updated_at": "2024-01-01T00:00:00Z"}',
     r"\[workload key, occurrences\] pairs"),
    ('{"kind": "model", "name": "m", "target": "t", "kernels": [["w1", 0]], "updated_at": "2024-01-01T00:00:00Z"}',
     "occurrences >= 1"),
    ('{"kind": "model", "name": "m", "target": "t", "kernels": [], "updated_at": "2024-01-01T00:00:00Z", "x": 1}',
     "unknown model fields"),
    ('{"kind": "header", "format": "something-else", "version": 1}', "not an akg tuning export"),
    ('{"kind": "header", "format": "akg-tuning-records", "version": "99"}', 'unknown export format version "99"'),
    ('{"kind": "header", "format": "akg-tuning-records", "version": "3"}', 'unknown export format version "3"'),
    ('{"kind": "header", "format": "akg-tuning-records", "version": 0}', "unknown export format version 0"),
    ('{"kind": "header", "format": "akg-tuning-records", "version": true}', "unknown export format version true"),
    ('{"kind": "header", "format": "akg-tuning-records"}', "unknown export format version null"),
]


@pytest.mark.parametrize("line, message", BAD_LINES)
def test_a_malformed_line_is_named_and_nothing_is_imported(db, tmp_path, line, message, rec):
    source = InMemoryDatabase()
    fill(source, rec)
    path = tmp_path / "records.jsonl"
    source.export_jsonl(path)
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:6] + [line] + lines[6:]) + "\n")
    with pytest.raises(DatabaseError, match=message) as e:
        db.import_jsonl(path)
    assert "records.jsonl:7:" in str(e.value)
    assert db.count() == 0 and db.workloads() == []


def test_bytes_that_are_not_utf8_are_named_by_line_and_nothing_is_imported(db, tmp_path, rec):
    source = InMemoryDatabase()
    fill(source, rec)
    path = tmp_path / "records.jsonl"
    source.export_jsonl(path)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:4]) + bytes(range(128, 256)) + b"\n" + b"".join(lines[4:]))
    with pytest.raises(DatabaseError, match=r"records.jsonl:5: not UTF-8 text \(bad byte 0x80 at column 1\)"):
        db.import_jsonl(path)
    assert db.count() == 0 and db.workloads() == []
    stream = io.TextIOWrapper(io.BytesIO(b"".join(lines[:4]) + b"\xff\xfe junk\n"), encoding="utf-8")
    with pytest.raises(DatabaseError, match="not a UTF-8 text file"):
        db.import_jsonl(stream)
    assert db.count() == 0


def test_cli_db_import_of_binary_junk_is_a_database_error(tmp_path, capsys):
    from akg.cli import main

    path = tmp_path / "junk.jsonl"
    path.write_bytes(bytes(range(256)))
    assert main(["db", "import", "--db", f"sqlite:///{tmp_path / 'x.db'}", str(path)]) == 6
    err = capsys.readouterr().err
    assert "junk.jsonl:" in err and "internal error" not in err


def test_timestamps_in_utc_z_form_and_blank_lines_are_read(db):
    text = ('\n{"kind":"record","workload":"w","target":"t","config":{"a":1},"status":"ok","cost":2.0,'
            '"timestamp":"2024-03-01T10:00:00Z"}\n\n')
    assert db.import_jsonl(io.StringIO(text)) == 1
    (r,) = db.records()
    assert r.timestamp.isoformat() == "2024-03-01T10:00:00+00:00" and r.unit.value == "s"


def test_missing_file_is_a_database_error(db, tmp_path):
    with pytest.raises(DatabaseError, match="cannot read"):
        db.import_jsonl(tmp_path / "nope.jsonl")
    with pytest.raises(DatabaseError, match="cannot write"):
        db.export_jsonl(tmp_path / "no" / "dir.jsonl")


def test_large_imports_are_written_in_chunks(db):
    records = [Record("w", "t", {"i": i}, "ok", float(i)) for i in range(2500)]
    source = InMemoryDatabase()
    source.add_many(records)
    buffer = io.StringIO()
    source.export_jsonl(buffer)
    buffer.seek(0)
    assert db.import_jsonl(buffer) == 2500
    assert db.best("w", "t").cost == 0.0 and db.count() == 2500


@pytest.mark.parametrize("into", ["memory", "sqlite", "postgres"])
def test_models_travel_and_a_newer_list_stays(db, make_db, tmp_path, into, rec):
    """Models are exported and imported (leases are not: they only mean something to the
    tuners running on their database)."""
    from datetime import datetime, timezone

    fill(db, rec)
    db.register_model("mlp", "cpu-test", [("w1", 3), ("w2", 1)])
    db.claim("w1", "cpu-test", [{"tile": 9}], "a tuner", 600)
    path = tmp_path / "records.jsonl"
    db.export_jsonl(path)
    assert [json.loads(line)["kind"] for line in path.read_text().splitlines()].count("model") == 1
    other = make_db(into)
    other.import_jsonl(path)
    assert other.models() == db.models()
    assert other.claim("w1", "cpu-test", [{"tile": 9}], "another tuner", 600) == ['{"tile":9}']
    other.import_jsonl(path)
    assert other.models() == db.models()
    other.register_model("mlp", "cpu-test", [("w1", 1)])  # newer than the file's
    other.import_jsonl(path)
    assert other.models()[0].kernels == (("w1", 1),)
    assert other.models()[0].updated_at > db.models()[0].updated_at
    assert other.models()[0].updated_at <= datetime.now(timezone.utc)

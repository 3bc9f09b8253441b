"""Verdicts of the tuner's final comparisons, against every implementation (memory, SQLite,
PostgreSQL): stored and read back, the latest counts, the choice rule `akg compile` follows
(`Database.choice`), JSON-lines round trips; and databases from before verdicts (schema
revision 0001, version-1 exports) open and choose as they did."""

import io
import json
from datetime import datetime, timedelta, timezone

import pytest
from alembic import command
from sqlalchemy import create_engine, inspect

from akg.db import Contender, InMemoryDatabase, SqlDatabase, Verdict, migrate

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)  # as the records of `rec`


def verdict(winner: int, best: int, at: float, *, default: int | None = None, workload="w1", target="cpu-test"):
    """A verdict over configs {"tile": n}: `winner` won, `best` was the tuning's pick, `default`
    (if given) is the default config's number."""
    numbers = [best] + [n for n in (winner, default) if n is not None and n != best]
    seen, contenders = set(), []
    for n in numbers:
        if n in seen:
            continue
        seen.add(n)
        role = "tuned" if n == best else ("default" if n == default else "runner-up")
        cost = 1e-6 if n == winner else 2e-6
        contenders.append(Contender(role, {"tile": n}, "ok", cost, (cost, cost * 1.1), is_default=n == default))
    role = next(c.role for c in contenders if c.config == json.dumps({"tile": winner}).replace(" ", ""))
    return Verdict(workload, target, {"tile": winner}, role, {"tile": best}, 1e-6, "s", tuple(contenders),
                   timestamp=T0 + timedelta(seconds=at))


def test_verdicts_read_back_equal_and_the_latest_counts(db, rec):
    db.add_many([rec(1, 1e-6), rec(2, 2e-6)])
    first, second = verdict(1, 1, 10), verdict(2, 1, 20)
    assert db.add_verdict(first) and db.add_verdict(second)
    assert not db.add_verdict(second)  # the same verdict again (an import twice) adds nothing
    assert db.verdicts("w1", "cpu-test") == [first, second] and db.verdicts() == [first, second]
    assert db.verdict("w1", "cpu-test") == second and db.verdict("w1", "cpu-other") is None
    assert second.winner.role == "runner-up" and second.contender("tuned").rounds == (2e-6, 2.2e-6)


def test_the_choice_follows_the_latest_verdict_else_the_cheapest_record(db, rec):
    assert db.choice("w1", "cpu-test") is None
    db.add_many([rec(1, 3e-6), rec(2, 2e-6), rec(3, 5e-6)])
    unconfirmed = db.choice("w1", "cpu-test")
    assert unconfirmed.config == '{"tile":2}' and not unconfirmed.confirmed and unconfirmed.record == rec(2, 2e-6)
    db.add_verdict(verdict(1, 2, 100))  # the runner-up won
    picked = db.choice("w1", "cpu-test")
    assert picked.config == '{"tile":1}' and picked.confirmed and picked.record == rec(1, 3e-6)
    db.add(rec(4, 1e-7, at=200))  # cheaper, but measured after the verdict and never compared
    assert db.choice("w1", "cpu-test").config == '{"tile":1}'
    db.add_verdict(verdict(3, 4, 300, default=3))  # the default won against the new pick
    kept = db.choice("w1", "cpu-test")
    assert kept.config is None and kept.record is None and kept.verdict.uses_default
    assert db.best("w1", "cpu-test") == rec(4, 1e-7, at=200)  # `best` is still the cheapest record


@pytest.mark.parametrize("into", ["memory", "sqlite"])
def test_verdicts_travel_in_an_export(db, make_db, tmp_path, into, rec):
    db.add_many([rec(1, 1e-6), rec(2, 2e-6)])
    db.add_verdict(verdict(2, 1, 10, default=2))
    path = tmp_path / "export.jsonl"
    db.export_jsonl(path)
    assert '"kind":"verdict"' in path.read_text()
    other = make_db(into)
    assert other.import_jsonl(path) == 2 and other.verdicts() == db.verdicts()
    assert other.import_jsonl(path) == 0 and len(other.verdicts()) == 1  # idempotent
    assert other.choice("w1", "cpu-test").config is None


def test_a_version_1_export_without_verdicts_imports(rec):
    lines = [{"kind": "header", "format": "akg-tuning-records", "version": 1},
             {"kind": "record", "workload": "w1", "target": "cpu-test", "config": {"tile": 1}, "status": "ok",
              "cost": 1e-6, "unit": "s", "error": "", "host": "h", "akg_version": "0.1", "tvm_version": "",
              "timestamp": T0.isoformat()}]
    db = InMemoryDatabase()
    assert db.import_jsonl(io.StringIO("\n".join(json.dumps(x) for x in lines))) == 1
    assert db.verdicts() == [] and db.choice("w1", "cpu-test").config == '{"tile":1}'


def test_a_database_at_the_schema_before_verdicts_opens_and_chooses_as_before(tmp_path, rec):
    url = f"sqlite:///{tmp_path / 'old.db'}"
    command.upgrade(migrate.alembic_config(url=url), "0001")
    engine = create_engine(url)
    with engine.begin() as conn:
        assert "verdicts" not in inspect(conn).get_table_names()
        conn.exec_driver_sql("INSERT INTO workloads (id, key, name, description) VALUES (1, 'w1', 'mm', '{}')")
        conn.exec_driver_sql("INSERT INTO targets (id, key, description) VALUES (1, 'cpu-test', '{}')")
        for n, cost in ((1, 3e-6), (2, 2e-6)):
            conn.exec_driver_sql(
                "INSERT INTO records (workload_id, target_id, config, config_hash, cost, unit, status, error, host, "
                "akg_version, tvm_version, measured_at) VALUES (1, 1, ?, ?, ?, 's', 'ok', '', 'h', '0.1', '', ?)",
                (f'{{"tile":{n}}}', f"hash{n}", cost, (T0 + timedelta(seconds=n)).isoformat(sep=" ")))
    engine.dispose()
    with SqlDatabase(url) as db:  # migrated to head on open
        assert db.count() == 2 and db.verdicts() == []
        choice = db.choice("w1", "cpu-test")
        assert choice.config == '{"tile":2}' and not choice.confirmed
        db.add_verdict(verdict(1, 2, 10))
    with SqlDatabase(url) as db:
        assert db.choice("w1", "cpu-test").config == '{"tile":1}'
    command.downgrade(migrate.alembic_config(url=url), "0001")  # and back down: the records stay
    engine = create_engine(url)
    with engine.connect() as conn:
        assert "verdicts" not in inspect(conn).get_table_names()
        assert conn.exec_driver_sql("SELECT count(*) FROM records").scalar() == 2
    engine.dispose()

"""SqlDatabase specifics: typed errors for bad URLs, unreachable servers and broken files;
SQLite WAL, lock waits and retries; concurrent writer processes and killed writers lose
nothing (SQLite and PostgreSQL)."""

import importlib.util
import json
import multiprocessing
import runpy
import signal
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from akg.db import Record, SqlDatabase
from akg.db import sql as sql_module
from akg.errors import DatabaseError

WRITER = Path(__file__).with_name("writer_process.py")


@pytest.mark.parametrize("url, message", [
    ("not a url at all", "bad database URL"),
    ("nosuchdialect://host/db", "nosuchdialect://host/db: SQLAlchemy knows no dialect.driver 'nosuchdialect'"),
    ("postgresql+psycopg://user@localhost:notaport/db", "bad database URL"),
    ("postgresql+nosuchdriver://localhost/db", "no dialect.driver 'postgresql.nosuchdriver'"),
])
def test_a_bad_url_is_a_database_error(url, message):
    with pytest.raises(DatabaseError, match=message):
        SqlDatabase(url)


def test_a_missing_driver_is_a_database_error():
    if importlib.util.find_spec("MySQLdb") is not None:
        pytest.skip("MySQLdb is installed here")
    with pytest.raises(DatabaseError, match="its driver is not installed .*MySQLdb"):
        SqlDatabase("mysql+mysqldb://user@localhost/tuning")


def test_an_unreachable_server_is_a_database_error_without_the_password():
    started = time.monotonic()
    with pytest.raises(DatabaseError) as e:
        SqlDatabase("postgresql+psycopg://akg:s3cret@127.0.0.1:1/tuning")
    message = str(e.value)
    assert "postgresql+psycopg://akg:***@127.0.0.1:1/tuning" in message and "s3cret" not in message
    assert "refused" in message or "connect" in message
    assert time.monotonic() - started < 30
    assert e.value.exit_code == 6


def test_a_plain_postgresql_url_uses_the_installed_driver():
    with pytest.raises(DatabaseError, match=r"postgresql\+psycopg://"):
        SqlDatabase("postgresql://127.0.0.1:1/tuning")


def test_a_file_that_is_not_a_database_is_a_database_error(tmp_path):
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not an SQLite file, not at all" * 100)
    with pytest.raises(DatabaseError, match="not a database"):
        SqlDatabase(f"sqlite:///{path}")


def test_a_missing_folder_is_a_database_error(tmp_path):
    with pytest.raises(DatabaseError, match="unable to open database file"):
        SqlDatabase(f"sqlite:///{tmp_path}/no/such/dir/tuning.db")


def test_sqlite_uri_parameters_are_honoured_and_make_no_stray_file(tmp_path, rec):
    # `?mode=ro` used to be ignored (read-write, with a warning); with `uri=true` alone SQLite
    # created a file named "t.db?mode=ro"
    path = tmp_path / "t.db"
    with SqlDatabase(f"sqlite:///{path}") as db:
        db.add(rec(1))
    with SqlDatabase(f"sqlite:///{path}?mode=ro") as ro:
        assert ro.best("w1", "cpu-test") == rec(1)
        with pytest.raises(DatabaseError, match="readonly"):
            ro.add(rec(2))
    with pytest.raises(DatabaseError, match="unable to open database file"):
        SqlDatabase(f"sqlite:///{tmp_path}/missing.db?mode=ro")
    assert sorted(p.name for p in tmp_path.iterdir() if "?" in p.name or p.name.startswith("missing")) == []


def test_an_in_memory_sqlite_url_works(rec):
    with SqlDatabase("sqlite://") as db:
        db.add(rec(1))
        assert db.best("w1", "cpu-test") == rec(1)


def test_sqlite_files_are_in_wal_mode(tmp_path):
    SqlDatabase(f"sqlite:///{tmp_path}/t.db").close()
    with sqlite3.connect(tmp_path / "t.db") as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def hold_write_lock(path: Path, seconds: float) -> threading.Thread:
    """Another writer holding SQLite's write lock for `seconds` (started before returning)."""
    locked = threading.Event()

    def hold():
        raw = sqlite3.connect(path, isolation_level=None)
        raw.execute("BEGIN IMMEDIATE")
        locked.set()
        time.sleep(seconds)
        raw.execute("COMMIT")
        raw.close()

    thread = threading.Thread(target=hold)
    thread.start()
    locked.wait()
    return thread


def test_readers_do_not_wait_for_a_writer_and_writers_wait_their_turn(tmp_path, rec):
    db = SqlDatabase(f"sqlite:///{tmp_path}/t.db")
    db.add(rec(1))
    holder = hold_write_lock(tmp_path / "t.db", 1.0)
    started = time.monotonic()
    assert db.count() == 1
    assert time.monotonic() - started < 0.5
    assert db.add(rec(2))  # waits for the lock instead of failing
    assert time.monotonic() - started >= 0.9
    holder.join()
    assert db.count() == 2
    db.close()


def test_locked_beyond_the_busy_timeout_is_retried(tmp_path, monkeypatch, rec):
    monkeypatch.setattr(sql_module, "BUSY_TIMEOUT_S", 0.05)
    db = SqlDatabase(f"sqlite:///{tmp_path}/t.db")
    holder = hold_write_lock(tmp_path / "t.db", 0.6)
    assert db.add(rec(1))
    holder.join()
    assert db.count() == 1
    db.close()


def test_a_lock_that_never_goes_is_a_database_error(tmp_path, monkeypatch, rec):
    monkeypatch.setattr(sql_module, "BUSY_TIMEOUT_S", 0.05)
    db = SqlDatabase(f"sqlite:///{tmp_path}/t.db", retry_for=0.3)
    holder = hold_write_lock(tmp_path / "t.db", 1.5)
    with pytest.raises(DatabaseError, match="stayed locked for 0.3s"):
        db.add(rec(1))
    holder.join()
    assert db.add(rec(1)) and db.count() == 1
    db.close()


def spawn_writers(url: str, tmp_path: Path, count: int, shared: int, workers: int, **extra):
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(workers)
    processes = []
    for worker in range(workers):
        params = {"URL": url, "WORKER": worker, "COUNT": count, "SHARED": shared, "BARRIER": barrier,
                  "RESULT": str(tmp_path / f"result{worker}.json"), **extra}
        p = ctx.Process(target=runpy.run_path, args=(str(WRITER),), kwargs={"init_globals": params})
        p.start()
        processes.append(p)
    for p in processes:
        p.join(timeout=240)
    return processes


@pytest.mark.timeout(300)
def test_four_processes_writing_at_once_lose_nothing(sql_url, tmp_path):
    """Four writers on one fresh database (they also race to migrate it), 200 records of
    their own each, committed one by one, plus 20 configs that all four try to add."""
    processes = spawn_writers(sql_url, tmp_path, count=200, shared=20, workers=4)
    assert [p.exitcode for p in processes] == [0, 0, 0, 0]
    results = [json.loads((tmp_path / f"result{w}.json").read_text()) for w in range(4)]
    assert [r["own"] for r in results] == [200] * 4
    assert sum(r["shared"] for r in results) == 20  # each shared config stored exactly once
    with SqlDatabase(sql_url) as db:
        assert db.count() == 4 * 200 + 20
        for w in range(4):
            mine = {json.dumps({"j": j, "worker": w}, separators=(",", ":")) for j in range(200)}
            assert mine <= db.measured_configs(f"w{w % 2}", "cpu-test")
        assert db.measured_configs("shared", "cpu-test") == {f'{{"j":{j}}}' for j in range(20)}
        assert db.best("w0", "cpu-test").cost == pytest.approx(1e-3)


@pytest.mark.timeout(120)
def test_a_killed_writer_loses_no_committed_record(sql_url, tmp_path):
    (p,) = spawn_writers(sql_url, tmp_path, count=100, shared=0, workers=1, KILL_AFTER=37)
    assert p.exitcode == -signal.SIGKILL
    with SqlDatabase(sql_url) as db:
        assert db.count() == 37
        assert db.add(Record("w0", "cpu-test", {"worker": 0, "j": 36}, "ok", 1.0)) is False

"""Alembic migrations: a fresh database gets the whole schema (equal to the models), an
existing one opens unchanged, a newer schema is refused, and the migration scripts are part
of the installed package."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text

from akg.db import SqlDatabase, migrate
from akg.db import sql as sql_module
from akg.db.schema import Base
from akg.errors import DatabaseError

ROOT = Path(__file__).resolve().parents[2]


def test_a_fresh_database_gets_the_schema_at_head(sql_url):
    SqlDatabase(sql_url).close()
    engine = create_engine(sql_url)
    with engine.connect() as conn:
        assert {"workloads", "targets", "records", "verdicts", "leases", "models", "model_kernels",
                "alembic_version"} <= set(inspect(conn).get_table_names())
        assert migrate.current_revision(conn) == migrate.head_revision() == "0003"
        uniques = {u["name"]: u["column_names"] for u in inspect(conn).get_unique_constraints("records")}
        assert uniques["uq_records_workload_target_config"] == ["workload_id", "target_id", "config_hash"]
    engine.dispose()


def test_the_migrated_schema_equals_the_models(sql_url):
    SqlDatabase(sql_url).close()
    engine = create_engine(sql_url)
    with engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
    engine.dispose()


def test_an_existing_database_opens_with_its_records(sql_url, rec):
    with SqlDatabase(sql_url) as db:
        db.add(rec(1))
    with SqlDatabase(sql_url) as again:
        assert again.history("w1", "cpu-test") == [rec(1)]


def test_a_0002_database_migrates_to_0003_with_its_data(sql_url, rec):
    command.upgrade(migrate.alembic_config(url=sql_url), "0002")
    engine = create_engine(sql_url)
    with engine.begin() as conn:
        assert migrate.current_revision(conn) == "0002"
        assert "leases" not in inspect(conn).get_table_names()
        conn.execute(text("INSERT INTO workloads (id, key, name, description) VALUES (1, 'w1', 'mm', '{}')"))
        conn.execute(text("INSERT INTO targets (id, key, description) VALUES (1, 'cpu-test', '{}')"))
        conn.execute(text(
            "INSERT INTO records (workload_id, target_id, config, config_hash, cost, unit, status, error, host, "
            "akg_version, tvm_version, measured_at) VALUES (1, 1, :config, :hash, 1.0, 's', 'ok', '', '', '', '', "
            ":at)"), {"config": rec(1).config, "hash": sql_module._config_hash(rec(1).config), "at": rec(1).timestamp})
    engine.dispose()
    with SqlDatabase(sql_url) as db:
        assert [r.config for r in db.history("w1", "cpu-test")] == ['{"tile":1}']
        assert db.workloads()[0].name == "mm"
        assert db.claim("w1", "cpu-test", [{"tile": 1}, {"tile": 2}], "me", 60) == ['{"tile":2}']
        db.register_model("m", "cpu-test", [("w1", 2)])
        assert db.models()[0].kernels == (("w1", 2),)
    engine = create_engine(sql_url)
    with engine.connect() as conn:
        assert migrate.current_revision(conn) == "0003"
    engine.dispose()


def test_migrations_run_by_hand_and_back_down(sql_url):
    config = migrate.alembic_config(url=sql_url)
    command.upgrade(config, "head")
    with SqlDatabase(sql_url) as db:
        assert db.count() == 0
    command.downgrade(config, "base")
    engine = create_engine(sql_url)
    with engine.connect() as conn:
        assert "records" not in inspect(conn).get_table_names()
    engine.dispose()
    with SqlDatabase(sql_url) as db:  # and opening migrates it up again
        assert db.count() == 0


def test_a_schema_newer_than_this_akg_is_refused(sql_url):
    SqlDatabase(sql_url).close()
    engine = create_engine(sql_url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999_from_the_future'"))
    engine.dispose()
    with pytest.raises(DatabaseError, match="'9999_from_the_future', newer than this akg knows"):
        SqlDatabase(sql_url)


def test_an_empty_sqlite_file_is_migrated(tmp_path):
    path = tmp_path / "empty.db"
    path.touch()
    with SqlDatabase(f"sqlite:///{path}") as db:
        assert db.count() == 0


@pytest.mark.parametrize("tables", [["CREATE TABLE notes (body TEXT)"], ["CREATE TABLE records (a)"]])
def test_another_program_s_sqlite_file_is_refused_and_left_as_it_was(tmp_path, tables):
    import sqlite3

    path = tmp_path / "theirs.db"
    conn = sqlite3.connect(path)
    for statement in tables:
        conn.execute(statement)
    conn.commit()
    conn.close()
    before = path.read_bytes()
    name = tables[0].split()[2]
    with pytest.raises(DatabaseError, match=f"theirs.db holds tables that are not an akg tuning database: {name}"):
        SqlDatabase(f"sqlite:///{path}")
    assert path.read_bytes() == before  # no akg tables, and still in its own journal mode (not WAL)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["theirs.db"]


def test_cli_refuses_another_program_s_sqlite_file_with_exit_code_6(tmp_path, capsys):
    import sqlite3

    from akg.cli import main

    path = tmp_path / "theirs.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes (body TEXT)")
    conn.close()
    assert main(["db", "ls", "--db", f"sqlite:///{path}"]) == 6
    err = capsys.readouterr().err
    assert "holds tables that are not an akg tuning database: notes" in err and "internal error" not in err


def test_migration_scripts_are_installed_with_the_package(tmp_path):
    """`pip install .` copies what setuptools' build_py collects: run it on a copy of the
    source tree and look for the Alembic environment and every revision."""
    tree = tmp_path / "src"
    tree.mkdir()
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tree / name)
    for folder in ("akg", "graph", "polyhedral", "schedules", "tuner", "db"):
        shutil.copytree(ROOT / folder, tree / folder, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "lib"
    done = subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(out)], cwd=tree,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    installed = out / "akg" / "db" / "migrations"
    expected = {p.relative_to(ROOT / "db" / "migrations")
                for p in (ROOT / "db" / "migrations").rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    assert {Path("env.py"), Path("script.py.mako"), Path("versions/0001_initial.py"),
            Path("versions/0002_verdicts.py"), Path("versions/0003_leases_models.py")} <= expected
    assert {p.relative_to(installed) for p in installed.rglob("*") if p.is_file()} == expected

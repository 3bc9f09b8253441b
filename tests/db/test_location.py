"""Where the database lives: explicit argument > $AKG_DB > the user cache dir
($XDG_CACHE_HOME, else ~/.cache); plain paths are SQLite files."""

from pathlib import Path

import pytest

from akg.db import InMemoryDatabase, SqlDatabase, default_path, open_database, resolve_url
from akg.errors import DatabaseError


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A fake home dir, with AKG_DB and XDG_CACHE_HOME unset."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("AKG_DB", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    return tmp_path / "home"


def test_default_is_in_the_home_cache(home):
    assert default_path() == home / ".cache" / "akg" / "tuning.db"
    assert resolve_url() == f"sqlite:///{home}/.cache/akg/tuning.db"


def test_xdg_cache_home_is_respected_when_absolute(home, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_path() == tmp_path / "xdg" / "akg" / "tuning.db"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    assert default_path() == home / ".cache" / "akg" / "tuning.db"
    monkeypatch.setenv("XDG_CACHE_HOME", "")
    assert default_path() == home / ".cache" / "akg" / "tuning.db"


def test_akg_db_overrides_the_default_and_an_argument_overrides_both(home, tmp_path, monkeypatch):
    monkeypatch.setenv("AKG_DB", "postgresql+psycopg://farm/tuning")
    assert resolve_url() == "postgresql+psycopg://farm/tuning"
    assert resolve_url("sqlite:///" + str(tmp_path / "mine.db")) == f"sqlite:///{tmp_path}/mine.db"
    monkeypatch.setenv("AKG_DB", "")
    assert resolve_url() == f"sqlite:///{home}/.cache/akg/tuning.db"


def test_plain_paths_are_sqlite_files(home, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_url("runs/tuning.db") == f"sqlite:///{tmp_path}/runs/tuning.db"
    assert resolve_url(tmp_path / "a.db") == f"sqlite:///{tmp_path}/a.db"
    assert resolve_url("~/t.db") == f"sqlite:///{home}/t.db"
    monkeypatch.setenv("AKG_DB", "env.db")
    assert resolve_url() == f"sqlite:///{tmp_path}/env.db"


def test_open_database_creates_the_default_file_and_its_folder(home, rec):
    with open_database() as db:
        assert isinstance(db, SqlDatabase)
        db.add(rec(1))
    assert (home / ".cache" / "akg" / "tuning.db").is_file()
    with open_database() as db:
        assert db.count() == 1


def test_open_database_follows_the_precedence(home, tmp_path, monkeypatch, rec):
    monkeypatch.setenv("AKG_DB", str(tmp_path / "env.db"))
    with open_database() as db:
        db.add(rec(1))
    with open_database(tmp_path / "arg.db") as db:
        assert db.count() == 0
    with open_database(f"sqlite:///{tmp_path}/env.db") as db:
        assert db.count() == 1
    assert not (home / ".cache").exists()


def test_open_database_passes_a_database_through():
    db = InMemoryDatabase()
    assert open_database(db) is db


def test_an_uncreatable_default_folder_is_a_database_error(home, tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "file"))
    with pytest.raises(DatabaseError, match="cannot create the tuning database folder"):
        open_database()

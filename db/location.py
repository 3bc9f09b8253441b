"""Where the tuning database lives: an explicit URL or path, else `$AKG_DB`, else an SQLite
file in the user cache directory; `open_database` turns that choice into a `Database` once."""

from __future__ import annotations

import os
from pathlib import Path

from akg.db.database import Database
from akg.errors import DatabaseError

ENV_VAR = "AKG_DB"


def default_path() -> Path:
    """`$XDG_CACHE_HOME/akg/tuning.db`, or `~/.cache/akg/tuning.db` when XDG_CACHE_HOME is
    unset or not absolute (as the XDG spec says)."""
    cache = os.environ.get("XDG_CACHE_HOME", "")
    root = Path(cache) if cache and os.path.isabs(cache) else Path.home() / ".cache"
    return root / "akg" / "tuning.db"


def is_url(text: str) -> bool:
    """`dialect[+driver]://...` is a URL; anything else is a file path."""
    return "://" in text


def sqlite_url(path: str | os.PathLike) -> str:
    return "sqlite:///" + str(Path(path).expanduser().absolute())


def resolve_url(url_or_path: str | os.PathLike | None = None) -> str:
    """The database URL to use: the argument, else `$AKG_DB`, else the default cache file;
    a plain path means an SQLite file there."""
    choice = url_or_path if url_or_path not in (None, "") else os.environ.get(ENV_VAR) or None
    if choice is None:
        return sqlite_url(default_path())
    text = os.fspath(choice)
    return text if is_url(text) else sqlite_url(text)


def open_database(url_or_path: str | os.PathLike | Database | None = None) -> Database:
    """A `Database` from a URL, a path (an SQLite file), or nothing (`$AKG_DB`, else the
    default cache file, whose folder is created). A `Database` is returned as it is."""
    from akg.db.sql import SqlDatabase

    if isinstance(url_or_path, Database):
        return url_or_path
    url = resolve_url(url_or_path)
    if url == sqlite_url(default_path()):
        try:
            default_path().parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise DatabaseError(f"cannot create the tuning database folder: {e}") from e
    return SqlDatabase(url)

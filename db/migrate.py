"""Schema migrations (Alembic): bring a database to the newest schema when it is opened."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import Connection, text

from akg.errors import DatabaseError

SCRIPT_LOCATION = Path(__file__).resolve().with_name("migrations")
# Key of the PostgreSQL advisory lock that serialises migrations of one database.
_PG_LOCK_KEY = 0x616B67DB


def alembic_config(connection: Connection | None = None, url: str | None = None) -> Config:
    """An Alembic Config for akg's migrations; with `connection`, they run on it (in the
    transaction it holds), else on `url`. For `alembic` commands during development:
    `command.revision(alembic_config(url=...), "message", autogenerate=True)`."""
    config = Config()
    config.set_main_option("script_location", str(SCRIPT_LOCATION).replace("%", "%%"))
    if url is not None:
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def current_revision(connection: Connection) -> str | None:
    """The revision the database is at (None for an empty database)."""
    return MigrationContext.configure(connection).get_current_revision()


def check_known(revision: str | None) -> None:
    """DatabaseError unless `revision` is one this akg has (a newer akg migrated it)."""
    if revision is None:
        return
    scripts = ScriptDirectory.from_config(alembic_config())
    try:
        known = scripts.get_revision(revision) is not None
    except CommandError:
        known = False
    if not known:
        raise DatabaseError(
            f"the database schema is at revision '{revision}', newer than this akg knows "
            f"(newest: '{scripts.get_current_head()}'); upgrade akg to use this database")


def is_current(connection: Connection) -> bool:
    """Whether the schema is at head; DatabaseError when it is newer than this akg."""
    revision = current_revision(connection)
    check_known(revision)
    return revision == head_revision()


def upgrade(connection: Connection) -> None:
    """Migrate to head inside the caller's write transaction. Concurrent openers are
    serialised: SQLite by the caller's BEGIN IMMEDIATE, PostgreSQL by an advisory lock."""
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK_KEY})
    if is_current(connection):
        return
    command.upgrade(alembic_config(connection), "head")

"""akg.db: the tuning database (schema, migrations, queries, import/export).

`open_database()` gives the default database (`$AKG_DB`, else an SQLite file in the user
cache dir); `InMemoryDatabase` is the null implementation for tests. See docs/database.md.
"""

from akg.db.database import Choice, Database, Tally, lease_owner, owner_is_gone
from akg.db.location import default_path, open_database, resolve_url
from akg.db.memory import InMemoryDatabase
from akg.db.record import (Contender, ModelEntry, Record, Status, TargetInfo, Unit, Verdict, Workload,
                           canonical_config)


def __getattr__(name: str):
    # SqlDatabase pulls in SQLAlchemy and Alembic: loaded on first use.
    if name == "SqlDatabase":
        from akg.db.sql import SqlDatabase

        return SqlDatabase
    raise AttributeError(f"module 'akg.db' has no attribute {name!r}")


__all__ = ["Choice", "Contender", "Database", "InMemoryDatabase", "ModelEntry", "Record", "SqlDatabase", "Status",
           "Tally", "TargetInfo", "Unit", "Verdict", "Workload", "canonical_config", "default_path", "lease_owner",
           "open_database", "owner_is_gone", "resolve_url"]

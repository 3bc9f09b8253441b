"""`SqlDatabase`: the tuning database on any SQLAlchemy URL (an SQLite file by default,
PostgreSQL for a shared farm), migrated to the newest schema when opened."""

from __future__ import annotations

import hashlib
import random
import time
from datetime import datetime, timedelta, timezone
from typing import Callable, Iterable, TypeVar

from alembic.util import CommandError
from sqlalchemy import (Connection, DateTime, Engine, Interval, Table, URL, and_, create_engine, delete, event, exists,
                        func, insert, literal, or_, select, update)
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError, NoSuchModuleError, SQLAlchemyError
from sqlalchemy.pool import StaticPool

from akg.db import migrate, schema
from akg.db.database import Database, Tally, check_k, check_lease, check_model
from akg.db.record import (ConfigLike, ModelEntry, Record, TargetInfo, Verdict, Workload, as_utc, canonical_config,
                           model_kernels)
from akg.errors import DatabaseError

T = TypeVar("T")

BUSY_TIMEOUT_S = 30.0  # SQLite waits this long for a lock before "database is locked"
RETRY_FOR_S = 120.0  # a transaction that keeps meeting locks/deadlocks is retried this long
CONNECT_TIMEOUT_S = 10  # a server that does not answer fails the open after this long
INSERT_BATCH = 50  # rows per INSERT statement (13 columns: well under SQLite's 999 parameters)


class SqlDatabase(Database):
    """`Database` on an SQLAlchemy URL. Every write is its own transaction, committed before
    the call returns; a write that meets a lock (SQLite "database is locked") or a deadlock
    (PostgreSQL) is retried, so concurrent writers lose nothing. Errors of SQLAlchemy or of
    the driver surface as `DatabaseError` naming the database (password hidden)."""

    def __init__(self, url: str | URL, *, retry_for: float = RETRY_FOR_S):
        try:
            self._url = with_default_driver(make_url(url))
        except (SQLAlchemyError, ValueError, TypeError) as e:
            raise DatabaseError(f"bad database URL {str(url)!r}: {_first_line(e)}") from e
        self.url = self._url.render_as_string(hide_password=True)  # for messages: no password
        self._retry_for = retry_for
        try:
            self._engine = _create_engine(self._url)
        except NoSuchModuleError as e:
            raise DatabaseError(f"cannot use database {self.url}: SQLAlchemy knows no dialect+driver "
                                f"'{self._url.drivername}'") from e
        except ImportError as e:
            raise DatabaseError(f"cannot use database {self.url}: its driver is not installed ({e})") from e
        except (SQLAlchemyError, ValueError, TypeError) as e:
            raise DatabaseError(f"cannot use database {self.url}: {_first_line(e)}") from e
        self._driver_error = getattr(self._engine.dialect.loaded_dbapi, "Error", SQLAlchemyError)
        try:
            if not self._run(migrate.is_current, write=False):
                self._run(migrate.upgrade, write=True)
        except BaseException:
            self._engine.dispose()
            raise

    def __repr__(self) -> str:
        return f"SqlDatabase({self.url!r})"

    # --- writing -------------------------------------------------------------------------

    def register_workload(self, workload: Workload) -> None:
        def work(conn: Connection) -> None:
            _insert_ignore(conn, schema.workloads, [{"key": _key(workload.key), "name": "", "description": "{}"}],
                           ["key"])
            w = schema.workloads.c
            if workload.name:
                conn.execute(update(schema.workloads).where(w.key == workload.key, w.name == "")
                             .values(name=workload.name[:schema.NAME_LENGTH]))
            if workload.description != "{}":
                conn.execute(update(schema.workloads).where(w.key == workload.key, w.description == "{}")
                             .values(description=workload.description))

        self._run(work, write=True)

    def register_target(self, target: TargetInfo) -> None:
        def work(conn: Connection) -> None:
            _insert_ignore(conn, schema.targets, [{"key": _key(target.key), "description": "{}"}], ["key"])
            t = schema.targets.c
            if target.description != "{}":
                conn.execute(update(schema.targets).where(t.key == target.key, t.description == "{}")
                             .values(description=target.description))

        self._run(work, write=True)

    def add_many(self, records: Iterable[Record]) -> int:
        records = list(records)
        if not records:
            return 0

        def work(conn: Connection) -> int:
            workload_ids = _ensure_keys(conn, schema.workloads, {r.workload_key for r in records})
            target_ids = _ensure_keys(conn, schema.targets, {r.target_key for r in records})
            rows = [{"workload_id": workload_ids[r.workload_key], "target_id": target_ids[r.target_key],
                     "config": r.config, "config_hash": _config_hash(r.config), "cost": r.cost,
                     "unit": r.unit.value, "status": r.status.value, "error": r.error,
                     "host": r.host[:schema.NAME_LENGTH], "akg_version": r.akg_version[:64],
                     "tvm_version": r.tvm_version[:64], "measured_at": r.timestamp} for r in records]
            return _insert_ignore(conn, schema.records, rows, ["workload_id", "target_id", "config_hash"])

        return self._run(work, write=True)

    def add_verdict(self, verdict: Verdict) -> bool:
        def work(conn: Connection) -> bool:
            workload_id = _ensure_keys(conn, schema.workloads, {verdict.workload_key})[verdict.workload_key]
            target_id = _ensure_keys(conn, schema.targets, {verdict.target_key})[verdict.target_key]
            row = {"workload_id": workload_id, "target_id": target_id, "config": verdict.config,
                   "role": verdict.role[:16], "best_config": verdict.best_config, "cost": verdict.cost,
                   "unit": verdict.unit.value, "contenders": verdict.contenders_json(),
                   "host": verdict.host[:schema.NAME_LENGTH], "akg_version": verdict.akg_version[:64],
                   "measured_at": verdict.timestamp}
            return _insert_ignore(conn, schema.verdicts, [row], ["workload_id", "target_id", "measured_at"]) == 1

        return self._run(work, write=True)

    def register_model(self, name: str, target_key: str, kernels: Iterable[tuple[str, int]], *,
                       updated_at: datetime | None = None) -> None:
        check_model(name, target_key)
        kernels = model_kernels(kernels)
        if len(name) > schema.NAME_LENGTH:
            raise DatabaseError(f"model name longer than {schema.NAME_LENGTH} characters: {name[:60]}...")
        stamp = datetime.now(timezone.utc) if updated_at is None else as_utc(updated_at)

        def work(conn: Connection) -> None:
            target_id = _ensure_keys(conn, schema.targets, {target_key})[target_key]
            workload_ids = _ensure_keys(conn, schema.workloads, {key for key, _ in kernels})
            m, k = schema.models.c, schema.model_kernels.c
            _insert_ignore(conn, schema.models, [{"name": name, "target_id": target_id, "updated_at": stamp}],
                           ["name", "target_id"])
            where = (m.name == name, m.target_id == target_id)
            if updated_at is not None:  # an import: an older list never replaces a newer one
                where += (m.updated_at <= stamp,)
            # Updating the row first locks it, so concurrent writers of one model take turns.
            if conn.execute(update(schema.models).where(*where).values(updated_at=stamp)).rowcount == 0:
                return
            model_id = conn.execute(select(m.id).where(m.name == name, m.target_id == target_id)).scalar_one()
            conn.execute(delete(schema.model_kernels).where(k.model_id == model_id))
            if kernels:
                conn.execute(insert(schema.model_kernels),
                             [{"model_id": model_id, "workload_id": workload_ids[key], "occurrences": n}
                              for key, n in kernels])

        self._run(work, write=True)

    # --- leases ----------------------------------------------------------------------------

    def claim(self, workload_key: str, target_key: str, configs: Iterable[ConfigLike], owner: str,
              ttl_seconds: float) -> list[str]:
        check_lease(owner, ttl_seconds)
        wanted = {_config_hash(c): c for c in dict.fromkeys(canonical_config(c) for c in configs)}
        if not wanted:
            return []
        owner = owner[:schema.NAME_LENGTH]

        def work(conn: Connection) -> list[str]:
            workload_id = _ensure_keys(conn, schema.workloads, {workload_key})[workload_key]
            target_id = _ensure_keys(conn, schema.targets, {target_key})[target_key]
            now, expires = _clock(conn), _clock(conn, timedelta(seconds=ttl_seconds))
            rows = [{"workload_id": workload_id, "target_id": target_id, "config_hash": h, "owner": owner,
                     "expires_at": expires} for h in sorted(wanted)]  # sorted: row locks in one order
            _upsert_leases(conn, rows, now)
            # Checked after taking the leases: a record committed before another tuner released
            # its lease on the same config is seen here, so that config is not measured twice.
            l, r = schema.leases.c, schema.records.c
            mine = (l.workload_id == workload_id, l.target_id == target_id, l.owner == owner)
            measured = set(conn.execute(select(r.config_hash).where(
                r.workload_id == workload_id, r.target_id == target_id, r.config_hash.in_(sorted(wanted)))).scalars())
            if measured:
                conn.execute(delete(schema.leases).where(*mine, l.config_hash.in_(sorted(measured))))
            held = set(conn.execute(select(l.config_hash).where(*mine, l.config_hash.in_(sorted(wanted)))).scalars())
            return [config for h, config in wanted.items() if h in held]

        return self._run(work, write=True)

    def release(self, owner: str, workload_key: str | None = None, target_key: str | None = None,
                configs: Iterable[ConfigLike] | None = None) -> int:
        check_lease(owner)
        l, w, t = schema.leases.c, schema.workloads.c, schema.targets.c
        where = [l.owner == owner[:schema.NAME_LENGTH]]
        if workload_key is not None:
            where.append(l.workload_id.in_(select(w.id).where(w.key == workload_key)))
        if target_key is not None:
            where.append(l.target_id.in_(select(t.id).where(t.key == target_key)))
        if configs is not None:
            hashes = sorted({_config_hash(canonical_config(c)) for c in configs})
            if not hashes:
                return 0
            where.append(l.config_hash.in_(hashes))
        return self._run(lambda conn: conn.execute(delete(schema.leases).where(*where)).rowcount, write=True)

    def tally(self, target_key: str, workload_keys: Iterable[str], owner: str) -> dict[str, Tally]:
        keys = sorted(set(workload_keys))
        if not keys:
            return {}
        l, r, w, t = schema.leases.c, schema.records.c, schema.workloads.c, schema.targets.c

        def work(conn: Connection) -> dict[str, Tally]:
            measured = dict(conn.execute(
                select(w.key, func.count()).select_from(_JOINED).where(t.key == target_key, w.key.in_(keys))
                .group_by(w.key)).all())
            unmeasured = ~exists().where(r.workload_id == l.workload_id, r.target_id == l.target_id,
                                         r.config_hash == l.config_hash)
            leased: dict[str, int] = {}
            holders: dict[str, set[str]] = {}
            for key, holder, count in conn.execute(
                    select(w.key, l.owner, func.count())
                    .select_from(schema.leases.join(schema.workloads, l.workload_id == w.id)
                                 .join(schema.targets, l.target_id == t.id))
                    .where(t.key == target_key, w.key.in_(keys), l.owner != owner[:schema.NAME_LENGTH],
                           l.expires_at > _clock(conn), unmeasured)
                    .group_by(w.key, l.owner)).all():
                leased[key] = leased.get(key, 0) + count
                holders.setdefault(key, set()).add(holder)
            return {k: Tally(measured.get(k, 0), leased.get(k, 0), frozenset(holders.get(k, ()))) for k in keys}

        return self._run(work, write=False)

    # --- reading -------------------------------------------------------------------------

    def models(self, target_key: str | None = None) -> list[ModelEntry]:
        m, t, k, w = schema.models.c, schema.targets.c, schema.model_kernels.c, schema.workloads.c
        stmt = (select(m.id, m.name, t.key.label("target_key"), m.updated_at, w.key.label("workload_key"),
                       k.occurrences)
                .select_from(schema.models.join(schema.targets, m.target_id == t.id)
                             .outerjoin(schema.model_kernels, k.model_id == m.id)
                             .outerjoin(schema.workloads, k.workload_id == w.id))
                .order_by(m.id, k.id))
        if target_key is not None:
            stmt = stmt.where(t.key == target_key)
        rows = self._run(lambda conn: conn.execute(stmt).all(), write=False)
        entries: dict[int, tuple] = {}
        for row in rows:
            name, target, stamp, kernels = entries.setdefault(row.id, (row.name, row.target_key, row.updated_at, []))
            if row.workload_key is not None:
                kernels.append((row.workload_key, row.occurrences))
        found = [ModelEntry(name, target, tuple(kernels), as_utc(stamp))
                 for name, target, stamp, kernels in entries.values()]
        return sorted(found, key=lambda e: (e.name, e.target_key))  # Python's order, as in memory

    def verdicts(self, workload_key: str | None = None, target_key: str | None = None) -> list[Verdict]:
        v = schema.verdicts.c
        stmt = _VERDICT_SELECT.where(*_keys_match(workload_key, target_key)).order_by(v.measured_at, v.id)
        rows = self._run(lambda conn: conn.execute(stmt).all(), write=False)
        return [Verdict(row.workload_key, row.target_key, row.config, row.role, row.best_config, row.cost,
                        row.unit, Verdict.parse_contenders(row.contenders), row.host, row.akg_version,
                        as_utc(row.measured_at)) for row in rows]

    def has(self, workload_key: str, target_key: str, config: ConfigLike) -> bool:
        digest = _config_hash(canonical_config(config))
        stmt = (select(literal(1)).select_from(_JOINED)
                .where(*_keys_match(workload_key, target_key), schema.records.c.config_hash == digest).limit(1))
        return self._run(lambda conn: conn.execute(stmt).first() is not None, write=False)

    def measured_configs(self, workload_key: str, target_key: str) -> set[str]:
        stmt = select(schema.records.c.config).select_from(_JOINED).where(*_keys_match(workload_key, target_key))
        return self._run(lambda conn: set(conn.execute(stmt).scalars()), write=False)

    def top_k(self, workload_key: str, target_key: str, k: int) -> list[Record]:
        r = schema.records.c
        stmt = (_RECORD_SELECT.where(*_keys_match(workload_key, target_key), r.status == "ok")
                .order_by(r.cost, r.measured_at, r.id).limit(check_k(k)))
        return self._fetch(stmt)

    def records(self, workload_key: str | None = None, target_key: str | None = None, *,
                exclude_workload: str | None = None) -> list[Record]:
        where = _keys_match(workload_key, target_key)
        if exclude_workload is not None:
            where.append(schema.workloads.c.key != exclude_workload)
        r = schema.records.c
        return self._fetch(_RECORD_SELECT.where(*where).order_by(r.measured_at, r.id))

    def workloads(self) -> list[Workload]:
        w = schema.workloads.c
        rows = self._run(lambda conn: conn.execute(select(w.key, w.name, w.description)).all(), write=False)
        return sorted((Workload(row.key, row.name, row.description) for row in rows), key=lambda x: x.key)

    def targets(self) -> list[TargetInfo]:
        t = schema.targets.c
        rows = self._run(lambda conn: conn.execute(select(t.key, t.description)).all(), write=False)
        return sorted((TargetInfo(row.key, row.description) for row in rows), key=lambda x: x.key)

    def count(self, workload_key: str | None = None, target_key: str | None = None) -> int:
        stmt = select(func.count()).select_from(_JOINED).where(*_keys_match(workload_key, target_key))
        return self._run(lambda conn: conn.execute(stmt).scalar_one(), write=False)

    def close(self) -> None:
        self._engine.dispose()

    # --- transactions --------------------------------------------------------------------

    def _fetch(self, stmt) -> list[Record]:
        rows = self._run(lambda conn: conn.execute(stmt).all(), write=False)
        return [Record(row.workload_key, row.target_key, row.config, row.status, row.cost, row.unit,
                       row.error, row.host, row.akg_version, row.tvm_version, as_utc(row.measured_at))
                for row in rows]

    def _run(self, work: Callable[[Connection], T], *, write: bool) -> T:
        """`work` in one transaction (committed when it returns), retried with backoff while
        it meets a lock or a deadlock; any other failure becomes a DatabaseError."""
        deadline = time.monotonic() + self._retry_for
        delay = 0.005
        while True:
            try:
                with self._engine.connect() as conn:
                    if write:
                        conn.execution_options(akg_write=True)
                    with conn.begin():
                        return work(conn)
            except (SQLAlchemyError, CommandError, self._driver_error) as e:
                if _is_transient(e) and time.monotonic() < deadline:
                    time.sleep(delay * (0.5 + random.random()))
                    delay = min(delay * 2, 0.5)
                    continue
                raise self._error(e) from e

    def _error(self, e: BaseException) -> DatabaseError:
        if _is_transient(e):
            return DatabaseError(f"database {self.url} stayed locked for {self._retry_for:g}s: {_first_line(e)}")
        return DatabaseError(f"database {self.url}: {_first_line(e)}")


# --- engine set-up -----------------------------------------------------------------------


def with_default_driver(url: URL) -> URL:
    """`postgresql://` means psycopg (3), the driver akg installs, unless psycopg2 is there."""
    if url.drivername == "postgresql":
        import importlib.util

        if importlib.util.find_spec("psycopg2") is None and importlib.util.find_spec("psycopg") is not None:
            return url.set(drivername="postgresql+psycopg")
    return url


# SQLite's URI parameters (https://sqlite.org/uri.html): pysqlite takes them only from a
# `file:` name with `uri=true`; otherwise SQLAlchemy ignored them (a `?mode=ro` database was
# opened read-write), and with `uri=true` alone SQLite created a file named `t.db?mode=ro`
SQLITE_URI_PARAMETERS = frozenset({"mode", "cache", "immutable", "vfs", "nolock", "psow", "modeof"})


def _create_engine(url: URL) -> Engine:
    if url.get_backend_name() == "sqlite":
        if SQLITE_URI_PARAMETERS & set(url.query) and "uri" not in url.query and url.database:
            # as SQLAlchemy wants a URI filename: `file:` ahead of the path, `uri=true`
            database = url.database if url.database.startswith("file:") else f"file:{url.database}"
            url = url.set(database=database).update_query_dict({"uri": "true"})
        in_memory = url.database in (None, "", ":memory:")
        options: dict = {"connect_args": {"timeout": BUSY_TIMEOUT_S}}
        if in_memory:
            options = {"poolclass": StaticPool, "connect_args": {"check_same_thread": False}}
        engine = create_engine(url, **options)

        def on_connect(dbapi_connection, record) -> None:
            _sqlite_connect(dbapi_connection, record, url.database)

        event.listen(engine, "connect", on_connect)
        event.listen(engine, "begin", _sqlite_begin)
        return engine
    connect_args = {}
    if url.get_backend_name() == "postgresql" and "connect_timeout" not in url.query:
        connect_args["connect_timeout"] = CONNECT_TIMEOUT_S
    return create_engine(url, pool_pre_ping=True, connect_args=connect_args)


def _sqlite_connect(dbapi_connection, _record, path: str | None = None) -> None:
    """WAL lets readers run beside the one writer; transactions are begun by `_sqlite_begin`
    (the driver's own BEGIN would be deferred, and a deferred reader that turns writer fails
    at once with "database is locked" instead of waiting). Another program's database is
    refused first (`_refuse_foreign_tables`), before anything in the file changes."""
    dbapi_connection.isolation_level = None
    try:
        _refuse_foreign_tables(dbapi_connection, path or ":memory:")
    except DatabaseError:
        dbapi_connection.close()
        raise
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = FULL")  # a commit survives power loss, not only a crash
    finally:
        cursor.close()


def _refuse_foreign_tables(dbapi_connection, path: str) -> None:
    """DatabaseError when an SQLite file holds tables but not the mark of akg's schema, the
    `alembic_version` table that the first migration of every akg database creates: it is
    another program's database, which akg must not migrate (add its tables to, or fail on a
    table of the same name). An empty or new file has no tables and is migrated."""
    cursor = dbapi_connection.cursor()
    try:
        tables = sorted(row[0] for row in cursor.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite!_%' ESCAPE '!'"))
    finally:
        cursor.close()
    if tables and "alembic_version" not in tables:
        shown = ", ".join(tables[:8]) + (f", ... ({len(tables)} tables)" if len(tables) > 8 else "")
        raise DatabaseError(f"{path} holds tables that are not an akg tuning database: {shown}; akg leaves "
                            "the file as it is: use another file for the tuning database")


def _sqlite_begin(conn: Connection) -> None:
    """Writers take the write lock up front (BEGIN IMMEDIATE), waiting up to the busy timeout."""
    write = conn.get_execution_options().get("akg_write", False)
    conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


def _is_transient(e: BaseException) -> bool:
    """A lock or deadlock that retrying the transaction resolves."""
    inner = getattr(e, "orig", None) or e
    message = str(inner).lower()
    if "database is locked" in message or "database is busy" in message or "database table is locked" in message:
        return True
    sqlstate = getattr(inner, "sqlstate", None) or getattr(inner, "pgcode", None)
    return sqlstate in ("40001", "40P01")  # serialization failure, deadlock


def _first_line(e: BaseException) -> str:
    inner = getattr(e, "orig", None) or e
    text = str(inner).strip()
    return text.splitlines()[0] if text else type(inner).__name__


# --- statements --------------------------------------------------------------------------


_JOINED = (schema.records
           .join(schema.workloads, schema.records.c.workload_id == schema.workloads.c.id)
           .join(schema.targets, schema.records.c.target_id == schema.targets.c.id))

_RECORD_SELECT = select(
    schema.workloads.c.key.label("workload_key"), schema.targets.c.key.label("target_key"),
    *(schema.records.c[name] for name in ("config", "status", "cost", "unit", "error", "host",
                                           "akg_version", "tvm_version", "measured_at")),
).select_from(_JOINED)


_VERDICT_SELECT = select(
    schema.workloads.c.key.label("workload_key"), schema.targets.c.key.label("target_key"),
    *(schema.verdicts.c[name] for name in ("config", "role", "best_config", "cost", "unit", "contenders", "host",
                                            "akg_version", "measured_at")),
).select_from(schema.verdicts
              .join(schema.workloads, schema.verdicts.c.workload_id == schema.workloads.c.id)
              .join(schema.targets, schema.verdicts.c.target_id == schema.targets.c.id))


def _keys_match(workload_key: str | None, target_key: str | None) -> list:
    where = []
    if workload_key is not None:
        where.append(schema.workloads.c.key == workload_key)
    if target_key is not None:
        where.append(schema.targets.c.key == target_key)
    return where


def _config_hash(config: str) -> str:
    return hashlib.sha256(config.encode()).hexdigest()


def _key(key: str) -> str:
    if len(key) > schema.KEY_LENGTH:
        raise DatabaseError(f"key longer than {schema.KEY_LENGTH} characters: {key[:60]}...")
    return key


def _insert_ignore(conn: Connection, table: Table, rows: list[dict], unique: list[str]) -> int:
    """INSERT each row unless a row with the same `unique` columns exists (or comes earlier
    in `rows`); returns how many were inserted. Multi-row statements of INSERT_BATCH rows."""
    dialect = conn.dialect.name
    if dialect not in ("sqlite", "postgresql"):
        return sum(_insert_one_ignore(conn, table, row, unique) for row in rows)
    new = 0
    for start in range(0, len(rows), INSERT_BATCH):
        batch = rows[start:start + INSERT_BATCH]
        if dialect == "sqlite":  # the driver's rowcount is exact (RETURNING needs SQLite >= 3.35)
            stmt = sqlite_insert(table).values(batch).on_conflict_do_nothing(index_elements=unique)
            new += conn.execute(stmt).rowcount
        else:  # psycopg reports no rowcount here: count the returned ids
            stmt = postgresql_insert(table).values(batch).on_conflict_do_nothing(index_elements=unique)
            new += len(conn.execute(stmt.returning(table.c.id)).all())
    return new


def _insert_one_ignore(conn: Connection, table: Table, row: dict, unique: list[str]) -> int:
    """The portable INSERT-unless-present, for dialects without ON CONFLICT."""
    exists = select(literal(1)).select_from(table).where(*(table.c[c] == row[c] for c in unique)).limit(1)
    if conn.execute(exists).first() is not None:
        return 0
    try:
        with conn.begin_nested():
            conn.execute(insert(table).values(row))
        return 1
    except IntegrityError:
        return 0


def _clock(conn: Connection, later: timedelta = timedelta(0)):
    """Now (plus `later`) as an SQL value: the server's clock on PostgreSQL (one clock for
    every machine of a farm), this machine's elsewhere (an SQLite file serves one machine)."""
    if conn.dialect.name == "postgresql":
        return func.now() + literal(later, Interval) if later else func.now()
    return literal(datetime.now(timezone.utc) + later, DateTime(timezone=True))


def _upsert_leases(conn: Connection, rows: list[dict], now) -> None:
    """Insert each lease, or take over the one already there when it expired or is the same
    owner's; a live lease of another owner stays. Atomic per row on SQLite (the writer holds
    the database) and PostgreSQL (ON CONFLICT locks the row; a concurrent claimer waits and
    then sees the winner's lease as live)."""
    dialect = conn.dialect.name
    leases = schema.leases
    unique = ["workload_id", "target_id", "config_hash"]
    if dialect in ("sqlite", "postgresql"):
        make = sqlite_insert if dialect == "sqlite" else postgresql_insert
        for start in range(0, len(rows), INSERT_BATCH):
            stmt = make(leases).values(rows[start:start + INSERT_BATCH])
            conn.execute(stmt.on_conflict_do_update(
                index_elements=unique, set_={"owner": stmt.excluded.owner, "expires_at": stmt.excluded.expires_at},
                where=or_(leases.c.expires_at <= now, leases.c.owner == stmt.excluded.owner)))
        return
    for row in rows:  # other dialects: row locks, then insert or take over
        key = and_(*(leases.c[c] == row[c] for c in unique))
        held = conn.execute(select(leases.c.owner, leases.c.expires_at).where(key).with_for_update()).first()
        if held is None:
            _insert_one_ignore(conn, leases, row, unique)
        else:
            conn.execute(update(leases).where(key, or_(leases.c.expires_at <= now, leases.c.owner == row["owner"]))
                         .values(owner=row["owner"], expires_at=row["expires_at"]))


def _ensure_keys(conn: Connection, table: Table, keys: set[str]) -> dict[str, int]:
    """{key: id} of the workload or target rows with these keys, created where missing (in
    sorted order, so concurrent writers take row locks in one order)."""
    lookup = select(table.c.key, table.c.id).where(table.c.key.in_(sorted(keys)))
    ids = dict(conn.execute(lookup).all())
    missing = sorted(keys - ids.keys())
    if not missing:
        return ids
    blank = {"name": ""} if "name" in table.c else {}
    _insert_ignore(conn, table, [{"key": _key(key), "description": "{}", **blank} for key in missing], ["key"])
    ids.update(conn.execute(select(table.c.key, table.c.id).where(table.c.key.in_(missing))).all())
    return ids

"""The tracker database: connection settings and versioned migrations.

Every connection runs in WAL mode with a busy timeout and foreign keys on; the
rules themselves are triggers (``migrations/*.sql``) and do not depend on those
settings, so a client that leaves foreign keys off is still held to them.

Migrations are the files ``migrations/NNNN_name.sql``, applied in order, each in
one ``BEGIN IMMEDIATE`` transaction that also records it in ``schema_migrations``
(version, name, BLAKE3 of the SQL, time) and sets ``PRAGMA user_version``.

A ``postgresql://`` URL instead of a path opens the PostgreSQL backend
(:mod:`tracker.pg`, migrations in ``migrations_pg/``); :func:`init`,
:func:`connect`, :func:`transaction` and :func:`schema_version` take either.
"""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from blake3 import blake3

from tracker.backends import is_postgres_url
from tracker.refusals import TrackerMissing, TrackerSchema, from_sqlite_error

if TYPE_CHECKING:
    from tracker.backends import Connection

__all__ = [
    "APPLICATION_ID",
    "BUSY_TIMEOUT_MS",
    "DEFAULT_DB",
    "Migration",
    "connect",
    "init",
    "migrations",
    "schema_version",
    "transaction",
]

DEFAULT_DB = "progress.sqlite3"
BUSY_TIMEOUT_MS = 30_000
# "AOST" as a big-endian integer: marks the file as an alpha tracker.
APPLICATION_ID = 0x414F5354

_MIGRATION_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True)
class Migration:
    """One schema step."""

    version: int
    name: str
    sql: str

    @property
    def digest(self) -> str:
        return blake3(self.sql.encode("utf-8")).hexdigest()


def migrations() -> list[Migration]:
    """Every migration shipped with this package, in version order."""
    found: list[Migration] = []
    for entry in resources.files("tracker").joinpath("migrations").iterdir():
        match = _MIGRATION_NAME.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    for expected, m in enumerate(found, start=1):
        if m.version != expected:  # pragma: no cover - a packaging mistake
            raise TrackerSchema(f"migration versions are not dense: expected {expected}, found {m.version}")
    return found


def _configure(conn: sqlite3.Connection) -> None:
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("PRAGMA synchronous = NORMAL")


def _open(path: Path) -> sqlite3.Connection:
    # isolation_level=None: no implicit transactions; we issue BEGIN IMMEDIATE
    # ourselves, so a writer takes the write lock up front and the busy timeout
    # applies (a deferred transaction that upgrades can fail with SQLITE_BUSY).
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    try:
        _configure(conn)
    except sqlite3.Error as exc:
        conn.close()
        raise from_sqlite_error(exc, str(path)) from exc
    return conn


_MIGRATIONS_TABLE = (
    "CREATE TABLE IF NOT EXISTS schema_migrations ("
    " version INTEGER PRIMARY KEY, name TEXT NOT NULL, sql_blake3 TEXT NOT NULL,"
    " applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))) STRICT"
)


def _statements(sql: str) -> Iterator[str]:
    """Split a script into complete statements (trigger bodies stay whole)."""
    pending = ""
    for line in sql.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            if pending.strip():
                yield pending
            pending = ""
    rest = pending.strip()
    if rest and not all(ln.strip().startswith("--") or not ln.strip() for ln in rest.splitlines()):
        raise TrackerSchema(f"incomplete statement at the end of a migration: {rest[:60]!r}")


def schema_version(conn: Connection) -> int:
    """The migration version the database is at (0: empty)."""
    if not isinstance(conn, sqlite3.Connection):
        from tracker import pg

        assert isinstance(conn, pg.PgConnection)
        return pg.schema_version(conn)
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def _migrate(conn: sqlite3.Connection, path: Path, target: int | None = None) -> int:
    known = migrations()
    try:
        version = schema_version(conn)
        app = int(conn.execute("PRAGMA application_id").fetchone()[0])
    except sqlite3.DatabaseError as exc:
        raise TrackerSchema(f"{path} is not a tracker database: {exc}") from exc
    if version > len(known):
        raise TrackerSchema(f"{path} is at schema version {version}; this tool knows {len(known)}")
    if version > 0 and app != APPLICATION_ID:
        raise TrackerSchema(f"{path} is an SQLite database, but not an alpha tracker")
    if version == 0 and app != APPLICATION_ID:
        tables = conn.execute("SELECT count(*) FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'").fetchone()[0]
        if tables:
            raise TrackerSchema(f"{path} is an SQLite database, but not an alpha tracker")
    for m in known[version : target if target is not None else len(known)]:
        try:
            conn.execute("BEGIN IMMEDIATE")
            # Another process may have migrated while we waited for the lock.
            if schema_version(conn) >= m.version:
                conn.execute("ROLLBACK")
                continue
            for statement in _statements(m.sql):
                conn.execute(statement)
            conn.execute(_MIGRATIONS_TABLE)
            conn.execute(
                "INSERT INTO schema_migrations (version, name, sql_blake3) VALUES (?, ?, ?)",
                (m.version, m.name, m.digest),
            )
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version = {m.version}")
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise TrackerSchema(f"{path}: migration {m.version} ({m.name}) failed: {exc}") from exc
    return len(known)


def init(path: str | os.PathLike[str], *, target: int | None = None) -> Connection:
    """Create (or bring up to date) the tracker at ``path``; WAL mode is set once, on the file.

    ``target`` stops at that schema version (for testing migrations); default: the latest.
    A ``postgresql://`` URL: the tracker in that database (see :func:`tracker.pg.init`).
    """
    if is_postgres_url(path):
        from tracker import pg

        return pg.init(str(path), target=target)
    p = Path(path)
    conn = _open(p)
    try:
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":  # pragma: no cover - e.g. a filesystem without shared memory
            raise TrackerSchema(f"{p}: cannot use WAL mode (got {mode})")
        _migrate(conn, p, target)
    except BaseException:
        conn.close()
        raise
    return conn


def connect(path: str | os.PathLike[str]) -> Connection:
    """Open an existing tracker (migrating it forward if needed); ``tracker-missing`` if there is none."""
    if is_postgres_url(path):
        from tracker import pg

        return pg.connect(str(path))
    p = Path(path)
    if not p.is_file():
        raise TrackerMissing(f"no tracker at {p} (create one with: alpha tracker --db {p} init)")
    conn = _open(p)
    try:
        known = len(migrations())
        if schema_version(conn) != known:
            _migrate(conn, p)
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise TrackerSchema(f"{p} is not a tracker database: {exc}") from exc
    except BaseException:
        conn.close()
        raise
    return conn


@contextmanager
def transaction(conn: Connection, context: str = "") -> Iterator[Any]:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``; a database error rolls back and becomes its refusal.

    PostgreSQL: ``BEGIN`` and the tracker's write lock (:func:`tracker.pg.transaction`).
    """
    if not isinstance(conn, sqlite3.Connection):
        from tracker import pg

        assert isinstance(conn, pg.PgConnection)
        with pg.transaction(conn, context) as c:
            yield c
        return
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.Error as exc:
        raise from_sqlite_error(exc, context) from exc
    try:
        yield conn
    except sqlite3.Error as exc:
        conn.execute("ROLLBACK")
        raise from_sqlite_error(exc, context) from exc
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    try:
        conn.execute("COMMIT")
    except sqlite3.Error as exc:  # pragma: no cover - e.g. disk full at commit
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise from_sqlite_error(exc, context) from exc

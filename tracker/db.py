"""The tracker database: connection settings and versioned migrations.

Every connection runs in WAL mode with a busy timeout and foreign keys on; the
rules themselves are triggers (``migrations/*.sql``) and do not depend on those
settings, so a client that leaves foreign keys off is still held to them.

Migrations are the files ``migrations/NNNN_name.sql``, applied in order, each in
one ``BEGIN IMMEDIATE`` transaction (foreign keys off, as SQLite's table rebuild
needs, and checked before commit) that also records it in ``schema_migrations``
(version, name, BLAKE3 of the SQL, time), sets ``PRAGMA user_version`` and, from
migration 3 (which creates the journal), appends a journal entry holding every
row and the schema cookie the migration left (``tracker.journal``).

A connection may carry the tracker's signing key (``connect(path, signer=...)``):
then every journal entry written through it is signed.

A ``postgresql://`` URL instead of a path opens the PostgreSQL backend
(:mod:`tracker.pg`, migrations in ``migrations_pg/``); :func:`init`,
:func:`connect`, :func:`transaction`, :func:`schema_version` and :func:`vacuum`
take either.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracker import journal

# Shared with the PostgreSQL backend (tracker.pg), which cannot import this module back.
from tracker.backends import (
    APPLICATION_ID,
    BUSY_TIMEOUT_MS,
    JOURNAL_VERSION,
    Migration,
    is_postgres_url,
    load_migrations,
)
from tracker.refusals import TrackerMissing, TrackerSchema, from_sqlite_error

if TYPE_CHECKING:
    from aos.signing import Signer
    from tracker.backends import Connection

__all__ = [
    "APPLICATION_ID",
    "BUSY_TIMEOUT_MS",
    "DEFAULT_DB",
    "JOURNAL_VERSION",
    "Migration",
    "TrackerConnection",
    "connect",
    "expected_schema",
    "init",
    "migrations",
    "schema_cookie",
    "schema_version",
    "transaction",
    "vacuum",
]

DEFAULT_DB = "progress.sqlite3"


class TrackerConnection(sqlite3.Connection):
    """A connection of the tool: it may carry the tracker's key, which signs the journal."""

    signer: Signer | None = None


def migrations() -> list[Migration]:
    """Every migration shipped with this package, in version order."""
    return load_migrations("migrations")


def _configure(conn: sqlite3.Connection) -> None:
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("PRAGMA synchronous = NORMAL")


def _open(path: Path, signer: Signer | None = None) -> TrackerConnection:
    # isolation_level=None: no implicit transactions; we issue BEGIN IMMEDIATE
    # ourselves, so a writer takes the write lock up front and the busy timeout
    # applies (a deferred transaction that upgrades can fail with SQLITE_BUSY).
    conn = sqlite3.connect(
        path,
        timeout=BUSY_TIMEOUT_MS / 1000,
        isolation_level=None,
        check_same_thread=False,
        factory=TrackerConnection,
    )
    conn.row_factory = sqlite3.Row
    conn.signer = signer
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


def schema_cookie(conn: sqlite3.Connection) -> int:
    """SQLite's schema cookie: it grows with every change to the schema (a trigger dropped or created, VACUUM)."""
    return int(conn.execute("PRAGMA schema_version").fetchone()[0])


def _apply(conn: sqlite3.Connection, m: Migration) -> None:
    """Run one migration's statements and record it (inside the caller's transaction)."""
    for statement in _statements(m.sql):
        conn.execute(statement)
    conn.execute(_MIGRATIONS_TABLE)
    conn.execute(
        "INSERT INTO schema_migrations (version, name, sql_blake3) VALUES (?, ?, ?)",
        (m.version, m.name, m.digest),
    )
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute(f"PRAGMA user_version = {m.version}")


def _journal_migration(conn: sqlite3.Connection, m: Migration) -> None:
    """The migration's journal entry: what was applied, the schema cookie after it, and every row."""
    args: dict[str, object] = {"version": m.version, "name": m.name, "sql_blake3": m.digest}
    if conn.execute("SELECT 1 FROM journal LIMIT 1").fetchone() is None:
        args["tracker_id"] = journal.new_tracker_id()
    args["sqlite_schema_version"] = schema_cookie(conn)
    journal.append(conn, "schema.migrate", args, journal.snapshot(conn, m.version), snapshot_of_all=True)


@cache
def expected_schema() -> dict[tuple[str, str], str]:
    """(type, name) -> SQL of every table, index and trigger the shipped migrations leave."""
    ref = sqlite3.connect(":memory:", isolation_level=None)
    try:
        for m in migrations():
            _apply(ref, m)
        return {
            (str(r[0]), str(r[1])): str(r[2])
            for r in ref.execute("SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")
        }
    finally:
        ref.close()


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
    # SQLite's table rebuild (migration 3) needs foreign keys off; the pragma is a
    # no-op inside a transaction, so it is set around the loop, and the keys are
    # checked before each migration commits.
    conn.execute("PRAGMA foreign_keys = OFF")
    try:
        for m in known[version : target if target is not None else len(known)]:
            try:
                conn.execute("BEGIN IMMEDIATE")
                # Another process may have migrated while we waited for the lock.
                if schema_version(conn) >= m.version:
                    conn.execute("ROLLBACK")
                    continue
                _apply(conn, m)
                broken = conn.execute("PRAGMA foreign_key_check").fetchall()
                if broken:
                    raise TrackerSchema(
                        f"{path}: migration {m.version} ({m.name}) would leave {len(broken)} broken reference(s),"
                        f" e.g. {tuple(broken[0])}"
                    )
                if m.version >= JOURNAL_VERSION:
                    _journal_migration(conn, m)
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise TrackerSchema(f"{path}: migration {m.version} ({m.name}) failed: {exc}") from exc
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
    finally:
        conn.execute("PRAGMA foreign_keys = ON")
    return len(known)


def _set_wal(conn: sqlite3.Connection) -> str:
    """``PRAGMA journal_mode = WAL``, retried up to the busy timeout: two inits racing on a new file can
    meet SQLITE_BUSY here at once (SQLite does not call the busy handler for this lock)."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            return str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def init(path: str | os.PathLike[str], *, target: int | None = None, signer: Signer | None = None) -> Connection:
    """Create (or bring up to date) the tracker at ``path``; WAL mode is set once, on the file.

    ``target`` stops at that schema version (for testing migrations); default: the latest.
    ``signer``: the tracker's key, signing the journal entries this connection writes.
    A ``postgresql://`` URL: the tracker in that database (see :func:`tracker.pg.init`).
    """
    if is_postgres_url(path):
        from tracker import pg

        return pg.init(str(path), target=target, signer=signer)
    p = Path(path)
    conn = _open(p, signer)
    try:
        mode = _set_wal(conn)
        if str(mode).lower() != "wal":  # pragma: no cover - e.g. a filesystem without shared memory
            raise TrackerSchema(f"{p}: cannot use WAL mode (got {mode})")
        _migrate(conn, p, target)
    except BaseException:
        conn.close()
        raise
    return conn


def connect(path: str | os.PathLike[str], *, signer: Signer | None = None) -> Connection:
    """Open an existing tracker (migrating it forward if needed); ``tracker-missing`` if there is none.

    ``signer``: the tracker's key, signing the journal entries this connection writes.
    """
    if is_postgres_url(path):
        from tracker import pg

        return pg.connect(str(path), signer=signer)
    p = Path(path)
    if not p.is_file():
        raise TrackerMissing(f"no tracker at {p} (create one with: alpha tracker --db {p} init)")
    conn = _open(p, signer)
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


def vacuum(conn: Connection) -> int:
    """``VACUUM`` the database and journal the schema cookie it leaves (VACUUM changes it); returns the cookie.

    PostgreSQL: ``VACUUM`` leaves the schema as it was; nothing to journal (returns 0).
    """
    if not isinstance(conn, sqlite3.Connection):
        from tracker import pg

        assert isinstance(conn, pg.PgConnection)
        return pg.vacuum(conn)
    try:
        conn.execute("VACUUM")
    except sqlite3.Error as exc:
        raise from_sqlite_error(exc, "vacuum") from exc
    with transaction(conn, "vacuum"):
        cookie = schema_cookie(conn)
        journal.append(conn, "schema.vacuum", {"sqlite_schema_version": cookie}, [])
    return cookie

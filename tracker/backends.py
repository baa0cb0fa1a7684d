"""The two tracker backends, behind one small DB-API surface.

A tracker is either an SQLite file (the embedded default: ``--db progress.sqlite3``)
or a PostgreSQL database (the shared backend: ``--db postgresql://...``). The code
above this module writes one SQL dialect, SQLite's, with ``?`` placeholders, and
talks to a :class:`Connection`: an ``sqlite3.Connection`` as it is, or a
:class:`tracker.pg.PgConnection`, which rewrites the few SQLite spellings the tool
uses into PostgreSQL's (see :func:`tracker.pg.translate`).

What differs is kept here and in :mod:`tracker.pg`, never in the callers:

- opening, creating and migrating (``tracker/migrations/`` and ``tracker/migrations_pg/``,
  the same versions with the same names);
- the write lock: SQLite's ``BEGIN IMMEDIATE``; PostgreSQL's one lock row
  (``tracker_lock``), which every write takes, through the database's own triggers
  for any client and at ``BEGIN`` for this tool;
- errors: both databases refuse a rule with the message ``NAME: detail``
  (``RAISE(ABORT, ...)`` in SQLite, ``RAISE EXCEPTION`` in PL/pgSQL), which
  :func:`tracker.refusals.from_db_error` turns into the same refusal.
"""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from blake3 import blake3

__all__ = [
    "APPLICATION_ID",
    "BUSY_TIMEOUT_MS",
    "JOURNAL_VERSION",
    "Connection",
    "Cursor",
    "Migration",
    "backend_of",
    "db_errors",
    "db_message",
    "is_postgres_url",
    "is_sqlite",
]

#: How long a writer waits for the write lock: SQLite's busy timeout, PostgreSQL's lock_timeout.
BUSY_TIMEOUT_MS = 30_000
# "AOST" as a big-endian integer: marks the file (PostgreSQL: tracker_lock.application) as an alpha tracker.
APPLICATION_ID = 0x414F5354
#: The migration that creates the journal; from it on, each migration is journalled.
JOURNAL_VERSION = 3


@dataclass(frozen=True)
class Migration:
    """One schema step."""

    version: int
    name: str
    sql: str

    @property
    def digest(self) -> str:
        return blake3(self.sql.encode("utf-8")).hexdigest()


_MIGRATION_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


def load_migrations(folder: str) -> list[Migration]:
    """Every migration shipped in the package folder ``tracker/FOLDER``, in version order (dense from 1)."""
    from importlib import resources

    from tracker.refusals import TrackerSchema

    found: list[Migration] = []
    for entry in resources.files("tracker").joinpath(folder).iterdir():
        match = _MIGRATION_NAME.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    for expected, m in enumerate(found, start=1):
        if m.version != expected:  # pragma: no cover - a packaging mistake
            raise TrackerSchema(f"migration versions are not dense: expected {expected}, found {m.version}")
    return found


def migration_record_problems(conn: Any, shipped: Sequence[Migration]) -> list[str]:
    """Audit: the ``schema_migrations`` rows must name exactly the ``shipped`` migrations (version, name, digest)."""
    want = {m.version: (m.name, m.digest) for m in shipped}
    recorded = {
        int(r[0]): (r[1], r[2]) for r in conn.execute("SELECT version, name, sql_blake3 FROM schema_migrations")
    }
    return [] if recorded == want else ["the record of applied migrations differs from the shipped migrations"]


_PG_SCHEMES = ("postgresql://", "postgres://")


class Cursor(Protocol):
    """What the tracker reads from ``Connection.execute``: ``sqlite3.Cursor`` and ``tracker.pg.PgCursor``."""

    @property
    def rowcount(self) -> int: ...

    @property
    def lastrowid(self) -> int | None: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Connection(Protocol):
    """A tracker connection: ``sqlite3.Connection`` or ``tracker.pg.PgConnection``.

    Rows support both ``row[0]`` and ``row["name"]`` (and ``dict(row)``).
    """

    def execute(self, sql: str, parameters: Sequence[Any] = ..., /) -> Any: ...

    def close(self) -> None: ...

    @property
    def in_transaction(self) -> bool: ...


def is_postgres_url(target: str | os.PathLike[str]) -> bool:
    """True for ``postgresql://...`` (or ``postgres://...``), the shared backend."""
    return isinstance(target, str) and target.startswith(_PG_SCHEMES)


def is_sqlite(conn: Connection) -> bool:
    return isinstance(conn, sqlite3.Connection)


def backend_of(conn: Connection) -> str:
    """``"sqlite"`` or ``"postgresql"``."""
    return "sqlite" if is_sqlite(conn) else "postgresql"


def db_errors(conn: Connection) -> tuple[type[Exception], ...]:
    """The exception classes of ``conn``'s driver (for ``except``): ``sqlite3.Error``, or ``psycopg.Error``."""
    if is_sqlite(conn):
        return (sqlite3.Error,)
    import psycopg

    return (psycopg.Error,)


def db_message(exc: BaseException) -> str:
    """A driver error's message on one line (PostgreSQL's primary message, without its LINE/CONTEXT lines)."""
    diag = getattr(exc, "diag", None)
    return str(getattr(diag, "message_primary", None) or exc).strip()

"""Plain database clients for the tracker's rule tests, one per backend.

"Plain" means what any client of the database gets, none of the tool's settings:
``sqlite3.connect(path)`` (no foreign keys, no busy timeout, default transactions),
or ``psycopg.connect(url)`` (default transactions, no write lock taken up front).
The only help is the spelling: tests write SQLite's SQL, which PostgreSQL's
client gets as ``tracker.pg.translate`` spells it (``%s`` placeholders,
``IS DISTINCT FROM``, ``to_char`` for ``strftime``); nothing else is added.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from tracker.backends import is_postgres_url


def integrity_errors() -> tuple[type[Exception], ...]:
    """The drivers' integrity-error classes: what a trigger's refusal raises in a plain client."""
    errors: list[type[Exception]] = [sqlite3.IntegrityError]
    try:
        import psycopg

        errors.append(psycopg.IntegrityError)
    except ImportError:  # pragma: no cover - the test extra installs it
        pass
    return tuple(errors)


class PlainClient:
    """``execute``/``commit``/``rollback``/``close`` on a plain connection of either backend."""

    def __init__(self, target: str | Path, *, autocommit: bool = False) -> None:
        self.target = str(target)
        self.postgres = is_postgres_url(self.target)
        self.backend = "postgresql" if self.postgres else "sqlite"
        if self.postgres:
            import psycopg

            self.raw: Any = psycopg.connect(self.target, cursor_factory=psycopg.ClientCursor, autocommit=autocommit)
        else:
            self.raw = sqlite3.connect(self.target, isolation_level=None if autocommit else "")

    def execute(self, sql: str, args: tuple[object, ...] = ()) -> Any:
        if self.postgres:
            from tracker.pg import translate

            q = translate(sql)
            return self.raw.execute(q.sql, q.arrange(args))
        return self.raw.execute(sql, args)

    def commit(self) -> None:
        self.raw.commit()

    def rollback(self) -> None:
        self.raw.rollback()

    def close(self) -> None:
        self.raw.close()

    def drop_trigger(self, name: str, table: str) -> None:
        self.execute(f"DROP TRIGGER {name} ON {table}" if self.postgres else f"DROP TRIGGER {name}")


def without_triggers(db: Path | str, *statements: str, args: tuple[object, ...] = ()) -> None:
    """Drop every trigger, run ``statements``, and re-create the triggers with their exact text."""
    raw = PlainClient(db, autocommit=True)  # a plain client: nothing of the tool
    try:
        if raw.postgres:
            saved = raw.execute(
                "SELECT t.tgname, c.relname, pg_get_triggerdef(t.oid) FROM pg_trigger t"
                " JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE NOT t.tgisinternal AND n.nspname = current_schema()"
            ).fetchall()
            drops = [f"DROP TRIGGER {name} ON {table}" for name, table, _ in saved]
            creates = [sql for _, _, sql in saved]
        else:
            saved = raw.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'").fetchall()
            drops = [f"DROP TRIGGER {name}" for name, _ in saved]
            creates = [sql for _, sql in saved]
        raw.execute("BEGIN")
        for sql in drops:
            raw.execute(sql)
        for sql in statements:
            raw.execute(sql, args if "?" in sql else ())
        for sql in creates:
            raw.execute(sql)
        raw.execute("COMMIT")
    finally:
        raw.close()

"""Plain database clients for the tracker's rule tests, one per backend.

"Plain" means what any client of the database gets, none of the tool's settings:
``sqlite3.connect(path)`` (no foreign keys, no busy timeout, default transactions),
or ``psycopg.connect(url)`` (default transactions, no write lock taken up front).
The only help is the placeholder: tests write ``?``, which PostgreSQL's client
spells ``%s``.
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

    def __init__(self, target: str | Path) -> None:
        self.target = str(target)
        self.postgres = is_postgres_url(self.target)
        self.backend = "postgresql" if self.postgres else "sqlite"
        if self.postgres:
            import psycopg

            self.raw: Any = psycopg.connect(self.target, cursor_factory=psycopg.ClientCursor)
        else:
            self.raw = sqlite3.connect(self.target)

    def execute(self, sql: str, args: tuple[object, ...] = ()) -> Any:
        if self.postgres:
            return self.raw.execute(sql.replace("?", "%s"), args or None)
        return self.raw.execute(sql, args)

    def commit(self) -> None:
        self.raw.commit()

    def rollback(self) -> None:
        self.raw.rollback()

    def close(self) -> None:
        self.raw.close()

    def drop_trigger(self, name: str, table: str) -> None:
        self.execute(f"DROP TRIGGER {name} ON {table}" if self.postgres else f"DROP TRIGGER {name}")

"""The PostgreSQL tracker backend (``--db postgresql://...``).

The schema and its rules are ``tracker/migrations_pg/NNNN_name.sql``: the same
versions, names, tables and rules as the SQLite migrations, as PL/pgSQL trigger
functions that raise the same ``NAME: detail`` messages. Any PostgreSQL client
(``psql``, another program) is held to them, as any SQLite client is to the
SQLite triggers.

**Locking.** SQLite has one writer at a time. PostgreSQL gets the same through
one lock row, ``tracker_lock``: a statement trigger on every tracker table
updates it before the statement's first row (once per transaction), so every
transaction that writes waits for the one before it to end. Under the default
READ COMMITTED, the rule checks (volatile PL/pgSQL, a fresh snapshot per query)
then see everything committed before; under REPEATABLE READ or SERIALIZABLE a
transaction that started before the previous writer committed fails with a
serialization error instead of checking a stale snapshot. This tool takes the
same lock at ``BEGIN`` (:func:`transaction`), which is SQLite's ``BEGIN IMMEDIATE``.
A ``lock_timeout`` of :data:`tracker.db.BUSY_TIMEOUT_MS` is the busy timeout.

**SQL.** The tool writes SQLite's dialect; :func:`translate` rewrites the few
spellings that differ: ``?``/``?N`` placeholders, ``INSERT OR IGNORE`` (``ON
CONFLICT DO NOTHING``), ``strftime('...', 'now')`` (``to_char`` of the statement
time, in UTC), and an ``INSERT`` into a table with an integer id gets
``RETURNING id`` so that ``cursor.lastrowid`` works as in ``sqlite3``.

psycopg (3) is imported only when a PostgreSQL tracker is opened.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tracker import journal
from tracker.backends import (
    APPLICATION_ID,
    BUSY_TIMEOUT_MS,
    JOURNAL_VERSION,
    Migration,
    load_migrations,
    migration_record_problems,
)
from tracker.refusals import TrackerDatabase, TrackerMissing, TrackerSchema, from_db_error

if TYPE_CHECKING:
    import psycopg

    from aos.signing import Signer

__all__ = [
    "PgConnection",
    "PgCursor",
    "Row",
    "catalog_problems",
    "connect",
    "expected_objects",
    "init",
    "migrations",
    "redact",
    "schema_version",
    "transaction",
    "translate",
]

# Tables whose ``id`` is an integer identity: an INSERT returns it as ``lastrowid``.
_ID_TABLES = frozenset({"experiments", "devices", "evidence", "measurements"})
_INSERT = re.compile(r"^\s*INSERT\s+(OR\s+IGNORE\s+)?INTO\s+(\w+)", re.IGNORECASE)
_STRFTIME = re.compile(r"strftime\(\s*'([^']*)'\s*,\s*'now'\s*\)", re.IGNORECASE)
_STRFTIME_CODES = {"%Y": "YYYY", "%m": "MM", "%d": "DD", "%H": "HH24", "%M": "MI", "%S": "SS", "%f": "SS.MS"}
# SQLite's `a IS b` / `a IS NOT b` compare any values, NULL included; PostgreSQL spells them
# IS NOT DISTINCT FROM / IS DISTINCT FROM (its own IS [NOT] NULL/TRUE/FALSE/DISTINCT stay).
_IS = re.compile(r"\bIS(\s+NOT)?\s+(?!NOT\b|NULL\b|TRUE\b|FALSE\b|DISTINCT\b|UNKNOWN\b|JSON\b)", re.IGNORECASE)
_PASSWORD = re.compile(r"(://[^:/?#@]*:)[^@/?#]*@")


def redact(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for messages and logs)."""
    return _PASSWORD.sub(r"\1***@", url)


# -- SQL translation ---------------------------------------------------------------------


def _to_char(fmt: str) -> str:
    out: list[str] = []
    literal = ""
    i = 0
    while i < len(fmt):
        code = fmt[i : i + 2]
        if code in _STRFTIME_CODES:
            if literal:
                out.append(f'"{literal}"')
                literal = ""
            out.append(_STRFTIME_CODES[code])
            i += 2
        elif code == "%%":
            literal += "%"
            i += 2
        elif fmt[i] == "%":
            raise ValueError(f"strftime code {code!r} has no PostgreSQL translation")
        else:
            literal += fmt[i]
            i += 1
    if literal:
        out.append(f'"{literal}"')
    return f"to_char(statement_timestamp() AT TIME ZONE 'UTC', '{''.join(out)}')"


@dataclass(frozen=True)
class Translated:
    """A statement in PostgreSQL's spelling: ``sql`` with ``%s`` placeholders taking ``order`` of the arguments."""

    sql: str
    order: tuple[int, ...]
    returning_id: bool

    def arrange(self, parameters: Sequence[Any]) -> list[Any]:
        if len(parameters) != (max(self.order) + 1 if self.order else 0):
            raise TypeError(f"the statement takes {len(set(self.order))} parameters, {len(parameters)} given")
        return [parameters[i] for i in self.order]


@functools.lru_cache(maxsize=512)
def translate(sql: str) -> Translated:
    """Rewrite one statement from the SQLite spelling the tool uses into PostgreSQL's (see the module docstring)."""
    insert = _INSERT.match(sql)
    sql = _STRFTIME.sub(lambda m: _to_char(m.group(1)), sql)
    out: list[str] = []
    order: list[int] = []
    largest = 0
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if c in "'\"":  # a string literal or a quoted identifier: copied, '%' escaped
            j = i + 1
            while j < n:
                if sql[j] == c:
                    if j + 1 < n and sql[j + 1] == c:
                        j += 2
                        continue
                    break
                j += 1
            out.append(sql[i : j + 1].replace("%", "%%"))
            i = j + 1
        elif sql.startswith("--", i):
            j = sql.find("\n", i)
            j = n if j < 0 else j
            out.append(sql[i:j].replace("%", "%%"))
            i = j
        elif c == "?":
            j = i + 1
            while j < n and sql[j].isdigit():
                j += 1
            number = int(sql[i + 1 : j]) if j > i + 1 else largest + 1
            largest = max(largest, number)
            order.append(number - 1)
            out.append("%s")
            i = j
        elif c == "%":
            out.append("%%")
            i += 1
        elif c in "iI" and (i == 0 or not (sql[i - 1].isalnum() or sql[i - 1] == "_")):
            m = _IS.match(sql, i)
            if m is None:
                out.append(c)
                i += 1
            else:
                out.append("IS DISTINCT FROM " if m.group(1) else "IS NOT DISTINCT FROM ")
                i = m.end()
        else:
            out.append(c)
            i += 1
    text = "".join(out).strip().rstrip(";").rstrip()
    returning = False
    if insert is not None:
        if insert.group(1):
            text = text[: insert.start(1)] + text[insert.end(1) :] + " ON CONFLICT DO NOTHING"
        if insert.group(2).lower() in _ID_TABLES and not re.search(r"\bRETURNING\b", text, re.IGNORECASE):
            text += " RETURNING id"
            returning = True
    return Translated(text, tuple(order), returning)


# -- rows, cursors, connections -------------------------------------------------------------


class Row(tuple[Any, ...]):
    """A result row: ``row[0]``, ``row["name"]``, ``row.keys()`` and ``dict(row)``, like ``sqlite3.Row``."""

    _keys: tuple[str, ...] = ()
    _index: dict[str, int] = {}  # noqa: RUF012 - set per result shape, by _row_class

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            try:
                key = self._index[key]
            except KeyError:
                raise IndexError(f"no column named {key}") from None
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        return list(self._keys)


@functools.lru_cache(maxsize=256)
def _row_class(names: tuple[str, ...]) -> type[Row]:
    return type("Row", (Row,), {"_keys": names, "_index": {k: i for i, k in enumerate(names)}, "__slots__": ()})


def _row_factory(cursor: Any) -> Any:
    description = cursor.description
    if description is None:
        return tuple
    cls = _row_class(tuple(d.name for d in description))
    return cls


class PgCursor:
    """The result of :meth:`PgConnection.execute`, read like an ``sqlite3.Cursor``."""

    def __init__(self, cursor: psycopg.Cursor[Any], returning_id: bool) -> None:
        self._cursor = cursor
        self.lastrowid: int | None = None
        self._done = cursor.description is None
        if returning_id:
            rows = cursor.fetchall()
            self.lastrowid = int(rows[-1][0]) if rows else None
            self._done = True
        self.rowcount: int = cursor.rowcount

    @property
    def description(self) -> list[tuple[str, ...]] | None:
        """``(name, ...)`` per column, as DB-API cursors give it (None for a statement without rows)."""
        d = self._cursor.description
        return None if d is None else [(c.name,) for c in d]

    def fetchone(self) -> Any:
        return None if self._done else self._cursor.fetchone()

    def fetchall(self) -> list[Any]:
        return [] if self._done else self._cursor.fetchall()

    def __iter__(self) -> Iterator[Any]:
        return iter(self.fetchall())


class PgConnection:
    """A PostgreSQL tracker connection, used like ``sqlite3.Connection`` by the tracker's code.

    Autocommit: a statement outside :func:`transaction` commits alone, as in
    ``sqlite3`` with ``isolation_level=None``. ``raw`` is the psycopg connection.
    """

    backend = "postgresql"

    def __init__(self, raw: psycopg.Connection[Any], url: str, signer: Signer | None = None) -> None:
        self.raw = raw
        self.url = url
        #: The tracker's key: signs the journal entries written through this connection.
        self.signer = signer

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> PgCursor:
        q = translate(sql)
        cursor = self.raw.cursor()
        cursor.execute(q.sql, q.arrange(parameters))
        return PgCursor(cursor, q.returning_id)

    def script(self, sql: str) -> None:
        """Run several statements as they are (no translation, no parameters)."""
        self.raw.execute(sql.encode("utf-8"))  # bytes: sent as written, '%' untouched

    @property
    def in_transaction(self) -> bool:
        from psycopg.pq import TransactionStatus

        return self.raw.info.transaction_status != TransactionStatus.IDLE

    def commit(self) -> None:
        if self.in_transaction:
            self.raw.execute("COMMIT")

    def rollback(self) -> None:
        if self.in_transaction:
            self.raw.execute("ROLLBACK")

    def close(self) -> None:
        self.raw.close()


def _open(url: str, *, create: bool = False, signer: Signer | None = None) -> PgConnection:
    import psycopg

    try:
        raw = psycopg.connect(
            url,
            autocommit=True,
            cursor_factory=psycopg.ClientCursor,
            row_factory=_row_factory,
            connect_timeout=30,
            application_name="alpha-tracker",
        )
    except psycopg.OperationalError as exc:
        if "does not exist" in str(exc) and "database" in str(exc):
            if create:
                _create_database(url)
                return _open(url, signer=signer)
            raise TrackerMissing(
                f"no tracker at {redact(url)}: the database does not exist"
                " (create it with: alpha tracker --db URL init)"
            ) from exc
        raise TrackerDatabase(f"{redact(url)}: cannot connect: {str(exc).strip()}") from exc
    try:
        raw.execute(f"SET lock_timeout = {BUSY_TIMEOUT_MS}")
        raw.execute("SET TIME ZONE 'UTC'")
    except psycopg.Error as exc:  # pragma: no cover - the server went away right after connecting
        raw.close()
        raise from_db_error(exc, redact(url)) from exc
    return PgConnection(raw, url, signer)


def _create_database(url: str) -> None:
    """``CREATE DATABASE`` for ``init`` on a server where the database does not exist yet (racing inits agree)."""
    import psycopg
    from psycopg import sql as pgsql
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    name = conninfo_to_dict(url).get("dbname")
    if not name:
        raise TrackerMissing(f"{redact(url)} names no database")
    try:
        with psycopg.connect(make_conninfo(url, dbname="postgres"), autocommit=True, connect_timeout=30) as admin:
            admin.execute(pgsql.SQL("CREATE DATABASE {}").format(pgsql.Identifier(str(name))))
    except (psycopg.errors.DuplicateDatabase, psycopg.errors.UniqueViolation):
        pass  # another init made it first (a race on pg_database's unique index reads as UniqueViolation)
    except psycopg.Error as exc:
        raise TrackerDatabase(f"{redact(url)}: the database does not exist and cannot be created: {exc}") from exc


# -- migrations --------------------------------------------------------------------------------


def migrations() -> list[Migration]:
    """Every PostgreSQL migration shipped with this package, in version order."""
    return load_migrations("migrations_pg")


_MIGRATIONS_TABLE = (
    "CREATE TABLE IF NOT EXISTS schema_migrations ("
    " version integer PRIMARY KEY, name text NOT NULL, sql_blake3 text NOT NULL,"
    " applied_at text NOT NULL DEFAULT tracker_now())"
)


def _has_table(conn: PgConnection, name: str) -> bool:
    # A query of pg_class, not to_regclass(): the catalog cache behind to_regclass is not refreshed
    # inside a transaction that began before another one (a racing init) committed the table.
    return bool(
        conn.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = current_schema() AND c.relname = ?)",
            (name,),
        ).fetchone()[0]
    )


def schema_version(conn: PgConnection) -> int:
    """The migration version the database is at (0: no tracker in it)."""
    if _has_table(conn, "schema_migrations"):
        return int(conn.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchone()[0])
    return 0


def _application(conn: PgConnection) -> int | None:
    if not _has_table(conn, "tracker_lock"):
        return None
    row = conn.execute("SELECT application FROM tracker_lock WHERE id = 1").fetchone()
    return None if row is None else int(row[0])


def _other_tables(conn: PgConnection) -> int:
    return int(
        conn.execute(
            "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p', 'v', 'm')"
        ).fetchone()[0]
    )


def _migrate(conn: PgConnection, target: int | None = None) -> int:
    import psycopg

    known = migrations()
    where = redact(conn.url)
    for m in known[: target if target is not None else len(known)]:
        try:
            conn.execute("BEGIN")
            # Inits and opens that race wait here; the loser finds the work done.
            conn.execute("SELECT pg_advisory_xact_lock(?)", (APPLICATION_ID,))
            version = schema_version(conn)
            app = _application(conn)
            if version > len(known):
                raise TrackerSchema(f"{where} is at schema version {version}; this tool knows {len(known)}")
            if version > 0 and app != APPLICATION_ID:
                raise TrackerSchema(f"{where} is a PostgreSQL database, but not an alpha tracker")
            if version == 0 and _other_tables(conn):
                raise TrackerSchema(f"{where} is a PostgreSQL database with tables, but not an alpha tracker")
            if version >= m.version:
                conn.execute("ROLLBACK")
                continue
            conn.script(m.sql)
            conn.execute(_MIGRATIONS_TABLE)
            conn.execute(
                "INSERT INTO schema_migrations (version, name, sql_blake3) VALUES (?, ?, ?)",
                (m.version, m.name, m.digest),
            )
            if m.version >= JOURNAL_VERSION:
                _journal_migration(conn, m)
            conn.execute("COMMIT")
        except psycopg.Error as exc:
            conn.rollback()
            raise TrackerSchema(f"{where}: migration {m.version} ({m.name}) failed: {exc}") from exc
        except BaseException:
            conn.rollback()
            raise
    return len(known)


def schema_fingerprint(conn: PgConnection) -> str:
    """BLAKE3 of every tracker trigger's and function's catalog row identity (oid, xmin, enabled state).

    PostgreSQL's stand-in for SQLite's schema cookie: dropping and re-creating a
    trigger word for word, disabling and re-enabling it, or replacing a function
    with its own text each leave a new oid or row version, so the fingerprint the
    journal recorded after the last migration no longer matches.
    """
    from blake3 import blake3

    rows = conn.execute(
        "SELECT 'trigger', t.tgname, t.oid::text, t.xmin::text, t.tgenabled::text FROM pg_trigger t"
        " JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE NOT t.tgisinternal AND n.nspname = current_schema()"
        " UNION ALL SELECT 'function', p.proname, p.oid::text, p.xmin::text, '' FROM pg_proc p"
        " JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = current_schema()"
        " ORDER BY 1, 2, 3"
    ).fetchall()
    return blake3("\n".join(" ".join(r) for r in rows).encode("utf-8")).hexdigest()


def _journal_migration(conn: PgConnection, m: Migration) -> None:
    """The migration's journal entry: what was applied, the schema fingerprint after it, and every row."""
    args: dict[str, object] = {"version": m.version, "name": m.name, "sql_blake3": m.digest}
    if conn.execute("SELECT 1 FROM journal LIMIT 1").fetchone() is None:
        args["tracker_id"] = journal.new_tracker_id()
    args["pg_schema"] = schema_fingerprint(conn)
    journal.append(conn, "schema.migrate", args, journal.snapshot(conn, m.version), snapshot_of_all=True)


def vacuum(conn: PgConnection) -> int:
    """``VACUUM`` (outside a transaction); PostgreSQL's schema is unchanged by it, so nothing is journalled."""
    import psycopg

    try:
        conn.execute("VACUUM")
    except psycopg.Error as exc:
        raise from_db_error(exc, "vacuum") from exc
    return 0


def _check_version(conn: PgConnection) -> None:
    known = len(migrations())
    version = schema_version(conn)
    where = redact(conn.url)
    if version > known:
        raise TrackerSchema(f"{where} is at schema version {version}; this tool knows {known}")
    if version > 0 and _application(conn) != APPLICATION_ID:
        raise TrackerSchema(f"{where} is a PostgreSQL database, but not an alpha tracker")


def require_psycopg() -> None:
    """Refuse as ``tracker-database``, saying how to install the ``postgres`` extra, when psycopg is not installed."""
    try:
        import psycopg  # noqa: F401
    except ImportError as exc:
        from observe.util.install import install_hint

        raise TrackerDatabase(
            f"a postgresql:// tracker needs psycopg, which is not installed: {install_hint('postgres')}"
        ) from exc


def init(url: str, *, target: int | None = None, signer: Signer | None = None) -> PgConnection:
    """Create (or bring up to date) the tracker in the database at ``url``.

    The database itself is created when it does not exist and the server lets this user create it.
    """
    require_psycopg()
    conn = _open(url, create=True, signer=signer)
    try:
        _check_version(conn)
        _migrate(conn, target)
    except BaseException:
        conn.close()
        raise
    return conn


def connect(url: str, *, signer: Signer | None = None) -> PgConnection:
    """Open an existing tracker (migrating it forward if needed); ``tracker-missing`` if there is none."""
    require_psycopg()
    import psycopg

    conn = _open(url, signer=signer)
    try:
        version = schema_version(conn)
        if version == 0:
            what = "has tables, but no tracker" if _other_tables(conn) else "holds no tracker"
            raise TrackerMissing(
                f"no tracker at {redact(url)}: the database {what} (create one with: alpha tracker --db URL init)"
            )
        _check_version(conn)
        if version != len(migrations()):
            _migrate(conn)
    except psycopg.Error as exc:
        conn.close()
        raise TrackerSchema(f"{redact(url)} is not a tracker database: {exc}") from exc
    except BaseException:
        conn.close()
        raise
    return conn


@contextmanager
def transaction(conn: PgConnection, context: str = "") -> Iterator[PgConnection]:
    """``BEGIN`` and the tracker's write lock ... ``COMMIT``; a database error rolls back and becomes its refusal."""
    import psycopg

    try:
        conn.execute("BEGIN")
        conn.execute("SELECT tracker_write_lock()")
    except psycopg.Error as exc:
        conn.rollback()
        raise from_db_error(exc, context) from exc
    try:
        yield conn
    except psycopg.Error as exc:
        conn.rollback()
        raise from_db_error(exc, context) from exc
    except BaseException:
        conn.rollback()
        raise
    try:
        conn.execute("COMMIT")
    except psycopg.Error as exc:  # pragma: no cover - e.g. the server went away at commit
        conn.rollback()
        raise from_db_error(exc, context) from exc


# -- the rules in the catalog (for audit) ------------------------------------------------------

_STATEMENT = re.compile(
    r"^(?:CREATE\s+TRIGGER\s+(?P<trigger>\w+)\s.*?\bON\s+(?P<on>\w+)\s.*?;"
    r"|CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+(?P<function>\w+)\s*\(.*?\bAS\s+\$\$(?P<body>.*?)\$\$\s*;"
    r"|DROP\s+TRIGGER\s+(?:IF\s+EXISTS\s+)?(?P<drop_trigger>\w+)\s+ON\s+\w+\s*;"
    r"|DROP\s+FUNCTION\s+(?:IF\s+EXISTS\s+)?(?P<drop_function>\w+)\s*\([^)]*\)\s*;"
    r"|CREATE\s+TABLE\s+(?P<table>\w+)"
    r"|DROP\s+TABLE\s+(?:IF\s+EXISTS\s+)?(?P<drop_tables>[\w\s,]+?)(?:\s+CASCADE)?\s*;"
    r"|ALTER\s+TABLE\s+(?P<renamed>\w+)\s+RENAME\s+TO\s+(?P<to>\w+)\s*;)",
    re.DOTALL | re.IGNORECASE | re.MULTILINE,
)
_SCHEMA_PREFIX = re.compile(r"\bON\s+\w+\.")


def _normal(text: str) -> str:
    return " ".join(_SCHEMA_PREFIX.sub("ON ", text).replace(";", " ").split())


@dataclass(frozen=True)
class Expected:
    """The rule objects the PostgreSQL migrations leave: trigger definitions, function bodies, tables."""

    triggers: dict[str, str]
    functions: dict[str, str]
    tables: tuple[str, ...]


@functools.lru_cache(maxsize=1)
def expected_objects() -> Expected:
    """Replays the migrations' CREATE and DROP statements, in order (each CREATE TRIGGER on one line,
    after any rename of its table; see the header of migrations_pg/0001_initial.sql)."""
    triggers: dict[str, tuple[str, str]] = {}
    functions: dict[str, str] = {}
    tables: list[str] = []
    for m in migrations():
        for match in _STATEMENT.finditer(m.sql):
            g = match.groupdict()
            if g["trigger"]:
                triggers[g["trigger"]] = (g["on"], _normal(match.group(0)))
            elif g["function"]:
                functions[g["function"]] = g["body"]
            elif g["drop_trigger"]:
                triggers.pop(g["drop_trigger"], None)
            elif g["drop_function"]:
                functions.pop(g["drop_function"], None)
            elif g["table"]:
                tables.append(g["table"])
            elif g["drop_tables"]:
                gone = {t.strip() for t in g["drop_tables"].split(",")}
                tables = [t for t in tables if t not in gone]
                triggers = {k: v for k, v in triggers.items() if v[0] not in gone}
            elif g["renamed"]:
                tables = [g["to"] if t == g["renamed"] else t for t in tables]
    return Expected({k: v[1] for k, v in triggers.items()}, functions, (*tables, "schema_migrations"))


def catalog_problems(conn: PgConnection) -> list[str]:
    """What differs from the shipped rules: triggers missing, altered, disabled or added; functions altered;
    query-rewrite rules on tracker tables (which could bypass triggers). Empty when every rule is in force."""
    want = expected_objects()
    problems: list[str] = []
    present = {
        r[0]: (r[1], r[2], r[3])
        for r in conn.execute(
            "SELECT t.tgname, pg_get_triggerdef(t.oid), t.tgenabled, c.relname FROM pg_trigger t"
            " JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE NOT t.tgisinternal AND n.nspname = current_schema()"
        )
    }
    for name, definition in want.triggers.items():
        if name not in present:
            problems.append(f"trigger {name} is missing: its rule is no longer enforced")
            continue
        text, enabled, _ = present[name]
        if _normal(text) != definition:
            problems.append(f"trigger {name} was altered")
        if enabled != "O":
            problems.append(f"trigger {name} is disabled ({enabled}): its rule is no longer enforced")
    for name in sorted(present):
        if name not in want.triggers:
            problems.append(f"trigger {name} is not one of the tracker's")
    bodies: dict[str, list[str]] = {}
    for r in conn.execute(
        "SELECT p.proname, p.prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
        " WHERE n.nspname = current_schema()"
    ):
        bodies.setdefault(r[0], []).append(r[1])
    for name, body in want.functions.items():
        if name not in bodies:
            problems.append(f"function {name} is missing: its rule is no longer enforced")
        elif bodies[name] != [body]:
            problems.append(f"function {name} was altered")
    tables = [
        r[0]
        for r in conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p', 'v', 'm', 'f') ORDER BY 1"
        )
    ]
    problems.extend(f"table {name} is missing" for name in want.tables if name not in tables)
    problems.extend(f"table {name} is not one of the tracker's" for name in tables if name not in want.tables)
    for r in conn.execute(
        "SELECT r.rulename, c.relname FROM pg_rewrite r JOIN pg_class c ON c.oid = r.ev_class"
        " JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = current_schema() AND r.rulename <> '_RETURN' ORDER BY 2, 1"
    ):
        problems.append(f"rule {r[0]} on {r[1]} is not one of the tracker's: it can rewrite writes past the triggers")
    return problems


def schema_problems(conn: PgConnection, journalled_fingerprint: str | None) -> list[str]:
    """Audit's schema check on PostgreSQL: :func:`catalog_problems`, the fingerprint the journal
    recorded after the last migration, and the record of applied migrations."""
    problems = catalog_problems(conn)
    if journalled_fingerprint is not None and schema_fingerprint(conn) != journalled_fingerprint:
        problems.append(
            "the schema was changed outside the tool (the triggers' and functions' catalog rows are not the ones"
            " the last migration left): a trigger or function dropped, re-created, replaced, disabled or added"
        )
    return problems + migration_record_problems(conn, migrations())

"""SQL over many streams: DuckDB scanning the verified events as Arrow.

``run_query(sql, paths)`` verifies every stream (``aos.verify``);
``run_index_query(sql, store)`` takes the streams a store's evidence index
lists, verified when they entered it (``observe.query.indexed``). Either gives
DuckDB three tables (docs/QUERY.md lists their columns):

- ``events``: one row per event of every stream that joined, with its
  ``stream_id``, typed convenience columns (``time``, ``name``, ``status``,
  ``exit_code``, ``duration_ns``), ``attrs`` as DuckDB ``JSON`` and the columns
  of the stream's sealed verdict (``gate``, ``verdict``, ``scope``);
- ``streams``: one row per stream that joined (path, id, integrity, verdict,
  signer, first and last time, host, labels, argv);
- ``checks``: one row per check of each sealed verdict.

``events`` is an Arrow ``RecordBatchReader`` that hands DuckDB one batch at a
time: a small stream's batches were decoded during verification from the bytes
verified in-process (up to ``observe.query.sources.CACHE_BUDGET`` in all); any other stream is re-read one
message at a time through a hash that must end equal to the verified file's.
Memory stays bounded by the largest stream's file (verification holds it),
the small streams' budget and DuckDB's own state for the query, never by the
sum of the streams. A reader is scanned once: DuckDB materialises a CTE that
a query names twice.

Streams are untrusted: their values reach DuckDB only as Arrow data, never in
SQL text. Damaged or unsealed streams are skipped (and said so) unless
``include_damaged``; two files claiming one stream id are skipped, not merged
(an identical copy is skipped as a copy). After the tables are registered,
DuckDB's file system and extension loading are switched off and the
configuration locked, with no temp directory (DuckDB's default, ``./.tmp``,
stays open to SQL otherwise) and no allowed directory or path (checked), so a
query cannot read or write files.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from observe.query.sources import Skipped, expand_paths, open_sources
from observe.query.tables import (
    CHECK_COLUMNS,
    EVENT_COLUMNS,
    STREAM_COLUMNS,
    EventScan,
    Source,
    checks_table,
    streams_table,
)
from observe.refusals import QuerySQL

if TYPE_CHECKING:
    from aos.signing import Verifier

__all__ = [
    "CHECK_COLUMNS",
    "EVENT_COLUMNS",
    "STREAM_COLUMNS",
    "QueryResult",
    "Skipped",
    "Source",
    "expand_paths",
    "open_sources",
    "query_sources",
    "run_index_query",
    "run_query",
]


@dataclass
class QueryResult:
    """A query's columns and rows, and the paths that were skipped."""

    columns: list[str]
    rows: list[tuple[Any, ...]]
    skipped: list[Skipped] = field(default_factory=list)
    streams: int = 0
    #: the streams verified again by this query (``run_index_query``: a file that changed, or ``reverify``)
    reverified: list[str] = field(default_factory=list)
    #: ``run_index_query``: the index rows not trusted (their stream's tail refused them), each with the refusal
    mismatched: list[Skipped] = field(default_factory=list)


# -- the query ------------------------------------------------------------------------


def duckdb_module() -> Any:
    """DuckDB, imported; ``query-sql`` (the query cannot run here) when the ``query`` extra is not installed.

    A process that cannot start a thread is refused before DuckDB starts its own (observe.util.threads)."""
    from observe.util.threads import require_a_thread

    require_a_thread()
    try:
        import duckdb
    except ImportError as exc:
        from observe.util.install import install_hint

        raise QuerySQL(f"queries need DuckDB, which is not installed: {install_hint('query')}") from exc
    return duckdb


def _connect(sources: Sequence[Source]) -> tuple[Any, EventScan]:
    """A DuckDB connection holding the three tables, with file access switched off and locked."""
    duckdb = duckdb_module()

    # No temp directory: DuckDB's default (./.tmp) stays readable and writable by SQL even with
    # external access off, so a query could read or overwrite the files there.
    con = duckdb.connect(":memory:", config={"python_enable_replacements": False, "temp_directory": ""})
    con.execute("SET enable_progress_bar = false")  # DuckDB would draw it on stdout, inside --json or --csv
    con.execute("LOAD json")
    scan = EventScan(sources)
    con.register("events", scan.reader())
    con.register("streams", streams_table(sources))
    con.register("checks", checks_table(sources))
    con.execute("SET enable_external_access = false")
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET autoload_known_extensions = false")
    con.execute("SET lock_configuration = true")
    _require_confined(con)
    return con, scan


def _require_confined(con: Any) -> None:
    """``query-sql`` unless the locked connection may reach no file: no temp directory, no allowed paths."""
    confined = con.execute(
        "SELECT current_setting('enable_external_access'), current_setting('temp_directory'), "
        "current_setting('allowed_directories'), current_setting('allowed_paths')"
    ).fetchone()
    if confined is None or tuple(confined) != (False, "", [], []):
        con.close()
        raise QuerySQL(f"DuckDB could not be confined (external access, temp directory, allowed paths: {confined})")


def _sql_refusal(exc: Exception) -> QuerySQL:
    text = " ".join(str(exc).split())
    if "already been consumed" in text:
        text = (
            "the query scans `events` more than once (a self-join or a second subquery); "
            "name it once in a CTE (WITH e AS MATERIALIZED (SELECT ... FROM events) ...): " + text
        )
    elif type(exc).__name__ == "PermissionException":
        text = "queries are read-only and cannot touch files: " + text
    return QuerySQL(text)


def query_sources(sql: str, sources: Sequence[Source]) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Run ``sql`` over streams already verified (``open_sources``): its columns and rows.

    Raises ``query-sql`` for SQL that DuckDB refuses (syntax, unknown names,
    types, a file access, a runtime error), and the stream's refusal when a
    stream changes under the query.
    """
    duckdb = duckdb_module()

    con, scan = _connect(sources)
    try:
        cursor = con.execute(sql)
        columns = [d[0] for d in cursor.description] if cursor.description else []
        rows = cursor.fetchall() if cursor.description else []
    except duckdb.Error as exc:
        if scan.failure is not None:
            raise scan.failure from exc
        raise _sql_refusal(exc) from exc
    finally:
        con.close()
    return columns, rows


def run_query(
    sql: str,
    patterns: Iterable[str],
    *,
    include_damaged: bool = False,
    key: Verifier | None = None,
) -> QueryResult:
    """Verify the streams that ``patterns`` name and run ``sql`` over them (``query_sources``).

    Skipped paths (and why) are in the result.
    """
    duckdb_module()  # before verifying what may be thousands of streams
    paths, skipped = expand_paths(patterns)
    sources, more = open_sources(paths, include_damaged=include_damaged, key=key)
    skipped.extend(more)
    columns, rows = query_sources(sql, sources)
    return QueryResult(columns=columns, rows=rows, skipped=skipped, streams=len(sources))


def run_index_query(
    sql: str,
    store: str,
    *,
    reverify: bool = False,
    include_damaged: bool = False,
    key: Verifier | None = None,
) -> QueryResult:
    """Run ``sql`` over the streams a folder store's evidence index lists (``observe.query.indexed``).

    Each row is checked against its stream's tail (``check_row``); the
    ``streams`` table comes from the rows, its verdict and the ``checks``
    table from the sealed verdicts. Only the streams whose file no longer
    matches its row, whose row the tail refuses (``mismatched``, with why), or
    all with ``reverify``, are verified again, listed in ``reverified``.
    """
    from observe.query.indexed import indexed_sources

    duckdb_module()
    got = indexed_sources(store, reverify=reverify, key=key, include_damaged=include_damaged)
    columns, rows = query_sources(sql, got.sources)
    return QueryResult(
        columns=columns,
        rows=rows,
        skipped=got.skipped,
        streams=len(got.sources),
        reverified=got.reverified,
        mismatched=got.mismatched,
    )

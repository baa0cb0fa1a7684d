"""``alpha observe query SQL STREAM_OR_GLOB...``: SQL (DuckDB) over the events of many streams.

The library is ``observe.query.run``; this module only parses options and prints
the result: an aligned table (default), ``--json`` or ``--csv``.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
import sys
from collections.abc import Sequence
from typing import Any

import click

from observe.cli.options import Exit, example, public_key, public_key_option, reports_refusals

__all__ = ["COMMANDS", "json_value", "query_command", "table_text"]

#: Widest cell of the text table; longer values end in an ellipsis (use --json or --csv for all of it).
CELL_WIDTH = 80


def json_value(value: Any) -> Any:
    """A DuckDB value as JSON: bytes as ``{"bytes_b64": B}``, times as ISO 8601, odd numbers as text."""
    import decimal

    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return {"bytes_b64": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else str(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_value(v) for v in value]
    return str(value)


def _plain(value: Any) -> str:
    """A value as one line of text (CSV and table): bytes decoded, undecodable ones as ``\\xNN``."""
    if value is None:
        return ""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "backslashreplace")
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dict | list | tuple):
        return json.dumps(json_value(value), ensure_ascii=False)
    return str(value)


def _safe(text: str) -> str:
    """Control characters (a stream's own ANSI escapes included) shown as ``\\xNN``, never sent to the terminal."""
    return "".join(f"\\x{ord(c):02x}" if ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 else c for c in text)


def _cell(value: Any) -> str:
    text = "null" if value is None else _safe(_plain(value))
    return text if len(text) <= CELL_WIDTH else text[: CELL_WIDTH - 1] + "\u2026"


def table_text(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """An aligned text table: a header, a rule, one line a row (numbers right-aligned)."""
    import decimal

    cells = [[_cell(v) for v in row] for row in rows]
    heads = [_safe(c) for c in columns]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(heads)]
    numeric = [
        bool(rows) and all(isinstance(r[i], int | float | decimal.Decimal) or r[i] is None for r in rows)
        for i in range(len(columns))
    ]

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True)]
        return "  ".join(parts).rstrip()

    out = [line(heads), "  ".join("-" * w for w in widths)]
    out.extend(line(r) for r in cells)
    return "\n".join(out) + "\n"


@example(
    "alpha observe query \"SELECT name, count(*) AS failed FROM checks WHERE status = 'fail' "
    "AND time > now() - INTERVAL 7 DAY GROUP BY name ORDER BY failed DESC\" 'aos-streams/*.aos'",
    'alpha observe query "SELECT gate AS lane, max(duration_ns) / 1e9 AS max_step_s FROM events '
    "WHERE kind = 'step.end' GROUP BY lane\" aos-streams/ --json",
    'alpha observe query "SELECT verdict, count(*) FROM streams GROUP BY verdict" --store aos-store',
)
@click.command("query")
@click.argument("sql")
@click.argument("streams", nargs=-1, metavar="[STREAM_OR_GLOB]...")
@click.option(
    "--store",
    metavar="STORE",
    help="Query the streams of this store's evidence index (written by push; a folder or s3://) instead of files named "
    "here.",
)
@click.option(
    "--reverify",
    is_flag=True,
    help="With --store: verify every stream again, not only those whose file no longer matches its index row.",
)
@click.option(
    "--include-damaged",
    is_flag=True,
    help="Also query streams that do not verify (unsealed, truncated, ...): the events before the damage.",
)
@public_key_option("Only streams sealed and signed by this Ed25519 public key join; others are skipped.")
@click.option("--json", "fmt", flag_value="json", help='One JSON document: {"columns", "rows", "skipped"}.')
@click.option("--csv", "fmt", flag_value="csv", help="CSV with a header line (skipped streams on stderr).")
@reports_refusals(by_name={"query-sql": Exit.USAGE})
def query_command(
    sql: str,
    streams: tuple[str, ...],
    store: str | None,
    reverify: bool,
    include_damaged: bool,
    key: str | None,
    fmt: str | None,
) -> None:
    """Run SQL (DuckDB) over the events of every stream given, as one table.

    Tables: `events` (one row per event, with stream_id, typed name, status,
    exit_code, duration_ns and time, attrs as JSON, and the gate, verdict and
    scope of the stream's sealed verdict), `streams` (one row per stream:
    path, integrity, verdict, signer, first and last time) and `checks` (one
    row per check of each sealed verdict); docs/QUERY.md lists every column.

    Each STREAM_OR_GLOB is a stream, a folder (its *.aos, recursively) or a
    quoted glob; every stream is verified first. With --store instead, the
    streams are those the store's evidence index lists (written by push;
    docs/FORMAT.md section 8), verified when they were pushed; an s3://
    store's are first copied into a mirror in the user's cache. Each
    row is checked against its stream's tail (the verdict's batch through
    the seal; with --key, the seal's signature): a row that does not state
    what its stream seals is named (`index-row`, the JSON's "mismatched")
    and the stream verified again, as is a file whose size no longer
    matches its row, or every stream with --reverify (the JSON's
    "reverified" lists them); a file changed before its tail stops the
    query when its events are read. A stream that
    does not verify, or whose stream id another file claims, is skipped and
    said so (on stderr, or in the JSON's "skipped"). Queries are read-only: they cannot read or
    write files. Exit 0 ran; 1 a stream changed under the query; 2 usage, or
    SQL that DuckDB refuses (`refused: query-sql: ...`).
    """
    from observe.util.allocator import keep_freed_memory

    keep_freed_memory()  # big buffers one after another: reuse their pages

    from observe.query.run import run_index_query, run_query

    if (store is None) == (not streams):
        raise click.UsageError("give either STREAM_OR_GLOB... or --store STORE")
    if reverify and store is None:
        raise click.UsageError("--reverify goes with --store (streams named here are always verified)")
    if store is not None:
        result = run_index_query(sql, store, reverify=reverify, include_damaged=include_damaged, key=public_key(key))
    else:
        result = run_query(sql, streams, include_damaged=include_damaged, key=public_key(key))
    if fmt == "json":
        doc: dict[str, Any] = {
            "columns": result.columns,
            "rows": [[json_value(v) for v in row] for row in result.rows],
            "skipped": [s.to_json() for s in result.skipped],
        }
        if store is not None:
            doc["reverified"] = result.reverified
            doc["mismatched"] = [m.to_json() for m in result.mismatched]
        sys.stdout.write(json.dumps(doc, ensure_ascii=False) + "\n")
        return
    for m in result.mismatched:
        click.echo(
            f"alpha observe query: index row not trusted, verified again: {_safe(m.path)}: {_safe(m.refusal)}", err=True
        )
    for s in result.skipped:
        click.echo(f"alpha observe query: skipped {_safe(s.path)}: {_safe(s.refusal)}", err=True)
    if fmt == "csv":
        import csv

        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(result.columns)
        writer.writerows([_plain(v) for v in row] for row in result.rows)
        return
    sys.stdout.write(table_text(result.columns, result.rows))


COMMANDS: list[click.Command] = [query_command]

"""The evidence index: one Parquet row per stream verified where it entered the evidence.

A stream is verified once, when it enters a store (``push``). What was
verified is written as an index row beside the streams, so readers trust the
row and re-verify only a file that no longer matches it (docs/FORMAT.md
section 8 is the layout and every column):

    STORE/index/v2/streams/day=YYYY-MM-DD/<indexed ns>-<random>.parquet
    STORE/index/v2/checks/day=YYYY-MM-DD/<same name>.parquet

``day`` is the UTC day of the stream's first event (Hive partitioning: DuckDB,
DataFusion, Spark, Trino and Athena read it as a column). Every append writes
new, uniquely named files and never rewrites one (a folder: an atomic rename
of a complete file; S3: one PUT of a complete object), so two writers at once
never lose a row. Readers union the files; a stream pushed twice has a row per
push and readers keep one per file digest (the latest). A day of more than
``COMPACT_AT`` files is compacted after an append: its rows merged into one
new file, and only then the files merged removed, so readers read few files.

A row is not signed: whoever writes the store can edit it. So a reader trusts
a row only after ``check_row``: the stream's tail (the batch holding the
verdict, through the seal) is read and chained from the row's ``tail_head``
to the seal whose hash is the row's ``head`` (and, with a key, whose
signature is that key's), and the row's id, signer, verdict, gate, scope and
checks must be the sealed ones (``index-row`` otherwise). docs/TRUST.md says
what such a row establishes and what it does not.

Refusals: ``stream-digest`` (the file changed after it was verified: nothing
is indexed), ``index-damaged`` (an index file that is not this schema's
Parquet), ``index-row`` (a row that does not state what its stream seals),
the store's own (``store-unreachable``).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aos import kinds
from observe.refusals import IndexDamaged, IndexRow, StreamDigest

if TYPE_CHECKING:
    import pyarrow as pa

    from aos.signing import Verifier
    from aos.verify import SealedTail, Verification

__all__ = [
    "CHECK_COLUMNS",
    "COMPACT_AT",
    "INDEX_VERSION",
    "STREAM_COLUMNS",
    "Appender",
    "IndexEntry",
    "check_row",
    "check_schema",
    "compact_day",
    "describe",
    "index_prefix",
    "read_index",
    "read_streams",
    "remember",
    "stream_schema",
    "write_entries",
]

#: The index layout's version: in every file's path (``index/v<N>/``) and its Parquet metadata.
INDEX_VERSION = 2
#: The Parquet key-value metadata key that holds ``INDEX_VERSION``.
VERSION_KEY = b"aos.index.version"

_FILE = re.compile(r"^day=(\d{4}-\d{2}-\d{2})/(\d+-[0-9a-f]{16})\.parquet$")

#: The columns of ``streams``, in order (docs/FORMAT.md section 8 says what each holds).
STREAM_COLUMNS: tuple[str, ...] = (
    "stream_id",
    "file_blake3",
    "file_size",
    "url",
    "head",
    "tail_offset",
    "tail_head",
    "verdict_seq",
    "events",
    "signed",
    "key_id",
    "gate",
    "verdict",
    "scope",
    "checks",
    "checks_failed",
    "source",
    "devices",
    "host",
    "labels",
    "argv",
    "first_time",
    "last_time",
    "indexed_time",
    "entered_by",
)

#: The columns of ``checks``, in order.
CHECK_COLUMNS: tuple[str, ...] = (
    "stream_id",
    "file_blake3",
    "gate",
    "verdict",
    "scope",
    "time",
    "name",
    "status",
    "reason",
    "evidence",
)


def index_prefix(table: str) -> str:
    """Where a table's files lie in a store: ``index/v2/streams`` or ``index/v2/checks``."""
    return f"index/v{INDEX_VERSION}/{table}"


def stream_schema() -> pa.Schema:
    """The Arrow schema of an index ``streams`` file."""
    import pyarrow as pa

    ts = pa.timestamp("us", tz="UTC")
    device = pa.struct([("uuid", pa.string()), ("name", pa.string()), ("serial", pa.string())])
    return pa.schema(
        [
            ("stream_id", pa.string()),
            ("file_blake3", pa.string()),
            ("file_size", pa.int64()),
            ("url", pa.string()),
            ("head", pa.string()),
            ("tail_offset", pa.int64()),
            ("tail_head", pa.string()),
            ("verdict_seq", pa.int64()),
            ("events", pa.int64()),
            ("signed", pa.bool_()),
            ("key_id", pa.string()),
            ("gate", pa.string()),
            ("verdict", pa.string()),
            ("scope", pa.string()),
            ("checks", pa.int32()),
            ("checks_failed", pa.int32()),
            ("source", pa.string()),
            ("devices", pa.list_(device)),
            ("host", pa.string()),
            ("labels", pa.string()),
            ("argv", pa.string()),
            ("first_time", ts),
            ("last_time", ts),
            ("indexed_time", ts),
            ("entered_by", pa.string()),
        ],
        metadata={VERSION_KEY: str(INDEX_VERSION).encode()},
    )


def check_schema() -> pa.Schema:
    """The Arrow schema of an index ``checks`` file."""
    import pyarrow as pa

    return pa.schema(
        [
            ("stream_id", pa.string()),
            ("file_blake3", pa.string()),
            ("gate", pa.string()),
            ("verdict", pa.string()),
            ("scope", pa.string()),
            ("time", pa.timestamp("us", tz="UTC")),
            ("name", pa.string()),
            ("status", pa.string()),
            ("reason", pa.string()),
            ("evidence", pa.list_(pa.int64())),
        ],
        metadata={VERSION_KEY: str(INDEX_VERSION).encode()},
    )


# -- what a verified stream says -----------------------------------------------------------


@dataclass
class IndexEntry:
    """One stream's index row and its checks' rows (column name to value)."""

    stream: dict[str, Any]
    checks: list[dict[str, Any]]
    #: the seal's wall time, in ns (``last_time`` holds microseconds)
    seal_wall_ns: int | None = None
    #: the sealed verdict's attrs, when the row names one
    verdict: dict[str, Any] | None = None

    @property
    def day(self) -> str:
        """The partition: the UTC day of the stream's first event (of its indexing when it has none)."""
        when = self.stream["first_time"] or self.stream["indexed_time"]
        return str(when.date().isoformat())


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _json(value: Any) -> str | None:
    try:
        return None if value is None else json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (RecursionError, ValueError):  # nested past Python's limit: the value stays in the stream
        return None


def _time(ns: int | None) -> dt.datetime | None:
    if ns is None:
        return None
    return dt.datetime.fromtimestamp(ns // 1000 / 1e6, tz=dt.UTC).replace(microsecond=(ns // 1000) % 1_000_000)


def _devices(observed: list[dict[str, Any]]) -> list[dict[str, str | None]]:
    """The GPUs the recorder observed (uuid, name, serial), each once, in the order first seen."""
    seen: dict[str, dict[str, str | None]] = {}
    for attrs in observed:
        gpus = attrs.get("gpus")
        for gpu in gpus if isinstance(gpus, list) else []:
            if not isinstance(gpu, dict) or not isinstance(gpu.get("uuid"), str):
                continue
            health = gpu.get("health")
            serial = _text(health.get("serial")) if isinstance(health, dict) else None
            known = seen.setdefault(gpu["uuid"], {"uuid": gpu["uuid"], "name": _text(gpu.get("name")), "serial": None})
            known["serial"] = known["serial"] or serial
    return list(seen.values())


def describe(path: str | os.PathLike[str], v: Verification, *, url: str, entered_by: str) -> IndexEntry:
    """The index row of the stream at ``path``, which ``v`` verified; ``stream-digest`` if it changed since.

    The file is read once more (its first event, its ``device.observed``
    events, the seal's time) and hashed as it is read: a file whose bytes are
    no longer the ones verified is refused, never indexed.
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    from blake3 import blake3

    from aos.chain import genesis
    from aos.reader import StreamFile, batch_events
    from observe.query.tables import byte_text

    first: Any = None
    last_ns: int | None = None
    observed: list[dict[str, Any]] = []
    # the tail a reader checks (aos.verify.verify_tail): the batch holding the verdict, or the seal's
    tail_offset, tail_head = int(v.seal["bytes"]), str(v.seal["head"])
    with StreamFile(path) as f:
        before = genesis(v.stream_id)
        size = len(f.view)
        got = blake3(f.view, max_threads=blake3.AUTO).hexdigest()
        if got != v.file_blake3:
            raise StreamDigest(f"{os.fspath(path)}: the file changed after it was verified (it hashes to {got})")
        for raw in f.batches():
            batch = raw.batch
            if batch.num_rows == 0:
                continue
            if first is None:
                first = batch_events(batch.slice(0, 1))[0]
            last_ns = batch.column(1)[batch.num_rows - 1].as_py()
            seqs = batch.column(0)
            if v.verdict_seq is not None and seqs[0].as_py() <= v.verdict_seq <= seqs[batch.num_rows - 1].as_py():
                tail_offset, tail_head = raw.start, before.hex()
            before = batch.column(7)[batch.num_rows - 1].as_py()
            if v.kinds.get(kinds.DEVICE_OBSERVED):
                picked = batch.filter(pc.equal(batch.column(3), pa.scalar(kinds.DEVICE_OBSERVED)))
                observed.extend(e.attrs for e in batch_events(picked) if isinstance(e.attrs, dict))
    opening: dict[str, Any] = {}
    if first is not None and first.kind == kinds.STREAM_OPEN and isinstance(first.attrs, dict):
        opening = first.attrs
    verdict = v.verdict if v.verdicts == 1 and isinstance(v.verdict, dict) else {}
    listed = verdict.get("checks")
    checks = [c for c in listed if isinstance(c, dict)] if isinstance(listed, list) else []
    host = opening.get("host")
    row = {
        "stream_id": v.stream_id,
        "file_blake3": v.file_blake3,
        "file_size": size,
        "url": url,
        "head": v.head,
        "tail_offset": tail_offset,
        "tail_head": tail_head,
        "verdict_seq": v.verdict_seq if verdict else None,
        "events": v.events,
        "signed": v.signed,
        "key_id": _text(v.key_id),
        "gate": _text(verdict.get("gate")),
        "verdict": _text(verdict.get("verdict")),
        "scope": _text(verdict.get("scope")),
        "checks": len(checks),
        "checks_failed": sum(1 for c in checks if c.get("status") == "fail"),
        "source": _json(opening["source"]) if "source" in opening else None,
        "devices": _devices(observed),
        "host": host if isinstance(host, str) else _json(host),
        "labels": _json(opening.get("labels")),
        "argv": _json(opening.get("argv")),
        "first_time": _time(first.wall_ns if first is not None else None),
        "last_time": _time(last_ns),
        "indexed_time": _time(time.time_ns()),
        "entered_by": entered_by,
    }
    check_rows = [
        {
            "stream_id": v.stream_id,
            "file_blake3": v.file_blake3,
            "gate": row["gate"],
            "verdict": row["verdict"],
            "scope": row["scope"],
            "time": row["last_time"],
            "name": byte_text(c.get("name")),
            "status": byte_text(c.get("status")),
            "reason": byte_text(c.get("reason")),
            "evidence": _evidence(c.get("evidence")),
        }
        for c in checks
    ]
    return IndexEntry(row, check_rows, last_ns, verdict or None)


def remember(store: Any, verified: list[tuple[IndexEntry, Verification]]) -> None:
    """Note in this user's memo (``observe.query.checked``) that each entry's row was checked: its stream was
    just verified whole, so a query here need not read its tail. Only for a folder store holding the file."""
    from observe.query.checked import Memo, Sealed, fingerprint

    root = store.local_path("")
    if root is None:
        return
    memo = Memo(root)
    for entry, v in verified:
        path = store.local_path(f"{entry.stream['file_blake3']}.aos")
        if path is None or entry.seal_wall_ns is None:
            continue
        try:
            st = os.stat(path)
        except OSError:
            continue
        sealed = Sealed(entry.verdict, entry.seal_wall_ns, int(v.seal["bytes"]), str(v.seal["file_blake3"]))
        for key_id in {None, v.key_id if v.signature_checked else None}:
            memo.add(fingerprint(entry.stream, st, key_id), sealed)
    memo.save()


def _evidence(value: Any) -> list[int]:
    """The seqs a check cites (the int64 ones)."""
    items = value if isinstance(value, list) else []
    return [e for e in items if type(e) is int and 0 <= e < (1 << 63)]


# -- writing: new files only ---------------------------------------------------------------


def _parquet(rows: list[dict[str, Any]], schema: pa.Schema) -> bytes:
    import pyarrow as pa

    return _parquet_table(pa.Table.from_pylist(rows, schema=schema))


def _parquet_table(table: pa.Table) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    return bytes(sink.getvalue().to_pybytes())


def _new_name(day: str) -> str:
    return f"day={day}/{time.time_ns()}-{secrets.token_hex(8)}.parquet"


def write_entries(store: Any, entries: list[IndexEntry]) -> list[str]:
    """Append ``entries`` to the index of ``store`` (an ``observe.store`` store): new files, one per day and table.

    Returns the names written. The checks file of a day is written before its
    streams file, so a reader that sees a stream's row also sees its checks.
    A day that then holds more than ``COMPACT_AT`` streams files is compacted
    (``compact_day``).
    """
    by_day: dict[str, list[IndexEntry]] = {}
    for e in entries:
        by_day.setdefault(e.day, []).append(e)
    written: list[str] = []
    for day, group in sorted(by_day.items()):
        name = _new_name(day)
        checks = [c for e in group for c in e.checks]
        if checks:
            store.put_bytes(f"{index_prefix('checks')}/{name}", _parquet(checks, check_schema()))
            written.append(f"{index_prefix('checks')}/{name}")
        store.put_bytes(f"{index_prefix('streams')}/{name}", _parquet([e.stream for e in group], stream_schema()))
        written.append(f"{index_prefix('streams')}/{name}")
        if len(store.list_names(f"{index_prefix('streams')}/day={day}/")) > COMPACT_AT:
            compact_day(store, day)
    return written


#: A day of more streams files than this is compacted into one file after an append.
COMPACT_AT = 8
#: How many index files a reader reads at once.
READERS = 8


def compact_day(store: Any, day: str) -> bool:
    """Merge one day's files into one new file per table (their rows, unchanged), then remove the files merged.

    Rows are never lost: a file is removed only after a newer file holding its
    rows was written, and a file written meanwhile (another writer) is not
    among those merged. The checks files merged are those of the streams files
    merged (same names), so an append whose streams file is not written yet
    keeps its checks file. Two compactions at once may both write a merged
    file (readers keep one row per digest); one that finds a file already
    removed (another compaction took it) stops, removing nothing. Returns
    whether it compacted.
    """
    import pyarrow as pa

    from aos.refusals import StreamMissing

    def listed(table: str) -> dict[str, str]:
        prefix = f"{index_prefix(table)}/day={day}/"
        return {n[len(prefix) :]: n for n in store.list_names(prefix) if _FILE.match(n[len(index_prefix(table)) + 1 :])}

    streams = listed("streams")
    if len(streams) < 2:
        return False
    checks = {tail: n for tail, n in listed("checks").items() if tail in streams}
    tail = _new_name(day).partition("/")[2]

    def read(names: dict[str, str], table: str, schema: pa.Schema) -> pa.Table:
        parts = [_read_file(store, n, table, schema) for n in names.values()]
        parts = [
            p.append_column("_file", pa.array([t] * p.num_rows, pa.string())) for p, t in zip(parts, names, strict=True)
        ]
        return pa.concat_tables(parts) if parts else schema.append(pa.field("_file", pa.string())).empty_table()

    try:
        merged_checks = read(checks, "checks", check_schema())
        merged_streams = read(streams, "streams", stream_schema())
    except StreamMissing:
        return False
    # one row per digest, as readers keep it: files merged by two compactions at once are merged again
    merged_streams, merged_checks = _latest(merged_streams, merged_checks)
    if merged_checks.num_rows:
        rows = merged_checks.drop_columns(["_file"]).replace_schema_metadata(check_schema().metadata)
        store.put_bytes(f"{index_prefix('checks')}/day={day}/{tail}", _parquet_table(rows))
    rows = merged_streams.drop_columns(["_file"]).replace_schema_metadata(stream_schema().metadata)
    store.put_bytes(f"{index_prefix('streams')}/day={day}/{tail}", _parquet_table(rows))
    for n in [*streams.values(), *checks.values()]:  # the streams files first: no row is left without its checks
        store.delete(n)
    return True


# -- reading: the union of the files -------------------------------------------------------


def _files(store: Any, table: str) -> Iterator[tuple[str, str]]:
    """``(day, relative name)`` of each index file of ``table`` in ``store``, in name order."""
    prefix = index_prefix(table) + "/"
    for name in sorted(store.list_names(prefix)):
        rest = name[len(prefix) :]
        match = _FILE.match(rest)
        if match is not None:
            yield match.group(1), name


def _read_file(store: Any, name: str, table: str, schema: pa.Schema) -> pa.Table:
    """One index file, checked to be this version's ``table`` (``index-damaged``); ``stream-missing`` if gone."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = store.get_bytes(name)
    try:
        got = pq.ParquetFile(pa.BufferReader(data)).read()
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise IndexDamaged(f"{store.url(name)}: not a Parquet file: {exc}") from exc
    meta = got.schema.metadata or {}
    if meta.get(VERSION_KEY) != str(INDEX_VERSION).encode() or not got.schema.remove_metadata().equals(
        schema.remove_metadata()
    ):
        raise IndexDamaged(f"{store.url(name)}: not an index v{INDEX_VERSION} {table} file")
    return got.replace_schema_metadata(None)


def _read_table(store: Any, table: str, schema: pa.Schema) -> pa.Table:
    """The union of a table's files, with ``day`` and the file's own name (``_file``, shared by the
    streams and checks files of one append).

    A file removed between the listing and its reading (a compaction merged
    it into a newer file) makes the reader list again, up to a few times.
    """
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow as pa

    from aos.refusals import StreamMissing

    def one(listed: tuple[str, str]) -> pa.Table:
        day, name = listed
        got = _read_file(store, name, table, schema)
        got = got.append_column("day", pa.array([day] * got.num_rows, pa.string()))
        return got.append_column("_file", pa.array([name.rpartition("/")[2]] * got.num_rows, pa.string()))

    for attempt in range(5):
        try:
            # Parquet decoding and S3 reads release the GIL: a few files at once
            with ThreadPoolExecutor(READERS) as pool:
                parts = list(pool.map(one, list(_files(store, table))))
        except StreamMissing:
            if attempt == 4:
                raise
            continue
        break
    if not parts:
        empty = schema.remove_metadata().append(pa.field("day", pa.string()))
        return empty.append(pa.field("_file", pa.string())).empty_table()
    return pa.concat_tables(parts)


def read_index(store: Any) -> tuple[pa.Table, pa.Table]:
    """The index of ``store`` (``observe.store.open_store``'s): ``(streams, checks)``, the union of its files
    with a ``day`` column.

    One row per file digest: where a stream was indexed more than once (pushed
    twice), its latest row, and only the checks written with that row.
    """

    streams = _read_table(store, "streams", stream_schema())
    checks = _read_table(store, "checks", check_schema())
    streams, checks = _latest(streams, checks)
    return streams.drop_columns(["_file"]), checks.drop_columns(["_file"])


def read_streams(store: Any) -> pa.Table:
    """The index's ``streams`` rows alone, one per file digest as ``read_index`` keeps them (no checks read)."""
    import pyarrow as pa

    streams = _read_table(store, "streams", stream_schema())
    none = pa.table({"file_blake3": pa.array([], pa.string()), "_file": pa.array([], pa.string())})
    return _latest(streams, none)[0].drop_columns(["_file"])


def _latest(streams: pa.Table, checks: pa.Table) -> tuple[pa.Table, pa.Table]:
    """One row per file digest, the one of the file whose name sorts last (names begin with the time they
    were written), and only the checks of that file; both tables carry ``_file``."""
    import pyarrow as pa

    latest: dict[str, tuple[str, int]] = {}  # digest -> (file, row)
    for i, (digest, name) in enumerate(
        zip(streams.column("file_blake3").to_pylist(), streams.column("_file").to_pylist(), strict=True)
    ):
        if digest not in latest or name > latest[digest][0]:
            latest[digest] = (name, i)
    streams = streams.take(pa.array(sorted(row for _, row in latest.values()), pa.int64()))
    keep = [
        i
        for i, (digest, name) in enumerate(
            zip(checks.column("file_blake3").to_pylist(), checks.column("_file").to_pylist(), strict=True)
        )
        if digest in latest and latest[digest][0] == name
    ]
    return streams, checks.take(pa.array(keep, pa.int64()))


# -- trusting a row: its stream's tail ------------------------------------------------------


def check_row(path: str | os.PathLike[str], row: dict[str, Any], key: Verifier | None = None) -> SealedTail:
    """The sealed tail of the stream at ``path``, checked to be what ``row`` (an index ``streams`` row) states.

    ``aos.verify.verify_tail`` reads the stream from the row's ``tail_offset``
    (only those bytes and the schema): every event there chains from
    ``tail_head`` to the seal, whose hash must be the row's ``head`` (with
    ``key``: the seal and the checkpoints there signed by it). Then the row's
    ``stream_id``, ``events``, ``signed``, ``key_id`` and ``last_time`` must be
    the seal's, and its ``verdict_seq``, ``gate``, ``verdict``, ``scope``,
    ``checks`` and ``checks_failed`` those of the one verdict event in the tail
    (none when the row names none): else ``index-row``, naming the first
    column that differs. A tail that does not verify raises its own refusal.
    """
    from aos.verify import verify_tail

    offset, before = row.get("tail_offset"), row.get("tail_head")
    if type(offset) is not int or not isinstance(before, str):
        raise IndexRow(f"{os.fspath(path)}: the row names no tail (tail_offset, tail_head)")
    tail = verify_tail(path, offset, before, key)

    def differs(column: str, sealed: Any) -> None:
        if row.get(column) != sealed:
            raise IndexRow(f"{os.fspath(path)}: the row's {column} is {row.get(column)!r}, the stream seals {sealed!r}")

    differs("stream_id", tail.stream_id)
    differs("head", tail.head)
    differs("events", tail.events)
    differs("signed", tail.signed)
    differs("key_id", tail.seal.get("key_id"))
    differs("last_time", _time(tail.seal_wall_ns))
    if len(tail.verdicts) > 1:
        raise IndexRow(f"{os.fspath(path)}: the stream's tail holds {len(tail.verdicts)} verdict events")
    sealed = tail.verdicts[0] if tail.verdicts else None
    verdict = sealed.attrs if sealed is not None else {}
    listed = verdict.get("checks")
    checks = [c for c in listed if isinstance(c, dict)] if isinstance(listed, list) else []
    differs("verdict_seq", sealed.seq if sealed is not None else None)
    differs("gate", _text(verdict.get("gate")))
    differs("verdict", _text(verdict.get("verdict")))
    differs("scope", _text(verdict.get("scope")))
    differs("checks", len(checks))
    differs("checks_failed", sum(1 for c in checks if c.get("status") == "fail"))
    return tail


class Appender:
    """Rows of streams verified where they entered the evidence (``attach``, ``tracker import``), appended
    to one store's index: described while each file is there, written together by ``flush``."""

    def __init__(self, store: Any) -> None:
        self.store = store  # an ``observe.store.open_store`` store
        self.pending: list[tuple[IndexEntry, Verification]] = []

    def entered(self, path: os.PathLike[str], v: Verification, url: str, by: str) -> None:
        self.pending.append((describe(path, v, url=url, entered_by=by), v))

    def flush(self) -> None:
        if self.pending:
            write_entries(self.store, [e for e, _ in self.pending])
            remember(self.store, self.pending)
        self.pending = []

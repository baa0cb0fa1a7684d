"""SQL over many streams: DuckDB scanning the verified events as Arrow.

``run_query(sql, paths)`` verifies every stream (``aos.verify``), then gives
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
verified (up to ``CACHE_BUDGET`` in all); any other stream is re-read one
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
configuration locked, so a query cannot read or write files.
"""

from __future__ import annotations

import contextlib
import glob
import io
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aos.refusals import QuerySQL, QueryStreamId, Refusal, StreamMissing, StreamSeal

if TYPE_CHECKING:
    import pyarrow as pa

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
    "run_query",
]

#: The columns of ``events``, in order (docs/QUERY.md says what each holds).
EVENT_COLUMNS: tuple[str, ...] = (
    "stream_id",
    "seq",
    "time",
    "wall_ns",
    "mono_ns",
    "kind",
    "step",
    "name",
    "status",
    "exit_code",
    "duration_ns",
    "attrs",
    "data",
    "gate",
    "verdict",
    "scope",
)

#: The columns of ``streams``, in order.
STREAM_COLUMNS: tuple[str, ...] = (
    "path",
    "stream_id",
    "events",
    "integrity",
    "damage",
    "sealed",
    "signed",
    "key_id",
    "gate",
    "verdict",
    "scope",
    "first_time",
    "last_time",
    "host",
    "labels",
    "argv",
)

#: The columns of ``checks``, in order.
CHECK_COLUMNS: tuple[str, ...] = (
    "stream_id",
    "gate",
    "verdict",
    "scope",
    "time",
    "name",
    "status",
    "reason",
    "evidence",
)

#: Kinds whose attrs fill the typed convenience columns.
_NAMED = frozenset({"step.start", "step.end", "receipt"})
_EXITED = frozenset({"step.end", "process.exit"})
_INT64 = (-(1 << 63), (1 << 63) - 1)
_GLOB = frozenset("*?[")


@dataclass(frozen=True)
class Skipped:
    """A path that did not join the query, and the refusal that says why."""

    path: str
    refusal: str

    def to_json(self) -> dict[str, str]:
        return {"path": self.path, "refusal": self.refusal}


@dataclass
class Source:
    """One stream that joins the query: what verification (or recovery) found."""

    path: Path
    stream_id: str
    digest: str
    events: int
    integrity: str
    damage: str | None
    sealed: bool
    signed: bool
    key_id: str | None
    verdict: dict[str, Any] | None
    first_ns: int | None
    last_ns: int | None
    host: str | None
    labels: str | None
    argv: str | None
    #: the ``events`` batches, decoded during verification from the bytes verified (small streams only)
    batches: list[pa.RecordBatch] | None = None

    def cached_bytes(self) -> int:
        return sum(b.nbytes for b in self.batches) if self.batches is not None else 0


@dataclass
class QueryResult:
    """A query's columns and rows, and the paths that were skipped."""

    columns: list[str]
    rows: list[tuple[Any, ...]]
    skipped: list[Skipped] = field(default_factory=list)
    streams: int = 0


# -- which files ---------------------------------------------------------------------


def expand_paths(patterns: Iterable[str]) -> tuple[list[Path], list[Skipped]]:
    """Each argument as paths: a file as itself, a folder as its ``*.aos`` (recursively), a glob expanded.

    A pattern that names nothing is a ``stream-missing`` skip; a file named
    twice (also through a link) is taken once, in first-named order.
    """
    out: list[Path] = []
    skipped: list[Skipped] = []
    seen: set[str] = set()
    for pattern in patterns:
        p = Path(pattern)
        if os.path.lexists(p):
            found = sorted(p.rglob("*.aos")) if p.is_dir() else [p]
        elif _GLOB & set(pattern):
            found = [Path(x) for x in sorted(glob.glob(pattern, recursive=True))]
        else:
            found = []
        if not found:
            what = "matches no file" if _GLOB & set(pattern) else "does not exist"
            skipped.append(Skipped(pattern, StreamMissing(f"{pattern} {what}").diagnostics()[len("refused: ") :]))
            continue
        for path in found:
            try:
                key = os.path.realpath(path)
            except (OSError, ValueError):
                key = str(path)
            if key not in seen:
                seen.add(key)
                out.append(path)
    return out, skipped


def _read(path: Path) -> bytes:
    """The file's bytes, read once into private memory (never blocks on a FIFO or device).

    One allocation of the file's size in the common case (a file that grows
    while it is read is read to its end).
    """
    from aos.reader import open_regular

    fd = open_regular(path)
    try:
        size = os.fstat(fd).st_size
        data = os.read(fd, size) if size else b""
        if len(data) < size or size == 0:
            chunks = [data]
            while chunk := os.read(fd, 8 << 20):
                chunks.append(chunk)
            data = b"".join(chunks)
        else:
            extra = os.read(fd, 8 << 20)
            if extra:
                chunks = [data, extra]
                while chunk := os.read(fd, 8 << 20):
                    chunks.append(chunk)
                data = b"".join(chunks)
    except OSError as exc:
        raise StreamMissing(f"{path}: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)
    return data


def _refusal_text(exc: Refusal) -> str:
    return f"{exc.name}: {exc.detail}"


# -- verification (pass 1) --------------------------------------------------------------


def _opening(first: Any) -> tuple[str | None, str | None, str | None]:
    """host, labels (JSON) and argv (JSON) of a ``stream.open`` event, as stored."""
    if first is None or first.kind != "stream.open":
        return None, None, None
    try:
        attrs = first.attrs
    except Refusal:
        return None, None, None
    host = attrs.get("host")

    def dump(value: Any) -> str | None:
        try:
            return None if value is None else json.dumps(value, ensure_ascii=False, sort_keys=True)
        except (RecursionError, ValueError):  # nested past Python's limit: the value stays in the events' attrs
            return None

    return (
        host if isinstance(host, str) else dump(host),
        dump(attrs.get("labels")),
        dump(attrs.get("argv")),
    )


def _verified_source(path: Path, data: bytes, key: Verifier | None) -> Source:
    """Verify ``data`` (the bytes of ``path``); raise its refusal, else describe it."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    from aos.reader import StreamFile, batch_events
    from aos.verify import verify_stream

    v = verify_stream(path, key, data=data)
    first = None
    last_ns: int | None = None
    with StreamFile(path, data=data) as f:
        for raw in f.batches():
            evs = batch_events(raw.batch.slice(0, 1))
            first = evs[0] if evs else None
            break
        seal_at = v.seal["bytes"]
        message = ipc.read_message(pa.py_buffer(data).slice(seal_at))
        seal = ipc.read_record_batch(message, f.schema)
        last_ns = seal.column(1)[0].as_py()
    host, labels, argv = _opening(first)
    return Source(
        path=path,
        stream_id=v.stream_id,
        digest=v.file_blake3,
        events=v.events,
        integrity="intact",
        damage=None,
        sealed=True,
        signed=v.signed,
        key_id=v.key_id,
        verdict=v.verdict if v.verdicts == 1 else None,
        first_ns=first.wall_ns if first is not None else None,
        last_ns=last_ns,
        host=host,
        labels=labels,
        argv=argv,
    )


def _damaged_source(path: Path, data: bytes, refusal: Refusal) -> Source:
    """What can be read of a stream that did not verify (raises when nothing can)."""
    from blake3 import blake3

    from aos.reader import StreamFile, batch_events

    first = None
    first_ns: int | None = None
    last_ns: int | None = None
    events = 0
    with StreamFile(path, data=data) as f:
        sid = f.stream_id
        for raw in f.batches():
            n = raw.batch.num_rows
            if n == 0:
                continue
            if first is None:
                first = batch_events(raw.batch.slice(0, 1))[0]
                first_ns = first.wall_ns
            last_ns = raw.batch.column(1)[n - 1].as_py()
            events += n
    host, labels, argv = _opening(first)
    return Source(
        path=path,
        stream_id=sid,
        digest=blake3(data, max_threads=blake3.AUTO).hexdigest(),
        events=events,
        integrity=refusal.name,
        damage=refusal.detail,
        sealed=False,
        signed=False,
        key_id=None,
        verdict=None,
        first_ns=first_ns,
        last_ns=last_ns,
        host=host,
        labels=labels,
        argv=argv,
    )


#: A stream file at most this large is decoded once, during verification, and its batches kept for the scan.
SMALL_STREAM = 1 << 20
#: At most this many bytes of such decoded batches are kept in all; later streams are re-read by the scan.
CACHE_BUDGET = 256 << 20


def _decoded(source: Source, data: bytes) -> list[pa.RecordBatch]:
    """The ``events`` batches of ``data`` (bytes already verified, or recovered up to the damage)."""
    from aos.reader import StreamFile

    schema = events_schema()
    with StreamFile(source.path, data=data) as f:
        return [_augment(raw.batch, source, schema) for raw in f.batches() if raw.batch.num_rows]


def _open_one(path: Path, include_damaged: bool, key: Verifier | None, *, keep: bool) -> Source | Skipped:
    """Verify one path: the stream that joins (a small one, with ``keep``, with its batches), or why it is skipped."""
    try:
        data = _read(path)
    except Refusal as exc:
        return Skipped(str(path), _refusal_text(exc))
    source: Source | None = None
    try:
        source = _verified_source(path, data, key)
    except Refusal as exc:
        refusal = exc.with_traceback(None)  # the traceback's frames would keep the bytes alive
        if include_damaged:
            with contextlib.suppress(Refusal):  # nothing readable (not an AOS stream): the refusal says why
                source = _damaged_source(path, data, refusal)
        if source is None:
            return Skipped(str(path), _refusal_text(refusal))
    if keep and len(data) <= SMALL_STREAM:
        source.batches = _decoded(source, data)
    return source


def _open_in_worker(path: Path, include_damaged: bool, raw_key: bytes | None) -> Source | Skipped:
    """``_open_one`` in a worker process (a public key travels as its 32 raw bytes).

    A worker keeps no batches: sending them back costs more (pickled Arrow, one
    small batch a stream) than the scan's re-reading them.
    """
    key = None
    if raw_key is not None:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        from aos.signing import Verifier

        key = Verifier(Ed25519PublicKey.from_public_bytes(raw_key))
    return _open_one(path, include_damaged, key, keep=False)


#: Streams per worker process below which verification stays in this process (a worker costs its start-up).
STREAMS_PER_WORKER = 256


def open_sources(
    paths: Sequence[Path],
    *,
    include_damaged: bool = False,
    key: Verifier | None = None,
    jobs: int | None = None,
) -> tuple[list[Source], list[Skipped]]:
    """Verify each path; return the streams that join and the paths skipped (with why), in the order given.

    Many streams are verified by ``jobs`` worker processes (default: one per
    CPU, at most one per ``STREAMS_PER_WORKER`` streams); each holds one
    stream's bytes at a time.
    """
    if jobs is None:
        jobs = min(os.cpu_count() or 1, len(paths) // STREAMS_PER_WORKER)
    sources: list[Source] = []
    skipped: list[Skipped] = []
    cached = 0

    def take(results: Iterable[Source | Skipped]) -> None:
        nonlocal cached
        for r in results:
            if isinstance(r, Skipped):
                skipped.append(r)
                continue
            size = r.cached_bytes()
            if cached + size > CACHE_BUDGET:
                r.batches = None  # over the budget: the scan re-reads it
            else:
                cached += size
            sources.append(r)

    if jobs < 2:
        take(_open_one(path, include_damaged, key, keep=True) for path in paths)
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor
        from itertools import repeat

        raw_key = None
        if key is not None:
            from cryptography.hazmat.primitives import serialization

            raw_key = key.public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        # spawn, not fork: this process may already run Arrow's threads
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(jobs, mp_context=ctx) as pool:
            chunk = max(1, min(64, len(paths) // (jobs * 4)))
            take(pool.map(_open_in_worker, paths, repeat(include_damaged), repeat(raw_key), chunksize=chunk))
    return _distinct_ids(sources, skipped)


def _distinct_ids(sources: list[Source], skipped: list[Skipped]) -> tuple[list[Source], list[Skipped]]:
    """Streams that claim one stream id are never merged: copies are taken once, conflicts not at all."""
    by_id: dict[str, list[Source]] = {}
    for s in sources:
        by_id.setdefault(s.stream_id, []).append(s)
    keep: list[Source] = []
    for s in sources:
        group = by_id[s.stream_id]
        if len(group) == 1:
            keep.append(s)
            continue
        first = group[0]
        if all(g.digest == first.digest for g in group):
            if s is first:
                keep.append(s)
            else:
                exc = QueryStreamId(f"stream id {s.stream_id} is also {first.path}, an identical copy: taken once")
                skipped.append(Skipped(str(s.path), _refusal_text(exc)))
            continue
        others = ", ".join(str(g.path) for g in group if g is not s)
        exc = QueryStreamId(f"stream id {s.stream_id} is also claimed by {others} with other bytes: neither is used")
        skipped.append(Skipped(str(s.path), _refusal_text(exc)))
    return keep, skipped


# -- the tables -------------------------------------------------------------------------


def events_schema() -> pa.Schema:
    """The Arrow schema of the ``events`` table."""
    import pyarrow as pa

    return pa.schema(
        [
            ("stream_id", pa.string()),
            ("seq", pa.uint64()),
            ("time", pa.timestamp("us", tz="UTC")),
            ("wall_ns", pa.int64()),
            ("mono_ns", pa.int64()),
            ("kind", pa.string()),
            ("step", pa.string()),
            ("name", pa.string()),
            ("status", pa.string()),
            ("exit_code", pa.int64()),
            ("duration_ns", pa.int64()),
            ("attrs", pa.json_(pa.string())),
            ("data", pa.binary()),
            ("gate", pa.string()),
            ("verdict", pa.string()),
            ("scope", pa.string()),
        ]
    )


def _text(value: Any) -> str | None:
    """A byte-text value (FORMAT.md 3.7) as a string: undecodable bytes as ``\\xNN``."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("bytes_b64"), str):
        import base64
        import binascii

        try:
            return base64.b64decode(value["bytes_b64"], validate=True).decode("utf-8", "backslashreplace")
        except (binascii.Error, ValueError):
            return None
    return None


def _int64(value: Any) -> int | None:
    if type(value) is int and _INT64[0] <= value <= _INT64[1]:
        return value
    return None


def _verdict_text(verdict: dict[str, Any] | None, key: str) -> str | None:
    if verdict is None:
        return None
    value = verdict.get(key)
    return value if isinstance(value, str) else None


def _augment(batch: pa.RecordBatch, source: Source, schema: pa.Schema) -> pa.RecordBatch:
    """One stream batch as an ``events`` batch: the stream's columns added, attrs' common fields typed."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = batch.num_rows
    kind = batch.column(3)
    attrs = batch.column(5)
    wall = batch.column(1)
    name: list[str | None] = [None] * n
    status: list[str | None] = [None] * n
    exit_code: list[int | None] = [None] * n
    duration: list[int | None] = [None] * n
    wanted = pc.indices_nonzero(pc.is_in(kind, value_set=pa.array(sorted(_NAMED | _EXITED))))
    for i in wanted.to_pylist():
        k = kind[i].as_py()
        try:
            a = json.loads(attrs[i].as_py())
        except (ValueError, RecursionError):  # pragma: no cover - the verifier parsed it; a damaged one may not
            continue
        if not isinstance(a, dict):
            continue
        if k in _NAMED:
            name[i] = _text(a.get("name"))
        if k == "receipt":
            s = a.get("status")
            status[i] = s if isinstance(s, str) else None
        if k in _EXITED:
            exit_code[i] = _int64(a.get("exit_code"))
            duration[i] = _int64(a.get("duration_ns"))

    def const(value: str | None) -> pa.Array:
        return pa.repeat(pa.scalar(value, pa.string()), n)

    v = source.verdict
    columns = [
        const(source.stream_id),
        batch.column(0),
        pc.cast(pc.divide(wall, 1000), pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        wall,
        batch.column(2),
        kind,
        batch.column(4),
        pa.array(name, pa.string()),
        pa.array(status, pa.string()),
        pa.array(exit_code, pa.int64()),
        pa.array(duration, pa.int64()),
        pa.ExtensionArray.from_storage(pa.json_(pa.string()), attrs),
        batch.column(6),
        const(_verdict_text(v, "gate")),
        const(_verdict_text(v, "verdict")),
        const(_verdict_text(v, "scope")),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


class _HashingFile(io.RawIOBase):
    """A read-only file over a descriptor that hashes (BLAKE3) every byte read through it, in order."""

    def __init__(self, fd: int) -> None:
        from blake3 import blake3

        super().__init__()
        self._fd = fd
        self._hash = blake3()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        n = os.readv(self._fd, [view])
        self._hash.update(view[:n])
        return n

    def rest_digest(self) -> str:
        """Read to the end; the hex digest of every byte of the file."""
        while chunk := os.read(self._fd, 1 << 20):
            self._hash.update(chunk)
        return str(self._hash.hexdigest())

    def close(self) -> None:
        if not self.closed:
            os.close(self._fd)
        super().close()


class _Scan:
    """The ``events`` batches: each stream re-read, proved to be the bytes verified, decoded batch by batch."""

    def __init__(self, sources: Sequence[Source]) -> None:
        self.sources = sources
        self.failure: Refusal | None = None

    def batches(self) -> Iterator[pa.RecordBatch]:
        schema = events_schema()
        for source in self.sources:
            yield from self._stream(source, schema)

    def _stream(self, source: Source, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        """One stream's batches, each proved part of the bytes verified before it reaches DuckDB's result.

        A sealed stream is read one message at a time through a hash of every
        byte read; at its end the hash must equal the verified file's, else the
        scan raises and DuckDB abandons the query (so no result ever rests on
        bytes that changed). Memory: one message. A damaged stream (only with
        ``include_damaged``) is read whole and hashed before it is decoded.
        """
        if source.batches is not None:  # decoded from the bytes verified; handed over once
            batches, source.batches = source.batches, None
            yield from batches
            return
        try:
            if source.sealed:
                yield from self._sealed(source, schema)
            else:
                yield from self._damaged(source, schema)
        except Refusal as exc:
            self.failure = exc
            raise

    def _sealed(self, source: Source, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa
        import pyarrow.ipc as ipc

        from aos.reader import open_regular

        changed = StreamSeal(f"{source.path} changed after it was verified; the query was stopped")
        with _HashingFile(open_regular(source.path)) as f:
            try:
                messages = iter(ipc.MessageReader.open_stream(f))
                first = next(messages, None)
                if first is None or first.type != "schema":
                    raise changed
                stored = ipc.read_schema(first)
                for message in messages:
                    batch = ipc.read_record_batch(message, stored)
                    if batch.num_rows:
                        yield _augment(batch, source, schema)
            except (pa.ArrowException, OSError, ValueError) as exc:  # bytes that no longer decode
                raise changed from exc
            if f.rest_digest() != source.digest:
                raise changed

    def _damaged(self, source: Source, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        from blake3 import blake3

        from aos.reader import StreamFile

        data = _read(source.path)
        if blake3(data, max_threads=blake3.AUTO).hexdigest() != source.digest:
            raise StreamSeal(f"{source.path} changed after it was read; the query was stopped")
        with StreamFile(source.path, data=data) as f:
            for raw in f.batches():
                if raw.batch.num_rows:
                    yield _augment(raw.batch, source, schema)

    def reader(self) -> pa.RecordBatchReader:
        import pyarrow as pa

        return pa.RecordBatchReader.from_batches(events_schema(), self.batches())


def _ts(ns: int | None) -> int | None:
    return None if ns is None else ns // 1000


def streams_table(sources: Sequence[Source]) -> pa.Table:
    """The ``streams`` table: one row per stream that joined."""
    import pyarrow as pa

    ts = pa.timestamp("us", tz="UTC")
    js = pa.json_(pa.string())
    cols: dict[str, pa.Array] = {
        "path": pa.array([str(s.path) for s in sources], pa.string()),
        "stream_id": pa.array([s.stream_id for s in sources], pa.string()),
        "events": pa.array([s.events for s in sources], pa.int64()),
        "integrity": pa.array([s.integrity for s in sources], pa.string()),
        "damage": pa.array([s.damage for s in sources], pa.string()),
        "sealed": pa.array([s.sealed for s in sources], pa.bool_()),
        "signed": pa.array([s.signed for s in sources], pa.bool_()),
        "key_id": pa.array([s.key_id if isinstance(s.key_id, str) else None for s in sources], pa.string()),
        "gate": pa.array([_verdict_text(s.verdict, "gate") for s in sources], pa.string()),
        "verdict": pa.array([_verdict_text(s.verdict, "verdict") for s in sources], pa.string()),
        "scope": pa.array([_verdict_text(s.verdict, "scope") for s in sources], pa.string()),
        "first_time": pa.array([_ts(s.first_ns) for s in sources], pa.int64()).cast(ts),
        "last_time": pa.array([_ts(s.last_ns) for s in sources], pa.int64()).cast(ts),
        "host": pa.array([s.host for s in sources], pa.string()),
        "labels": pa.ExtensionArray.from_storage(js, pa.array([s.labels for s in sources], pa.string())),
        "argv": pa.ExtensionArray.from_storage(js, pa.array([s.argv for s in sources], pa.string())),
    }
    return pa.table(cols)


def checks_table(sources: Sequence[Source]) -> pa.Table:
    """The ``checks`` table: one row per check of each sealed verdict."""
    import pyarrow as pa

    rows: dict[str, list[Any]] = {c: [] for c in CHECK_COLUMNS}
    for s in sources:
        checks = s.verdict.get("checks") if s.verdict is not None else None
        if not isinstance(checks, list):
            continue
        for check in checks:
            if not isinstance(check, dict):
                continue
            evidence = check.get("evidence")
            rows["stream_id"].append(s.stream_id)
            rows["gate"].append(_verdict_text(s.verdict, "gate"))
            rows["verdict"].append(_verdict_text(s.verdict, "verdict"))
            rows["scope"].append(_verdict_text(s.verdict, "scope"))
            rows["time"].append(_ts(s.last_ns))
            rows["name"].append(_text(check.get("name")))
            rows["status"].append(_text(check.get("status")))
            rows["reason"].append(_text(check.get("reason")))
            ints = [e for e in evidence if _int64(e) is not None] if isinstance(evidence, list) else []
            rows["evidence"].append(ints)
    return pa.table(
        {
            "stream_id": pa.array(rows["stream_id"], pa.string()),
            "gate": pa.array(rows["gate"], pa.string()),
            "verdict": pa.array(rows["verdict"], pa.string()),
            "scope": pa.array(rows["scope"], pa.string()),
            "time": pa.array(rows["time"], pa.int64()).cast(pa.timestamp("us", tz="UTC")),
            "name": pa.array(rows["name"], pa.string()),
            "status": pa.array(rows["status"], pa.string()),
            "reason": pa.array(rows["reason"], pa.string()),
            "evidence": pa.array(rows["evidence"], pa.list_(pa.int64())),
        }
    )


# -- the query ------------------------------------------------------------------------


def _connect(sources: Sequence[Source]) -> tuple[Any, _Scan]:
    """A DuckDB connection holding the three tables, with file access switched off and locked."""
    import duckdb

    con = duckdb.connect(":memory:", config={"python_enable_replacements": False})
    con.execute("SET enable_progress_bar = false")  # DuckDB would draw it on stdout, inside --json or --csv
    con.execute("LOAD json")
    scan = _Scan(sources)
    con.register("events", scan.reader())
    con.register("streams", streams_table(sources))
    con.register("checks", checks_table(sources))
    con.execute("SET enable_external_access = false")
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET autoload_known_extensions = false")
    con.execute("SET lock_configuration = true")
    return con, scan


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
    import duckdb

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
    paths, skipped = expand_paths(patterns)
    sources, more = open_sources(paths, include_damaged=include_damaged, key=key)
    skipped.extend(more)
    columns, rows = query_sources(sql, sources)
    return QueryResult(columns=columns, rows=rows, skipped=skipped, streams=len(sources))

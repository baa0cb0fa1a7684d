"""The tables ``alpha observe query`` gives DuckDB: ``events`` (a scan), ``streams`` and ``checks``.

``EventScan`` is the ``events`` reader: each stream's batches as ``events_batch``
makes them (the stream's id and verdict added, common attrs typed), from
batches kept during verification or re-read through a hash that must end equal
to the verified file's. docs/QUERY.md lists every column.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aos import kinds
from aos.refusals import Refusal, StreamMissing, StreamSeal

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "CHECK_COLUMNS",
    "EVENT_COLUMNS",
    "STREAM_COLUMNS",
    "EventScan",
    "Source",
    "byte_text",
    "checks_table",
    "events_batch",
    "events_schema",
    "read_private",
    "streams_table",
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
    "source",
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
_NAMED = frozenset({kinds.STEP_START, kinds.STEP_END, kinds.RECEIPT})
_EXITED = frozenset({kinds.STEP_END, kinds.PROCESS_EXIT})
_INT64 = (-(1 << 63), (1 << 63) - 1)


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
    #: ``source`` of ``stream.open`` as JSON (docs/FORMAT.md), None when the stream records none
    source: str | None = None
    #: ``(bytes, file_blake3)`` of the seal (an index row checked at its tail): the events scan requires the
    #: file's first ``bytes`` bytes to hash to the seal's digest, so events are the sealed (signed) bytes
    sealed_prefix: tuple[int, str] | None = None

    def cached_bytes(self) -> int:
        return sum(b.nbytes for b in self.batches) if self.batches is not None else 0


def read_private(path: Path) -> bytes:
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


def byte_text(value: Any) -> str | None:
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


def events_batch(batch: pa.RecordBatch, source: Source, schema: pa.Schema) -> pa.RecordBatch:
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
            name[i] = byte_text(a.get("name"))
        if k == kinds.RECEIPT:
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

    def __init__(self, fd: int, mark: int | None = None) -> None:
        from blake3 import blake3

        super().__init__()
        self._fd = fd
        self._hash = blake3()
        self._read = 0
        #: the digest of the first ``mark`` bytes, once they are read
        self._mark = mark
        self.marked: str | None = None

    def _update(self, chunk: memoryview | bytes) -> None:
        n = len(chunk)
        if self._mark is not None and self.marked is None and self._read <= self._mark <= self._read + n:
            cut = self._mark - self._read
            self._hash.update(chunk[:cut])
            self.marked = str(self._hash.hexdigest())  # BLAKE3's digest leaves the hasher as it was
            self._hash.update(chunk[cut:])
        else:
            self._hash.update(chunk)
        self._read += n

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        n = os.readv(self._fd, [view])
        self._update(view[:n])
        return n

    def rest_digest(self) -> str:
        """Read to the end; the hex digest of every byte of the file."""
        while chunk := os.read(self._fd, 1 << 20):
            self._update(chunk)
        return str(self._hash.hexdigest())

    def close(self) -> None:
        if not self.closed:
            os.close(self._fd)
        super().close()


class EventScan:
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

        from aos.framing import Malformed, check_inflation
        from aos.reader import open_regular

        changed = StreamSeal(f"{source.path} changed after it was verified; the query was stopped")
        prefix = source.sealed_prefix
        with _HashingFile(open_regular(source.path), prefix[0] if prefix is not None else None) as f:
            try:
                messages = iter(ipc.MessageReader.open_stream(f))
                first = next(messages, None)
                if first is None or first.type != "schema":
                    raise changed
                stored = ipc.read_schema(first)
                for message in messages:
                    # Bytes that changed since they were verified may declare any size: checked first.
                    check_inflation(message.metadata.to_pybytes(), memoryview(message.body))
                    batch = ipc.read_record_batch(message, stored)
                    if batch.num_rows:
                        yield events_batch(batch, source, schema)
            except (pa.ArrowException, OSError, ValueError, Malformed) as exc:  # bytes that no longer decode
                raise changed from exc
            if f.rest_digest() != source.digest:
                raise changed
            if prefix is not None and f.marked != prefix[1]:
                raise StreamSeal(
                    f"{source.path}: the bytes before the seal are not the ones it seals; the query was stopped"
                )

    def _damaged(self, source: Source, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        from blake3 import blake3

        from aos.reader import StreamFile

        data = read_private(source.path)
        if blake3(data, max_threads=blake3.AUTO).hexdigest() != source.digest:
            raise StreamSeal(f"{source.path} changed after it was read; the query was stopped")
        with StreamFile(source.path, data=data) as f:
            for raw in f.batches():
                if raw.batch.num_rows:
                    yield events_batch(raw.batch, source, schema)

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
        "source": pa.ExtensionArray.from_storage(js, pa.array([s.source for s in sources], pa.string())),
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
        # the stream's own columns once, not per check (10,000 streams of an index: a tenth of a second)
        gate = _verdict_text(s.verdict, "gate")
        verdict = _verdict_text(s.verdict, "verdict")
        scope = _verdict_text(s.verdict, "scope")
        when = _ts(s.last_ns)
        for check in checks:
            if not isinstance(check, dict):
                continue
            evidence = check.get("evidence")
            rows["stream_id"].append(s.stream_id)
            rows["gate"].append(gate)
            rows["verdict"].append(verdict)
            rows["scope"].append(scope)
            rows["time"].append(when)
            rows["name"].append(byte_text(check.get("name")))
            rows["status"].append(byte_text(check.get("status")))
            rows["reason"].append(byte_text(check.get("reason")))
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

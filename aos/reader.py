"""The crash-tolerant reader.

An AOS stream is a plain Arrow IPC stream, so any complete one opens with stock
``pyarrow.ipc.open_stream``. This reader walks it message by message instead,
so that on a damaged file it keeps every complete batch before the damage and
says exactly what is missing. It never raises anything but a ``Refusal``.

Damage is classified by what the bytes after the last good batch are:
- fewer bytes than the next message's framing announces: ``stream-truncated``
  (a torn write: the recorder was killed, or the file was cut);
- a complete-looking message that does not decode: ``stream-chain`` (the
  bytes were changed; no event after the last good one can be trusted);
- anything after the end-of-stream marker: ``stream-truncated`` here, and
  ``stream-seal`` in the verifier when a seal precedes it.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aos.event import Event
from aos.refusals import Refusal, StreamChain, StreamMissing, StreamSchema, StreamTruncated
from aos.schema import COLUMNS, FORMAT_NAME, FORMAT_VERSION, META_FORMAT, META_STREAM_ID, META_VERSION

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["EOS", "RawBatch", "StreamContents", "StreamFile", "iter_events", "open_buffer", "read_stream"]

EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"
_CONT = b"\xff\xff\xff\xff"
_I32 = struct.Struct("<i")


@dataclass(frozen=True)
class RawBatch:
    """One complete record batch message and where it lies in the file."""

    start: int
    end: int
    batch: pa.RecordBatch


@dataclass
class StreamContents:
    """What a read recovered: every event of every complete batch, and any damage."""

    path: Path
    stream_id: str
    events: list[Event]
    damage: Refusal | None
    intact_bytes: int
    batches: int
    metadata: dict[str, str] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        """True when nothing after the last batch is damaged (sealed or not)."""
        return self.damage is None


class StreamFile:
    """An open AOS stream: its schema, and its batches read in order.

    ``batches()`` yields each complete batch; afterwards ``damage`` holds the
    refusal that describes whatever followed the last one (or None), and
    ``tail`` the bytes after the end-of-stream marker, if one was found.
    """

    def __init__(self, path: str | os.PathLike[str], *, data: bytes | None = None) -> None:
        import pyarrow as pa
        import pyarrow.ipc as ipc

        self._pa, self._ipc = pa, ipc
        self.path = Path(path)
        self._mm: mmap.mmap | None = None
        if data is not None:  # bytes already in hand (open_buffer): ``path`` only names them
            self.size = len(data)
            self._init_view(memoryview(data))
            return
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError as exc:
            raise StreamMissing(f"{self.path}: {exc.strerror or exc}") from exc
        try:
            self.size = os.fstat(fd).st_size
            self._mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ) if self.size else None
        except (OSError, ValueError) as exc:
            raise StreamMissing(f"{self.path}: {exc}") from exc
        finally:
            os.close(fd)
        self._init_view(memoryview(self._mm) if self._mm is not None else memoryview(b""))

    def _init_view(self, view: memoryview) -> None:
        self.view = view
        self.damage: Refusal | None = None
        self.eos_at: int | None = None
        self.metadata: dict[str, str] = {}
        self.schema_end = 0
        self._read_schema()

    # -- schema ----------------------------------------------------------------------

    def _read_schema(self) -> None:
        head = bytes(self.view[:8])
        if self.size < 8 and _CONT.startswith(head[:4]):
            raise StreamTruncated(f"{self.path} holds {self.size} bytes: the schema was never completely written")
        if bytes(self.view[:4]) != _CONT:
            raise StreamSchema(f"{self.path} is not an Arrow IPC stream (it does not start with a message)")
        self._buf = self._pa.py_buffer(self.view)
        self._src = self._pa.BufferReader(self._buf)
        try:
            self._reader = self._ipc.MessageReader.open_stream(self._src)
            message = self._reader.read_next_message()
        except StopIteration:
            raise StreamSchema(f"{self.path} holds no schema") from None
        except Exception as exc:
            if self._short(0):
                raise StreamTruncated(f"{self.path}: the schema message is cut short ({self.size} bytes)") from exc
            raise StreamSchema(f"{self.path}: unreadable schema message: {exc}") from exc
        if message.type != "schema":
            raise StreamSchema(f"{self.path}: the first message is a {message.type}, not a schema")
        try:
            schema = self._ipc.read_schema(message)
        except Exception as exc:
            raise StreamSchema(f"{self.path}: unreadable schema: {exc}") from exc
        meta = {k.decode("utf-8", "replace"): v.decode("utf-8", "replace") for k, v in (schema.metadata or {}).items()}
        if meta.get(META_FORMAT.decode()) != FORMAT_NAME:
            raise StreamSchema(f"{self.path} is an Arrow stream but not an AOS stream (no aos.format=AOS)")
        version = meta.get(META_VERSION.decode())
        if version != FORMAT_VERSION:
            raise StreamSchema(
                f"{self.path}: AOS version {version!r} is not supported (this reader knows {FORMAT_VERSION})"
            )
        stream_id = meta.get(META_STREAM_ID.decode())
        if not stream_id:
            raise StreamSchema(f"{self.path}: no aos.stream_id in the schema metadata")
        from aos.schema import arrow_schema

        expected = arrow_schema(stream_id)
        if not schema.remove_metadata().equals(expected.remove_metadata()):
            try:
                names = ", ".join(schema.names)
            except UnicodeDecodeError:
                names = "(names that are not UTF-8)"
            raise StreamSchema(f"{self.path}: columns are [{names}], expected {', '.join(COLUMNS)} with v1 types")
        self.schema = expected
        self.stream_id = stream_id
        self.metadata = meta
        self.schema_end = self._src.tell()

    # -- batches ---------------------------------------------------------------------

    def _short(self, pos: int) -> bool:
        """True when the bytes from ``pos`` cannot hold the message they announce."""
        left = self.size - pos
        if left < 8:
            return True
        if bytes(self.view[pos : pos + 4]) != _CONT:
            return False
        (meta_len,) = _I32.unpack(self.view[pos + 4 : pos + 8])
        return bool(meta_len > 0 and pos + 8 + meta_len > self.size)

    def batches(self) -> Iterator[RawBatch]:
        """Each complete batch in order; stops at the end or at the first damage."""
        src, reader = self._src, self._reader
        while True:
            pos = src.tell()
            try:
                message = reader.read_next_message()
            except StopIteration:
                self._at_end(pos)
                return
            except Exception as exc:  # noqa: BLE001 - classified into a refusal below
                if self._short(pos) or "message body" in str(exc) or "bytes available" in str(exc):
                    self.damage = StreamTruncated(
                        f"{self.size - pos} bytes after the last complete batch (ending at byte {pos}) "
                        "do not form a complete message",
                        offset=pos,
                    )
                else:
                    self.damage = StreamChain(f"the message at byte {pos} does not decode: {exc}", offset=pos)
                return
            end = src.tell()
            if message.type != "record batch":
                self.damage = StreamChain(f"the message at byte {pos} is a {message.type}, not a batch", offset=pos)
                return
            try:
                batch = self._ipc.read_record_batch(message, self.schema)
                batch.validate(full=True)
            except Exception as exc:  # noqa: BLE001
                self.damage = StreamChain(f"the batch at byte {pos} does not decode: {exc}", offset=pos)
                return
            yield RawBatch(pos, end, batch)

    def _at_end(self, pos: int) -> None:
        rest = self.size - pos
        if rest == 0:
            return
        if bytes(self.view[pos : pos + 8]) == EOS:
            self.eos_at = pos
            if rest > 8:
                self.damage = StreamTruncated(f"{rest - 8} bytes follow the end-of-stream marker at byte {pos}")
            return
        self.damage = StreamTruncated(f"{rest} bytes after the last complete batch (ending at byte {pos})", offset=pos)

    def close(self) -> None:
        try:
            self.view.release()
        except (BufferError, ValueError):  # pragma: no cover - a batch still holds the buffer
            return
        if self._mm is not None:
            with contextlib.suppress(BufferError):  # arrow may still reference the map; GC closes it
                self._mm.close()
            self._mm = None

    def __enter__(self) -> StreamFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_buffer(data: bytes, name: str) -> StreamFile:
    """A ``StreamFile`` over bytes in memory (``name`` is used in refusals only)."""
    return StreamFile(name, data=data)


def batch_events(batch: pa.RecordBatch) -> list[Event]:
    """The events of one batch, in order (strings and bytes exactly as stored)."""
    cols: list[list[Any]] = [batch.column(i).to_pylist() for i in range(len(COLUMNS))]
    return [
        Event(seq, wall, mono, kind, step, attrs, data, h)
        for seq, wall, mono, kind, step, attrs, data, h in zip(*cols, strict=True)
    ]


def iter_events(path: str | os.PathLike[str]) -> Iterator[Event]:
    """Every event of every complete batch, streamed; damage ends it quietly."""
    with StreamFile(path) as f:
        for raw in f.batches():
            yield from batch_events(raw.batch)


def read_stream(path: str | os.PathLike[str]) -> StreamContents:
    """Read all complete batches (a stream still being written reads fine).

    Raises only ``stream-missing``, ``stream-schema`` and (for a file cut
    inside its schema message) ``stream-truncated``; any other damage is
    reported in ``StreamContents.damage`` with the events before it kept.
    """
    events: list[Event] = []
    n = 0
    intact = 0
    with StreamFile(path) as f:
        intact = f.schema_end
        for raw in f.batches():
            try:
                events.extend(batch_events(raw.batch))
            except Exception as exc:  # noqa: BLE001 - a batch whose values do not convert
                f.damage = StreamChain(f"the batch at byte {raw.start} holds values that do not decode: {exc}")
                break
            n += 1
            intact = raw.end
        return StreamContents(f.path, f.stream_id, events, f.damage, intact, n, f.metadata)

"""The crash-tolerant reader.

An AOS stream is a plain Arrow IPC stream, so any complete one opens with stock
``pyarrow.ipc.open_stream``. This reader walks it message by message instead,
so that on a damaged file it keeps every complete batch before the damage and
says exactly what is wrong. It never raises anything but a ``Refusal``, or an error
of the machine (``aos.resources``: a thread, memory or a file descriptor that could
not be had), which it re-raises unchanged: that is never damage to the stream.

What follows the last good batch is classified by ``aos.framing`` (docs/FORMAT.md,
section 1.1):
- nothing, or exactly the end-of-stream marker: a clean end;
- a proper prefix of a well-formed message, or of the end-of-stream marker:
  ``stream-truncated`` (a torn write: the recorder was killed, or the file was cut);
- anything else (junk, zeros, a complete message that does not decode, bytes
  after the end-of-stream marker): ``stream-chain`` here, and ``stream-seal`` in
  the verifier when a seal precedes it;
- a complete batch with a null in a column that may not hold one: ``stream-schema``.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import re
import stat
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aos.event import Event
from aos.framing import EOS, Cut, Malformed, batch_frame, schema_frame
from aos.refusals import Refusal, StreamChain, StreamMissing, StreamSchema, StreamTruncated
from aos.resources import machine_error
from aos.schema import (
    COLUMNS,
    FORMAT_NAME,
    FORMAT_VERSION,
    HASH_NAME,
    META_FORMAT,
    META_HASH,
    META_STREAM_ID,
    META_VERSION,
    NOT_NULL,
)

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "EOS",
    "RawBatch",
    "StreamContents",
    "StreamFile",
    "check_metadata",
    "compute",
    "is_in",
    "iter_events",
    "open_buffer",
    "open_regular",
    "read_stream",
    "require_regular",
    "string_set",
]

_STREAM_ID = re.compile(r"[0-9a-f]{32}")


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


def _file_type(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def open_regular(path: str | os.PathLike[str]) -> int:
    """Open ``path`` for reading without ever blocking; ``stream-missing`` unless it is a regular file.

    The open is non-blocking and takes no controlling terminal, so a FIFO, a
    terminal or a device is refused at once instead of waiting for a writer.
    The caller closes the returned descriptor.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if machine_error(exc):
            raise  # no descriptor to be had: the machine's, not a missing stream
        raise StreamMissing(f"{path}: {exc.strerror or exc}") from exc
    try:
        require_regular(fd, path)
    except StreamMissing:
        os.close(fd)
        raise
    return fd


def require_regular(fd: int, path: str | os.PathLike[str]) -> None:
    """``stream-missing`` unless ``fd`` is a regular file (a directory, FIFO or device is not a stream)."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError as exc:
        if machine_error(exc):
            raise
        raise StreamMissing(f"{path}: {exc.strerror or exc}") from exc
    if not stat.S_ISREG(mode):
        raise StreamMissing(f"{path} is {_file_type(mode)}, not a stream file")


def check_metadata(raw: dict[bytes, bytes] | None, where: str) -> dict[str, str]:
    """The schema-level metadata, checked exactly as FORMAT.md section 2 says; ``stream-schema`` otherwise."""
    meta: dict[str, str] = {}
    for k, v in (raw or {}).items():
        try:
            meta[k.decode("utf-8")] = v.decode("utf-8")
        except UnicodeDecodeError:
            raise StreamSchema(f"{where}: a schema metadata key or value is not UTF-8") from None
    if meta.get(META_FORMAT.decode()) != FORMAT_NAME:
        raise StreamSchema(f"{where} is an Arrow stream but not an AOS stream (no aos.format=AOS)")
    version = meta.get(META_VERSION.decode())
    if version != FORMAT_VERSION:
        raise StreamSchema(f"{where}: AOS version {version!r} is not supported (this reader knows {FORMAT_VERSION})")
    hash_name = meta.get(META_HASH.decode())
    if hash_name != HASH_NAME:
        raise StreamSchema(f"{where}: aos.hash is {hash_name!r}, not {HASH_NAME!r}")
    stream_id = meta.get(META_STREAM_ID.decode())
    if stream_id is None or not _STREAM_ID.fullmatch(stream_id):
        raise StreamSchema(f"{where}: aos.stream_id {stream_id!r} is not 32 lowercase hex digits")
    known = {k.decode() for k in (META_FORMAT, META_VERSION, META_HASH, META_STREAM_ID)}
    extra = sorted(set(meta) - known)
    if extra:
        raise StreamSchema(f"{where}: unknown schema metadata key {extra[0]!r} (v1 has exactly {sorted(known)})")
    return meta


def read_options(included_fields: list[int] | None = None) -> pa.ipc.IpcReadOptions:
    """How every reader of this project asks pyarrow to decode: on the calling thread (``use_threads=False``).

    On pyarrow's thread pool a failed allocation aborts the process (an uncaught
    ``std::bad_alloc``) where on the caller's thread it raises ``MemoryError``, which is the
    named refusal ``resource``; and one batch decodes no slower on one thread.
    """
    import pyarrow.ipc as ipc

    if included_fields is None:
        return ipc.IpcReadOptions(use_threads=False)
    return ipc.IpcReadOptions(use_threads=False, included_fields=included_fields)


def compute(name: str, *args: Any, options: Any = None) -> Any:
    """Arrow's compute function ``name`` on ``args`` (``pyarrow.compute.NAME(*args)``) without importing
    ``pyarrow.compute``, whose Python wrappers, made when it is imported, cost about 20 ms a process."""
    from pyarrow._compute import call_function

    return call_function(name, list(args), options)


def is_in(values: Any, value_set: Any) -> Any:
    """``pyarrow.compute.is_in(values, value_set=value_set)``, through :func:`compute`."""
    from pyarrow._compute import SetLookupOptions

    return compute("is_in", values, options=SetLookupOptions(value_set))


def string_set(values: list[str]) -> pa.Array:
    """``pa.array(values, pa.string())`` built from its buffers: a value set for ``pyarrow.compute.is_in``.

    Any conversion of Python objects by pyarrow first imports pandas when it is installed (to ask whether the
    objects are pandas'), a tenth of a second or more that a reader picking a few kinds of event out of a
    stream does not need (issue 36: the site's build of one added run)."""
    import struct

    import pyarrow as pa

    data = [v.encode("utf-8") for v in values]
    offsets = [0]
    for d in data:
        offsets.append(offsets[-1] + len(d))
    buffers = [None, pa.py_buffer(struct.pack(f"<{len(offsets)}i", *offsets)), pa.py_buffer(b"".join(data))]
    return pa.Array.from_buffers(pa.string(), len(data), buffers)


def null_damage(batch: pa.RecordBatch, start: int) -> StreamSchema | None:
    """``stream-schema`` when a column that may not hold a null holds one (FORMAT.md section 2)."""
    for i in NOT_NULL:
        column = batch.column(i)
        if column.null_count:
            row = column.to_pylist().index(None)
            seqs = batch.column(0).to_pylist()
            seq = seqs[row] if i != 0 else None
            named = f"seq {seq}" if seq is not None else f"row {row}"
            return StreamSchema(
                f"the batch at byte {start} holds a null {COLUMNS[i]} ({named}); the column may not be null",
                offset=start,
                **({"first_bad_seq": seq} if seq is not None else {}),
            )
    return None


class StreamFile:
    """An open AOS stream: its schema, and its batches read in order.

    ``batches()`` yields each complete batch; afterwards ``damage`` holds the
    refusal that describes whatever followed the last one (or None), and
    ``eos_at`` where the end-of-stream marker was found, if it was.
    """

    def __init__(self, path: str | os.PathLike[str], *, data: bytes | bytearray | None = None) -> None:
        import pyarrow as pa
        import pyarrow.ipc as ipc

        self._pa, self._ipc = pa, ipc
        self.path = Path(path)
        self._mm: mmap.mmap | None = None
        if data is not None:  # bytes already in hand (open_buffer): ``path`` only names them
            self.size = len(data)
            self._init_view(memoryview(data))
            return
        fd = open_regular(self.path)
        try:
            self.size = os.fstat(fd).st_size
            self._mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ) if self.size else None
        except (OSError, ValueError) as exc:
            if machine_error(exc):
                raise  # no memory to map it in: the machine's
            raise StreamMissing(f"{self.path}: {exc}") from exc
        finally:
            os.close(fd)
        self._init_view(memoryview(self._mm) if self._mm is not None else memoryview(b""))

    def _init_view(self, view: memoryview) -> None:
        self.view = view
        self._released = 0
        self._buf = self._pa.py_buffer(self.view)
        self._source: pa.BufferReader | None = None
        self._decoder: pa.ipc.RecordBatchStreamReader | None = None
        self.damage: Refusal | None = None
        self.eos_at: int | None = None
        self.metadata: dict[str, str] = {}
        self.schema_end = 0
        self._read_schema()

    # -- schema ----------------------------------------------------------------------

    def _read_schema(self) -> None:
        if self.size == 0:
            raise StreamTruncated(f"{self.path} holds 0 bytes: the schema was never written")
        try:
            frame = schema_frame(self.view, self.size)
        except Cut as exc:
            raise StreamTruncated(f"{self.path}: the schema message is cut short: {exc}") from None
        except Malformed as exc:
            raise StreamSchema(f"{self.path} is not an AOS stream: the first message: {exc}") from None
        try:
            message = self._ipc.read_message(self._buf.slice(0, frame.end))
            schema = self._ipc.read_schema(message)
        except Exception as exc:  # any failure to parse is a schema refusal, but the machine's own
            if machine_error(exc):
                raise
            raise StreamSchema(f"{self.path}: unreadable schema: {exc}") from exc
        meta = check_metadata(schema.metadata, str(self.path))
        stream_id = meta[META_STREAM_ID.decode()]
        from aos.schema import arrow_schema

        expected = arrow_schema(stream_id)
        if not schema.remove_metadata().equals(expected.remove_metadata(), check_metadata=True):
            try:
                names = ", ".join(schema.names)
            except UnicodeDecodeError:
                names = "(names that are not UTF-8)"
            raise StreamSchema(f"{self.path}: columns are [{names}], expected {', '.join(COLUMNS)} with v1 types")
        self.schema = expected
        self.stream_id = stream_id
        self.metadata = meta
        self.schema_end = frame.end

    # -- batches ---------------------------------------------------------------------

    def batches(self, *, release: bool = True, start: int | None = None) -> Generator[RawBatch, None, None]:
        """Each complete batch in order; stops at the end or at the first damage.

        With ``release=False`` the mapped pages of the batches read are not given back here: the caller
        does it (:meth:`release`) when it is done with their bytes (``aos.ahead``: this runs a batch ahead).
        With ``start`` the walk begins at that byte (a batch's first byte, from elsewhere: a byte that
        begins no message is damage like any other) instead of after the schema.
        """
        pos = self.schema_end if start is None else max(start, self.schema_end)
        size = self.size
        while pos < size:
            rest = size - pos
            head = bytes(self.view[pos : pos + 8])
            if head == EOS:
                self.eos_at = pos
                if rest > 8:
                    self.damage = StreamChain(
                        f"{rest - 8} bytes follow the end-of-stream marker at byte {pos}", offset=pos + 8
                    )
                return
            if rest < 8 and EOS.startswith(head):
                self.damage = StreamTruncated(
                    f"the end-of-stream marker at byte {pos} is cut short ({rest} of 8 bytes)", offset=pos
                )
                return
            try:
                frame = batch_frame(self.view, pos, size)
            except Cut as exc:
                self.damage = StreamTruncated(
                    f"the {rest} bytes after the last complete batch (ending at byte {pos}) "
                    f"are the start of a message cut short: {exc}",
                    offset=pos,
                )
                return
            except Malformed as exc:
                self.damage = StreamChain(f"the {rest} bytes at byte {pos} are not a message: {exc}", offset=pos)
                return
            try:
                message = self._ipc.read_message(self._buf.slice(pos, frame.end - pos))
                if message.type != "record batch":
                    raise ValueError(f"it is a {message.type}, not a batch")
                batch = self._decode(pos, frame.end)
                batch.validate(full=True)
            except Exception as exc:
                if machine_error(exc):
                    raise  # a thread or memory the machine could not give: not damage
                self.damage = StreamChain(f"the batch at byte {pos} does not decode: {exc}", offset=pos)
                return
            nulls = null_damage(batch, pos)
            if nulls is not None:
                self.damage = nulls
                return
            yield RawBatch(pos, frame.end, batch)
            if release:
                self.release(frame.end)
            pos = frame.end

    def _decode(self, start: int, end: int) -> pa.RecordBatch:
        """The batch of the frame (already checked) from ``start`` to ``end``, decoded on this thread.

        A stream reader of pyarrow's walks the same bytes in step with ``batches()``: it is the one
        way pyarrow takes read options (:func:`read_options`: on this thread). It must end where the
        frame ends.
        """
        if self._decoder is None:
            self._source = self._pa.BufferReader(self._buf)
            self._decoder = self._ipc.open_stream(self._source, options=read_options())
            if self._source.tell() != self.schema_end:
                raise ValueError(f"pyarrow read the schema to byte {self._source.tell()}, not {self.schema_end}")
        assert self._source is not None
        self._source.seek(start)  # where this frame starts (batches() may be walked more than once)
        batch = self._decoder.read_next_batch()
        if self._source.tell() != end:
            raise ValueError(f"pyarrow read the batch to byte {self._source.tell()}, its frame ends at {end}")
        return batch

    def events(self) -> Iterator[Event]:
        """Every event of every complete batch, in order. A batch whose values do not convert ends it
        and is recorded in ``damage`` (``stream-chain``), as ``batches()`` records what it cannot frame."""
        for raw in self.batches():
            try:
                events = batch_events(raw.batch)
            except Exception as exc:
                if machine_error(exc):
                    raise
                self.damage = StreamChain(f"the batch at byte {raw.start} holds values that do not decode: {exc}")
                return
            yield from events

    def release(self, upto: int) -> None:
        """Give back the mapped pages of the file before ``upto`` (whole pages only): the batches
        before it are decoded and their consumer has moved on, so reading a stream of any size
        holds a batch's worth of the file, not all of it. The pages come back from the file if
        read again (``view`` stays valid)."""
        if self._mm is None:
            return
        end = upto - upto % mmap.PAGESIZE
        if end > self._released:
            try:
                self._mm.madvise(mmap.MADV_DONTNEED, self._released, end - self._released)
            except (OSError, ValueError):  # pragma: no cover - advice only
                return
            self._released = end

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


def open_buffer(data: bytes | bytearray, name: str) -> StreamFile:
    """A ``StreamFile`` over bytes in memory (``name`` is used in refusals only)."""
    return StreamFile(name, data=data)


def batch_events(batch: pa.RecordBatch) -> list[Event]:
    """The events of one batch, in order (strings and bytes exactly as stored)."""
    cols: list[list[Any]] = [batch.column(i).to_pylist() for i in range(len(COLUMNS))]
    return [
        Event(seq, wall, mono, kind, step, attrs, data, h)
        for seq, wall, mono, kind, step, attrs, data, h in zip(*cols, strict=True)
    ]


#: One row as ``batch_rows`` gives it: the columns of ``COLUMNS``, ``data`` a view into the batch's buffer.
Row = tuple[int, int, int, str, "str | None", str, "memoryview | None", bytes]


def batch_rows(batch: pa.RecordBatch) -> list[Row]:
    """The rows of one batch like ``batch_events``, without building events or copying ``data``:
    each ``data`` is a ``memoryview`` of the batch's own buffer (None where null). For the verifier,
    which hashes every byte once and keeps none: copying each chunk out cost a memcpy per byte."""
    cols: list[list[Any]] = [batch.column(i).to_pylist() for i in range(len(COLUMNS)) if i != _DATA]
    datas = _binary_views(batch.column(_DATA))
    return [
        (seq, wall, mono, kind, step, attrs, data, h)
        for (seq, wall, mono, kind, step, attrs, h), data in zip(zip(*cols, strict=True), datas, strict=True)
    ]


_DATA = COLUMNS.index("data")


def _binary_views(column: Any) -> list[memoryview | None]:
    """A binary column's values as views of its data buffer (None where null)."""
    validity, offsets_buf, data_buf = column.buffers()
    n, start = len(column), column.offset
    offsets = memoryview(offsets_buf).cast("B").cast("i")[start : start + n + 1] if n else memoryview(b"")
    data = memoryview(data_buf) if data_buf is not None else memoryview(b"")
    bits = memoryview(validity) if validity is not None and column.null_count else None
    out: list[memoryview | None] = []
    for i in range(n):
        if bits is not None and not (bits[(start + i) >> 3] >> ((start + i) & 7)) & 1:
            out.append(None)
        else:
            out.append(data[offsets[i] : offsets[i + 1]])
    return out


def iter_events(path: str | os.PathLike[str]) -> Iterator[Event]:
    """Every event of every complete batch, streamed; damage ends it quietly."""
    with StreamFile(path) as f:
        for raw in f.batches():
            yield from batch_events(raw.batch)


def read_stream(path: str | os.PathLike[str]) -> StreamContents:
    """Read all complete batches (a stream still being written reads fine).

    Raises only ``stream-missing``, ``stream-schema``, (for a file cut
    inside its schema message) ``stream-truncated`` and the machine's own
    errors (``aos.resources``); any other damage is
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
            except Exception as exc:
                if machine_error(exc):
                    raise
                f.damage = StreamChain(f"the batch at byte {raw.start} holds values that do not decode: {exc}")
                break
            n += 1
            intact = raw.end
        return StreamContents(f.path, f.stream_id, events, f.damage, intact, n, f.metadata)

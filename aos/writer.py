"""The append-only stream writer.

One ``write()`` per batch (each batch is encoded into memory, as pyarrow
encodes it, by ``aos.ipc`` without importing pyarrow, then written whole),
never a seek: a recorder killed at any moment leaves a file whose complete
batches read and verify. Events are hashed into the chain as they are appended;
a batch is flushed when it is full, when its oldest event is ``flush_interval``
old (a background thread sees to that while events arrive), or on demand. A
``checkpoint`` event closes the first batch flushed after each
``checkpoint_interval``. The ``seal`` event goes in a batch of its own and
commits to the chain head, the event count and the BLAKE3 digest of every file
byte before its batch: the digest of the bytes this writer wrote, never of the
file re-read from its path.

With ``keep_copy=True`` every byte written to the stream is also written to a
private, nameless copy (``O_TMPFILE``: no path, so a process that can rename or
rewrite the stream file cannot reach it), and ``written_events()`` reads the
events back from that copy, checked against the writer's own running digest.
A gate evaluates those: exactly the events the writer appended, whatever the
recorded command did to the file at ``path`` meanwhile.

With ``pipelined=True`` batches are compressed by a pool of ``encoders``
threads (by default one per core, up to ``MAX_ENCODERS``) and written in order
by one more, while the caller goes on appending (and hashing); zstd and BLAKE3
release the GIL, so compression spreads over the cores. Each batch is compressed
whole on one encoder thread (a batch has one large buffer, so fanning its 20
buffers out would buy nothing and cost wake-ups).
At most ``encoders + 1`` batches wait for or are in compression, so memory
stays bounded by about ``(encoders + 2) * batch_max_bytes``; ``flush()`` and
``seal()`` wait for them, and a write failure surfaces on the next ``append``,
``flush`` or ``seal``.

Copies per byte of ``data``: none into the batch when it is one event's bytes
(they are the column's buffer as they are), one join otherwise; zstd reads them
once; the compressed frames are joined once into the message, which is written
to the stream and, with ``keep_copy``, the same bytes to the private copy.
"""

from __future__ import annotations

import os
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from blake3 import blake3

from aos.canonical import canonical_json
from aos.chain import checkpoint_message, genesis, link, seal_message
from aos.event import Event
from aos.framing import MAX_BATCH_BYTES, MAX_BATCH_ROWS, MAX_EVENT_BYTES
from aos.ipc import batch_message, schema_message
from aos.kinds import CHECKPOINT, SEAL
from aos.refusals import StreamWrite

if TYPE_CHECKING:
    from aos.signing import Signer

__all__ = ["MAX_ENCODERS", "FsyncPolicy", "SealInfo", "StreamWriter", "default_encoders", "new_stream_id"]

FsyncPolicy = Literal["never", "batch", "seal"]

_RESERVED = frozenset({SEAL, CHECKPOINT})
_EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"
#: How much of the private copy ``iter_written_events`` reads at a time.
_READ_WINDOW = 1 << 20
#: What a batch's fixed-width columns, offsets and validity take per row, rounded up (73 bytes).
_ROW_BYTES = 80
#: Room kept in every batch for the checkpoint a flush may add, and for rounding.
_BATCH_RESERVE = 4 << 10


#: The most encoder threads ``default_encoders`` gives: zstd level 1 compresses log text at
#: ~0.45 GB/s a core, so 4 compress ~1.8 GB/s, about what one thread can read and mask from
#: a pipe; each costs about two batches of memory in flight (with 1 MiB batches, the
#: recorder's peak RSS is ~88 MB with 2, ~93 MB with 4, ~102 MB with 6).
MAX_ENCODERS = 4


def default_encoders() -> int:
    """Encoder threads for a pipelined writer: the cores this process may use, 2 to ``MAX_ENCODERS``."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(2, min(cores, MAX_ENCODERS))


def new_stream_id() -> str:
    """A fresh stream id: 32 lowercase hex digits (a random UUID)."""
    return uuid.uuid4().hex


@dataclass(frozen=True)
class SealInfo:
    """What a seal committed to."""

    stream_id: str
    path: Path
    seq: int
    head: str
    events: int
    bytes: int
    file_blake3: str
    signature: str | None
    key_id: str | None


class StreamWriter:
    """Writes one AOS stream. Thread-safe; ``append`` may be called from any thread."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        stream_id: str | None = None,
        signer: Signer | None = None,
        flush_interval: float = 0.1,
        checkpoint_interval: float = 1.0,
        batch_max_bytes: int = 4 << 20,
        batch_max_events: int = 8192,
        fsync: FsyncPolicy = "seal",
        compression_level: int = 1,
        background_flush: bool = True,
        exclusive: bool = True,
        clock: Callable[[], tuple[int, int]] | None = None,
        pipelined: bool = False,
        encoders: int | None = None,
        keep_copy: bool = False,
    ) -> None:
        self.path = Path(path)
        self.stream_id = stream_id or new_stream_id()
        self.signer = signer
        self.flush_interval = flush_interval
        self.checkpoint_interval = checkpoint_interval
        # A v1 batch holds at most MAX_BATCH_ROWS rows and MAX_BATCH_BYTES bytes uncompressed
        # (aos.framing; readers refuse more): the writer cuts batches inside both.
        self.batch_max_bytes = min(batch_max_bytes, MAX_BATCH_BYTES)
        self.batch_max_events = max(1, min(batch_max_events, MAX_BATCH_ROWS - 1))
        self.fsync = fsync
        self._clock = clock
        self.compression_level = compression_level
        self._lock = threading.RLock()
        self._prev = genesis(self.stream_id)
        self._seq = 0
        self._sealed: SealInfo | None = None
        self._closed = False
        self.failure: StreamWrite | None = None
        self._digest = blake3()
        self._bytes = 0
        self._clear_pending()
        self._last_checkpoint = time.monotonic()
        self._last_checkpoint_seq: int | None = None

        flags = os.O_WRONLY | os.O_CREAT | (os.O_EXCL if exclusive else os.O_TRUNC)
        try:
            self._fd: int | None = os.open(self.path, flags | getattr(os, "O_CLOEXEC", 0), 0o644)
        except OSError as exc:
            raise StreamWrite(f"cannot create {self.path}: {exc.strerror or exc}") from exc
        #: The file this writer opened at ``path`` (its device, inode and mode), to tell it from another later.
        self.opened: os.stat_result = os.fstat(self._fd)
        self._copy_fd: int | None = None
        if keep_copy:
            try:
                self._copy_fd = _private_copy(self.path.parent)
            except OSError as exc:
                os.close(self._fd)
                raise StreamWrite(f"cannot create a private copy beside {self.path}: {exc.strerror or exc}") from exc
        # The messages are pyarrow's, byte for byte, encoded without it (aos.ipc): no pyarrow import to write.
        self._write_bytes(schema_message(self.stream_id))

        self._jobs: queue.Queue[Future[Any] | None] | None = None
        self._io: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None
        self.encoders = 0
        if pipelined:
            # Batches are encoded (compressed) by a pool while the caller goes on appending
            # and hashing; one thread writes them in order. The queue of encodings bounds
            # how many batches are in flight, so memory stays bounded.
            self.encoders = max(1, encoders if encoders is not None else default_encoders())
            self._pool = ThreadPoolExecutor(max_workers=self.encoders, thread_name_prefix="aos-encode")
            self._jobs = queue.Queue(maxsize=self.encoders + 1)
            self._io = threading.Thread(target=self._io_loop, name="aos-io", daemon=True)
            self._io.start()

        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None
        if background_flush and flush_interval > 0:
            self._flusher = threading.Thread(target=self._flush_loop, name="aos-flush", daemon=True)
            self._flusher.start()

    # -- appending -----------------------------------------------------------------

    @property
    def head(self) -> bytes:
        """The hash of the last appended event (the genesis before any)."""
        return self._prev

    @property
    def events(self) -> int:
        """How many events have been appended."""
        return self._seq

    @property
    def bytes_written(self) -> int:
        return self._bytes

    @property
    def sealed(self) -> SealInfo | None:
        return self._sealed

    def digest(self) -> bytes:
        """The BLAKE3 digest of every byte written so far (after the seal: of the whole stream)."""
        with self._lock:
            return self._digest.digest()

    def dup_copy(self) -> int | None:
        """A descriptor of the private copy of the caller's own (it closes it), or None without a copy.

        It stays valid after the writer closed; read it with ``pread`` (its offset is shared).
        """
        with self._lock:
            return None if self._copy_fd is None else os.dup(self._copy_fd)

    def append(
        self,
        kind: str,
        attrs: dict[str, Any] | None = None,
        data: bytes | None = None,
        step: str | None = None,
        *,
        wall_ns: int | None = None,
        mono_ns: int | None = None,
    ) -> int:
        """Append one event; returns its seq. Raises ``StreamWrite`` once writing failed."""
        if kind in _RESERVED:
            raise ValueError(f"kind {kind!r} is written by the writer itself (flush and seal)")
        attrs_json = canonical_json(attrs if attrs is not None else {})
        if data is not None and not isinstance(data, bytes):
            data = bytes(data)
        size = _event_bytes(kind, step, attrs_json, data)
        if size - _ROW_BYTES > MAX_EVENT_BYTES:
            raise ValueError(
                f"a {kind} event of {size - _ROW_BYTES} bytes (kind, step, attrs and data): "
                f"a v1 event holds at most {MAX_EVENT_BYTES}"
            )
        with self._lock:
            if self._sealed is not None or self._closed:
                raise StreamWrite(f"{self.path} is already sealed; nothing can follow the seal")
            if self.failure is not None:
                raise self.failure
            if self._p_seq and self._pending_size + size > MAX_BATCH_BYTES - _BATCH_RESERVE:
                self._flush_locked(allow_checkpoint=True)
            seq = self._add(kind, step, attrs_json, data, wall_ns, mono_ns, size)
            if (
                self._pending_bytes >= self.batch_max_bytes
                or len(self._p_seq) >= self.batch_max_events
                or time.monotonic() - self._pending_since >= self.flush_interval
            ):
                self._flush_locked(allow_checkpoint=True)
            return seq

    def _add(
        self,
        kind: str,
        step: str | None,
        attrs_json: str,
        data: bytes | None,
        wall_ns: int | None,
        mono_ns: int | None,
        size: int | None = None,
    ) -> int:
        seq = self._seq
        if (wall_ns is None or mono_ns is None) and self._clock is not None:
            cw, cm = self._clock()
            wall_ns = cw if wall_ns is None else wall_ns
            mono_ns = cm if mono_ns is None else mono_ns
        w = time.time_ns() if wall_ns is None else wall_ns
        m = time.monotonic_ns() if mono_ns is None else mono_ns
        h = link(self._prev, seq, w, m, kind, step, attrs_json, data)
        if not self._p_seq:
            self._pending_since = time.monotonic()
        self._p_seq.append(seq)
        self._p_wall.append(w)
        self._p_mono.append(m)
        self._p_kind.append(kind)
        self._p_step.append(step)
        self._p_attrs.append(attrs_json)
        self._p_data.append(data)
        self._p_hash.append(h)
        self._pending_bytes += len(attrs_json) + (len(data) if data else 0) + 64
        self._pending_size += _event_bytes(kind, step, attrs_json, data) if size is None else size
        self._prev = h
        self._seq = seq + 1
        return seq

    def _clear_pending(self) -> None:
        self._p_seq: list[int] = []
        self._p_wall: list[int] = []
        self._p_mono: list[int] = []
        self._p_kind: list[str] = []
        self._p_step: list[str | None] = []
        self._p_attrs: list[str] = []
        self._p_data: list[bytes | None] = []
        self._p_hash: list[bytes] = []
        self._pending_bytes = 0
        #: An upper bound on the pending batch's buffers, uncompressed (``_event_bytes`` summed).
        self._pending_size = 0
        self._pending_since = time.monotonic()

    # -- flushing ------------------------------------------------------------------

    def flush(self) -> None:
        """Write every pending event now (one batch)."""
        with self._lock:
            if self.failure is not None:
                raise self.failure
            self._flush_locked(allow_checkpoint=True)
            self._settle()

    def _checkpoint_attrs(self) -> dict[str, Any]:
        attrs: dict[str, Any] = {"head": self._prev.hex(), "events": self._seq}
        if self.signer is not None:
            attrs["signature"] = self.signer.sign(checkpoint_message(self.stream_id, self._prev, self._seq))
            attrs["key_id"] = self.signer.key_id
        return attrs

    def _flush_locked(self, *, allow_checkpoint: bool) -> None:
        if not self._p_seq:
            return
        now = time.monotonic()
        if allow_checkpoint and now - self._last_checkpoint >= self.checkpoint_interval:
            self._last_checkpoint = now
            self._last_checkpoint_seq = self._seq
            self._add(CHECKPOINT, None, canonical_json(self._checkpoint_attrs()), None, None, None)
        job = _Job(
            seq=self._p_seq,
            wall=self._p_wall,
            mono=self._p_mono,
            kind=self._p_kind,
            step=self._p_step,
            attrs=self._p_attrs,
            data=self._p_data,
            hash=self._p_hash,
        )
        self._clear_pending()
        if self._jobs is not None and self._pool is not None:
            self._jobs.put(self._pool.submit(self._encode_job, job))
        else:
            self._write_bytes(self._encode_job(job))
            if self.fsync == "batch":
                self._sync()

    def _encode_job(self, job: _Job) -> bytes:
        """One batch's record batch message (``aos.ipc``; its zstd frames compressed with the GIL released)."""
        return batch_message(
            job.seq, job.wall, job.mono, job.kind, job.step, job.attrs, job.data, job.hash, self.compression_level
        )

    def _io_loop(self) -> None:
        jobs = self._jobs
        assert jobs is not None
        while True:
            job = jobs.get()
            try:
                if job is None:
                    return
                encoded = job.result()
                if self.failure is None:
                    self._write_bytes(encoded)
                    if self.fsync == "batch":
                        self._sync()
            except StreamWrite:
                pass  # kept in self.failure; appends and flush raise it
            except Exception as exc:  # noqa: BLE001 - any failure to encode is a failed write
                self.failure = StreamWrite(f"cannot write {self.path}: {exc}")
            finally:
                jobs.task_done()

    def _settle(self) -> None:
        """Wait until every handed-over batch is written (pipelined mode); raise a failure."""
        if self._jobs is not None:
            self._jobs.join()
        if self.failure is not None:
            raise self.failure

    def _write_bytes(self, out: bytes | memoryview) -> None:
        if self._fd is None:
            raise StreamWrite(f"{self.path} is closed")
        try:
            _write_all(self._fd, out)
            if self._copy_fd is not None:
                _write_all(self._copy_fd, out)
        except OSError as exc:
            self.failure = StreamWrite(f"cannot write {self.path}: {exc.strerror or exc}")
            raise self.failure from exc
        self._digest.update(out)
        self._bytes += len(out)

    def _sync(self) -> None:
        if self._fd is None:
            return
        try:
            os.fsync(self._fd)
        except OSError as exc:
            self.failure = StreamWrite(f"cannot sync {self.path}: {exc.strerror or exc}")
            raise self.failure from exc

    def _flush_loop(self) -> None:
        tick = max(self.flush_interval / 4, 0.005)
        while not self._stop.wait(tick):
            with self._lock:
                if self._closed or self._sealed is not None or self.failure is not None:
                    return
                if self._p_seq and time.monotonic() - self._pending_since >= self.flush_interval:
                    try:
                        self._flush_locked(allow_checkpoint=True)
                    except StreamWrite:
                        return

    # -- reading back what was written ----------------------------------------------

    def written_events(self) -> list[Event]:
        """Every event appended so far, read back from the private copy (``keep_copy=True``).

        ``list(iter_written_events())``: see there.
        """
        return list(self.iter_written_events())

    def iter_written_events(self, window: int = _READ_WINDOW) -> Iterator[Event]:
        """Every event appended so far, read back from the private copy batch by batch.

        Flushes first (when the iteration starts). The copy is read with ``pread``
        about ``window`` bytes at a time and hashed as it is read, so memory holds
        one window and one batch's events, not the stream. The bytes are checked
        against the running digest of the bytes written to the stream, so what
        came back is exactly what the stream file holds unless something other
        than this writer changed that file, and the events' chain is checked to
        end at this writer's head: those checks can only be made when the whole
        copy has been read, so they are made when the iteration ends, and a
        caller must consume the iterator to its end before it acts on what it
        yielded (``observe.recorder.gating`` does, before it appends a verdict). Raises
        ``StreamWrite`` (at the start or at the end) when there is no copy, it
        cannot be read, or it disagrees with what was written; an error of the
        machine (``aos.resources``) as it is.
        """
        from aos.framing import Cut, Malformed, batch_frame, schema_frame
        from aos.reader import batch_events, open_buffer
        from aos.resources import machine_error

        with self._lock:
            if self._copy_fd is None:
                raise StreamWrite("this writer keeps no private copy (keep_copy=False)")
            self._flush_locked(allow_checkpoint=False)
            self._settle()
            size, expected, head, count = self._bytes, self._digest.digest(), self._prev, self._seq
            fd = self._copy_fd
        name = f"{self.path} (private copy)"
        whole = StreamWrite(f"the private copy of {self.path} does not hold the bytes written")
        digest = blake3()
        buf = bytearray()  # the copy's bytes from ``base`` to ``read``, not yet handed to the reader
        base = read = 0

        def fill(want: int) -> None:
            nonlocal read
            while read < size and len(buf) < want:
                try:
                    chunk = os.pread(fd, min(size - read, max(want - len(buf), window)), read)
                except OSError as exc:
                    if machine_error(exc):
                        raise
                    raise StreamWrite(f"cannot read the private copy of {self.path}: {exc}") from exc
                if not chunk:
                    raise whole
                digest.update(chunk)
                buf.extend(chunk)
                read += len(chunk)

        # The schema message first: every later window is read as schema + whole batches.
        fill(window)
        while True:
            try:
                schema_end = schema_frame(memoryview(bytes(buf)), len(buf)).end
                break
            except Cut:
                if read >= size:
                    raise whole from None
                fill(2 * len(buf))
            except Malformed as exc:
                raise StreamWrite(f"the private copy of {self.path} does not read back: {exc}") from None
        schema = bytes(buf[:schema_end])
        del buf[:schema_end]
        base = schema_end
        seen, last = 0, b""
        while base < size:
            fill(window)
            view = memoryview(bytes(buf))
            at = 0
            while at < len(view):
                try:
                    at = batch_frame(view, at, len(view)).end
                except Cut:
                    break
                except Malformed as exc:
                    raise StreamWrite(f"the private copy of {self.path} does not read back: {exc}") from None
            if at == 0:  # one batch larger than the window: read on
                if read >= size:
                    raise whole
                fill(2 * len(buf))
                continue
            with open_buffer(schema + view[:at], name) as f:
                for raw in f.batches():
                    try:
                        batch = batch_events(raw.batch)
                    except Exception as exc:
                        if machine_error(exc):
                            raise  # the machine's failure (aos.resources), not a copy that differs
                        raise StreamWrite(f"the private copy of {self.path} does not read back: {exc}") from None
                    for ev in batch:
                        seen += 1
                        last = ev.hash
                        yield ev
                damage = f.damage
            if damage is not None:
                raise StreamWrite(f"the private copy of {self.path} does not read back whole: {damage}")
            del buf[:at]
            base += at
        if read != size or digest.digest() != expected:
            raise whole
        if seen != count or (seen and last != head):
            raise StreamWrite(f"the private copy of {self.path} does not read back whole: it ends at event {seen}")

    # -- sealing -------------------------------------------------------------------

    def seal(self) -> SealInfo:
        """Flush, append the seal in a batch of its own, end the stream and close."""
        with self._lock:
            if self._sealed is not None:
                return self._sealed
            if self.failure is not None:
                raise self.failure
            self._flush_locked(allow_checkpoint=False)
            self._settle()
            head, events, nbytes = self._prev, self._seq, self._bytes
            file_digest = self._digest.digest()
            attrs: dict[str, Any] = {
                "head": head.hex(),
                "events": events,
                "bytes": nbytes,
                "file_blake3": file_digest.hex(),
            }
            signature = key = None
            if self.signer is not None:
                signature = self.signer.sign(seal_message(self.stream_id, head, events, nbytes, file_digest))
                key = self.signer.key_id
                attrs["signature"], attrs["key_id"] = signature, key
            seq = self._add(SEAL, None, canonical_json(attrs), None, None, None)
            self._flush_locked(allow_checkpoint=False)
            self._settle()
            self._write_bytes(_EOS)
            if self.fsync != "never":
                self._sync()
            self._sealed = SealInfo(
                self.stream_id, self.path, seq, head.hex(), events, nbytes, file_digest.hex(), signature, key
            )
        self.close()
        return self._sealed

    def close(self) -> None:
        """Stop the flusher and close the file. Pending events are flushed (unsealed)."""
        self._stop.set()
        if self._flusher is not None and self._flusher is not threading.current_thread():
            self._flusher.join()
        with self._lock:
            if self._closed:
                return
            try:
                if self._sealed is None and self.failure is None:
                    self._flush_locked(allow_checkpoint=False)
            finally:
                if self._jobs is not None and self._io is not None:
                    self._jobs.join()
                    self._jobs.put(None)
                    self._io.join()
                if self._pool is not None:
                    self._pool.shutdown(wait=True)
                self._closed = True
                if self._fd is not None:
                    os.close(self._fd)
                    self._fd = None
                if self._copy_fd is not None:
                    os.close(self._copy_fd)
                    self._copy_fd = None

    def __enter__(self) -> StreamWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _event_bytes(kind: str, step: str | None, attrs_json: str, data: bytes | None) -> int:
    """An upper bound on what one event adds to its batch's buffers, uncompressed."""
    return (
        _ROW_BYTES
        + _utf8_len(kind)
        + (_utf8_len(step) if step is not None else 0)
        + _utf8_len(attrs_json)
        + (len(data) if data else 0)
    )


def _write_all(fd: int, out: bytes | memoryview) -> None:
    view = memoryview(out)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _private_copy(directory: Path) -> int:
    """A nameless read-write file: ``O_TMPFILE`` in ``directory`` (else in the temp dir).

    It has no path, so no other process can open it by name; with the recorder
    made non-dumpable, not through ``/proc/PID/fd`` either (root excepted).
    """
    import tempfile

    flags = os.O_RDWR | getattr(os, "O_CLOEXEC", 0)
    tmpfile = getattr(os, "O_TMPFILE", 0)
    if tmpfile:
        for where in (directory, Path(tempfile.gettempdir())):
            try:
                return os.open(where, flags | tmpfile, 0o600)
            except OSError:
                continue
    fd, name = tempfile.mkstemp(prefix=".aos-copy-")
    os.unlink(name)
    return fd


@dataclass(frozen=True, slots=True)
class _Job:
    """One batch's columns, handed from the appending side to the writing side."""

    seq: list[int]
    wall: list[int]
    mono: list[int]
    kind: list[str]
    step: list[str | None]
    attrs: list[str]
    data: list[bytes | None]
    hash: list[bytes]

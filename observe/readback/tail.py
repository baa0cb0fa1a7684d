"""``alpha observe tail``: follow a stream while it is written, like ``tail -f``.

The stream is read as it grows, batch by batch (the writer flushes one at least
every 100 ms while output flows). Recorded stdout bytes go to stdout and stderr
bytes to stderr, exactly; following stops at the seal.

It never waits forever. Each time the stream has not grown for the idle limit
(``--idle``, default ``IDLE`` seconds) tail checks on the recorder that
``stream.open`` names (its pid, on this host): while it runs, tail goes on
waiting (a quiet command writes nothing); once it is gone, or cannot be checked
(another host, no ``stream.open`` yet), tail ends with ``stream-unsealed``. A
file that does not exist is waited for up to the idle limit (the recorder may
not have created it yet), then refused as ``stream-missing``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from aos.attrs import json_int
from aos.kinds import OUTPUT, SEAL, STDOUT, STREAM_OPEN
from aos.reader import require_regular
from aos.refusals import StreamChain, StreamMissing, StreamSchema, StreamTruncated, StreamUnsealed

__all__ = ["IDLE", "GaveUp", "follow", "recorder_alive"]

POLL = 0.02
#: Seconds without growth after which tail checks that the recorder still runs (``--idle``).
IDLE = 10.0
_CONTINUATION = b"\xff\xff\xff\xff"


class GaveUp(Exception):
    """The stream stopped growing and its recorder is gone (``idle``), or the overall timeout passed."""


def recorder_alive(pid: Any, host: Any, started_ns: Any) -> bool:
    """True when the recorder ``stream.open`` names still runs: pid ``pid`` on this host, started
    no later than the stream (a reused pid started after it is someone else). False when it
    cannot be checked from here (another host, no /proc)."""
    import socket

    if json_int(pid) is None or pid <= 0 or host != socket.gethostname():
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        with open("/proc/stat", "rb") as fh:
            btime = next(int(line.split()[1]) for line in fh if line.startswith(b"btime "))
        state, start_ticks = fields[0], int(fields[19])
    except (OSError, IndexError, ValueError, StopIteration):
        return False
    if state in (b"Z", b"X"):
        return False
    if json_int(started_ns) is not None:
        started_s = btime + start_ticks / os.sysconf("SC_CLK_TCK")
        if started_s > started_ns / 1e9 + 2:  # btime is whole seconds: allow for rounding
            return False
    return True


#: The most one ``read`` of the followed file asks for at once.
CHUNK = 1 << 20


class _Growing:
    """A read-only file object whose ``read(n)`` waits until ``n`` bytes exist.

    ``alive()`` is asked each time nothing arrived for ``idle`` seconds; when it says
    the writer is gone, reading gives up (``GaveUp("idle")``).
    """

    def __init__(self, path: Path, idle: float, deadline: float | None) -> None:
        self.idle = idle
        self.deadline = deadline
        self.closed = False
        self.alive: Any = lambda: False
        self._last = time.monotonic()
        while True:
            try:
                # Never block in open(): a FIFO or a terminal is refused below, not waited on.
                self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
                break
            except FileNotFoundError:
                self._wait()  # the recorder may not have created it yet
        try:
            require_regular(self._fd, path)
        except StreamMissing:
            os.close(self._fd)
            raise
        self._pos = 0
        self._pushback = b""

    def unread(self, data: bytes) -> None:
        """Put bytes back in front (used to peek at the file's first bytes)."""
        self._pushback = data + self._pushback
        self._pos -= len(data)

    def _wait(self) -> None:
        now = time.monotonic()
        if self.deadline is not None and now >= self.deadline:
            raise GaveUp("timeout")
        if now - self._last >= self.idle:
            if not self.alive():
                raise GaveUp("idle")
            self._last = now  # the recorder runs: a quiet command; check again after the next idle period
        time.sleep(POLL)

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            n = 1 << 20
        parts: list[bytes] = []
        if self._pushback:
            head, self._pushback = self._pushback[:n], self._pushback[n:]
            parts.append(head)
            self._pos += len(head)
        need = n - sum(len(p) for p in parts)
        while need:
            # Never ask the kernel for more than a chunk: a damaged length field can ask for ~100 GB,
            # and the bytes that are there arrive a chunk at a time (then the idle rule decides).
            chunk = os.read(self._fd, min(need, CHUNK))
            if chunk:
                parts.append(chunk)
                need -= len(chunk)
                self._pos += len(chunk)
                self._last = time.monotonic()
            else:
                self._wait()
        return b"".join(parts)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def writable(self) -> bool:
        return False

    def tell(self) -> int:
        return self._pos

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            os.close(self._fd)


class _OutputClosed(Exception):
    """Where tail prints went away (``tail | head``)."""


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except OSError as exc:
            raise _OutputClosed(str(exc)) from None


def follow(
    path: str | os.PathLike[str],
    *,
    idle: float | None = None,
    timeout: float | None = None,
    out_fd: int = 1,
    err_fd: int = 2,
) -> bool:
    """Print the stream's output as it is recorded; True at the seal, False when ``timeout`` passed.

    Raises ``StreamSchema`` for a file that is not an AOS stream (or a batch with a
    null where none may be), ``StreamChain`` for a message that does not decode,
    ``StreamTruncated`` for one that cannot be read on, ``StreamMissing`` for one
    that never appeared or is not a regular file,
    ``StreamUnsealed`` for one that stopped growing without a seal and whose recorder
    is gone (checked after every ``idle`` seconds without growth; default ``IDLE``).
    """
    import pyarrow as pa

    idle = IDLE if idle is None else idle
    deadline = time.monotonic() + timeout if timeout is not None else None
    try:
        source = _Growing(Path(path), idle, deadline)
    except GaveUp as exc:
        if not os.path.exists(path):
            raise StreamMissing(f"{path} does not exist (waited {idle:g} s for it)") from None
        if str(exc) == "timeout":
            return False
        raise StreamUnsealed(f"{path} appeared but could not be opened") from None
    except OSError as exc:
        raise StreamMissing(f"cannot open {path}: {exc.strerror or exc}") from exc
    try:
        return _follow(source, str(path), out_fd, err_fd)
    except _OutputClosed:
        return False
    except GaveUp as exc:
        if str(exc) == "timeout":
            return False
        raise StreamUnsealed(
            f"{path} has not grown for {idle:g} s and its recorder is gone (or cannot be checked from here): "
            "stopped before the seal"
        ) from None
    except (pa.ArrowException, OSError, ValueError, TypeError, KeyError, IndexError) as exc:
        raise StreamTruncated(f"{path}: cannot be read on: {type(exc).__name__}: {exc}") from None
    finally:
        source.close()


def _follow(source: _Growing, path: str, out_fd: int, err_fd: int) -> bool:
    import pyarrow as pa
    import pyarrow.ipc as ipc

    from aos.reader import check_metadata, null_damage, read_options
    from aos.schema import arrow_schema

    head = source.read(4)
    if head != _CONTINUATION:
        raise StreamSchema(f"{path} is not an AOS stream (no Arrow IPC stream header)")
    source.unread(head)
    try:
        reader = ipc.open_stream(source, options=read_options())
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise StreamSchema(f"{path} is not an AOS stream: {exc}") from None
    expected = arrow_schema(check_metadata(reader.schema.metadata, path)["aos.stream_id"])
    if not reader.schema.remove_metadata().equals(expected.remove_metadata(), check_metadata=True):
        raise StreamSchema(f"{path}: its columns are not those of an AOS v1 stream")
    while True:
        start = source.tell()
        try:
            batch = reader.read_next_batch()
            batch.validate(full=True)
        except StopIteration:
            return False  # the end of the stream without a seal
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise StreamChain(f"{path}: the message at byte {start} does not decode: {exc}") from None
        nulls = null_damage(batch, start)
        if nulls is not None:
            raise nulls
        kinds = batch.column("kind").to_pylist()
        data = batch.column("data")
        for i, kind in enumerate(kinds):
            if kind in OUTPUT:
                chunk = data[i].as_py()
                if isinstance(chunk, bytes) and chunk:
                    _write(out_fd if kind == STDOUT else err_fd, chunk)
            elif kind == STREAM_OPEN:
                _watch_recorder(source, batch, i)
            elif kind == SEAL:
                return True


def _watch_recorder(source: _Growing, batch: Any, i: int) -> None:
    """From ``stream.open``: the recorder (pid, host, start) whose liveness decides how long to wait."""
    import json

    try:
        attrs = json.loads(batch.column("attrs")[i].as_py() or "{}")
    except (ValueError, TypeError):
        return
    if isinstance(attrs, dict):
        started = batch.column("wall_ns")[i].as_py()
        pid, host = attrs.get("pid"), attrs.get("host")
        source.alive = lambda: recorder_alive(pid, host, started)

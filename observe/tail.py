"""``alpha observe tail``: follow a stream while it is written, like ``tail -f``.

The stream is read as it grows, batch by batch (the writer flushes one at least
every 100 ms while output flows). Recorded stdout bytes go to stdout and stderr
bytes to stderr, exactly; following stops at the seal.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from aos.reader import require_regular
from aos.refusals import StreamChain, StreamMissing, StreamSchema

__all__ = ["GaveUp", "follow"]

POLL = 0.02
_CONTINUATION = b"\xff\xff\xff\xff"


class GaveUp(Exception):
    """No new bytes within the idle limit, or the overall timeout passed."""


class _Growing:
    """A read-only file object whose ``read(n)`` waits until ``n`` bytes exist."""

    def __init__(self, path: Path, idle: float | None, deadline: float | None) -> None:
        self.idle = idle
        self.deadline = deadline
        self.closed = False
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
        if self.idle is not None and now - self._last >= self.idle:
            raise GaveUp("idle")
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
            chunk = os.read(self._fd, need)
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


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def follow(
    path: str | os.PathLike[str],
    *,
    idle: float | None = None,
    timeout: float | None = None,
    out_fd: int = 1,
    err_fd: int = 2,
) -> bool:
    """Print the stream's output as it is recorded; True at the seal, False when it gave up.

    Raises ``StreamSchema`` for a file that is not an AOS stream (or a batch
    with a null where none may be), ``StreamMissing`` for one that is not a
    regular file, ``StreamChain`` for a message that does not decode.
    """
    import pyarrow as pa
    import pyarrow.ipc as ipc

    from aos.reader import check_metadata, null_damage

    deadline = time.monotonic() + timeout if timeout is not None else None
    try:
        source = _Growing(Path(path), idle, deadline)
    except GaveUp:
        if not os.path.exists(path):
            raise StreamMissing(f"{path} does not exist") from None
        return False
    except OSError as exc:
        raise StreamMissing(f"cannot open {path}: {exc.strerror or exc}") from exc
    try:
        try:
            head = source.read(4)
            if head != _CONTINUATION:
                raise StreamSchema(f"{path} is not an AOS stream (no Arrow IPC stream header)")
            source.unread(head)
            reader = ipc.open_stream(source)
        except GaveUp:
            return False
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise StreamSchema(f"{path} is not an AOS stream: {exc}") from exc
        from aos.schema import arrow_schema

        expected = arrow_schema(check_metadata(reader.schema.metadata, str(path))["aos.stream_id"])
        if not reader.schema.remove_metadata().equals(expected.remove_metadata(), check_metadata=True):
            raise StreamSchema(f"{path}: its columns are not those of an AOS v1 stream")
        while True:
            start = source.tell()
            try:
                batch = reader.read_next_batch()
                batch.validate(full=True)
            except StopIteration:
                return False  # the end of the stream without a seal
            except GaveUp:
                return False
            except (pa.ArrowException, OSError, ValueError) as exc:
                raise StreamChain(f"{path}: the message at byte {start} does not decode: {exc}") from exc
            nulls = null_damage(batch, start)
            if nulls is not None:
                raise nulls
            kinds = batch.column("kind").to_pylist()
            data = batch.column("data")
            for i, kind in enumerate(kinds):
                if kind == "stdout" or kind == "stderr":
                    chunk = data[i].as_py()
                    if chunk:
                        _write(out_fd if kind == "stdout" else err_fd, chunk)
                elif kind == "seal":
                    return True
    finally:
        source.close()

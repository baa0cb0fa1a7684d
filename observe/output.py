"""Where captured bytes go: the terminal (``Echo``) and the stream (``Sink``).

The two fail independently. A stream that cannot be written any more (a full
disk) never stops the echo or the command: the ``Sink`` remembers the failure,
logs it once through structlog on the recorder's stderr, and drops further
events; the recording then ends in exit code 125.
"""

from __future__ import annotations

import os
import select
import sys
from typing import TYPE_CHECKING, Any

from aos.refusals import StreamWrite

if TYPE_CHECKING:
    from aos.writer import SealInfo, StreamWriter

__all__ = ["Echo", "Sink", "logger"]


def logger() -> Any:
    """The recorder's own diagnostics: key=value lines on stderr, never in the stream."""
    import structlog  # only when there is something to say: it costs start-up time

    return structlog.wrap_logger(
        structlog.PrintLogger(sys.stderr),
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.KeyValueRenderer(key_order=["level", "event"], drop_missing=True),
        ],
    )


class Echo:
    """Writes captured (already masked) bytes to the recorder's own stdout/stderr, unbuffered."""

    def __init__(self, enabled: bool, fds: dict[str, int] | None = None) -> None:
        self.fds: dict[str, int] = dict(fds or {"stdout": 1, "stderr": 2}) if enabled else {}

    def write(self, name: str, data: bytes) -> None:
        fd = self.fds.get(name)
        if fd is None or not data:
            return
        view = memoryview(data)
        while view:
            try:
                n = os.write(fd, view)
            except (BlockingIOError, InterruptedError):
                select.select([], [fd], [], 1.0)
                continue
            except OSError:
                # The terminal went away (EPIPE, EIO): keep recording, stop echoing there.
                self.fds.pop(name, None)
                return
            view = view[n:]


class Sink:
    """Appends events to the writer; after a write failure, drops them and remembers why."""

    def __init__(self, writer: StreamWriter) -> None:
        self.writer = writer
        self.failure: StreamWrite | None = None

    @property
    def failed(self) -> bool:
        return self.failure is not None

    def append(self, kind: str, attrs: dict[str, Any] | None = None, data: bytes | None = None,
               step: str | None = None) -> int | None:
        if self.failure is not None:
            return None
        try:
            return self.writer.append(kind, attrs, data, step)
        except StreamWrite as exc:
            self._fail(exc)
            return None

    def _fail(self, exc: StreamWrite) -> None:
        if self.failure is None:
            self.failure = exc
            logger().error("stream write failed; the command keeps running", detail=exc.detail)

    def flush(self) -> None:
        if self.failure is None:
            try:
                self.writer.flush()
            except StreamWrite as exc:
                self._fail(exc)

    def seal(self) -> SealInfo | None:
        if self.failure is not None:
            self.writer.close()
            return None
        try:
            return self.writer.seal()
        except StreamWrite as exc:
            self._fail(exc)
            self.writer.close()
            return None

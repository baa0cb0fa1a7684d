"""Where captured bytes go: the terminal (``Echo``) and the stream (``Sink``).

The two fail independently. A stream that cannot be written any more (a full
disk) never stops the echo or the command: the ``Sink`` remembers the failure,
logs it once through structlog on the recorder's stderr, and drops further
events; the recording then ends in exit code 125.
"""

from __future__ import annotations

import os
import queue
import select
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from aos.refusals import StreamWrite

if TYPE_CHECKING:
    from aos.writer import SealInfo, StreamWriter
    from observe.ci.systems import Markers
    from observe.recorder.progress import Progress

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
    """Writes captured (already masked) bytes to the recorder's own stdout/stderr, unbuffered.

    Under CI (``markers``, from ``observe.ci.systems``) each step is also folded in the
    CI's markers, written here only: the echo is the recorder's own output, the
    stream holds what the command wrote. A marker starts on a line of its own.
    On a terminal (``progress``, from ``observe.recorder.progress``) the status
    line is taken off before each write, so what is echoed is the command's bytes.
    """

    def __init__(
        self,
        enabled: bool,
        fds: dict[str, int] | None = None,
        markers: Markers | None = None,
        progress: Progress | None = None,
        expected_refusals: frozenset[str] = frozenset(),
    ) -> None:
        self.fds: dict[str, int] = dict(fds or {"stdout": 1, "stderr": 2}) if enabled else {}
        self.markers = markers if enabled else None
        self.progress = progress if enabled else None
        self.expected_refusals = expected_refusals
        self._controls: dict[str, str] = {}  # span -> name of an expected refusal control under way
        self._mid_line: dict[int, bool] = {}  # fd -> the last byte echoed there was not a newline

    def begin_step(self, span: str, name: str) -> None:
        """Open the CI's fold for a step that starts (nothing outside CI); label an expected refusal control."""
        if self.progress is not None:
            self.progress.step_started(span, name)
        if self.markers is not None:
            self._marker(self.markers.begin(span, name))
        if name in self.expected_refusals:
            self._controls[span] = name
            self._label(f"expected refusal control: step {name} must refuse; its 'refused:' line is expected")

    def end_step(self, span: str, exit_code: object) -> None:
        """Close the step's fold (nothing outside CI, or when the step got none)."""
        if self.progress is not None:
            self.progress.step_ended(span)
        name = self._controls.pop(span, None)
        if name is not None:
            self._label(f"end of expected refusal control {name} (exit {exit_code}; the gate judges the refusal)")
        if self.markers is not None:
            self._marker(self.markers.end(span, exit_code))

    def _label(self, text: str) -> None:
        """A line of the recorder's own on the echo's stderr (never in the stream), on a line of its own."""
        fd = self.fds.get("stderr")
        if fd is None:
            return
        from aos.text import display

        line = f"[alpha] {display(text)}\n".encode("utf-8", "backslashreplace")
        if self._mid_line.get(fd):
            line = b"\n" + line
        self._echo("stderr", line, output=False)

    def close_folds(self) -> None:
        """Close any fold still open (the recording ends); under GitHub, end the lines the command left open and
        resume workflow commands the command stopped, leaving them running for the recorder's annotations.
        The status line, on a terminal, is taken off for good."""
        self.close_progress()
        if self.markers is None:
            return
        commands = self.markers.commands
        if commands is not None:
            for name, fd in list(self.fds.items()):
                if self._mid_line.get(fd):  # a line left open could be a ::stop-commands:: the runner reads at EOF
                    self.write(name, b"\n")
        self._marker(self.markers.close_all(), again=False)
        if commands is None:
            return
        if commands.token is not None:
            self.write("stdout", commands.resume())
        elif commands.lost:
            sys.stderr.write(
                "alpha observe: the command stopped GitHub workflow commands with a token no line can resume; "
                "the runner will not process the recorder's annotations (its job summary and outputs are files, "
                "written all the same)\n"
            )
            sys.stderr.flush()

    def close_progress(self) -> None:
        """Take the status line off the terminal for good (again: nothing)."""
        progress, self.progress = self.progress, None
        if progress is not None:
            progress.close()

    def _marker(self, data: bytes, *, again: bool = True) -> None:
        """Echo a fold marker on a line of its own. Under GitHub, when the command stopped workflow commands, the
        marker goes between ``::TOKEN::`` and (``again``) the same stop, so the command's own lines stay as it
        meant them."""
        fd = self.fds.get("stdout")
        if not data or fd is None:
            return
        if self._mid_line.get(fd):
            self.write("stdout", b"\n")  # ends the command's line first (it may be the stop itself)
        commands = self.markers.commands if self.markers is not None else None
        token = commands.token if commands is not None else None
        if commands is not None and token is not None:
            data = commands.resume() + data + (commands.stop(token) if again else b"")
        self.write("stdout", data)

    def write(self, name: str, data: bytes) -> None:
        fd = self.fds.get(name)
        if fd is None or not data:
            return
        self._echo(name, data, output=True)

    def _echo(self, name: str, data: bytes, *, output: bool) -> None:
        fd = self.fds.get(name)
        if fd is None or not data:
            return
        progress = self.progress
        if progress is None:
            self._write(name, fd, data)
            return
        with progress.lock:
            progress.clear()
            self._write(name, fd, data)
            progress.wrote(data, output=output)

    def _write(self, name: str, fd: int, data: bytes) -> None:
        self._mid_line[fd] = not data.endswith(b"\n")
        if self.markers is not None and self.markers.commands is not None:
            self.markers.commands.feed(fd, data)  # what the runner reads, the recorder's own lines included
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


def _fitted(attrs: dict[str, Any] | None, data: bytes | None, kind: str, step: str | None) -> dict[str, Any]:
    """``attrs`` cut to what an event of ``data``, ``kind`` and ``step`` leaves them (aos.bounds.fit_attrs)."""
    from aos.bounds import fit_attrs
    from aos.framing import MAX_EVENT_BYTES

    room = MAX_EVENT_BYTES - len(data or b"") - 4 * (len(kind) + len(step or "")) - 4096
    return fit_attrs(attrs or {}, max(room, 1024))


class Sink:
    """Appends events to the writer from a worker thread, in order; after a write failure, drops them.

    Hashing, compressing and writing a batch run on the worker while the
    recorder's loop goes on reading and echoing (pyarrow releases the GIL while
    it compresses). The queue is bounded (``max_pending`` events of at most
    about 1 MiB each: observe.recorder.capture.READ_SIZE), so a slow disk slows the reading
    rather than filling memory; 4 is enough to keep the worker busy (it only hashes
    and hands batches to the writer's encoders). Timestamps are taken when an event
    is handed over, not when written.
    """

    def __init__(self, writer: StreamWriter, *, max_pending: int = 4) -> None:
        self.writer = writer
        self.failure: StreamWrite | None = None
        self._queue: queue.Queue[tuple[str, dict[str, Any] | None, bytes | None, str | None, int, int] | None] = (
            queue.Queue(maxsize=max_pending)
        )
        self._worker = threading.Thread(target=self._work, name="aos-sink", daemon=True)
        self._worker.start()

    @property
    def failed(self) -> bool:
        return self.failure is not None

    def append(
        self, kind: str, attrs: dict[str, Any] | None = None, data: bytes | None = None, step: str | None = None
    ) -> None:
        """Queue one event (its time is now)."""
        if self.failure is not None:
            return
        self._queue.put((kind, attrs, data, step, time.time_ns(), time.monotonic_ns()))

    def _work(self) -> None:
        q = self._queue
        while True:
            item = q.get()
            try:
                if item is None:
                    return
                if self.failure is None:
                    kind, attrs, data, step, wall_ns, mono_ns = item
                    try:
                        try:
                            self.writer.append(kind, attrs, data, step, wall_ns=wall_ns, mono_ns=mono_ns)
                        except ValueError:  # over the event bound: the attrs cut to fit, said in them (aos.bounds)
                            attrs = _fitted(attrs, data, kind, step)
                            self.writer.append(kind, attrs, data, step, wall_ns=wall_ns, mono_ns=mono_ns)
                    except StreamWrite as exc:
                        self._fail(exc)
                    except Exception as exc:  # noqa: BLE001 - a bad event must not kill the worker
                        self._fail(StreamWrite(f"cannot record a {kind} event: {type(exc).__name__}: {exc}"))
            finally:
                q.task_done()

    def _fail(self, exc: StreamWrite) -> None:
        if self.failure is None:
            self.failure = exc
            logger().error("stream write failed; the command keeps running", detail=exc.detail)

    def drain(self) -> None:
        """Wait until every queued event is in the writer (and so readable after a flush)."""
        self._queue.join()

    def flush(self) -> None:
        self.drain()
        if self.failure is None:
            try:
                self.writer.flush()
            except StreamWrite as exc:
                self._fail(exc)

    def stop(self) -> None:
        """Drain and end the worker thread."""
        if self._worker.is_alive():
            self._queue.put(None)
            self._worker.join()

    def seal(self) -> SealInfo | None:
        self.stop()
        if self.failure is not None:
            self.writer.close()
            return None
        try:
            return self.writer.seal()
        except StreamWrite as exc:
            self._fail(exc)
            self.writer.close()
            return None

"""The status line on a terminal: what is running, for how long, how far.

While ``record`` or ``gate`` runs with its stderr on a terminal, one line at the
bottom says the running step, the elapsed time, the steps done and the bytes
of output recorded. It is redrawn in place at most ``RATE`` times a second by a
thread of its own, and cleared before any of the command's output is echoed,
so the echo stays byte-exact; it is drawn only while the command's last echoed
byte ended a line (never in the middle of one of its lines). Off a terminal
there is no status line at all (``for_terminal`` gives None): logs and pipes get
exactly the command's bytes.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping

from observe.util.formatting import size

__all__ = ["RATE", "Progress", "for_terminal"]

#: Redraws a second, at most.
RATE = 4
#: Erase the line the cursor is on and go to its start (the status line is always the last line).
_CLEAR = b"\r\x1b[K"


def for_terminal(fd: int, env: Mapping[str, str]) -> Progress | None:
    """A status line on ``fd`` when it is a terminal (and ``TERM`` is not ``dumb``); else None."""
    try:
        tty = os.isatty(fd)
    except OSError:
        return None
    if not tty or env.get("TERM") == "dumb":
        return None
    return Progress(fd)


class Progress:
    """One status line on terminal ``fd``. ``clear`` before writing there; ``wrote`` after; ``close`` at the end."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.lock = threading.Lock()  # held by the echo around each write, and by each redraw
        self._started = time.monotonic()
        self._open: dict[str, str] = {}  # span -> step name, in the order they started
        self._done = 0
        self._bytes = 0
        self._shown = False
        self._text = ""  # what the line shows while ``_shown``
        self._mid_line = False  # the command's last echoed byte did not end a line
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="alpha-progress", daemon=True)
        self._thread.start()

    # -- what the echo tells it (the caller holds ``lock``) ---------------------------------

    def clear(self) -> None:
        """Take the status line off the terminal (before the echo writes)."""
        if self._shown:
            self._write(_CLEAR)
            self._shown = False

    def wrote(self, data: bytes, *, output: bool = True) -> None:
        """The echo wrote ``data``; ``output``: the command's bytes (counted as recorded)."""
        if data:
            self._mid_line = not data.endswith(b"\n")
            if output:
                self._bytes += len(data)

    # -- steps (any thread) -----------------------------------------------------------------

    def step_started(self, span: str, name: str) -> None:
        with self.lock:
            self._open[span] = name

    def step_ended(self, span: str) -> None:
        with self.lock:
            if self._open.pop(span, None) is not None:
                self._done += 1

    def close(self) -> None:
        """Stop redrawing and take the line off the terminal (the recording ended)."""
        self._stop.set()
        self._thread.join(timeout=2)
        with self.lock:
            self.clear()

    # -- drawing ----------------------------------------------------------------------------

    def line(self) -> str:
        """The status line's text (the caller holds ``lock``)."""
        elapsed = int(time.monotonic() - self._started)
        running = next(reversed(self._open.values()), None)
        what = f"step {running}" if running is not None else "the command"
        steps = f"{self._done} step{'' if self._done == 1 else 's'} done"
        return f"alpha: {what} running, {elapsed // 60}:{elapsed % 60:02d}, {steps}, {size(self._bytes)} recorded"

    def _run(self) -> None:
        while not self._stop.wait(1 / RATE):
            with self.lock:
                if self._mid_line:
                    continue
                text = self.line()
                width = _columns(self.fd)
                if width and len(text) >= width:  # a pty that says 0 columns: whole
                    text = text[: max(width - 1, 0)]
                if self._shown and text == self._text:
                    continue
                self._write(_CLEAR + text.encode("utf-8", "replace"))
                self._shown, self._text = True, text

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                n = os.write(self.fd, view)
            except InterruptedError:
                continue
            except OSError:
                self._stop.set()  # the terminal went away: no more status line
                return
            view = view[n:]


def _columns(fd: int) -> int | None:
    try:
        return os.get_terminal_size(fd).columns
    except OSError:
        return None

"""The recorder's event loop: read the command's output, serve the channel, watch the clock.

One thread, one selector. Output pipes are always read before channel messages,
so bytes written before a receipt or a span boundary are recorded before it.
When the main process exits, what is already in the pipes and the receipts
files is recorded, then ``process.exit``; a background process still holding
the pipes is drained for a bounded time afterwards (its output follows
``process.exit``), then recorded as a stray writer.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import selectors
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from aos import kinds
from observe.exits import Exit
from observe.recorder.containment import Container, End
from observe.recorder.control import Control
from observe.recorder.sinks import Echo, Sink
from observe.recorder.spawn import Spawned, exit_status, exit_waker, signal_name
from observe.secrets.masking import Masker, SecretSet

__all__ = ["Capture", "Outcome"]

#: The most one output event holds (the pipes are this big: observe.recorder.spawn).
READ_SIZE = 1 << 20
#: While output floods (what one pass has gathered reaches FLOOD bytes), a pipe that runs
#: dry is given up to COALESCE_S to refill before the event is cut, so a fast writer gives
#: events of up to READ_SIZE rather than one per ``write()`` it made: the same bytes in
#: fewer events (less per-event work), the echo at most COALESCE_S later. Quieter output
#: (an interactive line) is never held.
FLOOD = 64 << 10
COALESCE_S = 0.002
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: Seconds between two reapings of the tree's exited orphans while the command runs.
REAP_EVERY = 0.5
#: Which ready descriptors are served first: output before the channel, the exit last.
_ORDER = {"pipe": 0, "steppipe": 0, "stdin": 1, "accept": 1, "conn": 2, "exit": 3, "stepexit": 3}


@dataclass
class _Source:
    fd: int
    name: str  # kinds.STDOUT or kinds.STDERR: the event kind
    masker: Masker
    open: bool = True


@dataclass
class Outcome:
    """How the command ended."""

    exit_code: int | None = None
    signal: str | None = None
    shell_code: int = Exit.RECORDER
    timed_out: bool = False
    interrupted: str | None = None
    duration_ns: int = 0
    rusage: dict[str, Any] = field(default_factory=dict)
    stray: list[str] = field(default_factory=list)
    late_interrupt: str | None = None  # a signal that arrived after process.exit
    ended: list[dict[str, Any]] = field(default_factory=list)  # descendants ended after the drain
    end: End | None = None  # how the container was ended (containment, guaranteed, survivors)
    capture_timed_out: bool = False  # --timeout ran out during the final --artifact captures


def _rusage(ru: Any) -> dict[str, Any]:
    return {
        "utime_ns": int(ru.ru_utime * 1e9),
        "stime_ns": int(ru.ru_stime * 1e9),
        "maxrss_kb": int(ru.ru_maxrss),
        "minflt": int(ru.ru_minflt),
        "majflt": int(ru.ru_majflt),
        "inblock": int(ru.ru_inblock),
        "oublock": int(ru.ru_oublock),
        "nvcsw": int(ru.ru_nvcsw),
        "nivcsw": int(ru.ru_nivcsw),
    }


def _readable(fd: int, timeout: float) -> bool:
    """Whether ``fd`` becomes readable (or hung up) within ``timeout`` seconds."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(max(1, int(timeout * 1000))))


class Capture:
    """Runs one spawned command to its end, recording as it goes."""

    def __init__(
        self,
        spawned: Spawned,
        sink: Sink,
        echo: Echo,
        control: Control,
        secrets: SecretSet,
        *,
        timeout: float | None,
        kill_grace: float,
        drain_seconds: float,
        started_ns: int,
        not_ours: frozenset[int] = frozenset(),
        container: Container | None = None,
    ) -> None:
        self.spawned = spawned
        self.sink = sink
        self.echo = echo
        self.control = control
        self.timeout = timeout
        self.kill_grace = kill_grace
        self.drain_seconds = drain_seconds
        self.started_ns = started_ns
        self.sources = [_Source(spawned.out_fd, kinds.STDOUT, Masker(secrets))]
        if spawned.err_fd is not None:
            self.sources.append(_Source(spawned.err_fd, kinds.STDERR, Masker(secrets)))
        self.outcome = Outcome()
        self.exited = False
        self._sel = selectors.DefaultSelector()
        self._drain_until: float | None = None
        self._deadline: float | None = None
        self._deferred: list[int] = []
        self._mark_pending = False  # an interrupt arrived; its recorder.interrupted is not appended yet
        #: Processes of the command's tree (not the command itself) signalled at --timeout.
        self._signalled: dict[int, dict[str, Any]] = {}
        #: Children this process had before the command started: never the command's to end.
        self.not_ours = not_ours
        #: Where the command runs (observe.recorder.containment): what is ended at --timeout and at the end.
        self.container = container if container is not None else Container(not_ours)
        self.container.unreaped = control.steps.pids
        control.steps.container = self.container
        self._stdin = _StdinForward(spawned.out_fd) if spawned.forward_stdin else None
        control.drain_command = self.drain_pipes
        control.stop = self.must_stop

    # -- output --------------------------------------------------------------------

    def _read(self, src: _Source, budget: int) -> None:
        """Read what ``src`` has now (up to ``budget`` bytes), recording and echoing it."""
        got = 0
        while src.open and got < budget:
            chunk, more = self._gather(src)
            got += len(chunk)
            if chunk:
                out = src.masker.feed(chunk)
                if out:
                    self.echo.write(src.name, out)
                    self.sink.append(src.name, {}, out)
            if more is None:
                self._close(src)
                return
            if not more:
                return

    def _gather(self, src: _Source) -> tuple[bytes, bool | None]:
        """Up to READ_SIZE bytes from ``src`` (coalesced while output floods) and whether more may be
        waiting: True (it filled up), False (the pipe ran dry), None (end of file)."""
        parts: list[bytes] = []
        size = 0
        until = 0.0
        more: bool | None = True
        while size < READ_SIZE:
            try:
                chunk = os.read(src.fd, READ_SIZE - size)
            except (BlockingIOError, InterruptedError):
                if size >= FLOOD:
                    now = time.monotonic()
                    until = until or now + COALESCE_S
                    if now < until and _readable(src.fd, until - now):
                        continue
                more = False
                break
            except OSError as exc:
                if exc.errno != errno.EIO:  # EIO: a pseudo-terminal's end of file
                    self.sink.append(kinds.RECORDER_ERROR, {"error": f"reading {src.name}: {exc}"})
                chunk = b""
            if not chunk:
                more = None
                break
            parts.append(chunk)
            size += len(chunk)
        return (parts[0] if len(parts) == 1 else b"".join(parts)), more

    def _close(self, src: _Source) -> None:
        rest = src.masker.finish()
        if rest:
            self.echo.write(src.name, rest)
            self.sink.append(src.name, {}, rest)
        src.open = False
        with contextlib.suppress(KeyError, ValueError):
            self._sel.unregister(src.fd)
        if self.spawned.err_fd is None and not self.exited:
            # A pseudo-terminal's master reads EIO once the command closed its side, which it
            # may do just before it exits (coreutils do): closing the master now would hang up
            # the terminal and kill the command with SIGHUP. It is closed after the exit.
            self._deferred.append(src.fd)
            return
        os.close(src.fd)

    def drain_pipes(self, budget: int = 8 << 20) -> None:
        """Record everything already waiting in the pipes (bounded, against endless writers)."""
        for src in self.sources:
            self._read(src, budget)

    # -- signals -------------------------------------------------------------------

    def _forward(self, signum: int, _frame: object) -> None:
        name = signal_name(signum)
        if self.exited:
            self.outcome.late_interrupt = self.outcome.late_interrupt or name
            self._drain_until = time.monotonic()  # stop waiting for stray writers
            return
        if self.outcome.interrupted is None:
            self.outcome.interrupted = name
            self._mark_pending = True
        self._killpg(signum)
        self.control.steps.interrupt(signum)  # the steps run in sessions of their own: sent on to each, once

    def _mark_interrupt(self) -> None:
        """Append ``recorder.interrupted`` once, at the first turn of the loop after the signal (never from the
        handler itself, which may run in the middle of an append): what follows it was cut by the interrupt."""
        if self._mark_pending:
            self._mark_pending = False
            self.sink.append(kinds.RECORDER_INTERRUPTED, {"signal": self.outcome.interrupted, "during": "command"})

    def _killpg(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.spawned.pid, signum)

    def _kill_tree(self, signum: int) -> None:
        """``signum`` to the command's process group and to every process of its container, also those
        in sessions of their own; SIGKILL ends the whole container at once (observe.recorder.containment)."""
        self._killpg(signum)
        if signum == signal.SIGKILL:
            for entry in self.container.kill_now(self.spawned.pid):
                self._signalled[entry["pid"]] = entry
            return
        for proc in self.container.signal_all(signum):
            if proc.pid != self.spawned.pid:
                entry = self._signalled.setdefault(proc.pid, {"pid": proc.pid, "argv": list(proc.argv)})
                entry["signal"] = signal_name(signum)

    def must_stop(self) -> bool:
        """True once a capture in progress must end: past ``--timeout``, or interrupted."""
        if self.outcome.interrupted is not None or self.outcome.late_interrupt is not None:
            return True
        return self._deadline is not None and time.monotonic() >= self._deadline

    # -- the loop ------------------------------------------------------------------

    def run(self) -> Outcome:
        sel = self._sel
        for src in self.sources:
            sel.register(src.fd, selectors.EVENT_READ, ("pipe", src))
        self.control.register(sel)
        waker = exit_waker(self.spawned.pid)
        sel.register(waker, selectors.EVENT_READ, ("exit", None))
        previous = self._install_handlers()
        start = time.monotonic()
        deadline = start + self.timeout if self.timeout is not None else None
        self._deadline = deadline
        kill_at: float | None = None
        reap_at = start + REAP_EVERY
        if self._stdin is not None:
            self._stdin.register(sel)
        try:
            while True:
                now = time.monotonic()
                if now >= reap_at:  # orphans of the tree that exited: each zombie holds a pid until reaped
                    self.container.reap(None if self.exited else self.spawned.pid)
                    reap_at = now + REAP_EVERY
                if not self.exited:
                    if deadline is not None and now >= deadline and not self.outcome.timed_out:
                        self.outcome.timed_out = True
                        self._kill_tree(signal.SIGTERM)
                        kill_at = now + self.kill_grace
                    if kill_at is not None and now >= kill_at:
                        self._kill_tree(signal.SIGKILL)
                        kill_at = None
                else:
                    if not any(s.open for s in self.sources):
                        break
                    if self._drain_until is not None and now >= self._drain_until:
                        break
                wait = 0.02
                for t in (deadline if not self.outcome.timed_out else None, kill_at, self._drain_until):
                    if t is not None:
                        wait = min(wait, max(t - now, 0.0))
                self._mark_interrupt()
                ready = sel.select(wait)
                ready.sort(key=lambda kv: _ORDER[kv[0].data[0]])
                for key, mask in ready:
                    self._mark_interrupt()
                    what, obj = key.data
                    if what == "stdin":
                        if self._stdin is not None and not self.exited:
                            self._stdin.read(sel)
                    elif what == "pipe":
                        if obj.open:
                            self._read(obj, 4 << 20)
                    elif what == "accept":
                        self.control.accept(sel)
                    elif what == "conn":
                        if mask & selectors.EVENT_WRITE and obj.sock.fileno() in self.control.conns:
                            self.control.writable(obj, sel)
                        if mask & selectors.EVENT_READ and obj.sock.fileno() in self.control.conns:
                            self.control.readable(obj, sel)
                    elif what in ("steppipe", "stepexit"):
                        self.control.steps.ready(what, obj, sel)
                    elif what == "exit" and not self.exited:
                        sel.unregister(waker)
                        self._on_exit()
                self._mark_interrupt()
                self.control.poll_receipts()
                self.control.steps.tick(sel)
                if self._stdin is not None and not self.exited:
                    self._stdin.flush(sel)
        except BaseException:
            if not self.exited:  # the recorder itself broke: do not leave the command running unrecorded
                self._killpg(signal.SIGTERM)
            raise
        finally:
            self._restore_handlers(previous)
            with contextlib.suppress(OSError):
                os.close(waker)
            if self._stdin is not None:
                self._stdin.close(sel)
            for fd in self._deferred:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.outcome.stray = [s.name for s in self.sources if s.open]
        # What the command left running (daemons, `setsid` children) ends with the recording.
        # The steps the recorder runs are inside the container too: ended with it, their statuses theirs to reap.
        self.outcome.end = end = self.container.end(self.kill_grace, self.spawned.pid)
        ended = {p["pid"]: p for p in end.ended}
        self.control.steps.finish_all(sel)
        for pid, entry in self._signalled.items():  # ended at --timeout: recorded with the signal sent then
            if pid not in ended or ended[pid]["signal"] is None:
                ended[pid] = entry
        self.outcome.ended = [ended[pid] for pid in sorted(ended)]
        if self.outcome.ended:
            self.drain_pipes()  # their last words, now that the pipes can close
        for src in self.sources:
            if src.open:
                self._close(src)
        return self.outcome

    def _on_exit(self) -> None:
        self._mark_interrupt()
        pid = self.spawned.pid
        _, status, ru = os.wait4(pid, 0)
        self.spawned.proc.returncode = status  # reaped here; keep Popen from waiting again
        self.exited = True
        o = self.outcome
        o.duration_ns = time.monotonic_ns() - self.started_ns
        o.exit_code, o.signal, o.shell_code = exit_status(status)
        o.rusage = _rusage(ru)
        # Everything the command wrote before it exited is in the pipes and files now.
        self.drain_pipes(64 << 20)
        self.control.poll_receipts(force=True)
        stray = any(s.open for s in self.sources)
        self.sink.append(
            kinds.PROCESS_EXIT,
            {
                "exit_code": o.exit_code,
                "signal": o.signal,
                "timed_out": o.timed_out,
                "duration_ns": o.duration_ns,
                "rusage": o.rusage,
                "interrupted": o.interrupted,
                "stray_writers": stray,
            },
        )
        self._drain_until = time.monotonic() + self.drain_seconds

    def _install_handlers(self) -> dict[int, Any]:
        previous: dict[int, Any] = {}
        if threading.current_thread() is not threading.main_thread():
            return previous
        for sig in FORWARDED:
            previous[sig] = signal.signal(sig, self._forward)
        return previous

    def _restore_handlers(self, previous: dict[int, Any]) -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class _StdinForward:
    """Under ``--pty``: the recorder's stdin is copied to the terminal the command reads.

    At the end of stdin the terminal gets its end-of-file character (twice after a
    partial line), so ``echo hi | alpha observe record --pty -- cat`` ends. When
    stdin is not a terminal, the pseudo-terminal does not echo what is forwarded
    (a pipe's bytes are input, not output). When stdin is a terminal, the command's
    terminal does the echoing, the line editing and the output processing, so the
    recorder's own terminal stops doing them (as ``script`` does) until the
    recording ends; it keeps its signal keys, so Ctrl-C interrupts the recording
    as it would without ``--pty`` (the recorder forwards it and records it). Writes
    never block the loop: what the command has not read yet waits here, and stdin
    is not read meanwhile.
    """

    LIMIT = 1 << 16

    def __init__(self, master: int) -> None:
        self.master = master
        self.pending = b""
        self.eof = False
        self.last = b"\n"
        self.registered = False
        self.done = False
        self.disabled = False
        self._saved_tty: list[Any] | None = None  # the recorder's terminal settings, restored at the end
        try:
            os.fstat(0)
        except OSError:
            self.eof = True  # no stdin at all: end of file at once
        else:
            with contextlib.suppress(OSError):
                # A terminal we are not in the foreground of: reading it would stop us (SIGTTIN).
                self.disabled = os.isatty(0) and os.tcgetpgrp(0) != os.getpgrp()

    def register(self, sel: selectors.BaseSelector) -> None:
        if self.disabled:
            return
        if self.eof:
            self._end()
            return
        self._quiet_terminal()
        try:
            sel.register(0, selectors.EVENT_READ, ("stdin", None))
            self.registered = True
        except (OSError, ValueError):  # a regular file (epoll refuses it): it never blocks, read it now
            while not self.eof and len(self.pending) < (8 << 20):
                self.read(None)

    def read(self, sel: selectors.BaseSelector | None) -> None:
        try:
            chunk = os.read(0, self.LIMIT)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._end()
            if sel is not None:
                self._unregister(sel)
            return
        self.pending += chunk
        self.last = chunk[-1:]
        if sel is not None and len(self.pending) >= self.LIMIT:
            self._unregister(sel)  # until the command has read some

    def _end(self) -> None:
        self.eof = True
        self.pending += b"\x04" if self.last == b"\n" else b"\x04\x04"

    def flush(self, sel: selectors.BaseSelector) -> None:
        if not self.pending:
            return
        try:
            n = os.write(self.master, self.pending)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.pending = b""
            return
        self.pending = self.pending[n:]
        if not self.pending and not self.eof and not self.registered:
            with contextlib.suppress(OSError, ValueError):
                sel.register(0, selectors.EVENT_READ, ("stdin", None))
                self.registered = True

    def _unregister(self, sel: selectors.BaseSelector) -> None:
        if self.registered:
            with contextlib.suppress(KeyError, ValueError):
                sel.unregister(0)
            self.registered = False

    def _quiet_terminal(self) -> None:
        """Stop the recorder's terminal from echoing and line-editing what is typed (the command's does)."""
        import termios

        with contextlib.suppress(OSError, termios.error):
            if not os.isatty(0):
                return
            saved = termios.tcgetattr(0)
            quiet = termios.tcgetattr(0)
            quiet[1] &= ~termios.OPOST  # the command's terminal already turned its \n into \r\n
            quiet[3] &= ~(termios.ECHO | termios.ECHONL | termios.ICANON | termios.IEXTEN)
            quiet[6][termios.VMIN] = 1
            quiet[6][termios.VTIME] = 0
            termios.tcsetattr(0, termios.TCSANOW, quiet)
            self._saved_tty = saved

    def close(self, sel: selectors.BaseSelector) -> None:
        self._unregister(sel)
        if self._saved_tty is not None:
            import termios

            with contextlib.suppress(OSError, termios.error):
                termios.tcsetattr(0, termios.TCSADRAIN, self._saved_tty)
            self._saved_tty = None

"""Steps the recorder runs itself: ``alpha observe step NAME -- CMD`` asks, the recorder starts CMD.

The step client sends its argv, cwd, environment and stdin (the descriptor itself,
over the control socket); the recorder starts the command as its own child
(:func:`observe.recorder.spawn.spawn_step`), reads its stdout and stderr from pipes
it owns, on its one loop, and waits for it. So a step's output, exit code, signal
and duration in the stream are the recorder's own observation of its own child,
never what a client reports. The bytes read are recorded (masked) in the step's
span and echoed as the command's are; where the client's own stdout/stderr is not
the recorder's (``step ... | wc``, ``$(step ...)``), they are also forwarded to the
client, unmasked, which writes them there. A client that does not read what is
forwarded to it slows its step (its pipes are read no further), never the loop.

This module holds the mechanics (pipes, forwarding, the exit, the end of the
recording); :mod:`observe.recorder.control` records ``step.start``/``step.end``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import selectors
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aos import kinds
from observe.channel.protocol import FRAME_ERR, FRAME_OUT, encode_frame, encode_json
from observe.exits import Exit
from observe.recorder.sinks import Echo, Sink
from observe.recorder.spawn import Spawned, SpawnFailure, exit_status, exit_waker, signal_name, spawn_step
from observe.secrets.masking import Masker, SecretSet

if TYPE_CHECKING:
    from observe.recorder.containment import Container

__all__ = ["FORWARDED_SIGNALS", "Run", "Steps"]

#: After a step's command exits, how long its pipes are still read while a background
#: process of it holds them (the step client waited as long before the recorder ran steps).
STRAY_DRAIN = 2.0
#: Forwarded bytes a client may leave unread before its step's pipes are read no further.
FORWARD_LIMIT = 1 << 20
#: After the command exited, what may wait for a slow client before forwarding gives up
#: (the bytes are recorded all the same; the client is told some were not forwarded).
FORWARD_CAP = 64 << 20
READ_SIZE = 1 << 16
#: The signals a step client may ask the recorder to send its step's command.
FORWARDED_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP})


@dataclass
class _Pipe:
    fd: int
    name: str  # kinds.STDOUT or kinds.STDERR: the event kind
    echo: bool  # echoed by the recorder (the client's own fd is the recorder's), else forwarded
    masker: Masker
    open: bool = True
    registered: bool = False


@dataclass
class Run:
    """One step command the recorder started, from its start to its end."""

    span: str
    spawned: Spawned
    pipes: list[_Pipe]
    started_ns: int
    sock: Any  # the client's control connection (None once the client went away)
    conn: Any  # what the selector holds for that connection
    waker: int = -1
    exit_code: int | None = None
    signal: str | None = None
    shell_code: int = 0
    duration_ns: int | None = None
    exited: bool = False
    drain_until: float | None = None
    stray_writers: bool = False
    done: bool = False
    forwarded: list[str] = field(default_factory=list)  # signals the client asked to be sent
    interrupted: str | None = None  # the signal the recorder itself got and sent on to this step (an interrupt)
    outbox: bytearray = field(default_factory=bytearray)
    forward_lost: bool = False
    writing: bool = False  # the connection is registered for writing

    @property
    def pid(self) -> int:
        return self.spawned.pid


class Steps:
    """Every step the recorder runs; ``on_end(run)`` is called once a step's command and pipes are done."""

    def __init__(self, sink: Sink, echo: Echo, secrets: SecretSet, on_end: Callable[[Run], None]) -> None:
        self.sink = sink
        self.echo = echo
        self.secrets = secrets
        self.on_end = on_end
        self.runs: dict[int, Run] = {}  # pid -> run, while it runs
        #: Where step commands run: the command's container (set by the capture loop), ended with it.
        self.container: Container | None = None

    def pids(self) -> set[int]:
        """The pids of the step commands not reaped yet."""
        return {r.pid for r in self.runs.values() if not r.exited}

    # -- starting ------------------------------------------------------------------

    def start(
        self,
        sel: selectors.BaseSelector,
        *,
        span: str,
        argv: list[str],
        env: Mapping[str, str],
        cwd: str,
        stdin: int | None,
        echo: tuple[bool, bool],
        sock: Any,
        conn: Any,
    ) -> Run | SpawnFailure:
        """Start a step's command and watch it (its pipes and its exit on ``sel``)."""
        started = time.monotonic_ns()
        spawned = spawn_step(argv, env, cwd=cwd, stdin=stdin, echo=echo, container=self.container)
        if isinstance(spawned, SpawnFailure):
            return spawned
        assert spawned.err_fd is not None
        pipes = [
            _Pipe(spawned.out_fd, kinds.STDOUT, echo[0], Masker(self.secrets)),
            _Pipe(spawned.err_fd, kinds.STDERR, echo[1], Masker(self.secrets)),
        ]
        run = Run(span, spawned, pipes, started, sock, conn)
        for pipe in pipes:
            self._watch(sel, run, pipe)
        run.waker = exit_waker(spawned.pid)
        sel.register(run.waker, selectors.EVENT_READ, ("stepexit", run))
        self.runs[run.pid] = run
        return run

    def _watch(self, sel: selectors.BaseSelector, run: Run, pipe: _Pipe) -> None:
        if pipe.open and not pipe.registered:
            sel.register(pipe.fd, selectors.EVENT_READ, ("steppipe", (run, pipe)))
            pipe.registered = True

    def _unwatch(self, sel: selectors.BaseSelector, pipe: _Pipe) -> None:
        if pipe.registered:
            with contextlib.suppress(KeyError, ValueError):
                sel.unregister(pipe.fd)
            pipe.registered = False

    # -- the loop's events ---------------------------------------------------------

    def ready(self, what: str, obj: Any, sel: selectors.BaseSelector) -> None:
        """A step's pipe is readable (``steppipe``) or its command exited (``stepexit``)."""
        if what == "steppipe":
            run, pipe = obj
            if pipe.open and not run.done:
                self._read(sel, run, pipe, 1 << 20)
        elif what == "stepexit":
            self._exited(sel, obj)
        self._settle(sel, obj[0] if what == "steppipe" else obj)

    def tick(self, sel: selectors.BaseSelector) -> None:
        """Ends the steps whose stray writers' time is up (called on every turn of the loop)."""
        now = time.monotonic()
        for run in list(self.runs.values()):
            if run.drain_until is not None and now >= run.drain_until:
                for pipe in run.pipes:
                    if pipe.open:
                        run.stray_writers = True
                        self._read(sel, run, pipe, 8 << 20)
                        self._close_pipe(sel, run, pipe)
                self._settle(sel, run)

    def drain(self, sel: selectors.BaseSelector | None) -> None:
        """Record what every step's pipes hold now (before a receipt or a span boundary is recorded), and send
        on at once what is to be forwarded: the pipes are empty now, so no turn of the loop would wake for it,
        and a step that waits for its client to read what it wrote would wait for ever (a coordinator that
        announced its address, in a lane over SSH, did)."""
        for run in list(self.runs.values()):
            for pipe in run.pipes:
                if pipe.open and pipe.registered:
                    self._read(None, run, pipe, 8 << 20)
            if sel is not None and run.outbox:
                self._flush(sel, run)

    def writable(self, run: Run, sel: selectors.BaseSelector) -> None:
        """The client's connection can take more of what is forwarded to it (its step's pipes may resume)."""
        self._settle(sel, run)

    def interrupt(self, signum: int) -> None:
        """The recorder was interrupted: send ``signum`` on to every step still running (each in a session of its
        own, out of the command's process group), once; each records it as ``interrupted``. Called from the
        recorder's signal handler: it only signals and sets a field."""
        name = signal_name(signum)
        for run in list(self.runs.values()):
            if run.exited or run.interrupted is not None:
                continue
            run.interrupted = name
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(run.pid, signum)

    def send_signal(self, run: Run, signum: int) -> bool:
        """Send ``signum`` (one of FORWARDED_SIGNALS) to the step's command and its process group; not again
        when the recorder already sent it on as an interrupt (the step gets one interrupt, not two)."""
        if signum not in FORWARDED_SIGNALS or run.exited:
            return False
        if run.interrupted == signal_name(signum):
            run.forwarded.append(signal_name(signum))
            return True
        run.forwarded.append(signal_name(signum))
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(run.pid, signum)  # its own session: the group is the leader's pid, not reused before reaping
        return True

    def close_stream(self, sel: selectors.BaseSelector, run: Run, name: str) -> None:
        """The client's own stdout/stderr is closed (``step ... | head -1``): what the step writes there
        from now on meets a closed pipe, as it would in the pipeline."""
        for pipe in run.pipes:
            if pipe.name == name and pipe.open and not pipe.echo:
                self._read(None, run, pipe, 1 << 20)
                self._close_pipe(sel, run, pipe)
        self._settle(sel, run)

    def detach(self, sel: selectors.BaseSelector, run: Run) -> None:
        """The client went away: its step runs on, recorded, with nobody to forward to."""
        self._stop_writing(sel, run)
        run.sock = None
        run.outbox.clear()
        for pipe in run.pipes:
            self._watch(sel, run, pipe)

    # -- reading -------------------------------------------------------------------

    def _read(self, sel: selectors.BaseSelector | None, run: Run, pipe: _Pipe, budget: int) -> None:
        got = 0
        while pipe.open and got < budget:
            try:
                chunk = os.read(pipe.fd, READ_SIZE)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno != errno.EIO:
                    self.sink.append(
                        kinds.RECORDER_ERROR, {"error": f"reading step {pipe.name}: {exc}"}, None, run.span
                    )
                chunk = b""
            if not chunk:
                if sel is not None:
                    self._close_pipe(sel, run, pipe)
                else:
                    pipe.open = False  # closed by the next turn of the loop (_settle)
                return
            got += len(chunk)
            self._record(run, pipe, pipe.masker.feed(chunk))
            if not pipe.echo:
                self._forward(run, pipe.name, chunk)
            if len(chunk) < READ_SIZE:
                return

    def _record(self, run: Run, pipe: _Pipe, masked: bytes) -> None:
        if masked:
            if pipe.echo:
                self.echo.write(pipe.name, masked)
            self.sink.append(pipe.name, {}, masked, run.span)

    def _close_pipe(self, sel: selectors.BaseSelector, run: Run, pipe: _Pipe) -> None:
        self._record(run, pipe, pipe.masker.finish())
        pipe.open = False
        self._unwatch(sel, pipe)
        with contextlib.suppress(OSError):
            os.close(pipe.fd)
        pipe.fd = -1

    # -- forwarding ----------------------------------------------------------------

    def _forward(self, run: Run, name: str, data: bytes) -> None:
        if run.sock is None or run.forward_lost:
            return
        if len(run.outbox) > FORWARD_CAP:
            run.forward_lost = True
            return
        run.outbox += encode_frame(FRAME_OUT if name == kinds.STDOUT else FRAME_ERR, data)

    def reply(self, sel: selectors.BaseSelector, run: Run, obj: dict[str, Any]) -> None:
        """Queue the step's final message to its client, after everything forwarded."""
        if run.sock is not None:
            run.outbox += encode_json(obj)
            self._flush(sel, run)

    def _flush(self, sel: selectors.BaseSelector, run: Run) -> None:
        sock = run.sock
        while sock is not None and run.outbox:
            try:
                n = sock.send(run.outbox)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:  # the client is gone: nothing more to forward
                run.outbox.clear()
                break
            del run.outbox[:n]
        if run.outbox and not run.writing:
            sel.modify(run.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, run.conn)
            run.writing = True
        elif not run.outbox:
            self._stop_writing(sel, run)

    def _stop_writing(self, sel: selectors.BaseSelector, run: Run) -> None:
        if run.writing and run.sock is not None:
            with contextlib.suppress(KeyError, ValueError, OSError):
                sel.modify(run.sock, selectors.EVENT_READ, run.conn)
        run.writing = False

    def _settle(self, sel: selectors.BaseSelector, run: Run) -> None:
        """Flush, pause or resume the step's pipes by what its client has left unread; end it when done."""
        for pipe in run.pipes:
            if not pipe.open and pipe.fd >= 0:
                self._close_pipe(sel, run, pipe)
        self._flush(sel, run)
        behind = len(run.outbox) > FORWARD_LIMIT and not run.exited
        for pipe in run.pipes:
            if behind and not pipe.echo:
                self._unwatch(sel, pipe)
            else:
                self._watch(sel, run, pipe)
        if run.exited and not run.done and not any(p.open for p in run.pipes):
            run.done = True
            self.runs.pop(run.pid, None)
            self.on_end(run)

    # -- the exit ------------------------------------------------------------------

    def _exited(self, sel: selectors.BaseSelector, run: Run) -> None:
        if run.exited:
            return
        try:
            pid, status = os.waitpid(run.pid, os.WNOHANG)
        except ChildProcessError:
            pid, status = run.pid, -1
        if pid == 0:
            return  # not yet (a spurious wake-up)
        self._reaped(sel, run, status)
        for pipe in run.pipes:  # what it wrote before it exited is in the pipes now
            self._read(sel, run, pipe, 64 << 20)
        if any(p.open for p in run.pipes):
            run.drain_until = time.monotonic() + STRAY_DRAIN

    def _reaped(self, sel: selectors.BaseSelector, run: Run, status: int) -> None:
        run.duration_ns = time.monotonic_ns() - run.started_ns
        run.exited = True
        if status == -1:  # reaped by someone else: how it ended is not known
            run.exit_code, run.signal, run.shell_code = None, None, Exit.RECORDER
        else:
            run.spawned.proc.returncode = status  # reaped here; keep Popen from waiting again
            run.exit_code, run.signal, run.shell_code = exit_status(status)
        with contextlib.suppress(KeyError, ValueError):
            sel.unregister(run.waker)
        with contextlib.suppress(OSError):
            os.close(run.waker)

    def finish_all(self, sel: selectors.BaseSelector, grace: float = 2.0) -> None:
        """At the end of the recording (its tree ended): reap each step still running and end it."""
        deadline = time.monotonic() + grace
        for run in list(self.runs.values()):
            while not run.exited:
                try:
                    pid, status = os.waitpid(run.pid, os.WNOHANG)
                except ChildProcessError:
                    pid, status = run.pid, -1
                if pid:
                    self._reaped(sel, run, status)
                elif time.monotonic() >= deadline:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(run.pid, signal.SIGKILL)
                    deadline = time.monotonic() + grace
                else:
                    time.sleep(0.01)
            for pipe in run.pipes:
                if pipe.open:
                    self._read(sel, run, pipe, 8 << 20)
                    if pipe.open:
                        run.stray_writers = True
                        self._close_pipe(sel, run, pipe)
            self._settle(sel, run)
            if run.sock is not None and run.outbox:  # the client's last chance to read it
                with contextlib.suppress(OSError):
                    run.sock.settimeout(1.0)
                    run.sock.sendall(run.outbox)
                run.outbox.clear()

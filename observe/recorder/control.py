"""The recorder's side of the channel: tailing receipts files and serving the control socket.

Everything here runs on the recorder's one event loop, so events are recorded
in the order they are handled. Before a receipt, a span boundary or an artifact
is recorded, the output pipes are drained (``drain`` callback, and the steps'
pipes): whatever the command printed before it spoke on the channel is recorded
before what it said.

A step (``step.run``) is run by the recorder (observe.recorder.steps): its
``step.end`` holds what the recorder saw its own child do. A span opened by hand
(``step.start``/``step.end``) is a span and no more: the exit code, signal and
duration a client sends, and the output frames it sends, are refused (counted in
``step.end``'s ``refused``, never recorded as the step's).
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aos import kinds
from aos.attrs import json_int
from aos.bounds import bounded_list, cut_text
from aos.canonical import canonical_json
from aos.text import display, key_bytes, printable, text_key, value_bytes
from observe.channel.protocol import (
    ENV_CONTROL,
    ENV_RECEIPTS,
    ENV_STEP,
    FRAME_ERR,
    FRAME_ERR_ECHO,
    FRAME_JSON,
    FRAME_OUT,
    FRAME_OUT_ECHO,
    FRAME_OVERSIZE,
    MAX_FRAME,
    FrameReader,
    Oversize,
    ReceiptTail,
    encode_json,
    parse_receipt_line,
)
from observe.recorder import artifacts
from observe.recorder.sinks import Echo, Sink
from observe.recorder.spawn import SpawnFailure
from observe.recorder.steps import Run, Steps
from observe.secrets.masking import SecretSet, mask_attrs, mask_bytes, mask_json_bytes, mask_text

__all__ = ["Control"]


def _os_path(value: Any) -> str:
    """A path a client sent (byte text, FORMAT.md 3.7) as Python's ``os`` functions spell it."""
    raw = value_bytes(value)
    if raw is None:
        return "" if value is None else str(value)
    return os.fsdecode(raw)


def _said(text: str) -> str:
    """A message (an error, a refused claim) made valid text and cut to an item's share (aos.bounds)."""
    cut = cut_text(printable(text))
    return cut if isinstance(cut, str) else printable(text)[:1024]


#: What an answer lists at most (the paths an artifact request recorded, those it could not): the stream has all.
_LISTED = 1000


def _listed(items: list[str]) -> list[str]:
    """``items`` for an answer that must stay one frame: the first ``_LISTED``, each cut (``_said``), and a count
    of the rest."""
    out = [_said(item) if len(item) > 1024 else item for item in items[:_LISTED]]
    out = [item if len(item) <= 4096 else item[:1024] + item[item.rindex("[CUT: ") :] for item in out]
    if len(items) > _LISTED:
        out.append(f"... and {len(items) - _LISTED} more (see the stream)")
    return out


_DATA_FRAMES = {
    FRAME_OUT: (kinds.STDOUT, False),
    FRAME_ERR: (kinds.STDERR, False),
    FRAME_OUT_ECHO: (kinds.STDOUT, True),
    FRAME_ERR_ECHO: (kinds.STDERR, True),
}


@dataclass
class _Conn:
    sock: socket.socket
    reader: FrameReader = field(default_factory=FrameReader)
    span: str | None = None
    start: dict[str, Any] = field(default_factory=dict)
    tail: ReceiptTail | None = None
    ended: bool = False
    pid: int | None = None  # the connecting process, from SO_PEERCRED (never from what it says)
    run: Run | None = None  # the step the recorder runs for this client (step.run)
    fds: list[int] = field(default_factory=list)  # descriptors received, not used yet
    refused: dict[str, Any] = field(default_factory=dict)  # what a span opened by hand claimed


#: The most descriptors one connection may have waiting (a step's stdin is one).
_MAX_FDS = 4


def _take_fds(conn: _Conn, ancillary: list[tuple[int, int, bytes]]) -> None:
    """Keep the descriptors a client passed (SCM_RIGHTS), up to _MAX_FDS waiting; close the rest."""
    for level, kind, data in ancillary:
        if level != socket.SOL_SOCKET or kind != socket.SCM_RIGHTS:
            continue
        usable = len(data) - len(data) % 4
        for (fd,) in struct.iter_unpack("i", data[:usable]):
            if len(conn.fds) < _MAX_FDS:
                conn.fds.append(fd)
            else:
                with contextlib.suppress(OSError):
                    os.close(fd)


def _peer_pid(sock: socket.socket) -> int | None:
    """The pid of the process that connected ``sock`` (Linux ``SO_PEERCRED``; None where there is none)."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return None
    try:
        pid, _uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i")))
    except (OSError, struct.error):
        return None
    return pid if pid > 0 else None


class Control:
    """Receipts files plus the control socket, in ``directory``."""

    def __init__(
        self,
        directory: str,
        sink: Sink,
        echo: Echo,
        secrets: SecretSet,
        *,
        cwd: str,
        artifact_max_bytes: int | None,
        drain: Callable[[], None],
    ) -> None:
        self.directory = directory
        self.sink = sink
        self.echo = echo
        self.secrets = secrets
        self.cwd = cwd
        self.artifact_max_bytes = artifact_max_bytes
        self.drain_command = drain
        #: Polled during artifact captures: true when the capture must end now (``--timeout``, a signal).
        self.stop: Callable[[], bool] = lambda: False
        self.receipts_path = os.path.join(directory, "receipts")
        self.control_path = os.path.join(directory, "control")
        self.tails: list[ReceiptTail] = [ReceiptTail(self._new_file(self.receipts_path), None)]
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.control_path)
        self.listener.listen(1024)
        self.listener.setblocking(False)
        self.conns: dict[int, _Conn] = {}
        self._last_poll = 0.0
        self._steps_lock = threading.Lock()
        self._open_steps: dict[str, tuple[str, int | None]] = {}  # span -> (name, step pid), in start order
        self._spans: set[str] = set()  # every span opened, by its id
        self.steps = Steps(sink, echo, secrets, self._run_ended)
        self.sel: selectors.BaseSelector | None = None

    def drain(self) -> None:
        """Record what the command's and the steps' pipes hold now."""
        self.drain_command()
        self.steps.drain(self.sel)

    def open_steps(self) -> list[tuple[str, int | None]]:
        """``(name, pid)`` of each step open now, in the order they started (any thread may call it): the pid
        of the step's command, the recorder's own child (None for a span opened by hand)."""
        with self._steps_lock:
            return list(self._open_steps.values())

    def env(self) -> dict[str, str]:
        """What the command needs to find the channel."""
        return {ENV_RECEIPTS: self.receipts_path, ENV_CONTROL: self.control_path}

    @staticmethod
    def _new_file(path: str) -> str:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
        return path

    # -- receipts files --------------------------------------------------------------

    def poll_receipts(self, *, force: bool = False, interval: float = 0.02) -> None:
        """Record every complete line appended to any receipts file (at most every ``interval``)."""
        now = time.monotonic()
        if not force and now - self._last_poll < interval:
            return
        self._last_poll = now
        drained = False
        for tail in self.tails:
            for line in tail.lines():
                if not drained:
                    self.drain()
                    drained = True
                self._receipt(line, tail.step)

    def _receipt(self, line: bytes | Oversize, step: str | None) -> None:
        if isinstance(line, Oversize):
            self._oversize(line, "a receipts line", step)
            return
        # Parsed first, masked after: a secret written with JSON escapes (\", \\, \uXXXX) is
        # a secret again once parsed; the raw line of an invalid one is masked escapes and all.
        kind, attrs = parse_receipt_line(line)
        raw = mask_json_bytes(line, self.secrets)[:MAX_FRAME] if kind == kinds.RECEIPT_INVALID else None
        attrs = mask_attrs(attrs, self.secrets)
        # JSON spells a number such as 9e20 in 4 bytes that canonical JSON writes in 21: a line past an eighth of
        # the bound may parse to attrs beyond it (masks grow text less)
        size = len(canonical_json(attrs).encode()) if kind == kinds.RECEIPT and len(line) > MAX_FRAME // 8 else 0
        if size > MAX_FRAME:  # a line within the bound whose attrs are not: numbers written longer, masks
            big = Oversize()
            big.add(line)
            said = f"a receipt whose attrs are {size} bytes once parsed, more than an event holds ({MAX_FRAME})"
            attrs = {**big.attrs("a receipt"), "reason": said}
            kind, raw = kinds.RECEIPT_INVALID, mask_json_bytes(line, self.secrets)[:MAX_FRAME]
        self.sink.append(kind, attrs, raw, step)

    def _oversize(self, big: Oversize, what: str, step: str | None) -> None:
        """A line or frame longer than an event holds: a ``receipt.invalid`` with its first bytes (masked), its
        length and its SHA-256 (docs/FORMAT.md): nothing is dropped silently."""
        attrs = big.attrs(what)
        if big.kind is not None:
            attrs["frame"] = printable(big.kind.decode("latin-1"))
        self.sink.append(kinds.RECEIPT_INVALID, attrs, mask_json_bytes(bytes(big.head), self.secrets)[:MAX_FRAME], step)

    def finish_receipts(self) -> None:
        """At the end: every remaining line, and final lines without a newline."""
        self.poll_receipts(force=True)
        for tail in self.tails:
            rest = tail.rest()
            if rest is not None:
                self._receipt(rest, tail.step)

    # -- the control socket ----------------------------------------------------------

    def register(self, sel: selectors.BaseSelector) -> None:
        self.sel = sel
        sel.register(self.listener, selectors.EVENT_READ, ("accept", None))

    def accept(self, sel: selectors.BaseSelector) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            sock.setblocking(False)
            conn = _Conn(sock, pid=_peer_pid(sock))
            self.conns[sock.fileno()] = conn
            sel.register(sock, selectors.EVENT_READ, ("conn", conn))

    def readable(self, conn: _Conn, sel: selectors.BaseSelector) -> None:
        try:
            data, ancillary, _flags, _addr = conn.sock.recvmsg(
                1 << 20, socket.CMSG_SPACE(_MAX_FDS * 4), socket.MSG_CMSG_CLOEXEC
            )
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data, ancillary = b"", []
        _take_fds(conn, ancillary)
        if not data:
            self._close(conn, sel)
            return
        try:
            for kind, payload in conn.reader.feed(data):
                self._frame(conn, kind, payload)
        except (ValueError, TypeError, KeyError) as exc:
            self.sink.append(kinds.RECORDER_ERROR, {"error": _said(f"bad control message: {exc}")}, None, conn.span)
            self._close(conn, sel)

    def writable(self, conn: _Conn, sel: selectors.BaseSelector) -> None:
        """The connection can take more of what its step forwards."""
        if conn.run is not None:
            self.steps.writable(conn.run, sel)

    def _frame(self, conn: _Conn, kind: bytes, payload: bytes) -> None:
        if kind == FRAME_OVERSIZE and conn.reader.oversize is not None:
            big = conn.reader.oversize
            self.drain()
            self._oversize(big, "a control frame", conn.span)
            if big.kind == FRAME_JSON:  # its client waits for an answer
                self.sink.drain()
                self._reply(conn, {"ok": False, "error": big.attrs("a control frame")["reason"]})
            return
        if kind in _DATA_FRAMES:
            # Output a client sends is its claim, never a step's output: only counted, as refused.
            key = f"{_DATA_FRAMES[kind][0]}_bytes"
            conn.refused[key] = conn.refused.get(key, 0) + len(payload)
            return
        if kind != FRAME_JSON:
            raise ValueError(f"unknown frame type {kind!r}")
        msg = json.loads(payload)
        op = msg.get("op")
        if op == "step.run":
            self._step_run(conn, msg)
        elif op == "step.signal":
            if conn.run is None or json_int(msg.get("signal")) is None:
                raise ValueError("step.signal needs a running step and a signal number")
            self.steps.send_signal(conn.run, int(msg["signal"]))
        elif op == "step.close":
            if conn.run is None or msg.get("stream") not in ("stdout", "stderr"):
                raise ValueError("step.close needs a running step and a stream")
            self.steps.close_stream(self._selector(), conn.run, str(msg["stream"]))
        elif op == "step.start":
            self._step_start(conn, msg)
        elif op == "step.end":
            self._step_end(conn, msg)
        elif op == "artifact":
            self._artifact(conn, msg)
        elif op == "receipts.sync":
            self._sync(conn, msg)
        else:
            raise ValueError(f"unknown op {op!r}")

    def _reply(self, conn: _Conn, obj: dict[str, Any]) -> None:
        conn.sock.setblocking(True)
        conn.sock.settimeout(5.0)
        try:
            conn.sock.sendall(encode_json(obj))
        except OSError:
            pass
        finally:
            conn.sock.setblocking(False)

    def _masked(self, value: Any) -> bytes:
        """A client's byte text (FORMAT.md 3.7) as its bytes, masked."""
        raw = value_bytes(value)
        raw = str(value).encode("utf-8", "surrogatepass") if raw is None else raw
        return mask_bytes(raw, self.secrets) if self.secrets else raw

    def _bytes_text(self, value: Any) -> str | dict[str, str]:
        """A client's name or path as byte text, masked: any bytes are kept, up to an item's share (a longer
        one is cut, its length and SHA-256 noted: aos.bounds)."""
        return cut_text(self._masked(value))

    def _argv(self, values: Any) -> list[str | dict[str, str]]:
        """A client's argv as byte text, masked, within a list's budget (aos.bounds.bounded_list)."""
        return bounded_list(self._masked(a) for a in (values if isinstance(values, list) else []))

    def _step_column(self, value: Any) -> str | None:
        """The step a client names for its artifacts (its ``AOS_STEP``), as the step column: up to 4 KiB."""
        if not isinstance(value, str):
            return None
        cut = cut_text(value, 4096)
        return text_key(value_bytes(cut) or b"")

    def _selector(self) -> selectors.BaseSelector:
        if self.sel is None:
            raise ValueError("the control socket is not being served")
        return self.sel

    def _parent(self, value: Any) -> str | None:
        """The enclosing span a client names (its ``AOS_STEP``), kept only when this recording opened it."""
        if value is None:
            return None
        span = text_key(value_bytes(value) or str(value))
        return span if span in self._spans else None

    def _new_span(self, conn: _Conn) -> tuple[str, str]:
        """A new span of the recorder's own id for ``conn``, and its receipts file: ``(span, path)``."""
        span = os.urandom(8).hex()  # the recorder's id: a client cannot name (and so join) another's span
        self.drain()
        self.poll_receipts(force=True)
        if conn.span is not None:
            with self._steps_lock:  # a second span on one connection: the first is no longer open
                self._open_steps.pop(conn.span, None)
        conn.span = span
        self._spans.add(span)
        path = os.path.join(self.directory, f"receipts-{len(self.tails)}")
        conn.tail = ReceiptTail(self._new_file(path), span)
        self.tails.append(conn.tail)
        return span, path

    def _record_start(self, conn: _Conn, start: dict[str, Any], pid: int | None) -> None:
        """Record the span's ``step.start`` (``pid``: the step's command, for the sampler's attribution)."""
        span = str(conn.span)
        conn.start = start
        self.sink.append(kinds.STEP_START, dict(start), None, span)
        self.echo.begin_step(span, display(start["name"]))  # a CI fold, in the echo only
        with self._steps_lock:
            name = start["name"]  # byte text: the registry keeps the step column's text form
            self._open_steps[span] = (name if isinstance(name, str) else text_key(value_bytes(name) or b""), pid)

    def _close_span(self, conn: _Conn, attrs: dict[str, Any]) -> None:
        """Record ``step.end`` (``attrs``) of the connection's span."""
        self.drain()
        self.poll_receipts(force=True)
        self.sink.append(kinds.STEP_END, attrs, None, conn.span)
        self.echo.end_step(str(conn.span), attrs.get("exit_code"))
        conn.ended = True
        with self._steps_lock:
            self._open_steps.pop(str(conn.span), None)

    # -- steps the recorder runs -----------------------------------------------------

    def _step_run(self, conn: _Conn, msg: dict[str, Any]) -> None:
        """``step.run``: start the client's command as the recorder's own child, in a new span."""
        if conn.span is not None:
            raise ValueError("one step per connection")
        sel = self._selector()
        argv = [os.fsdecode(value_bytes(a) or str(a).encode()) for a in msg.get("argv") or []]
        env = {
            os.fsdecode(key_bytes(str(k))): os.fsdecode(value_bytes(v) or str(v).encode())
            for k, v in dict(msg.get("env") or {}).items()
        }
        cwd = _os_path(msg.get("cwd")) or self.cwd
        echo = msg.get("echo") or [False, False]
        stdin = conn.fds.pop(0) if msg.get("stdin") and conn.fds else None
        start = {
            "name": self._bytes_text(msg["name"]),
            "argv": self._argv(msg.get("argv") or []),
            "parent": self._parent(msg.get("parent")),
            "pid": conn.pid,
            "runner": "recorder",
            "cwd": self._bytes_text(cwd),
        }
        span, receipts = self._new_span(conn)
        env.update(self.env())
        env.update({ENV_RECEIPTS: receipts, ENV_STEP: span})
        try:
            run = self.steps.start(
                sel,
                span=span,
                argv=argv,
                env=env,
                cwd=cwd,
                stdin=stdin,
                echo=(bool(echo[0]), bool(echo[1])),
                sock=conn.sock,
                conn=("conn", conn),
            )
        finally:
            if stdin is not None:
                os.close(stdin)  # the child has its own copy
        if isinstance(run, SpawnFailure):
            error = _said(mask_text(run.error, self.secrets))
            self._record_start(conn, {**start, "process": None}, None)
            end = {**conn.start, "exit_code": run.exit_code, "signal": None, "duration_ns": 0, "error": error}
            self._close_span(conn, end)
            self.sink.drain()
            self._reply(conn, {"op": "step.exit", "ok": not self.sink.failed, "code": run.exit_code, "error": error})
            return
        conn.run = run
        # Recorded before any of its output: the loop reads its pipes only after this returns.
        self._record_start(conn, {**start, "process": run.pid}, run.pid)

    def _run_ended(self, run: Run) -> None:
        """A step's command exited and its pipes are done: record its ``step.end``, tell its client."""
        conn = run.conn[1]
        attrs = dict(conn.start)
        attrs.update(exit_code=run.exit_code, signal=run.signal, duration_ns=run.duration_ns)
        if run.forwarded:
            attrs["forwarded"] = list(run.forwarded)
        if run.interrupted is not None:
            attrs["interrupted"] = run.interrupted
        if run.stray_writers:
            attrs["stray_writers"] = True
        if run.sock is None:
            attrs["client_gone"] = True
        if conn.refused:
            attrs["refused"] = dict(conn.refused)
        self._close_span(conn, attrs)
        self.sink.drain()
        self.steps.reply(
            self._selector(),
            run,
            {
                "op": "step.exit",
                "ok": not self.sink.failed,
                "code": run.shell_code,
                "exit_code": run.exit_code,
                "signal": run.signal,
                "forward_lost": run.forward_lost,
            },
        )

    # -- spans opened by hand ------------------------------------------------------------

    def _step_start(self, conn: _Conn, msg: dict[str, Any]) -> None:
        """``step.start`` from a client that runs nothing through the recorder: a span, with no result."""
        argv = self._argv(msg.get("argv", []))
        start = {
            "name": self._bytes_text(msg["name"]),
            "argv": argv,
            "parent": self._parent(msg.get("parent")),
            "pid": conn.pid,
            "runner": "client",
        }
        span, path = self._new_span(conn)
        self._record_start(conn, start, None)
        self.sink.drain()
        self._reply(conn, {"ok": not self.sink.failed, "receipts": path, "span": span})

    def _step_end(self, conn: _Conn, msg: dict[str, Any], *, incomplete: bool = False) -> None:
        """The end of a span opened by hand: no exit code, signal or duration but the recorder's (none)."""
        if conn.run is not None or conn.span is None:
            raise ValueError("step.end of no span opened by hand")
        for key in ("exit_code", "signal", "duration_ns"):
            if key in msg:
                value = msg[key]
                conn.refused[key] = value if value is None or json_int(value) is not None else _said(str(value))
        attrs = dict(conn.start)
        attrs.update(exit_code=None, signal=None, duration_ns=None)
        if msg.get("error"):
            attrs["error"] = _said(mask_text(printable(str(msg["error"])), self.secrets))
        if incomplete:
            attrs["incomplete"] = True
        if conn.refused:
            attrs["refused"] = mask_attrs(dict(conn.refused), self.secrets)
        self._close_span(conn, attrs)
        if not incomplete:
            self.sink.drain()
            self._reply(conn, {"ok": not self.sink.failed})

    def _artifact(self, conn: _Conn, msg: dict[str, Any]) -> None:
        if "origin" in msg or "env" in msg:
            # Only the recorder marks an artifact as its own capture (the lane config): never a client.
            raise ValueError("an artifact request may not set 'origin' or 'env' (only the recorder sets them)")
        self.drain()
        self.poll_receipts(force=True)
        step = msg.get("step")
        problems: list[str] = []
        recorded = artifacts.capture(
            self._append_artifact,
            [_os_path(p) for p in msg.get("paths", [])],
            cwd=_os_path(msg.get("cwd")) or self.cwd,
            base=self.cwd,
            max_bytes=self.artifact_max_bytes,
            step=self._step_column(step),
            secrets=self.secrets,
            problems=problems,
            stop=self.stop,
        )
        self.sink.drain()
        reply = {"ok": not self.sink.failed, "paths": _listed(recorded), "not_captured": _listed(problems)}
        self._reply(conn, reply)

    def _sync(self, conn: _Conn, msg: dict[str, Any]) -> None:
        """Answer once the receipts file ``msg["receipts"]`` is recorded up to ``msg["offset"]``."""
        path, offset = str(msg.get("receipts")), json_int(msg.get("offset"))
        if offset is None:
            raise ValueError("receipts.sync needs an integer offset")
        self.drain()
        self.poll_receipts(force=True)
        tail = next((t for t in self.tails if t.path == path), None)
        if tail is None:
            self._reply(conn, {"ok": False, "error": f"{path} is not a receipts file of this recording"})
            return
        if tail.consumed < offset:
            self._reply(conn, {"ok": False, "error": f"{path} holds no complete line up to byte {offset}"})
            return
        self.sink.drain()
        self._reply(conn, {"ok": not self.sink.failed})

    def _append_artifact(self, kind: str, attrs: dict[str, Any], data: bytes | None, step: str | None) -> None:
        self.sink.append(kind, attrs, data, step)

    def _close(self, conn: _Conn, sel: selectors.BaseSelector | None) -> None:
        for fd in conn.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        conn.fds.clear()
        if conn.run is not None and not conn.ended:
            if self.sel is not None:  # the client went away: its step runs on, recorded
                self.steps.detach(self.sel, conn.run)
        elif conn.span is not None and not conn.ended:
            self._step_end(conn, {"error": "the step's client went away before the step ended"}, incomplete=True)
        if sel is not None:
            with contextlib.suppress(KeyError, ValueError):
                sel.unregister(conn.sock)
        self.conns.pop(conn.sock.fileno(), None)
        conn.sock.close()

    def close(self, sel: selectors.BaseSelector | None = None) -> None:
        """Stop listening; close (and end as incomplete) any connection left.

        The socket's name goes first, so a client arriving from now on is refused
        at once; one already connected but not answered gets end-of-file, and
        exits non-zero: nothing it sent is acknowledged unless it was recorded.
        """
        with contextlib.suppress(OSError):
            os.unlink(self.control_path)
        for conn in list(self.conns.values()):
            self._close(conn, sel)
        if sel is not None:
            with contextlib.suppress(KeyError, ValueError):
                sel.unregister(self.listener)
        self.listener.close()
        for tail in self.tails:
            tail.close()

"""The recorder's side of the channel: tailing receipts files and serving the control socket.

Everything here runs on the recorder's one event loop, so events are recorded
in the order they are handled. Before a receipt, a span boundary or an artifact
is recorded, the output pipes are drained (``drain`` callback): whatever the
command printed before it spoke on the channel is recorded before what it said.
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

from aos.attrs import json_int
from aos.canonical import canonical_json
from aos.text import display, printable, text_key, text_value, value_bytes
from observe.channel.protocol import (
    ENV_CONTROL,
    ENV_RECEIPTS,
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
from observe.secrets.masking import Masker, SecretSet, mask_attrs, mask_bytes, mask_json_bytes, mask_text

__all__ = ["Control"]


def _os_path(value: Any) -> str:
    """A path a client sent (byte text, FORMAT.md 3.7) as Python's ``os`` functions spell it."""
    raw = value_bytes(value)
    if raw is None:
        return "" if value is None else str(value)
    return os.fsdecode(raw)


_DATA_FRAMES = {
    FRAME_OUT: ("stdout", False),
    FRAME_ERR: ("stderr", False),
    FRAME_OUT_ECHO: ("stdout", True),
    FRAME_ERR_ECHO: ("stderr", True),
}


@dataclass
class _Conn:
    sock: socket.socket
    reader: FrameReader = field(default_factory=FrameReader)
    span: str | None = None
    start: dict[str, Any] = field(default_factory=dict)
    tail: ReceiptTail | None = None
    maskers: dict[str, Masker] = field(default_factory=dict)
    ended: bool = False
    pid: int | None = None  # the connecting process, from SO_PEERCRED (never from what it says)


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
        self.drain = drain
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
        self._open_steps: dict[str, tuple[str, int | None]] = {}  # span -> (name, client pid), in start order

    def open_steps(self) -> list[tuple[str, int | None]]:
        """``(name, client pid)`` of each step open now, in the order they started (any thread may call it)."""
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
        raw = mask_json_bytes(line, self.secrets)[:MAX_FRAME] if kind == "receipt.invalid" else None
        attrs = mask_attrs(attrs, self.secrets)
        size = len(canonical_json(attrs)) if kind == "receipt" and len(line) > MAX_FRAME // 2 else 0
        if size > MAX_FRAME:  # a line within the bound whose attrs are not: numbers written longer, masks
            big = Oversize()
            big.add(line)
            said = f"a receipt whose attrs are {size} bytes once parsed, more than an event holds ({MAX_FRAME})"
            attrs = {**big.attrs("a receipt"), "reason": said}
            kind, raw = "receipt.invalid", mask_json_bytes(line, self.secrets)[:MAX_FRAME]
        self.sink.append(kind, attrs, raw, step)

    def _oversize(self, big: Oversize, what: str, step: str | None) -> None:
        """A line or frame longer than an event holds: a ``receipt.invalid`` with its first bytes (masked), its
        length and its SHA-256 (docs/FORMAT.md): nothing is dropped silently."""
        attrs = big.attrs(what)
        if big.kind is not None:
            attrs["frame"] = printable(big.kind.decode("latin-1"))
        self.sink.append("receipt.invalid", attrs, mask_json_bytes(bytes(big.head), self.secrets)[:MAX_FRAME], step)

    def finish_receipts(self) -> None:
        """At the end: every remaining line, and final lines without a newline."""
        self.poll_receipts(force=True)
        for tail in self.tails:
            rest = tail.rest()
            if rest is not None:
                self._receipt(rest, tail.step)

    # -- the control socket ----------------------------------------------------------

    def register(self, sel: selectors.BaseSelector) -> None:
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
            data = conn.sock.recv(1 << 20)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._close(conn, sel)
            return
        try:
            for kind, payload in conn.reader.feed(data):
                self._frame(conn, kind, payload)
        except (ValueError, TypeError, KeyError) as exc:
            self.sink.append("recorder.error", {"error": f"bad control message: {exc}"}, None, conn.span)
            self._close(conn, sel)

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
            name, echo = _DATA_FRAMES[kind]
            masker = conn.maskers.setdefault(name, Masker(self.secrets))
            out = masker.feed(payload)
            if out:
                if echo:
                    self.echo.write(name, out)
                self.sink.append(name, {}, out, conn.span)
            return
        if kind != FRAME_JSON:
            raise ValueError(f"unknown frame type {kind!r}")
        msg = json.loads(payload)
        op = msg.get("op")
        if op == "step.start":
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

    def _bytes_text(self, value: Any) -> str | dict[str, str]:
        """A client's name or argument as byte text (FORMAT.md 3.7), masked: any bytes are kept."""
        raw = value_bytes(value)
        raw = str(value).encode("utf-8", "surrogatepass") if raw is None else raw
        return text_value(mask_bytes(raw, self.secrets) if self.secrets else raw)

    def _step_start(self, conn: _Conn, msg: dict[str, Any]) -> None:
        span = text_key(value_bytes(msg["span"]) or str(msg["span"]))  # the step column is text
        self.drain()
        self.poll_receipts(force=True)
        argv = [self._bytes_text(a) for a in msg.get("argv", [])]
        parent = msg.get("parent")
        parent = text_key(value_bytes(parent) or str(parent)) if parent is not None else None
        if conn.span is not None:
            with self._steps_lock:  # a second step.start on one connection: the first is no longer open
                self._open_steps.pop(conn.span, None)
        conn.span = span
        conn.start = {"name": self._bytes_text(msg["name"]), "argv": argv, "parent": parent, "pid": conn.pid}
        self.sink.append("step.start", dict(conn.start), None, span)
        self.echo.begin_step(span, display(conn.start["name"]))  # a CI fold, in the echo only
        with self._steps_lock:
            name = conn.start["name"]  # byte text: the registry keeps the step column's text form
            self._open_steps[span] = (name if isinstance(name, str) else text_key(value_bytes(name) or b""), conn.pid)
        path = os.path.join(self.directory, f"receipts-{len(self.tails)}")
        conn.tail = ReceiptTail(self._new_file(path), span)
        self.tails.append(conn.tail)
        self.sink.drain()
        self._reply(conn, {"ok": not self.sink.failed, "receipts": path})

    def _flush_maskers(self, conn: _Conn) -> None:
        for name, masker in conn.maskers.items():
            rest = masker.finish()
            if rest:
                self.echo.write(name, rest)  # held back only while it could start a secret
                self.sink.append(name, {}, rest, conn.span)

    def _step_end(self, conn: _Conn, msg: dict[str, Any], *, incomplete: bool = False) -> None:
        self._flush_maskers(conn)
        self.drain()
        self.poll_receipts(force=True)
        attrs = dict(conn.start)
        attrs.update(
            exit_code=msg.get("exit_code"),
            signal=msg.get("signal"),
            duration_ns=msg.get("duration_ns"),
        )
        if msg.get("error"):
            attrs["error"] = printable(mask_text(printable(str(msg["error"])), self.secrets))
        if incomplete:
            attrs["incomplete"] = True
        self.sink.append("step.end", attrs, None, conn.span)
        self.echo.end_step(str(conn.span), attrs.get("exit_code"))
        conn.ended = True
        with self._steps_lock:
            self._open_steps.pop(str(conn.span), None)
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
            step=text_key(step) if isinstance(step, str) else None,
            secrets=self.secrets,
            problems=problems,
            stop=self.stop,
        )
        self.sink.drain()
        self._reply(conn, {"ok": not self.sink.failed, "paths": recorded, "not_captured": problems})

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
        if conn.span is not None and not conn.ended:
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

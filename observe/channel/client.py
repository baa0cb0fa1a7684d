"""The light side of the channel: ``receipt``, ``step`` and ``artifact`` inside a recording.

Lanes call these hundreds of times, so this module imports only the standard
library and ``observe.channel.protocol``: never pyarrow, never the writer.

Outside a recording (``AOS_RECEIPTS`` unset) each says so on stderr and returns
2; ``step(..., standalone=True)`` runs its command anyway.

Exit 0 means recorded: each waits until the recorder acknowledges that what it
sent is appended to the stream's writer. ``receipt`` appends its line to
``$AOS_RECEIPTS`` and then asks the recorder, over ``$AOS_CONTROL``, to confirm
it has recorded that file up to the end of the line; ``artifact`` waits for the
capture; ``step`` for its ``step.start`` and ``step.end``. A client that gets
no acknowledgement (the recording has ended, the recorder is gone) says so on
stderr and exits non-zero: ``receipt`` and ``artifact`` 1, ``step`` 125 (its
command still runs, unrecorded, but its exit code cannot be told from a recorded one).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import TYPE_CHECKING, Any

from aos.text import printable, text_value
from observe.channel.protocol import (
    ENV_CONTROL,
    ENV_RECEIPTS,
    ENV_STDERR_ID,
    ENV_STDOUT_ID,
    ENV_STEP,
    FRAME_ERR,
    FRAME_ERR_ECHO,
    FRAME_JSON,
    FRAME_OUT,
    FRAME_OUT_ECHO,
    FrameReader,
    encode_frame,
    encode_json,
    fd_identity,
    receipt_line,
)
from observe.exits import Exit

if TYPE_CHECKING:
    import subprocess

# socket, selectors and subprocess load only where a step or artifact needs
# them: ``receipt`` is called most often and needs none of them.

__all__ = ["NOT_RECORDING", "artifact", "build_fields", "receipt", "step"]

NOT_RECORDING = 2
CONNECT_TIMEOUT = 10.0
#: How long a client waits for the recorder's acknowledgement. The recorder runs
#: one loop; under load, or while it captures a large artifact for another
#: client, an answer can take a while, and giving up early loses nothing but
#: turns a recorded event into a reported failure.
ACK_TIMEOUT = 600.0
START_TIMEOUT = 120.0
END_TIMEOUT = 120.0
ARTIFACT_TIMEOUT = 600.0
STRAY_DRAIN = 2.0


def _outside(what: str) -> int:
    sys.stderr.write(
        f"alpha observe {what}: not inside a recording ({ENV_RECEIPTS} is not set); "
        f"run it under `alpha observe record -- ...`\n"
    )
    return NOT_RECORDING


def build_fields(pairs: list[tuple[str, str]], json_obj: str | None) -> dict[str, Any]:
    """Fields from ``--json OBJ`` then ``--field K=V`` (V parsed as JSON when it parses)."""
    fields: dict[str, Any] = {}
    if json_obj is not None:
        try:
            parsed = json.loads(json_obj)
        except ValueError as exc:
            raise ValueError(f"not JSON: {exc}") from exc
        if not isinstance(parsed, dict):
            raise ValueError("must be a JSON object")
        fields.update(parsed)
    for key, value in pairs:
        try:
            fields[key] = json.loads(value)
        except ValueError:
            fields[key] = value
    return fields


def receipt(name: str, status: str = "info", fields: dict[str, Any] | None = None) -> int:
    """Append one receipt line to ``$AOS_RECEIPTS`` (one ``O_APPEND`` write), then wait until it is recorded."""
    path = os.environ.get(ENV_RECEIPTS)
    if not path:
        return _outside("receipt")
    line = receipt_line(name, status, fields)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
    except OSError as exc:
        sys.stderr.write(
            f"alpha observe receipt: cannot open {path}: {exc.strerror or exc} "
            "(has the recording ended?); receipt not recorded\n"
        )
        return 1
    try:
        if os.write(fd, line) != len(line):
            sys.stderr.write("alpha observe receipt: short write to the receipts channel; receipt not recorded\n")
            return 1
        end = os.lseek(fd, 0, os.SEEK_CUR)  # with O_APPEND: just past our own line
    except OSError as exc:
        sys.stderr.write(f"alpha observe receipt: cannot write {path}: {exc.strerror or exc}; receipt not recorded\n")
        return 1
    finally:
        os.close(fd)
    return _confirm("receipt", {"op": "receipts.sync", "receipts": path, "offset": end}, ACK_TIMEOUT)


def _confirm(what: str, msg: dict[str, Any], timeout: float) -> int:
    """Send one request on a fresh control connection; 0 only when the recorder answers ok."""
    control = _control_path()
    try:
        link = _Link(control or "")
        try:
            reply = link.request(msg, timeout)
        finally:
            link.close()
    except (OSError, ValueError) as exc:
        sys.stderr.write(
            f"alpha observe {what}: the recorder did not confirm it was recorded ({exc or type(exc).__name__}); "
            "the recording may have ended\n"
        )
        return 1
    if not reply.get("ok"):
        sys.stderr.write(f"alpha observe {what}: not recorded: {reply.get('error') or 'the recorder refused it'}\n")
        return 1
    return 0


class _Link:
    """A connection to the recorder's control socket."""

    def __init__(self, path: str) -> None:
        import socket

        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(CONNECT_TIMEOUT)
        try:
            self.sock.connect(path)
        except BaseException:
            self.sock.close()
            raise
        self.reader = FrameReader()

    def send(self, frame: bytes) -> None:
        self.sock.sendall(frame)

    def request(self, obj: dict[str, Any], timeout: float) -> dict[str, Any]:
        self.sock.settimeout(timeout)
        self.sock.sendall(encode_json(obj))
        deadline = time.monotonic() + timeout
        while True:
            self.sock.settimeout(max(deadline - time.monotonic(), 0.001))
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("the recorder closed the channel")
            for kind, payload in self.reader.feed(data):
                if kind == FRAME_JSON:
                    reply: dict[str, Any] = json.loads(payload)
                    return reply

    def close(self) -> None:
        self.sock.close()


def _control_path() -> str | None:
    path = os.environ.get(ENV_CONTROL)
    if path:
        return path
    receipts = os.environ.get(ENV_RECEIPTS)
    return os.path.join(os.path.dirname(receipts), "control") if receipts else None


def artifact(paths: list[str]) -> int:
    """Ask the recorder to capture ``paths`` now; wait (bounded) until it has.

    Exits 1 when the recorder did not confirm, or when a path matched nothing or
    could not be read (the stream then says why: ``artifact.missing``, ``unreadable``).
    """
    control = _control_path() if os.environ.get(ENV_RECEIPTS) else None
    if control is None:
        return _outside("artifact")
    try:
        link = _Link(control)
        try:
            msg = {
                "op": "artifact",
                "paths": [text_value(p) for p in paths],  # any bytes (FORMAT.md 3.7)
                "cwd": text_value(os.getcwd()),
                "step": os.environ.get(ENV_STEP),
            }
            reply = link.request(msg, ARTIFACT_TIMEOUT)
        finally:
            link.close()
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"alpha observe artifact: the recorder did not confirm the capture: {exc}\n")
        return 1
    if not reply.get("ok"):
        sys.stderr.write(f"alpha observe artifact: not recorded: {reply.get('error') or 'the recorder refused it'}\n")
        return 1
    problems = [str(p) for p in reply.get("not_captured") or []]
    if problems:
        sys.stderr.write(f"alpha observe artifact: not captured (recorded as such): {', '.join(problems)}\n")
        return 1
    return 0


def _shell_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _run_plain(argv: list[str]) -> int:
    import subprocess

    try:
        return _shell_code(subprocess.call(argv))
    except FileNotFoundError as exc:
        sys.stderr.write(f"alpha observe step: {argv[0]}: command not found ({exc.strerror})\n")
        return 127
    except OSError as exc:
        sys.stderr.write(f"alpha observe step: {argv[0]}: cannot execute ({exc.strerror or exc})\n")
        return 126


def step(name: str, argv: list[str], *, standalone: bool = False) -> int:
    """Run ``argv`` as a span of the enclosing recording; return its exit code.

    The sub-command's output is piped through this process and sent to the
    recorder, so every byte is recorded with the span's id. Where this process's
    own stdout/stderr is the recorder's (the usual case), the recorder echoes the
    bytes; otherwise (``step ... | grep``) they are written here as well.
    """
    if not os.environ.get(ENV_RECEIPTS):
        if standalone:
            return _run_plain(argv)
        return _outside("step")
    control = _control_path()
    span = os.urandom(8).hex()  # 16 hex digits, as uuid4().hex[:16] gave, without importing uuid (and platform)
    parent = os.environ.get(ENV_STEP) or None
    link: _Link | None = None
    try:
        link = _Link(control or "")
        # A name or argument that is not UTF-8 goes as {"bytes_b64": ...} (FORMAT.md 3.7).
        start = {"op": "step.start", "span": span, "name": text_value(name), "parent": parent}
        reply = link.request({**start, "argv": [text_value(a) for a in argv]}, START_TIMEOUT)
        if not reply.get("ok"):
            raise ValueError(reply.get("error") or "the recorder refused the step")
    except (OSError, ValueError) as exc:
        if link is not None:
            link.close()
        sys.stderr.write(
            printable(
                f"alpha observe step: the recorder did not answer ({exc or type(exc).__name__}); "
                f"running {name} unrecorded, exit {Exit.RECORDER}\n"
            )
        )
        code = _run_plain(argv)
        sys.stderr.write(printable(f"alpha observe step: {name} exited {code} unrecorded\n"))
        return Exit.RECORDER
    return _run_step(link, span, argv, reply.get("receipts"))


def _run_step(link: _Link, span: str, argv: list[str], receipts: str | None) -> int:
    import subprocess

    echo_out = fd_identity(1) is not None and fd_identity(1) == os.environ.get(ENV_STDOUT_ID)
    echo_err = fd_identity(2) is not None and fd_identity(2) == os.environ.get(ENV_STDERR_ID)
    out_r, out_w = os.pipe2(os.O_CLOEXEC)
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    env = dict(os.environ)
    env[ENV_STEP] = span
    if receipts:
        env[ENV_RECEIPTS] = receipts
    # Our pipes count as the recorder's own only if what we read from them is echoed there.
    env[ENV_STDOUT_ID] = (fd_identity(out_w) or "") if echo_out else ""
    env[ENV_STDERR_ID] = (fd_identity(err_w) or "") if echo_err else ""
    start = time.monotonic_ns()
    code: int | None
    sig: str | None = None
    error: str | None = None
    try:
        proc = subprocess.Popen(argv, stdout=out_w, stderr=err_w, env=env)
    except OSError as exc:
        os.close(out_w)
        os.close(err_w)
        os.close(out_r)
        os.close(err_r)
        code = 127 if isinstance(exc, FileNotFoundError) else 126
        error = printable(
            f"{argv[0]}: {'command not found' if code == 127 else 'cannot execute'} ({exc.strerror or exc})"
        )
        sys.stderr.write(f"alpha observe step: {error}\n")
        return code if _end(link, code, None, time.monotonic_ns() - start, error) else Exit.RECORDER
    os.close(out_w)
    os.close(err_w)
    link.sock.settimeout(END_TIMEOUT)
    frames = {
        out_r: (FRAME_OUT_ECHO if echo_out else FRAME_OUT, None if echo_out else 1),
        err_r: (FRAME_ERR_ECHO if echo_err else FRAME_ERR, None if echo_err else 2),
    }
    forwarded = _pump(link, proc, frames)
    rc = proc.returncode
    if rc < 0:
        import signal as _signal

        try:
            sig = _signal.Signals(-rc).name
        except ValueError:
            sig = f"SIG{-rc}"
        code = None
    else:
        code = rc
    if not forwarded:
        error = "the step's output could not all be sent to the recorder"
    if not _end(link, code, sig, time.monotonic_ns() - start, error) or not forwarded:
        sys.stderr.write(f"alpha observe step: the step was not recorded whole; exit {Exit.RECORDER}\n")
        return Exit.RECORDER
    return _shell_code(rc)


def _pump(link: _Link, proc: subprocess.Popen[bytes], frames: dict[int, tuple[bytes, int | None]]) -> bool:
    """Forward the sub-command's output until it exits and its pipes close (bounded after exit).

    False when the link to the recorder broke, so some output was not recorded.
    """
    import selectors

    sel = selectors.DefaultSelector()
    for fd in frames:
        sel.register(fd, selectors.EVENT_READ)
    open_fds = set(frames)
    linked = True
    drain_until: float | None = None
    while open_fds:
        if drain_until is None and proc.poll() is not None:
            drain_until = time.monotonic() + STRAY_DRAIN
        if drain_until is not None and time.monotonic() >= drain_until:
            break
        for key, _ in sel.select(0.05):
            fd = key.fd
            try:
                chunk = os.read(fd, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                sel.unregister(fd)
                os.close(fd)
                open_fds.discard(fd)
                continue
            kind, own_fd = frames[fd]
            if own_fd is not None:
                _write_all(own_fd, chunk)
            if linked:
                try:
                    link.send(encode_frame(kind, chunk))
                except OSError:
                    linked = False
            if not linked and own_fd is None:
                _write_all(1 if kind == FRAME_OUT_ECHO else 2, chunk)
    for fd in open_fds:
        sel.unregister(fd)
        os.close(fd)
    proc.wait()
    return linked


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except OSError:
            return


def _end(link: _Link, code: int | None, sig: str | None, duration_ns: int, error: str | None) -> bool:
    """Send ``step.end``; True only when the recorder acknowledged it."""
    msg: dict[str, Any] = {"op": "step.end", "exit_code": code, "signal": sig, "duration_ns": duration_ns}
    if error:
        msg["error"] = error
    try:
        reply = link.request(msg, END_TIMEOUT)
    except (OSError, ValueError) as exc:
        sys.stderr.write(
            f"alpha observe step: the recorder did not acknowledge the step's end: {exc or type(exc).__name__}\n"
        )
        return False
    finally:
        link.close()
    return bool(reply.get("ok"))

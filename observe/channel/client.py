"""The light side of the channel: ``receipt``, ``step`` and ``artifact`` inside a recording.

Lanes call these hundreds of times, so this module imports only the standard
library and ``observe.channel.protocol``: never pyarrow, never the writer.

Outside a recording (``AOS_RECEIPTS`` unset) each says so on stderr and returns
2; ``step(..., standalone=True)`` runs its command anyway.

Exit 0 means recorded: each waits until the recorder acknowledges that what it
sent is appended to the stream's writer. ``receipt`` appends its line to
``$AOS_RECEIPTS`` and then asks the recorder, over ``$AOS_CONTROL``, to confirm
it has recorded that file up to the end of the line; ``artifact`` waits for the
capture. ``step`` asks the recorder to run its command (the recorder starts it,
records it and reports its end: observe.recorder.steps) and exits with the code
the recorder reports. A client that gets no acknowledgement (the recording has
ended, the recorder is gone) says so on stderr and exits non-zero: ``receipt``
and ``artifact`` 1, ``step`` 125 (when the recorder cannot be reached at all the
command still runs, unrecorded, but its exit code cannot be told from a recorded
one; once asked, the recorder alone runs it).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from aos.text import printable, text_key, text_value
from observe.channel.protocol import (
    ENV_CONTROL,
    ENV_RECEIPTS,
    ENV_STDERR_ID,
    ENV_STDOUT_ID,
    ENV_STEP,
    FRAME_ERR,
    FRAME_JSON,
    FRAME_OUT,
    FrameReader,
    encode_json,
    fd_identity,
    receipt_line,
)
from observe.exits import Exit

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
    return Exit.SIGNAL - returncode if returncode < 0 else returncode


def _run_plain(argv: list[str]) -> int:
    import subprocess

    try:
        return _shell_code(subprocess.call(argv))
    except FileNotFoundError as exc:
        sys.stderr.write(f"alpha observe step: {argv[0]}: command not found ({exc.strerror})\n")
        return Exit.NOT_FOUND
    except OSError as exc:
        sys.stderr.write(f"alpha observe step: {argv[0]}: cannot execute ({exc.strerror or exc})\n")
        return Exit.CANNOT_EXECUTE


def step(name: str, argv: list[str], *, standalone: bool = False) -> int:
    """Have the recorder run ``argv`` as a span of the enclosing recording; return its exit code.

    The recorder starts the command itself (with this process's argv, cwd,
    environment and stdin), records its output, exit code, signal and duration as
    its own observation, and sends here what this process must write to its own
    stdout/stderr (nothing where those are the recorder's own, which echoes them).
    SIGINT, SIGTERM and SIGHUP received here are sent on to the command. The exit
    code is the recorder's: the command's, 128+N for signal N, 126/127 when it
    cannot be executed or found.
    """
    if not os.environ.get(ENV_RECEIPTS):
        if standalone:
            return _run_plain(argv)
        return _outside("step")
    try:
        cwd: str | None = os.getcwd()
    except OSError:
        cwd = None  # the recorder runs it in the recording's directory
    stdin = _has_fd(0)
    msg = {
        "op": "step.run",
        # A name, argument or variable that is not UTF-8 goes as {"bytes_b64": ...} (FORMAT.md 3.7).
        "name": text_value(name),
        "argv": [text_value(a) for a in argv],
        "parent": os.environ.get(ENV_STEP) or None,
        "cwd": text_value(cwd) if cwd is not None else None,
        "env": {text_key(k): text_value(v) for k, v in os.environb.items()},
        "echo": [_is_recorders(1, ENV_STDOUT_ID), _is_recorders(2, ENV_STDERR_ID)],
        "stdin": stdin,
    }
    link: _Link | None = None
    try:
        link = _Link(_control_path() or "")
        _send_with_stdin(link, encode_json(msg), stdin)
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
    try:
        return _follow(link)
    finally:
        link.close()


def _has_fd(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _is_recorders(fd: int, variable: str) -> bool:
    """Whether ``fd`` is the recorder's own pipe (named by ``variable``), which it echoes."""
    ident = fd_identity(fd)
    return ident is not None and ident == os.environ.get(variable)


def _send_with_stdin(link: _Link, frame: bytes, stdin: bool) -> None:
    """Send ``frame`` with this process's stdin descriptor attached (SCM_RIGHTS) when it has one."""
    import socket

    fds = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, (0).to_bytes(4, sys.byteorder))] if stdin else []
    sent = link.sock.sendmsg([frame], fds)
    if sent < len(frame):
        link.sock.sendall(frame[sent:])


def _follow(link: _Link) -> int:
    """Write what the recorder forwards until the step ends; its exit code (125: not recorded whole)."""
    import signal

    sock = link.sock
    sock.settimeout(None)  # a step takes as long as it takes

    def forward(signum: int, _frame: object) -> None:
        _send(sock, {"op": "step.signal", "signal": signum})

    handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, forward) for sig in handled}
    closed: set[int] = set()
    try:
        while True:
            try:
                data = sock.recv(1 << 16)
            except OSError as exc:
                return _lost(str(exc) or type(exc).__name__)
            if not data:
                return _lost("the recorder closed the channel")
            for kind, payload in link.reader.feed(data):
                if kind in (FRAME_OUT, FRAME_ERR):
                    fd = 1 if kind == FRAME_OUT else 2
                    if fd not in closed and not _write_all(fd, payload):
                        closed.add(fd)  # ``step ... | head -1``: the step meets the closed pipe too
                        _send(sock, {"op": "step.close", "stream": "stdout" if fd == 1 else "stderr"})
                elif kind == FRAME_JSON:
                    return _ended(json.loads(payload))
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _send(sock: Any, msg: dict[str, Any]) -> None:
    """Send one message to the recorder; a recorder gone is found by the read that follows."""
    try:
        sock.sendall(encode_json(msg))
    except OSError:
        return


def _lost(why: str) -> int:
    sys.stderr.write(f"alpha observe step: the recorder did not report the step's end ({why}); exit {Exit.RECORDER}\n")
    return Exit.RECORDER


def _ended(reply: dict[str, Any]) -> int:
    """The exit code of the step the recorder reported, or 125 where it was not recorded whole."""
    error = reply.get("error")
    if error:
        sys.stderr.write(printable(f"alpha observe step: {error}\n"))
    if not reply.get("ok") or reply.get("op") != "step.exit":
        sys.stderr.write(f"alpha observe step: the step was not recorded whole; exit {Exit.RECORDER}\n")
        return Exit.RECORDER
    if reply.get("forward_lost"):
        sys.stderr.write(
            f"alpha observe step: some of the step's output was recorded but not written here; exit {Exit.RECORDER}\n"
        )
        return Exit.RECORDER
    code = reply.get("code")
    return code if isinstance(code, int) and 0 <= code <= 255 else Exit.RECORDER


def _write_all(fd: int, data: bytes) -> bool:
    """Write all of ``data`` to ``fd``; False once the reader is gone (EPIPE)."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BrokenPipeError:
            return False
        except OSError:
            return True  # another failure (a closed fd): the bytes are recorded all the same
    return True

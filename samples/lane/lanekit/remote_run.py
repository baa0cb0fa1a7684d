"""One run of a lane on nodes reached over SSH: each participant a step the recorder runs.

Every participant (the coordinator and the two owners) is started on its node as
``alpha observe step NAME -- ssh ... HOST COMMAND`` (outside a recording, the ssh
command alone), so its output, exit code and duration in the stream are the
recorder's own observation of the ssh client, whose exit is the remote role's.
The command checks the executable's SHA-256 on the node before it runs it
(``remote-digest``, exit 26, when it does not match), then ``exec``s the node's
python on it.

The participants meet through the driver's link, their stdin: the coordinator
makes its listener and announces it; each owner gets its address as the first
line of its stdin. ``loopback``: a Unix socket in a private folder of the one
node. ``ssh-tunnel``: TCP on 127.0.0.1 of the coordinator's node, reached from
the other node through the driver's two master connections (``-L`` to the
coordinator's node, ``-R`` from the other). Closing a participant's stdin ends
it on its node, so a failed or abandoned run leaves no role running there.
"""

from __future__ import annotations

import contextlib
import shlex
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import IO

from .receipts import _alpha, _recording
from .refusals import RemoteDigest
from .remote import Link, remote_command
from .session import RunResult
from .spec import COORDINATOR_HOST

__all__ = ["Participant", "run_remote", "start_participant"]

ANNOUNCE = "coordinator: listening on "


@dataclass
class Participant:
    """One started participant: its process (the step client, or ssh), its stdin, what it printed."""

    name: str
    proc: subprocess.Popen[bytes]
    output: list[str]
    stdout: list[str]
    pumps: list[threading.Thread]

    def close_stdin(self) -> None:
        """Close the driver's link: the role on the node ends when it reads EOF."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()


def guarded(link: Link, exe: str, digest: str, args: list[str]) -> str:
    """The node's command line: check ``exe``'s SHA-256 there, then run it with the node's python."""
    refusal = f"refused: remote-digest: {exe} on {link.node.label} does not hash to {digest}"
    check = f"printf '%s  %s\\n' {shlex.quote(digest)} {shlex.quote(exe)} | sha256sum -c --status - 2>/dev/null"
    run = remote_command([link.node.python, exe, *args], link.node.env)
    return f"{check} || {{ echo {shlex.quote(refusal)} >&2; exit {RemoteDigest.exit_code}; }}; exec {run}"


def _pump(
    name: str,
    stream: IO[bytes],
    sink: IO[str],
    echo: bool,
    keep: list[str],
    only: list[str] | None,
    announced: list[str] | None,
    ready: threading.Event | None,
) -> None:
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", "replace")
        keep.append(line)
        if only is not None:
            only.append(line)
        if announced is not None and ready is not None and line.startswith(ANNOUNCE) and not announced:
            announced.append(line[len(ANNOUNCE) :].strip())
            ready.set()
        if line.startswith("refused: "):
            sink.write(line)  # the phase's own stderr shows the refusal, as the gate's step rules read it
        elif echo:
            sink.write(f"[{name}] {line}")
        sink.flush()


def start_participant(
    link: Link,
    step: str,
    name: str,
    exe: str,
    digest: str,
    args: list[str],
    *,
    announced: list[str] | None = None,
    ready: threading.Event | None = None,
) -> Participant:
    """Start one participant on ``link``'s node, under the recorder when recording; its output is pumped."""
    ssh = link.argv(guarded(link, exe, digest, args))
    recording = _recording()
    argv = [*_alpha(), "observe", "step", "--standalone", step, "--", *ssh] if recording else ssh
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    output: list[str] = []
    stdout: list[str] = []
    pumps = []
    # Inside a recording the step's output is the recorder's already (recorded and echoed): only its
    # refusal lines are repeated, on the phase's own stderr (a step rule reads a step's own output).
    for stream, sink, only in ((proc.stdout, sys.stdout, stdout), (proc.stderr, sys.stderr, None)):
        assert stream is not None
        extra = (announced, ready) if only is None else (None, None)
        t = threading.Thread(target=_pump, args=(name, stream, sink, not recording, output, only, *extra), daemon=True)
        t.start()
        pumps.append(t)
    return Participant(name, proc, output, stdout, pumps)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _end(parts: dict[str, Participant], timeout: float, grace: float = 1.0) -> dict[str, int]:
    """Wait for every participant; once one fails, give the rest ``grace`` seconds, then close their links."""
    deadline = time.monotonic() + timeout
    failed_at: float | None = None
    stopping_at: float | None = None
    terminated = False
    while True:
        codes = {name: p.proc.poll() for name, p in parts.items()}
        if all(code is not None for code in codes.values()):
            return {name: int(code) for name, code in codes.items() if code is not None}
        now = time.monotonic()
        if failed_at is None and any(code not in (None, 0) for code in codes.values()):
            failed_at = now
        if stopping_at is None and (now > deadline or (failed_at is not None and now > failed_at + grace)):
            stopping_at = now
            for p in parts.values():
                p.close_stdin()  # the role on the node reads EOF and exits; ssh follows
        if stopping_at is not None and now > stopping_at + 15 and not terminated:
            terminated = True
            for p in parts.values():
                if p.proc.poll() is None:
                    p.proc.terminate()  # a step client passes it on to its ssh (the recorder's child)
        time.sleep(0.01)


def run_remote(
    links: list[Link],
    node_of: dict[str, int],
    exes: dict[str, tuple[str, str]],
    *,
    label: str,
    transport: str,
    coordinator_args: list[str],
    owner_args: list[str],
    timeout: float = 300.0,
) -> RunResult:
    """Run one lane run: ``exes`` maps each role to (remote path, SHA-256); ``node_of`` each member to its link."""
    ready = threading.Event()
    announced: list[str] = []
    parts: dict[str, Participant] = {}
    host = exes[COORDINATOR_HOST]
    try:
        listen = "tcp" if transport == "ssh-tunnel" else "unix"
        parts["coordinator"] = start_participant(
            links[node_of["coordinator"]],
            f"{label}.coordinator",
            "coordinator",
            host[0],
            host[1],
            ["coordinate", "--listen", listen, *coordinator_args],
            announced=announced,
            ready=ready,
        )
        for role in exes:
            exe, digest = exes[role]
            parts[role] = start_participant(
                links[node_of[role]], f"{label}.{role}", role, exe, digest, ["serve", "--connect-stdin", *owner_args]
            )
        deadline = time.monotonic() + timeout
        while not ready.wait(0.05):
            if parts["coordinator"].proc.poll() is not None or time.monotonic() > deadline:
                break
        if announced:
            address = announced[0]
            for role in exes:
                where = address
                if node_of[role] != node_of["coordinator"]:
                    # The tunnel: 127.0.0.1 of the owner's node -> here -> 127.0.0.1 of the coordinator's node.
                    local = _free_port()
                    links[node_of["coordinator"]].forward_local(local, int(address.rpartition(":")[2]))
                    where = f"tcp:127.0.0.1:{links[node_of[role]].forward_remote(local)}"
                stdin = parts[role].proc.stdin
                assert stdin is not None
                try:
                    stdin.write(f"{where}\n".encode())
                    stdin.flush()
                except OSError:
                    pass  # it ended already; its exit says why
        else:
            for p in parts.values():
                p.close_stdin()
        codes = _end(parts, max(1.0, deadline - time.monotonic()))
        for p in parts.values():
            for t in p.pumps:
                t.join(5)
        return RunResult(
            codes,
            {name: "".join(p.output) for name, p in parts.items()},
            {name: "".join(p.stdout) for name, p in parts.items()},
        )
    finally:
        for p in parts.values():
            p.close_stdin()
            if p.proc.poll() is None:
                try:
                    p.proc.wait(15)
                except subprocess.TimeoutExpired:
                    p.proc.kill()
                    p.proc.wait()

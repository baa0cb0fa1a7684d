"""Nodes reached over SSH: the lane driver's own OpenSSH connections (driver side, never embedded).

A lane config's ``host`` of ``"local"`` (or no ``host``) is this machine; any other
host (``user@address``, ``localhost`` included) is a node reached with the OpenSSH
client in BatchMode. The user's ``~/.ssh/config`` is honoured; the lane adds
``StrictHostKeyChecking=yes`` and, when the config names ``known_hosts``, that file
as the only one (``GlobalKnownHostsFile=/dev/null``), so an unknown host key
(``host-key-unknown``) or a changed one (``host-key-changed``) is refused, never
accepted. ``port`` and ``ssh_key`` become ``-p`` and ``-i``.

A :class:`Link` is one master connection (``ControlMaster``) to a node for the
length of one phase; every command, upload, fetch and forward of the phase goes
through it. The roles' own processes are started over it too, each as a step the
recorder runs (``alpha observe step NAME -- ssh ...``: :mod:`lanekit.remote_run`).
"""

from __future__ import annotations

import io
import json
import os
import shlex
import shutil
import subprocess
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from .refusals import HostKeyChanged, HostKeyUnknown, LaneRefusal, NodeUnreachable, RemoteDigest

__all__ = ["LOCAL", "Link", "Node", "is_local", "keyscan_hint", "remote_command"]

LOCAL = "local"
SSH = "ssh"
SCP = "scp"
#: How long a master connection may take to come up.
CONNECT_TIMEOUT = 30.0
#: What a fetch brings back at most (the lane's outputs are a few KiB).
FETCH_LIMIT = 64 << 20
#: ssh's own exit status for its own errors (a lost or refused connection).
SSH_ERROR = 255
#: Run on the node by :meth:`Link.query`: each command of argv[1] (JSON), its stdout or null.
QUERY = """import json, subprocess, sys
out = []
for argv in json.loads(sys.argv[1]):
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        out.append(done.stdout if done.returncode == 0 else None)
    except (OSError, subprocess.SubprocessError):
        out.append(None)
print(json.dumps(out))
"""


def is_local(host: object) -> bool:
    """Whether a config's ``host`` names this machine (no SSH)."""
    return host is None or host == LOCAL


def _quote_option(value: str) -> str:
    """An ssh ``-o`` value that may hold spaces (ssh splits unquoted values on whitespace)."""
    return f'"{value}"' if any(c.isspace() for c in value) else value


def remote_command(words: list[str], env: dict[str, str] | None = None) -> str:
    """The shell command line a node runs for ``words`` (each quoted), with ``env`` set for it."""
    prefix = ["env", *(f"{k}={v}" for k, v in sorted((env or {}).items()))] if env else []
    return shlex.join([*prefix, *words])


@dataclass(frozen=True)
class Node:
    """One node of a lane config: where a role (or both, for ``loopback``) runs."""

    index: int
    host: str
    remote_root: str
    port: int | None = None
    ssh_key: str | None = None
    known_hosts: str | None = None
    #: Environment set for every command the lane runs on the node (the config's ``node_env``).
    env: dict[str, str] = field(default_factory=dict)
    python: str = "python3"
    #: The node's observer account (the config's ``observer.user``): the recorder's, never the lane's.
    observer_user: str = "root"

    @property
    def label(self) -> str:
        """The node as messages name it."""
        return f"{self.host}:{self.port}" if self.port else self.host

    def options(self) -> list[str]:
        """The OpenSSH options of every connection to this node (without the port flag)."""
        opts = [
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            f"ConnectTimeout={int(CONNECT_TIMEOUT)}",
            "-o",
            "ServerAliveInterval=5",
            "-o",
            "ServerAliveCountMax=3",
        ]
        if self.known_hosts:
            opts += [
                "-o",
                f"UserKnownHostsFile={_quote_option(self.known_hosts)}",
                "-o",
                "GlobalKnownHostsFile=/dev/null",
            ]
        if self.ssh_key:
            opts += ["-i", self.ssh_key, "-o", "IdentitiesOnly=yes"]
        return opts


def keyscan_hint(node: Node) -> str:
    """How to add an unknown host key (once its fingerprint is checked out of band), in known_hosts' own form."""
    address = node.host.rpartition("@")[2]
    port = node.port or 22
    name = address if port == 22 else f"[{address}]:{port}"
    known = node.known_hosts or "~/.ssh/known_hosts"
    return f"check its fingerprint, then: ssh-keyscan -p {port} {address} >> {known} (known_hosts names it {name})"


def classify(node: Node, stderr: str) -> LaneRefusal:
    """The refusal an ssh failure's stderr stands for."""
    text = " ".join(stderr.split())
    if "REMOTE HOST IDENTIFICATION HAS CHANGED" in text or "has changed and you have requested strict" in text:
        return HostKeyChanged(f"{node.label} presents a host key other than the one known_hosts holds: {text[-300:]}")
    if "host key is known" in text or "Host key verification failed" in text:
        return HostKeyUnknown(f"{node.label}'s host key is not in known_hosts; {keyscan_hint(node)}: {text[-300:]}")
    return NodeUnreachable(f"{node.label}: {text[-300:] or 'ssh failed'}")


class Link:
    """One master SSH connection to a node, for the length of a ``with`` block."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.folder = ""
        self.control = ""
        self.master: subprocess.Popen[bytes] | None = None

    # -- the connection ------------------------------------------------------------

    def __enter__(self) -> Link:
        base = tempfile.gettempdir()
        self.folder = tempfile.mkdtemp(prefix="lane-ssh-", dir=base if len(base) < 60 else "/tmp")
        self.control = os.path.join(self.folder, "control")
        log = open(os.path.join(self.folder, "master.log"), "wb")
        try:
            self.master = subprocess.Popen(
                [SSH, *self._flags(), "-M", "-N", "-o", "ControlPersist=no", self.node.host],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,
            )
        finally:
            log.close()
        # The master makes its control socket once the connection is authenticated (host key verified).
        deadline = time.monotonic() + CONNECT_TIMEOUT + 5
        while not os.path.exists(self.control):
            if self.master.poll() is not None or time.monotonic() > deadline:
                why = self._log()
                self.__exit__()
                raise classify(self.node, why)
            time.sleep(0.01)
        return self

    def __exit__(self, *_exc: object) -> None:
        if self.master is not None:
            if self.master.poll() is None:
                self.master.terminate()  # our own child: its connection and forwards end with it
                try:
                    self.master.wait(10)
                except subprocess.TimeoutExpired:
                    self.master.kill()
                    self.master.wait()
            self.master = None
        if self.folder:
            shutil.rmtree(self.folder, ignore_errors=True)

    def _flags(self, scp: bool = False) -> list[str]:
        port = ["-P" if scp else "-p", str(self.node.port)] if self.node.port else []
        return [*self.node.options(), *port, "-o", f"ControlPath={self.control}"]

    def _check(self) -> bool:
        done = subprocess.run([SSH, *self._flags(), "-O", "check", self.node.host], capture_output=True, check=False)
        return done.returncode == 0

    def _log(self) -> str:
        try:
            with open(os.path.join(self.folder, "master.log"), encoding="utf-8", errors="replace") as fh:
                return fh.read()
        except OSError:
            return ""

    def alive(self) -> bool:
        """Whether the master connection still stands."""
        return self.master is not None and self.master.poll() is None and self._check()

    def lost(self, what: str, stderr: str = "") -> NodeUnreachable:
        """The refusal for a command that failed because the node went away."""
        return NodeUnreachable(f"{self.node.label}: {what}: {' '.join((stderr or self._log()).split())[-300:]}")

    # -- commands ------------------------------------------------------------------

    def argv(self, words: list[str] | str, *, env: bool = True) -> list[str]:
        """``ssh ... HOST COMMAND`` over the master (``words`` quoted; a str is sent as is)."""
        command = words if isinstance(words, str) else remote_command(words, self.node.env if env else None)
        return [SSH, *self._flags(), "-o", "ControlMaster=no", self.node.host, "--", command]

    def run(self, words: list[str] | str, *, stdin: bytes | None = None, timeout: float = 120.0) -> Any:
        """Run a command on the node; a failure of ssh itself (255 with the master gone) is ``node-unreachable``."""
        try:
            done = subprocess.run(self.argv(words), input=stdin, capture_output=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise self.lost(f"no answer within {timeout:.0f} s") from None
        if done.returncode == SSH_ERROR and not self.alive():
            raise self.lost("the connection was lost", done.stderr.decode("utf-8", "replace"))
        return done

    def mkdir(self, path: str) -> None:
        """Make a folder (and its parents) on the node."""
        done = self.run(["mkdir", "-p", "--", path])
        if done.returncode != 0:
            raise self.lost(f"cannot make {path}", done.stderr.decode("utf-8", "replace"))

    def upload(self, files: list[str], folder: str) -> None:
        """Copy local files into a folder of the node (made first), with scp over the master."""
        self.mkdir(folder)
        target = f"{self.node.host}:{folder}/"
        done = subprocess.run(
            [SCP, "-B", "-q", *self._flags(scp=True), "-o", "ControlMaster=no", "--", *files, target],
            capture_output=True,
            timeout=300,
            check=False,
        )
        if done.returncode != 0:
            raise self.lost(f"upload to {folder} failed", done.stderr.decode("utf-8", "replace"))

    def sha256(self, paths: list[str], make: str | None = None) -> dict[str, str | None]:
        """Each file's SHA-256 as the node computes it (None: not there, or unreadable)."""
        command = shlex.join(["sha256sum", "--", *paths])
        if make is not None:
            command = f"{shlex.join(['mkdir', '-p', '--', make])} && {command}"
        done = self.run(command)
        if make is not None and done.returncode not in (0, 1):
            raise self.lost(f"cannot make {make}", done.stderr.decode("utf-8", "replace"))
        found: dict[str, str | None] = dict.fromkeys(paths)
        for line in done.stdout.decode("utf-8", "replace").splitlines():
            digest, _, name = line.partition("  ")
            if name in found and len(digest) == 64:
                found[name] = digest
        return found

    def verify(self, expected: dict[str, str], make: str | None = None) -> None:
        """Refuse (``remote-digest``) unless every remote file hashes to its expected SHA-256 on the node.

        ``make``: a folder made first, in the same command (a run's output folder).
        """
        got = self.sha256(sorted(expected), make)
        wrong = [f"{p} is {got[p] or 'missing'}, not {d}" for p, d in sorted(expected.items()) if got[p] != d]
        if wrong:
            raise RemoteDigest(f"on {self.node.label}: " + "; ".join(wrong))

    def query(self, commands: list[list[str]]) -> list[str | None]:
        """Run several commands on the node in one connection (its python3): each one's stdout, None where it failed."""
        done = self.run([self.node.python, "-c", QUERY, json.dumps(commands)], timeout=120)
        try:
            answers = json.loads(done.stdout)
        except ValueError:
            answers = None
        if done.returncode != 0 or not isinstance(answers, list) or len(answers) != len(commands):
            return [None] * len(commands)
        return [a if isinstance(a, str) else None for a in answers]

    def forward_local(self, local_port: int, remote_port: int) -> None:
        """Forward 127.0.0.1:``local_port`` here to 127.0.0.1:``remote_port`` on the node (``-L``, over the master)."""
        spec = f"127.0.0.1:{local_port}:127.0.0.1:{remote_port}"
        done = subprocess.run(
            [SSH, *self._flags(), "-O", "forward", "-L", spec, self.node.host], capture_output=True, check=False
        )
        if done.returncode != 0:
            raise self.lost(f"cannot forward {spec}", done.stderr.decode("utf-8", "replace"))

    def forward_remote(self, local_port: int) -> int:
        """Listen on 127.0.0.1 of the node (a port it picks) and forward to 127.0.0.1:``local_port`` here (``-R``)."""
        spec = f"127.0.0.1:0:127.0.0.1:{local_port}"
        done = subprocess.run(
            [SSH, *self._flags(), "-O", "forward", "-R", spec, self.node.host], capture_output=True, check=False
        )
        port = done.stdout.decode("ascii", "replace").strip()
        if done.returncode != 0 or not port.isdigit():
            raise self.lost(f"cannot forward {spec}", done.stderr.decode("utf-8", "replace"))
        return int(port)

    def fetch(self, folder: str, local: str) -> list[str]:
        """Copy back every regular file under a folder of the node into ``local``; the files written.

        Whatever exists is copied (a failed run's partial outputs too). Names are checked
        here: nothing absolute, no ``..``, no links or devices, at most :data:`FETCH_LIMIT`.
        """
        done = self.run(f"cd {shlex.quote(folder)} 2>/dev/null && tar -cf - . || true", timeout=300)
        if done.returncode != 0:
            raise self.lost(f"cannot copy back {folder}", done.stderr.decode("utf-8", "replace"))
        return extract(done.stdout, local)


def extract(data: bytes, local: str) -> list[str]:
    """Write the regular files of a tar stream under ``local``, refusing unsafe names; the paths written."""
    if not data:
        return []
    if len(data) > FETCH_LIMIT:
        raise NodeUnreachable(f"the node sent {len(data)} bytes back, more than {FETCH_LIMIT}")
    written: list[str] = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        for member in tar:
            name = os.path.normpath(member.name)
            if member.isdir() or name == ".":
                continue
            if not member.isfile() or os.path.isabs(name) or name.split(os.sep)[0] == "..":
                raise NodeUnreachable(f"the node sent back {member.name!r}, which is not a plain file under its folder")
            source = tar.extractfile(member)
            assert source is not None
            target = os.path.join(local, name)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "wb") as fh:
                shutil.copyfileobj(source, fh)
            written.append(target)
    return sorted(written)

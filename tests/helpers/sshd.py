"""Real OpenSSH servers for the tests: Debian's ``sshd`` started by the suite on 127.0.0.1.

Each :class:`SshNode` is one ``sshd`` of its own (never the machine's): a throwaway
ed25519 host key, a throwaway user key authorised for the user running the suite, a
high port, and a ``known_hosts`` file that holds exactly this node's host key (for
``[127.0.0.1]:PORT``). Two nodes have distinct host keys, so they stand for two hosts.
:func:`start_node` starts one and :meth:`SshNode.stop` ends it; the fixtures in
``tests/conftest.py`` (``ssh_node``, ``ssh_nodes``) hand out running ones per session.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

SSHD = "/usr/sbin/sshd"
SSH = shutil.which("ssh") or "/usr/bin/ssh"
SSH_KEYGEN = shutil.which("ssh-keygen") or "/usr/bin/ssh-keygen"
ADDRESS = "127.0.0.1"


def sshd_available() -> str | None:
    """None when a test sshd can be started here, else why not (for a skip)."""
    for tool in (SSHD, SSH, SSH_KEYGEN):
        if not os.access(tool, os.X_OK):
            return f"{tool} is not installed (Debian's openssh-server and openssh-client)"
    return None


def _keygen(path: Path, comment: str) -> str:
    """A fresh ed25519 key pair at ``path`` (no passphrase); the public key's line."""
    subprocess.run(
        [SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        capture_output=True,
        timeout=30,
    )
    return (path.parent / (path.name + ".pub")).read_text().strip()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((ADDRESS, 0))
        return int(s.getsockname()[1])


@dataclass
class SshNode:
    """One running test ``sshd``: how to reach it, and the files that say who it is."""

    name: str
    port: int
    user: str
    #: The user's private key (authorised on this node).
    ssh_key: Path
    #: A known_hosts file with this node's host key alone.
    known_hosts: Path
    #: This node's public host key line (``ssh-ed25519 AAAA... comment``).
    host_key_pub: str
    #: The private host key (tests that change a node's identity rewrite it and restart).
    host_key: Path
    #: An empty folder for the node's ``remote_root``.
    root: Path
    folder: Path
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def host(self) -> str:
        """``user@127.0.0.1``, as a lane config names it."""
        return f"{self.user}@{ADDRESS}"

    def ssh_options(self) -> list[str]:
        """The OpenSSH client options that reach this node in BatchMode, verifying its host key."""
        return [
            "-F",
            "/dev/null",
            "-p",
            str(self.port),
            "-i",
            str(self.ssh_key),
            "-o",
            "BatchMode=yes",
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            f"UserKnownHostsFile={self.known_hosts}",
            "-o",
            "GlobalKnownHostsFile=/dev/null",
        ]

    def ssh_argv(self, *command: str) -> list[str]:
        """``ssh ... user@127.0.0.1 COMMAND`` for this node."""
        return [SSH, *self.ssh_options(), self.host, *command]

    def config(self, **extra: object) -> dict[str, object]:
        """The lane-config fields that name this node (host, port, ssh_key, known_hosts, remote_root)."""
        return {
            "host": self.host,
            "port": self.port,
            "ssh_key": str(self.ssh_key),
            "known_hosts": str(self.known_hosts),
            "remote_root": str(self.root),
            **extra,
        }

    # -- life ----------------------------------------------------------------------

    def start(self) -> None:
        """Start this node's sshd and wait until it accepts a BatchMode login."""
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # the privilege separation folder sshd insists on
        self.process = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(self.folder / "sshd_config")],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=open(self.folder / "sshd.log", "ab"),  # noqa: SIM115 - the server's for its lifetime
            start_new_session=True,
        )
        deadline = time.monotonic() + 20
        while True:
            probe = subprocess.run(self.ssh_argv("true"), capture_output=True, timeout=20, check=False)
            if probe.returncode == 0:
                return
            if self.process.poll() is not None or time.monotonic() > deadline:
                log = (self.folder / "sshd.log").read_text(errors="replace")
                self.stop()
                raise RuntimeError(f"test sshd {self.name} did not start: {probe.stderr!r}\n{log}")
            time.sleep(0.1)

    def stop(self) -> None:
        """End this node's sshd and every session it serves (each in a session of its own, so not in the
        listener's group): the node is lost, mid-run too."""
        if self.process is not None and self.process.poll() is None:
            for pid in [*_descendants(self.process.pid), self.process.pid]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, 9)
            self.process.wait(timeout=10)
        self.process = None

    def new_host_key(self) -> str:
        """Give this node a new host key (as a re-installed or impersonated host has) and restart it; the new
        public line. ``known_hosts`` keeps the old one."""
        self.stop()
        self.host_key.unlink()
        (self.folder / (self.host_key.name + ".pub")).unlink()
        self.host_key_pub = _keygen(self.host_key, f"host-{self.name}-2")
        self.process = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(self.folder / "sshd_config")],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=open(self.folder / "sshd.log", "ab"),  # noqa: SIM115
            start_new_session=True,
        )
        _wait_listening(self.port)
        return self.host_key_pub


def _descendants(root: int) -> list[int]:
    """Every live descendant of ``root``, children before their own children."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                parents[int(entry)] = int(stat[stat.rindex(")") + 2 :].split()[1])
    found, todo = [], [root]
    while todo:
        parent = todo.pop()
        kids = [pid for pid, ppid in parents.items() if ppid == parent]
        found += kids
        todo += kids
    return found


def _wait_listening(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex((ADDRESS, port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {ADDRESS}:{port}")


def make_node(folder: Path, name: str) -> SshNode:
    """Keys, config and folders of a test node ``name`` under ``folder`` (not started)."""
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    host_key = folder / "ssh_host_ed25519_key"
    host_pub = _keygen(host_key, f"host-{name}")
    user_key = folder / "id_ed25519"
    user_pub = _keygen(user_key, f"user-{name}")
    (folder / "authorized_keys").write_text(user_pub + "\n")
    port = _free_port()
    known = folder / "known_hosts"
    known.write_text(f"[{ADDRESS}]:{port} {' '.join(host_pub.split()[:2])}\n")
    root = folder / "remote"
    root.mkdir()
    (folder / "sshd_config").write_text(
        "\n".join(
            [
                f"ListenAddress {ADDRESS}",
                f"Port {port}",
                f"HostKey {host_key}",
                f"AuthorizedKeysFile {folder / 'authorized_keys'}",
                f"PidFile {folder / 'sshd.pid'}",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "PermitRootLogin prohibit-password",
                "UsePAM no",
                "StrictModes no",
                "AllowTcpForwarding yes",
                "AllowStreamLocalForwarding no",
                "X11Forwarding no",
                "PrintMotd no",
                "Subsystem sftp internal-sftp",
                "AcceptEnv LANG LC_*",
                "",
            ]
        )
    )
    return SshNode(name, port, getpass.getuser(), user_key, known, host_pub, host_key, root, folder)


@contextlib.contextmanager
def running_node(folder: Path, name: str) -> Iterator[SshNode]:
    """A started test node, stopped at the end."""
    node = make_node(folder, name)
    node.start()
    try:
        yield node
    finally:
        node.stop()

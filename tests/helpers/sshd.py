"""Real OpenSSH servers for the tests: Debian's ``sshd`` started by the suite on 127.0.0.1.

Each :class:`SshNode` is one ``sshd`` of its own (never the machine's), run as root and
set up as a pod is (docs/TRUST.md, "Remote nodes"): two accounts, the *observer account*
``root`` (the recorder's: the session-wide :func:`observer_key` is authorised for it,
in the node's own file) and the unprivileged *lane account* ``aos-lane`` (created once
with ``useradd``, idempotently; its own home and ``~/.ssh/authorized_keys``, where each
node's throwaway lane key is authorised). A throwaway ed25519 host key, a high port, a
``known_hosts`` file that holds exactly this node's host key (for ``[127.0.0.1]:PORT``),
and a ``remote_root`` the lane account owns. Two nodes have distinct host keys, so they
stand for two hosts. :func:`running_node` starts one and :meth:`SshNode.stop` ends it;
the fixtures in ``tests/conftest.py`` (``ssh_node``, ``ssh_nodes``) hand out running
ones per session.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.helpers.accounts import ensure, per_worker
from tests.helpers.eagain import retry_eagain

SSHD = "/usr/sbin/sshd"
SSH = shutil.which("ssh") or "/usr/bin/ssh"
SSH_KEYGEN = shutil.which("ssh-keygen") or "/usr/bin/ssh-keygen"
ADDRESS = "127.0.0.1"
#: The node's unprivileged account the lane logs into (never the recorder's): ``aos-lane``, one per xdist
#: worker (tests.helpers.accounts), since a test plants start-up code in its home.
LANE_USER = per_worker("aos-lane")
#: The node's observer account, the recorder's.
OBSERVER_USER = "root"
#: The environment variable the tests hand the observer key in (``--observer-key-env``).
OBSERVER_KEY_ENV = "AOS_TEST_OBSERVER_KEY"


def lane_account() -> pwd.struct_passwd:
    """The lane account, created on first use (its own home; not locked, so a key logs in)."""
    return ensure(LANE_USER)


def as_lane(path: Path) -> Path:
    """Give ``path`` (and, for a folder, what is in it) to the lane account: it is the lane's to change."""
    account = lane_account()
    for folder, dirs, files in os.walk(path) if path.is_dir() else [(str(path.parent), [], [path.name])]:
        for name in [*dirs, *files]:
            os.lchown(os.path.join(folder, name), account.pw_uid, account.pw_gid)
    os.lchown(path, account.pw_uid, account.pw_gid)
    return path


def lane_home() -> Path:
    return Path(lane_account().pw_dir)


_OBSERVER_KEY: list[Path] = []


def observer_key() -> Path:
    """The session's observer key (one for every node, as the recorder logs into all with one key)."""
    if not _OBSERVER_KEY:
        folder = Path(tempfile.mkdtemp(prefix="aos-observer-key-"))
        _keygen(folder / "id_ed25519", "observer")
        _OBSERVER_KEY.append(folder / "id_ed25519")
    return _OBSERVER_KEY[0]


def observer_env() -> dict[str, str]:
    """The recorder's environment entry that holds the observer key (named by :func:`observer_args`)."""
    return {OBSERVER_KEY_ENV: observer_key().read_text()}


def observer_args() -> list[str]:
    """``record``/``gate`` options that log into the nodes' observer accounts with the observer key."""
    return ["--observer-key-env", OBSERVER_KEY_ENV]


def lane_readable(source: Path) -> Path:
    """A copy of the folder ``source`` the lane account can read (the checkout may lie under a private home)."""
    target = Path(tempfile.gettempdir()) / f"aos-lane-share-{os.getpid()}" / source.name
    if not target.exists():
        target.parent.mkdir(mode=0o755, exist_ok=True)
        target.parent.chmod(0o755)
        shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
        for folder, _dirs, files in os.walk(target):
            os.chmod(folder, 0o755)
            for name in files:
                path = os.path.join(folder, name)
                os.chmod(path, 0o755 if os.access(path, os.X_OK) else 0o644)
    return target


def sshd_available() -> str | None:
    """None when a test sshd can be started here, else why not (for a skip)."""
    for tool in (SSHD, SSH, SSH_KEYGEN):
        if not os.access(tool, os.X_OK):
            return f"{tool} is not installed (Debian's openssh-server and openssh-client)"
    return None


def _keygen(path: Path, comment: str) -> str:
    """A fresh ed25519 key pair at ``path`` (no passphrase); the public key's line."""
    argv = [SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)]
    retry_eagain(lambda: subprocess.run(argv, check=True, capture_output=True, timeout=30), "ssh-keygen")
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
    #: The lane account (``aos-lane``), the ``host``'s user.
    user: str
    #: The lane's private key (authorised for the lane account on this node).
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
        """``aos-lane@127.0.0.1``, as a lane config names it."""
        return f"{self.user}@{ADDRESS}"

    def lane_folder(self, name: str) -> Path:
        """A folder ``name`` under this node's ``remote_root``, the lane account's (made when missing)."""
        path = self.root / name
        path.mkdir(parents=True, exist_ok=True)
        return as_lane(path)

    def observer_argv(self, *command: str) -> list[str]:
        """``ssh ... root@127.0.0.1 COMMAND``: a session of the observer account, with the observer key."""
        options = self.ssh_options()
        options[options.index("-i") + 1] = str(observer_key())
        return [SSH, *options, f"{OBSERVER_USER}@{ADDRESS}", *command]

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
        self.process = self._spawn()
        deadline = time.monotonic() + 20
        while True:
            probe = retry_eagain(
                lambda: subprocess.run(self.ssh_argv("true"), capture_output=True, timeout=20, check=False),
                f"the login probe of test sshd {self.name}",
            )
            if probe.returncode == 0:
                return
            if self.process.poll() is not None or time.monotonic() > deadline:
                log = (self.folder / "sshd.log").read_text(errors="replace")
                self.stop()
                raise RuntimeError(f"test sshd {self.name} did not start: {probe.stderr!r}\n{log}")
            time.sleep(0.1)

    def _spawn(self) -> subprocess.Popen[bytes]:
        """This node's sshd, started (tried again after a transient EAGAIN)."""

        def spawn() -> subprocess.Popen[bytes]:
            with open(self.folder / "sshd.log", "ab") as log:  # the child keeps its own descriptor
                return subprocess.Popen(
                    [SSHD, "-D", "-e", "-f", str(self.folder / "sshd_config")],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=log,
                    start_new_session=True,
                )

        return retry_eagain(spawn, f"test sshd {self.name}")

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
        self.process = self._spawn()
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
    user_pub = _keygen(user_key, f"lane-{name}")
    observer_pub = (observer_key().parent / "id_ed25519.pub").read_text().strip()
    (folder / "authorized_keys").write_text(observer_pub + "\n")  # the observer account's (root's), the node's own
    authorize_lane_key(user_pub)
    port = _free_port()
    known = folder / "known_hosts"
    known.write_text(f"[{ADDRESS}]:{port} {' '.join(host_pub.split()[:2])}\n")
    root = as_lane(Path(tempfile.mkdtemp(prefix=f"aos-lane-{name}-")))  # remote_root: the lane's to write
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
                # The lane account's own keys, in its own home: it may change them (an authorized_keys command=).
                f"Match User {LANE_USER}",
                "    AuthorizedKeysFile .ssh/authorized_keys",
                "",
            ]
        )
    )
    return SshNode(name, port, LANE_USER, user_key, known, host_pub, host_key, root, folder)


def authorize_lane_key(pub: str) -> None:
    """Authorise ``pub`` for the lane account (its ``~/.ssh/authorized_keys``, the lane's own file)."""
    ssh = lane_home() / ".ssh"
    ssh.mkdir(mode=0o700, exist_ok=True)
    keys = ssh / "authorized_keys"
    lines = keys.read_text().splitlines() if keys.exists() else []
    if pub not in lines:
        keys.write_text("".join(f"{line}\n" for line in [*lines, pub]))
    as_lane(ssh)


@contextlib.contextmanager
def running_node(folder: Path, name: str) -> Iterator[SshNode]:
    """A started test node, stopped at the end."""
    node = make_node(folder, name)
    node.start()
    try:
        yield node
    finally:
        node.stop()
        shutil.rmtree(node.root, ignore_errors=True)
        pub = (node.folder / "id_ed25519.pub").read_text().strip()
        keys = lane_home() / ".ssh" / "authorized_keys"
        with contextlib.suppress(OSError):
            keys.write_text("".join(f"{line}\n" for line in keys.read_text().splitlines() if line != pub))


def end_links(links: list[Any], wait: float = 30.0) -> None:
    """Ask every node link (``observe.devices.remote.NodeLink``) for its end at once, then wait for each and
    close it: what a recording does when its command has ended, without the recorder's deadlines."""
    for link in links:
        link.end()
    for link in links:
        link.done.wait(wait)
        link.close()

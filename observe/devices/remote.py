"""The recorder's own SSH connections to the lane's remote nodes, and the observers it runs there.

For each node the captured lane config names (observe.devices.lane_nodes), a
thread of the recorder, started before the command:

1. connects with paramiko, in this process: the recorder is not dumpable
   (observe.recorder.record), so a same-user command can neither read its
   memory nor open its descriptors, and no OpenSSH client, control socket or
   agent exists that the command could use or ptrace;
2. verifies the node's host key against the node's ``known_hosts`` before
   authenticating: a host it lists no key for (``host-key-unknown``) or a key
   other than the one it lists (``host-key-changed``) is refused, recorded, and
   never accepted (nothing is ever written to a ``known_hosts``);
3. authenticates with the node's key alone (BatchMode: no agent, no prompt);
4. runs ``python3 -c BOOTSTRAP SHA256`` (observe.devices.bundle), sends the
   bundle and a setup line, and appends each observation the node streams
   back as ``device.observed`` / ``telemetry`` with ``node`` attrs: which node,
   the SHA-256 fingerprint of the host key it verified, the observer's digest
   (as the node computed it), the node's kernel and Python.

A node that cannot be reached, refuses the login or has no python3 is recorded
as a ``start`` observation of observer ``none`` with the reason. A node whose
connection ends before the recorder asked for its end observation is recorded as
``node.lost``; the recording goes on.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import shlex
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from observe.devices.bundle import BOOTSTRAP, Bundle, build_bundle
from observe.devices.lane_nodes import Node, lane_nodes, node_key
from observe.devices.observers import ENV_SIMULATED, lane_configs

__all__ = ["CONNECT_TIMEOUT", "NodeLink", "fingerprint", "keyscan_hint", "open_links"]

#: Seconds for the TCP connection, the SSH handshake and the login, each.
CONNECT_TIMEOUT = 10.0
#: The most stderr of the node's observer kept for a reason.
STDERR_KEPT = 4096

Append = Callable[[str, dict[str, Any]], None]


class Refused(Exception):
    """The node was not accepted: ``reason`` names why (``host-key-unknown``, ``host-key-changed``, ...)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def fingerprint(blob: bytes) -> str:
    """OpenSSH's SHA-256 fingerprint of a public key blob (``SHA256:`` and unpadded base64, as ``ssh-keygen -l``)."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def _known_name(node: Node) -> str:
    return node.address if node.port == 22 else f"[{node.address}]:{node.port}"


def keyscan_hint(node: Node) -> str:
    """How to add an unknown host key (once its fingerprint is checked out of band), and the name it goes by."""
    return (
        f"check its fingerprint, then: ssh-keyscan -p {node.port} {node.address} >> {node.known_hosts} "
        f"(known_hosts names it {_known_name(node)})"
    )


def _connect(node: Node, facts: dict[str, Any]) -> Any:
    """An authenticated paramiko Transport to ``node``, its host key verified (facts: what was offered)."""
    try:
        import paramiko
    except ImportError as exc:
        raise Refused("no-ssh-library", f"paramiko is not installed (pip install 'alpha-observe[ssh]'): {exc}") from exc

    known = paramiko.HostKeys()
    try:
        known.load(node.known_hosts)
    except OSError as exc:
        raise Refused(
            "host-key-unknown",
            f"cannot read known_hosts {node.known_hosts}: {exc.strerror or exc}; {keyscan_hint(node)}",
        ) from exc
    listed = known.lookup(_known_name(node)) or {}
    sock = socket.create_connection((node.address, node.port), timeout=CONNECT_TIMEOUT)
    transport = paramiko.Transport(sock)
    try:
        opts = transport.get_security_options()
        types = list(opts.key_types)
        wanted = [t for t in types if t in listed]
        if wanted:  # ask for a key of a type known_hosts lists, so a known host is verified, never mistyped
            opts.key_types = [*wanted, *(t for t in types if t not in wanted)]
        transport.banner_timeout = CONNECT_TIMEOUT
        transport.auth_timeout = CONNECT_TIMEOUT
        transport.start_client(timeout=CONNECT_TIMEOUT)
        offered = transport.get_remote_server_key()
        facts["host_key"] = {"type": offered.get_name(), "sha256": fingerprint(offered.asbytes())}
        expected = listed.get(offered.get_name())
        if expected is None:
            if listed:
                raise Refused(
                    "host-key-changed",
                    f"{_known_name(node)} offered a {offered.get_name()} key; {node.known_hosts} lists it with "
                    f"{', '.join(listed.keys())} only",
                )
            raise Refused(
                "host-key-unknown",
                f"{node.known_hosts} lists no host key for {_known_name(node)}; {keyscan_hint(node)}",
            )
        if expected.asbytes() != offered.asbytes():
            raise Refused(
                "host-key-changed",
                f"{_known_name(node)} offered {facts['host_key']['sha256']}; {node.known_hosts} lists "
                f"{fingerprint(expected.asbytes())}",
            )
        facts["host_key_verified"] = True
        if node.ssh_key is None:
            raise Refused("no-key", "the lane config names no ssh_key and ~/.ssh/config no IdentityFile")
        try:
            key = paramiko.PKey.from_path(node.ssh_key)
        except (OSError, paramiko.SSHException, ValueError) as exc:
            raise Refused("no-key", f"cannot load ssh_key {node.ssh_key}: {exc}") from exc
        try:
            transport.auth_publickey(node.lane_user, key)
        except paramiko.SSHException as exc:
            raise Refused(
                "login-refused", f"{node.lane_user}@{node.address} refused the key {node.ssh_key}: {exc}"
            ) from exc
        transport.set_keepalive(5)
        return transport
    except BaseException:
        transport.close()
        raise


class NodeLink:
    """One node: the connection, the observer it runs there, and the events it appends (see the module)."""

    def __init__(
        self,
        node: Node,
        bundle: Bundle,
        *,
        interval: float,
        simulated: dict[str, str] | None,
        config: dict[str, str],
        append: Append,
    ) -> None:
        self.node = node
        self.bundle = bundle
        self.interval = interval
        self.simulated = simulated
        self.append_event = append
        self.facts: dict[str, Any] = {
            **node.describe(),
            "roles": list(node.roles),
            "known_hosts": node.known_hosts,
            "ssh_config": node.from_ssh_config,
            "config": config,
            "host_key": None,
            "host_key_verified": False,
            "observer_sha256": None,
            "kernel": None,
            "python": None,
            "pid_namespace": None,
        }
        self.transport: Any = None
        self.channel: Any = None
        self._lock = threading.Lock()
        self._pending: list[tuple[str, dict[str, Any]]] = []
        self._start_ready = threading.Event()
        self._start_claimed = False
        self._ending = False
        self._closed = False
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._main, name=f"aos-node-{node.address}", daemon=True)

    # -- called by the sampler ------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def take_start(self, timeout: float) -> list[tuple[str, dict[str, Any]]]:
        """The start observation (and whatever followed it already), for the recorder to append before
        ``process.start``; empty when it is not ready within ``timeout`` (the link appends it when it comes)."""
        self._start_ready.wait(timeout)
        with self._lock:
            self._start_claimed = True
            pending, self._pending = self._pending, []
        return pending

    def end(self) -> None:
        """Ask the node for its end observation."""
        with self._lock:
            self._ending = True
            channel = self.channel
        if channel is not None:
            try:
                channel.sendall(b"end\n")
                channel.shutdown_write()
            except Exception:  # noqa: BLE001 - a gone node: its loss is recorded by the reader
                pass

    def close(self) -> None:
        """Append nothing more; close the connection."""
        with self._lock:
            self._closed = True
        if self.transport is not None:
            self.transport.close()

    # -- the thread ------------------------------------------------------------------------

    def _emit(self, kind: str, attrs: dict[str, Any]) -> None:
        with self._lock:
            if self._closed:
                return
            if not self._start_claimed:  # held for the recorder, which appends them before process.start
                self._pending.append((kind, attrs))
                if kind == "device.observed" and attrs.get("phase") == "start":
                    self._start_ready.set()
                return
        self.append_event(kind, attrs)

    def _none(self, error: str, refused: str | None = None) -> None:
        """A start observation of observer ``none``: the node could not be observed, and why."""
        node = {**self.facts, "refused": refused} if refused else dict(self.facts)
        self._emit(
            "device.observed",
            {
                "phase": "start",
                "observer": "none",
                "library": None,
                "driver": None,
                "cuda_driver": None,
                "namespace": None,
                "gpus": [],
                "processes": [],
                "attribution": "unavailable",
                "simulated_from": None,
                "error": f"node {self.node.host} port {self.node.port}: {error}",
                "node": node,
            },
        )

    def _main(self) -> None:
        try:
            self._run()
        except Refused as exc:
            self._none(f"refused ({exc.reason}): {exc.detail}", exc.reason)
        except Exception as exc:  # noqa: BLE001 - an unreachable node is recorded; the recording goes on
            self._none(f"unreachable: {type(exc).__name__}: {exc}")
        finally:
            self._start_ready.set()
            self.done.set()

    def _run(self) -> None:
        self.transport = _connect(self.node, self.facts)
        channel = self.transport.open_session(timeout=CONNECT_TIMEOUT)
        channel.exec_command(f"python3 -c {shlex.quote(BOOTSTRAP)} {self.bundle.sha256}")
        setup = {
            "interval": self.interval,
            "node": node_key(self.node.host, self.node.port),
            "simulated": self.simulated,
        }
        channel.sendall(str(len(self.bundle.data)).encode() + b"\n" + self.bundle.data)
        channel.sendall(json.dumps(setup).encode() + b"\n")
        with self._lock:
            self.channel = channel
            ending = self._ending
        if ending:
            self.end()
        self._read(channel)

    def _read(self, channel: Any) -> None:
        stream = channel.makefile("rb")
        started = False
        finished = False
        for raw in stream:
            try:
                msg = json.loads(raw)
            except ValueError:
                continue
            kind = msg.get("type") if isinstance(msg, dict) else None
            if kind == "hello":
                if msg.get("sha256") != self.bundle.sha256:
                    raise Refused("observer-digest", f"the node ran an observer of SHA-256 {msg.get('sha256')}")
                space = msg.get("namespace")
                self.facts.update(
                    observer_sha256=msg.get("sha256"),
                    kernel=msg.get("kernel"),
                    python=msg.get("python"),
                    pid_namespace=space.get("pid") if isinstance(space, dict) else None,
                )
            elif kind == "refused":
                raise Refused("observer-digest", f"the node received an observer of SHA-256 {msg.get('sha256')}")
            elif kind in ("device.observed", "telemetry") and isinstance(msg.get("attrs"), dict):
                attrs = {**msg["attrs"], "node": dict(self.facts)}
                started = started or kind == "device.observed"
                self._emit(kind, attrs)
            elif kind == "bye":
                finished = True
        if finished:
            return
        channel.status_event.wait(2.0)  # the exit status follows the output's end, if the node sends one
        status = channel.exit_status if channel.exit_status_ready() else None
        stderr = b""
        while channel.recv_stderr_ready() and len(stderr) < STDERR_KEPT:
            stderr += channel.recv_stderr(STDERR_KEPT)
        said = stderr.decode("utf-8", "replace").strip()[-STDERR_KEPT:]
        if not started:
            if status == 127:
                raise Refused("no-python3", f"the node has no python3 (exit 127{': ' + said if said else ''})")
            raise Refused("observer-failed", f"the observer exited {status} before observing: {said or 'no output'}")
        self._emit(
            "node.lost",
            {
                "node": dict(self.facts),
                "reason": (
                    f"the connection ended before the end observation (exit status {status})"
                    + (f": {said}" if said else "")
                ),
                "at_ns": time.monotonic_ns(),
            },
        )


#: The largest lane config (and simulated-GPU file) the recorder reads for its nodes.
CONFIG_MAX_BYTES = 1 << 20


def _read(path: str) -> bytes | None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            return os.read(fd, CONFIG_MAX_BYTES)
        finally:
            os.close(fd)
    return None


def open_links(env: dict[str, str], cwd: str, *, interval: float, append: Append) -> tuple[list[NodeLink], list[str]]:
    """A started link to each remote node the lane configs of ``env`` name (one per user, address and port),
    and what kept a config from naming its nodes."""
    links: list[NodeLink] = []
    problems: list[str] = []
    seen: set[tuple[str, str, str, int]] = set()
    bundle: Bundle | None = None
    simulated: dict[str, str] | None = None
    for name, value in lane_configs(env):
        path = os.path.realpath(os.path.join(cwd, value))
        data = _read(path)
        if data is None:
            continue  # the capture of the config records that it could not be read
        try:
            doc = json.loads(data)
        except ValueError as exc:
            problems.append(f"${name} ({path}) is not JSON: {exc}")
            continue
        nodes, wrong = lane_nodes(doc, os.path.dirname(path), env.get("HOME") or os.path.expanduser("~"))
        problems += [f"${name}: {w}" for w in wrong]
        config = {"env": name, "path": path, "sha256": hashlib.sha256(data).hexdigest()}
        for node in nodes:
            if (node.user, node.lane_user, node.address, node.port) in seen:
                continue
            seen.add((node.user, node.lane_user, node.address, node.port))
            if bundle is None:
                bundle = build_bundle()
                sim_path = env.get(ENV_SIMULATED)
                sim = _read(os.path.abspath(sim_path)) if sim_path else None
                if sim_path:
                    simulated = {"path": os.path.abspath(sim_path), "data_b64": base64.b64encode(sim or b"").decode()}
            link = NodeLink(node, bundle, interval=interval, simulated=simulated, config=config, append=append)
            link.start()
            links.append(link)
    return links, problems

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
3. logs into the node's *observer account* (the config's ``observer.user``,
   default root), never the lane's ``host`` user, with the observer key alone
   (``--observer-key-env NAME``, a variable the command's environment lacks, or
   ``--observer-key FILE``; BatchMode: no agent, no prompt); the config never
   names that key;
4. runs ``exec /usr/bin/python3 -I -S -c BOOTSTRAP SHA256`` (the config's
   ``observer.python``, by absolute path: SSH hands every command to the
   account's shell, and ``exec`` of an absolute path leaves it no ``PATH``
   lookup; ``-I -S``: no user site, ``.pth`` file, ``usercustomize`` or
   ``PYTHON*`` variable of the node runs in it; observe.devices.bundle), sends the
   bundle and a setup line, and appends each observation the node streams back
   as ``device.observed`` / ``telemetry`` with ``node`` attrs: which node, the
   accounts (the observer's and the lane's, with their uids on the node), the
   key's source, the SHA-256 fingerprint of the host key it verified, the
   observer's digest (as the node computed it), the interpreter and its SHA-256,
   the node's kernel and Python, and every other SSH session seen open on the
   node during the run.

What the node sends is bounded: a line of at most :data:`LINE_MAX` bytes, at
most :data:`MESSAGES_PER_INTERVAL` messages per sample interval, and each
observation's attrs of the recorder's own schema (observe.devices.observers);
beyond them the node is ``node.lost`` with the reason, and nothing more of it is
appended.

A node that cannot be reached, refuses the login or has no interpreter at the
observer's path is recorded as a ``start`` observation of observer ``none`` with
the reason. A node whose connection ends before the recorder asked for its end
observation is recorded as ``node.lost``; the recording goes on.
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
from dataclasses import dataclass
from typing import Any

from aos import kinds
from observe.devices.bundle import BOOTSTRAP, Bundle, build_bundle
from observe.devices.lane_nodes import Node, lane_nodes, node_key
from observe.devices.observers import ENV_SIMULATED, lane_configs, schema_problem
from observe.exits import Exit

__all__ = [
    "CONNECT_ATTEMPTS",
    "CONNECT_BACKOFF",
    "CONNECT_CONCURRENCY",
    "CONNECT_TIMEOUT",
    "IDLE_WAKE",
    "NodeLink",
    "ObserverKey",
    "Refused",
    "connect",
    "fingerprint",
    "keyscan_hint",
    "observe_once",
    "observer_command",
    "open_links",
]

#: Seconds for the TCP connection, the SSH handshake and the login, each.
CONNECT_TIMEOUT = 10.0
#: How often a node's connection is tried when it is dropped before the SSH handshake ends (OpenSSH's
#: ``MaxStartups``, 10:30:100 by default, drops at random the connections past 10 not yet logged in: many nodes
#: behind one endpoint, or many recorders at once). Bounded: the waits between tries double from
#: ``CONNECT_BACKOFF`` seconds with jitter (x0.5-1.5), at most 0.25 + 0.5 + 1 + 2 + 4 = 7.75 s (x1.5 with
#: jitter); a refusal (host key, login) or a timeout is never tried again.
CONNECT_ATTEMPTS = 6
CONNECT_BACKOFF = 0.25
#: The most nodes whose login is under way at once (TCP connection to the observer's upload): the others wait their
#: turn, each taking a free place as soon as one logs in. More at once would not start the nodes sooner (each login
#: is about 4 ms of the recorder's CPU, one core's worth under the GIL) but would leave every login half done until
#: all are; so many pending logins behind one endpoint are also what ``MaxStartups`` drops.
CONNECT_CONCURRENCY = 64
#: How often the thread of an idle connection wakes (seconds; paramiko's own is 0.1 s: at 256 nodes 2,560 wake-ups a
#: second of the recorder's). A node's lines still arrive as they come; its keepalive (5 s) is sent on time.
IDLE_WAKE = 1.0
#: The most stderr of the node's observer kept for a reason.
STDERR_KEPT = 4096
#: The longest line a node's observer may send (bytes, its newline excluded).
LINE_MAX = 1 << 20
#: The most messages a node's observer may send per sample interval (it sends about three).
MESSAGES_PER_INTERVAL = 64
#: The most sessions kept per node (beyond them: ``sessions_truncated``).
SESSIONS_KEPT = 256
#: The node facts every observation and telemetry event of a node carries; the node's first event carries them
#: all (its account, uids, key source, kernel, interpreter, config...), written once per node, and a later event
#: carries ``sessions`` (and ``sessions_truncated``) only when they grew since the last event that carried them,
#: and in its ``end`` observation (every session seen during the run).
NODE_EVERY = ("host", "address", "port", "user", "host_key", "host_key_verified")


@dataclass(frozen=True)
class ObserverKey:
    """The private key the recorder logs into observer accounts with: ``source`` ``env`` (``--observer-key-env``,
    never in the command's environment) or ``file`` (``--observer-key``: a file the command could read)."""

    source: str
    #: ``$NAME`` or the file's path, for messages.
    label: str
    text: str


def observer_command(python: str, digest: str) -> str:
    """The command line the observer account's shell runs: exec the interpreter by absolute path, isolated."""
    return f"exec {shlex.quote(python)} -I -S -c {shlex.quote(BOOTSTRAP)} {digest}"


def _private_key(key: ObserverKey) -> Any:
    """The paramiko key of ``key``'s text (any type paramiko reads), or Refused (``no-key``)."""
    import io

    import paramiko

    problems = []
    for kind in (paramiko.Ed25519Key, paramiko.ECDSAKey, paramiko.RSAKey):
        try:
            return kind.from_private_key(io.StringIO(key.text))
        except (paramiko.SSHException, ValueError, TypeError, IndexError) as exc:
            problems.append(f"{kind.__name__}: {exc}")
    raise Refused("no-key", f"cannot load the observer key ({key.label}): {'; '.join(problems)}")


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


def connect(node: Node, facts: dict[str, Any], key: ObserverKey | None) -> Any:
    """An authenticated paramiko Transport to ``node``'s observer account, its host key verified first (facts: what
    was offered), logged in with ``key``; Refused (``reason``: host-key-unknown, host-key-changed, no-key,
    login-refused, no-ssh-library) when not."""
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
    transport = _handshake(node, listed, facts)
    try:
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
        if key is None:
            raise Refused(
                "no-key",
                "no observer key: give the recorder --observer-key-env NAME (a private key the command never sees) "
                "for the node's observer account",
            )
        pkey = _private_key(key)
        try:
            transport.auth_publickey(node.user, pkey)
        except paramiko.SSHException as exc:
            who = f"{node.user}@{node.address}"
            raise Refused("login-refused", f"{who} refused the observer key ({key.label}): {exc}") from exc
        transport.set_keepalive(5)
        transport.sock.settimeout(IDLE_WAKE)  # paramiko's thread wakes each 0.1 s by default, idle or not
        return transport
    except BaseException:
        transport.close()
        raise


def _handshake(node: Node, listed: Any, facts: dict[str, Any]) -> Any:
    """A paramiko Transport to ``node`` past the SSH handshake (not yet verified or logged in), tried again with
    bounded back-off while the node drops the connection before the handshake ends (``CONNECT_ATTEMPTS``); the
    number of tries in ``facts["connect_attempts"]``."""
    import random

    import paramiko

    for attempt in range(1, CONNECT_ATTEMPTS + 1):
        facts["connect_attempts"] = attempt
        sock = socket.create_connection((node.address, node.port), timeout=CONNECT_TIMEOUT)
        # each step of a login is a small message awaiting the other side's answer: sent at once, never held back
        # for the previous one's acknowledgement (Nagle's algorithm; 40 ms a step against a delayed ACK)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
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
            return transport
        except (paramiko.SSHException, EOFError, ConnectionResetError, ConnectionAbortedError, BrokenPipeError) as exc:
            transport.close()
            if attempt == CONNECT_ATTEMPTS or not _dropped(exc):
                raise
        except BaseException:
            transport.close()
            raise
        time.sleep(CONNECT_BACKOFF * 2 ** (attempt - 1) * random.uniform(0.5, 1.5))  # jitter only
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


def _dropped(exc: BaseException) -> bool:
    """Whether the node closed the connection before the handshake ended (what ``MaxStartups`` does), rather than
    answering with something else or timing out."""
    if isinstance(exc, (EOFError, ConnectionResetError, ConnectionAbortedError, BrokenPipeError)):
        return True
    if isinstance(exc.__cause__ or exc.__context__, (TimeoutError, socket.timeout)):
        return False  # a node that does not answer is not tried again: it would take CONNECT_TIMEOUT each time
    said = str(exc).lower()
    return "timed out" not in said and ("banner" in said or "connection reset" in said or "eof" in said)


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
        key: ObserverKey | None = None,
        turns: threading.BoundedSemaphore | None = None,
    ) -> None:
        self.node = node
        self.key = key
        #: Shared by the links of one recording: a place among the logins under way (``CONNECT_CONCURRENCY``).
        self.turns = turns
        self.bundle = bundle
        self.interval = interval
        self.simulated = simulated
        self.append_event = append
        self.facts: dict[str, Any] = {
            **node.describe(),
            "lane_user": node.lane_user,
            "key": key.source if key is not None else None,
            "observer_python": node.python,
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
            "executable": None,
            "executable_sha256": None,
            "isolated": None,
            "observer_uid": None,
            "lane_uid": None,
            "sessions": [],
        }
        self.transport: Any = None
        self.channel: Any = None
        self._lock = threading.Lock()
        self._pending: list[tuple[str, dict[str, Any]]] = []
        self._start_ready = threading.Event()
        self._start_claimed = False
        self._ending = False
        self._closed = False
        #: What the recorder stopped waiting for: its start (before ``process.start``), its end (after the end wait).
        self._late: set[str] = set()
        #: The sessions (count, truncated) the last event that carried them said; None before the node's first event.
        self._sent_sessions: tuple[int, bool] | None = None
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
            if not self._start_ready.is_set():
                self._late.add("start")  # appended when it comes, after process.start, marked late
            pending, self._pending = self._pending, []
        return pending

    def end_is_late(self) -> None:
        """The recorder's end wait is over: an end observation that still comes is appended marked late."""
        with self._lock:
            self._late.add("end")

    def never_answered(self, waited: float) -> None:
        """The node sent no end observation in all the time the recorder waited: recorded as ``node.lost``, named."""
        self._emit(
            kinds.NODE_LOST,
            {
                "node": dict(self.facts),
                "reason": f"no end observation in the {waited:g} s the recorder waited for it: the node never answered",
                "at_ns": time.monotonic_ns(),
            },
        )

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
            phase = attrs.get("phase") if kind == kinds.DEVICE_OBSERVED else None
            if phase in self._late and self._start_claimed:
                attrs = {**attrs, "late": True}
            if not self._start_claimed:  # held for the recorder, which appends them before process.start
                self._pending.append((kind, attrs))
                if kind == kinds.DEVICE_OBSERVED and attrs.get("phase") == "start":
                    self._start_ready.set()
                return
        self.append_event(kind, attrs)

    def _none(self, error: str, refused: str | None = None) -> None:
        """A start observation of observer ``none``: the node could not be observed, and why."""
        node = {**self.facts, "refused": refused} if refused else dict(self.facts)
        self._emit(
            kinds.DEVICE_OBSERVED,
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
        with self.turns if self.turns is not None else contextlib.nullcontext():
            channel = self._open()
        with self._lock:
            self.channel = channel
            ending = self._ending
        if ending:
            self.end()
        self._read(channel)

    def _open(self) -> Any:
        """Connect, log in, start the observer and send it the bundle and the setup: the channel it answers on."""
        self.transport = connect(self.node, self.facts, self.key)
        channel = self.transport.open_session(timeout=CONNECT_TIMEOUT)
        channel.exec_command(observer_command(self.node.python, self.bundle.sha256))
        setup = {
            "interval": self.interval,
            "node": node_key(self.node.host, self.node.port),
            "simulated": self.simulated,
            "lane_user": self.node.lane_user,
        }
        channel.sendall(str(len(self.bundle.data)).encode() + b"\n" + self.bundle.data)
        channel.sendall(json.dumps(setup).encode() + b"\n")
        return channel

    def _lines(self, channel: Any) -> Any:
        """The observer's stdout, line by line, each at most LINE_MAX bytes; raises _Overrun past the bounds."""
        buffer = b""
        began, count = time.monotonic(), 0
        while True:
            chunk = channel.recv(1 << 16)
            if not chunk:
                return
            buffer += chunk
            while True:
                cut = buffer.find(b"\n")
                if cut < 0:
                    break
                line, buffer = buffer[:cut], buffer[cut + 1 :]
                if len(line) > LINE_MAX:
                    raise _Overrun(f"the observer sent a line longer than {LINE_MAX} bytes")
                count += 1
                # per interval since the connection (a burst after a pause of the recorder is not a flood)
                if count > MESSAGES_PER_INTERVAL * (1 + (time.monotonic() - began) / self.interval):
                    raise _Overrun(
                        f"the observer sent more than {MESSAGES_PER_INTERVAL} messages per sample interval "
                        f"({self.interval} s)"
                    )
                yield line
            if len(buffer) > LINE_MAX:
                raise _Overrun(f"the observer sent a line longer than {LINE_MAX} bytes")

    def _hello(self, msg: dict[str, Any]) -> None:
        if msg.get("sha256") != self.bundle.sha256:
            raise Refused("observer-digest", f"the node ran an observer of SHA-256 {msg.get('sha256')}")
        space = msg.get("namespace")
        given = msg.get("flags")
        flags: dict[str, Any] = given if isinstance(given, dict) else {}

        def num(value: Any) -> int | None:
            return value if isinstance(value, int) and not isinstance(value, bool) else None

        def text(value: Any) -> str | None:
            return value[:4096] if isinstance(value, str) else None

        self.facts.update(
            observer_sha256=msg.get("sha256"),
            kernel=msg.get("kernel") if isinstance(msg.get("kernel"), dict) else None,
            python=text(msg.get("python")),
            pid_namespace=space.get("pid") if isinstance(space, dict) else None,
            executable=text(msg.get("executable")),
            executable_sha256=text(msg.get("executable_sha256")),
            isolated=flags.get("isolated") is True and flags.get("no_site") is True,
            observer_uid=num(msg.get("uid")),
            lane_uid=num(msg.get("lane_uid")),
        )
        self._sessions(msg.get("sessions"))

    def _node_attrs(self, end: bool = False) -> dict[str, Any]:
        """The ``node`` of the next observation or telemetry event: every fact the first time, then ``NODE_EVERY``
        and the sessions when they grew, and always in the ``end`` observation (every session seen during the
        run), so a node's facts are written once, not in every sample."""
        sessions = len(self.facts.get("sessions") or []), self.facts.get("sessions_truncated") is True
        if self._sent_sessions is None:
            self._sent_sessions = sessions
            return dict(self.facts)
        node = {k: self.facts[k] for k in NODE_EVERY if k in self.facts}
        if sessions != self._sent_sessions or end:
            self._sent_sessions = sessions
            node["sessions"] = list(self.facts["sessions"])
            if sessions[1]:
                node["sessions_truncated"] = True
        return node

    def _sessions(self, found: Any) -> None:
        """Add the sessions the node reported to those seen during the run (each once, by pid and account)."""
        if not isinstance(found, list):
            return
        seen = self.facts["sessions"]
        known = {(s["pid"], s["user"]) for s in seen}
        for s in found:
            if not isinstance(s, dict) or not isinstance(s.get("pid"), int) or not isinstance(s.get("user"), str):
                continue
            if (s["pid"], s["user"]) in known:
                continue
            if len(seen) >= SESSIONS_KEPT:
                self.facts["sessions_truncated"] = True
                break
            uid = s.get("uid")
            entry = {"user": s["user"][:256], "uid": uid if isinstance(uid, int) else None, "pid": s["pid"]}
            if s.get("observer") is True:
                entry["observer"] = True
            seen.append(entry)
            known.add((s["pid"], s["user"]))
        self.facts["sessions"] = list(seen)

    def _read(self, channel: Any) -> None:
        started = False
        finished = False
        try:
            for raw in self._lines(channel):
                try:
                    msg = json.loads(raw)
                except ValueError:
                    continue
                kind = msg.get("type") if isinstance(msg, dict) else None
                if kind == "hello":
                    self._hello(msg)
                elif kind == "refused":
                    raise Refused("observer-digest", f"the node received an observer of SHA-256 {msg.get('sha256')}")
                elif kind == "sessions":
                    self._sessions(msg.get("sessions"))
                elif kind in (kinds.DEVICE_OBSERVED, kinds.TELEMETRY):
                    wrong = schema_problem(kind, msg.get("attrs"))
                    if wrong is not None:
                        raise _Overrun(f"the observer sent a {kind} not of the recorder's schema: {wrong}")
                    attrs = {**msg["attrs"], "node": self._node_attrs(msg["attrs"].get("phase") == "end")}
                    started = started or kind == kinds.DEVICE_OBSERVED
                    self._emit(kind, attrs)
                elif kind == "bye":
                    finished = True
        except _Overrun as exc:
            channel.close()
            if not started:
                raise Refused("observer-failed", str(exc)) from None
            self._emit(kinds.NODE_LOST, {"node": dict(self.facts), "reason": str(exc), "at_ns": time.monotonic_ns()})
            return
        if finished:
            return
        channel.status_event.wait(2.0)  # the exit status follows the output's end, if the node sends one
        status = channel.exit_status if channel.exit_status_ready() else None
        stderr = b""
        while channel.recv_stderr_ready() and len(stderr) < STDERR_KEPT:
            stderr += channel.recv_stderr(STDERR_KEPT)
        said = stderr.decode("utf-8", "replace").strip()[-STDERR_KEPT:]
        if not started:
            if status == Exit.NOT_FOUND:
                raise Refused(
                    "no-python3",
                    f"the node has no interpreter at {self.node.python} (exit 127{': ' + said if said else ''})",
                )
            raise Refused("observer-failed", f"the observer exited {status} before observing: {said or 'no output'}")
        self._emit(
            kinds.NODE_LOST,
            {
                "node": dict(self.facts),
                "reason": (
                    f"the connection ended before the end observation (exit status {status})"
                    + (f": {said}" if said else "")
                ),
                "at_ns": time.monotonic_ns(),
            },
        )


class _Overrun(Exception):
    """The node's observer sent more than the bounds allow (the message says which)."""


def observe_once(
    node: Node, key: ObserverKey | None, *, simulated: dict[str, str] | None = None, timeout: float = 45.0
) -> list[tuple[str, dict[str, Any]]]:
    """Connect to ``node``'s observer account as a recording does (host key verified, ``key``, the isolated
    observer), take its start and end observations and close: the ``(kind, attrs)`` a recording would append for
    it (a refused or unreachable node: one observation of observer ``none`` whose ``node.refused`` says why)."""
    found: list[tuple[str, dict[str, Any]]] = []
    link = NodeLink(
        node,
        build_bundle(),
        interval=1.0,
        simulated=simulated,
        config={},
        append=lambda kind, attrs: found.append((kind, attrs)),
        key=key,
    )
    link.start()
    found += link.take_start(timeout)
    link.end()
    link.done.wait(timeout)
    link.close()
    return found


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


def open_links(
    env: dict[str, str], cwd: str, *, interval: float, append: Append, key: ObserverKey | None = None
) -> tuple[list[NodeLink], list[str]]:
    """A started link to each remote node the lane configs of ``env`` name (one per observer account, lane account,
    address and port), logged in with ``key``, and what kept a config from naming its nodes. The links connect side
    by side, at most ``CONNECT_CONCURRENCY`` logins under way at once."""
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
            links.append(
                NodeLink(node, bundle, interval=interval, simulated=simulated, config=config, append=append, key=key)
            )
    turns = threading.BoundedSemaphore(max(min(CONNECT_CONCURRENCY, len(links)), 1))
    for link in links:  # every node's thread at once, each logging in as soon as it has a place
        link.turns = turns
        link.start()
    return links, problems

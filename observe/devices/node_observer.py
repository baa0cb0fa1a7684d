"""The observer the recorder runs on a remote node, over its own SSH connection.

The recorder uploads this module with what it needs (observe.devices.bundle): the
node's ``python3`` runs a bootstrap that reads the bundle from stdin, checks its
SHA-256 against the digest the recorder named on the command line, and imports
the modules from memory (nothing is written on the node). Then :func:`main`
reads one setup line and streams JSON lines back on stdout, one object each:

- ``{"type": "hello", "sha256", "python", "kernel", "namespace", "executable",
  "executable_sha256", "flags", "uid", "lane_uid", "sessions"}``: the digest the
  node computed of the bundle it runs, its Python, ``uname`` and PID-namespace
  facts (observe.devices.namespace, read on the node), the interpreter it runs as
  (``/proc/self/exe``) and that file's SHA-256, whether it runs isolated
  (``-I -S``), the observer account's uid, the lane account's uid (``pwd``, of
  the setup's ``lane_user``; null when the node has no such account), and the
  node's other SSH sessions (below);
- ``{"type": "sessions", "sessions": [{"user", "uid", "pid"}, ...]}``: every
  interval where they changed, each SSH session open on the node other than the
  observer's own: a process titled ``sshd: USER@TTY`` (``sshd-session:`` on newer
  OpenSSH), the post-login process of one connection, not among the observer's
  own ancestors;
- ``{"type": "device.observed", "attrs": {...}}``: an observation of the node's
  GPUs, with the schema of the recorder's own (observe.devices.observers), at
  ``start``, every interval when something changed (``sample``, by the
  recorder's own rule: observe.devices.observing) and at ``end``;
- ``{"type": "telemetry", "attrs": {"gpus": [...]}}``: the first interval, then an interval where a GPU's
  reading moved by its step or more (observe.devices.observers.telemetry_moved: 5 points of utilisation,
  256 MiB of memory, 2 degrees), and at least every 30 s;
- ``{"type": "bye"}``: after the end observation.

It ends after the ``end`` observation, taken when the recorder writes ``end`` on
stdin or closes it (the connection dropped): nothing of it outlives the recording.
No process on a node is of the recorded tree: every GPU process is identified by
what the kernel says it executes (observe.devices.identity), never by its argv.

Only the standard library and the bundled modules are imported: the node needs a
python3 (3.9 or later) and nothing installed.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from observe.devices.namespace import namespace_facts
from observe.devices.observers import (
    TELEMETRY_HEARTBEAT,
    DeviceReading,
    NvmlObserver,
    Observer,
    Tree,
    gpu_telemetry,
    telemetry_moved,
)
from observe.devices.observing import Observing

__all__ = ["main"]


def _not_dumpable() -> None:
    """Keep same-user processes on the node (not root) out of this process's memory (``PR_SET_DUMPABLE`` 0)."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _argv(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read(1 << 16)
    except OSError:
        return None
    return [a.decode("utf-8", "backslashreplace") for a in raw.split(b"\0")[:-1]] if raw else None


def _all_processes() -> Tree:
    """Every process of the node and its parent: what a simulated ``"pid": "tree"`` entry stands for here."""
    parents: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
            parents[int(name)] = int(stat[stat.rindex(b")") + 2 :].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    me = os.getpid()
    parents.pop(me, None)
    return Tree(parents=parents, argv=_argv)


#: An OpenSSH post-login process's title: ``sshd: USER@TTY`` (``notty`` without one).
SESSION_TITLE = re.compile(rb"^sshd(?:-session)?: ([^\s@\[\]]+)@(\S+)")


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return int(stat[stat.rindex(b")") + 2 :].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _ancestors() -> set[int]:
    """This process and every ancestor of it (its own SSH session among them)."""
    found, pid = set(), os.getpid()
    while pid and pid not in found:
        found.add(pid)
        pid = _parent(pid) or 0
    return found


def _uid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cmdline(pid: int | str) -> bytes | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read(1 << 16)
    except OSError:
        return None


def _is_observer(title: bytes | None, me: bytes) -> bool:
    """Whether a session's process runs this very observer: the same command line, or still the login shell
    about to ``exec`` it (``SHELL -c 'exec PYTHON -I -S -c BOOTSTRAP DIGEST'``, observe.devices.remote)."""
    if title is None:
        return False
    if title == me:
        return True
    parts, mine = title.split(b"\0"), me.split(b"\0")
    if len(parts) < 3 or parts[-3] != b"-c" or len(mine) < 2:
        return False
    command = parts[-2]
    return command.startswith(b"exec ") and command.endswith(b" " + mine[-2]) and mine[-3] in command


def sessions(own: set[int]) -> list[dict[str, Any]]:
    """Each SSH session open on the node but the observer's own (see the module), by pid.

    A session whose processes are all an observer running this very bundle (the same command line: the
    isolated interpreter, the bootstrap and the bundle's digest) is another observer of the recorder's, e.g.
    the other node of two hosts that are one machine, or ``nodes check``: it is said ``"observer": true``.
    """
    me = _cmdline("self")
    titles: dict[int, bytes] = {}
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        title = _cmdline(pid)
        if title is None:
            continue
        titles[pid] = title
        parent = _parent(pid)
        if parent is not None:
            children.setdefault(parent, []).append(pid)
    found = []
    for pid, title in titles.items():
        if pid in own:
            continue
        match = SESSION_TITLE.match(title.replace(b"\0", b" "))
        if match:
            user = match.group(1).decode("utf-8", "backslashreplace")
            entry: dict[str, Any] = {"user": user, "uid": _uid(pid), "pid": pid}
            kids = children.get(pid, [])
            if me and kids and all(_is_observer(titles.get(k), me) for k in kids):
                entry["observer"] = True
            found.append(entry)
    return sorted(found, key=lambda s: s["pid"])


def _lane_uid(user: Any) -> int | None:
    import pwd

    try:
        return pwd.getpwnam(str(user)).pw_uid if user else None
    except KeyError:
        return None


def _exe_sha256() -> str | None:
    digest = hashlib.sha256()
    try:
        with open("/proc/self/exe", "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    except OSError:
        return None
    return digest.hexdigest()


def _open(setup: dict[str, Any]) -> Observer:
    simulated = setup.get("simulated")
    if isinstance(simulated, dict):
        from observe.devices.simulated import SimulatedObserver

        data = base64.b64decode(str(simulated.get("data_b64", "")))
        return SimulatedObserver(str(simulated.get("path")), data, node=setup.get("node"))
    return NvmlObserver.open(required=True)


def _node(observer: Observer, namespace: dict[str, Any]) -> Observing:
    """This node's observations, taken as the recorder's sampler takes them of its own machine."""
    # the recorder's sink masks what it appends; no process here is of the recorded tree: each is identified
    return Observing(observer, namespace, mask=lambda text: text, everyone=True)


def _observe(node: Observing, phase: str) -> tuple[dict[str, Any], DeviceReading, object]:
    """One observation of the node (a simulated observer reads every process of the node as its tree)."""
    read: Callable[[], Tree] = Tree
    if getattr(node.observer, "name", "") == "simulated":
        read = _all_processes
    attrs, reading, _tree, key = node.observe(phase, read, Tree(argv=_argv))
    return attrs, reading, key


def _emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def main(digest: str) -> int:
    """Observe this node until the recorder says ``end`` (or goes away); ``digest`` is the bundle's SHA-256."""
    _not_dumpable()
    stdin = sys.stdin.buffer
    setup = json.loads(stdin.readline() or b"{}")
    interval = max(float(setup.get("interval", 1.0)), 0.05)
    stop = threading.Event()

    def listen() -> None:
        for line in stdin:
            if line.strip() == b"end":
                break
        stop.set()

    threading.Thread(target=listen, name="aos-node-stdin", daemon=True).start()
    u = os.uname()
    namespace = namespace_facts(os.environ)
    own = _ancestors()
    seen = sessions(own)
    try:
        executable: str | None = os.readlink("/proc/self/exe")
    except OSError:
        executable = None
    _emit(
        {
            "type": "hello",
            "sha256": digest,
            "python": sys.version.split()[0],
            "kernel": {"sysname": u.sysname, "release": u.release, "version": u.version, "machine": u.machine},
            "namespace": namespace,
            "executable": executable,
            "executable_sha256": _exe_sha256(),
            "flags": {"isolated": bool(sys.flags.isolated), "no_site": bool(sys.flags.no_site)},
            "uid": os.getuid(),
            "lane_uid": _lane_uid(setup.get("lane_user")),
            "sessions": seen,
        }
    )
    node = _node(_open(setup), namespace)
    attrs, _reading, key = _observe(node, "start")
    node.changed(key)
    _emit({"type": "device.observed", "attrs": attrs})
    next_at = time.monotonic() + interval
    sent: list[dict[str, Any]] | None = None  # the telemetry last sent, and when
    sent_at = 0.0
    while not stop.wait(max(next_at - time.monotonic(), 0.0)):
        next_at = max(next_at + interval, time.monotonic())
        now_open = sessions(own)
        if now_open != seen:
            seen = now_open
            _emit({"type": "sessions", "sessions": seen})
        attrs, reading, key = _observe(node, "sample")
        gpus = gpu_telemetry(reading)
        if telemetry_moved(sent, gpus) or time.monotonic() - sent_at >= TELEMETRY_HEARTBEAT:
            sent, sent_at = gpus, time.monotonic()
            _emit({"type": "telemetry", "attrs": {"gpus": gpus}})
        if node.changed(key):
            _emit({"type": "device.observed", "attrs": attrs})
    now_open = sessions(own)
    if now_open != seen:
        _emit({"type": "sessions", "sessions": now_open})
    attrs, _reading, _key = _observe(node, "end")
    _emit({"type": "device.observed", "attrs": attrs})
    with contextlib.suppress(Exception):  # closing NVML must not lose the end observation
        node.observer.close()
    _emit({"type": "bye"})
    return 0

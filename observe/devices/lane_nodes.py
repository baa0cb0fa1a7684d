"""The remote nodes a captured lane config names, and how the recorder reaches each.

A lane config (docs/GATES.md, "Lane config") names the machine its roles run
on: ``"host"`` absent or ``"local"`` is the recorder's own machine (observed
locally, no SSH); any other host, ``localhost`` included, is ``USER@ADDRESS``
(or ``ADDRESS``), ``USER`` the lane's account there, reached over SSH at
``port`` (default 22), its host key verified against ``known_hosts`` (the
config's file when named, else the user's ``~/.ssh/known_hosts``). The recorder
logs into the node's observer account (``"observer": {"user", "python"}``,
defaults root and /usr/bin/python3), never the lane's, with a key the config
never names (observe.devices.remote); the lane's ``ssh_key`` is not its. ``"transport": "ssh-tunnel"`` names one
node per role instead, in role order: ``"nodes": [{"host", "port", "ssh_key",
"minors", "remote_root", "known_hosts", "observer"}, ...]``, each defaulting to
the top level's (the one reader of both the lane and the recorder:
observe.devices.lane_config).

``~/.ssh/config`` (the recorder's ``HOME``) is honoured for what the lane config
leaves open: ``HostName``, ``User`` (the lane's account), ``Port`` and
``UserKnownHostsFile`` of the first matching ``Host`` blocks (not
``IdentityFile``: that is the lane's key). Not honoured, by
design: ``Match`` blocks (``Match exec`` would run a program), ``ProxyCommand``
and ``ProxyJump`` (a program or a hop the command could reach), ``ControlMaster``
and ``ControlPath`` (a shared connection is one the command could use),
``StrictHostKeyChecking`` (always yes), ``IdentityAgent`` and agent forwarding
(BatchMode with keys only), ciphers and algorithms (the SSH library's own).
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from observe.devices.lane_config import LaneConfigProblem, is_local, node_entries, observer_of, role_binding

__all__ = ["Node", "lane_nodes", "node_key"]


@dataclass(frozen=True)
class Node:
    """One node the recorder connects to: where, as whom, with which key, verified against which file."""

    #: The config's ``host`` as written (``user@address``): the node's name in the stream.
    host: str
    address: str
    port: int
    #: The observer account the recorder logs into (the config's ``observer.user``, default root).
    user: str
    #: The lane's account on the node (the ``host``'s user): never the recorder's login.
    lane_user: str
    #: The interpreter the observer runs as, by absolute path (the config's ``observer.python``).
    python: str
    known_hosts: str
    #: The roles (indices, in role order) that run on this node; empty for a ``loopback`` pod (all of them).
    roles: tuple[int, ...] = ()
    #: What ~/.ssh/config supplied, for the record (``{"HostName": ...}``).
    from_ssh_config: dict[str, str] = field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        """The part of the ``node`` attrs that says which node this is."""
        return {"host": self.host, "address": self.address, "port": self.port, "user": self.user}


def node_key(host: str, port: int) -> str:
    """The key a node goes by in a simulated-GPU file's ``nodes`` (``USER@ADDRESS:PORT``)."""
    return f"{host}:{port}"


def _ssh_config(path: str, alias: str) -> dict[str, str]:
    """The options ``Host`` blocks of ``path`` give ``alias`` (first value wins; ``Match`` blocks skipped)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read(1 << 20)
    except OSError:
        return {}
    import fnmatch

    found: dict[str, str] = {}
    applies = True  # options before the first Host line apply to every host
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.replace("=", " ", 1).partition(" ")
        key, value = key.lower(), value.strip().strip('"')
        if key == "host":
            patterns = value.split()
            positive = [p for p in patterns if not p.startswith("!")]
            negated = [p[1:] for p in patterns if p.startswith("!")]
            applies = any(fnmatch.fnmatch(alias, p) for p in positive) and not any(
                fnmatch.fnmatch(alias, p) for p in negated
            )
        elif key == "match":
            applies = False
        elif applies:
            names = {
                "hostname": "HostName",
                "user": "User",
                "port": "Port",
                "identityfile": "IdentityFile",
                "userknownhostsfile": "UserKnownHostsFile",
            }
            if key in names and names[key] not in found:
                found[names[key]] = value.split()[0] if key == "userknownhostsfile" else value
    return found


def _node(entry: Mapping[str, Any], base: str, home: str, roles: tuple[int, ...]) -> Node | str:
    host = str(entry.get("host") or "")
    user, _, address = host.rpartition("@")
    ssh = _ssh_config(os.path.join(home, ".ssh", "config"), address)
    user = user or ssh.get("User") or getpass.getuser()
    real = ssh.get("HostName", address).replace("%h", address)
    port_value = entry.get("port", ssh.get("Port", 22))
    try:
        port = int(port_value)
    except (TypeError, ValueError):
        return f"node {host}: port {port_value!r} is not a number"
    try:
        observer = observer_of(entry)
    except LaneConfigProblem as exc:
        return f"node {host}: {exc}"

    def path(value: Any) -> str | None:
        if not isinstance(value, str) or not value:
            return None
        if value.startswith("~/"):
            value = home + value[1:]
        return value if os.path.isabs(value) else os.path.join(base, value)

    known = path(entry.get("known_hosts")) or path(ssh.get("UserKnownHostsFile"))
    used = {k: v for k, v in ssh.items() if k in ("HostName", "User", "Port", "UserKnownHostsFile")}
    return Node(
        host=host,
        address=real,
        port=port,
        user=observer.user,
        lane_user=user,
        python=observer.python,
        known_hosts=known or os.path.join(home, ".ssh", "known_hosts"),
        roles=roles,
        from_ssh_config=used,
    )


def lane_nodes(config: Any, base: str, home: str | None = None) -> tuple[list[Node], list[str]]:
    """The remote nodes ``config`` names (one per distinct user, address and port) and what is wrong with it.

    ``base`` resolves relative paths (the config file's folder); ``home`` is the recorder's ``HOME``.
    """
    home = home if home is not None else os.path.expanduser("~")
    if not isinstance(config, dict):
        return [], ["the lane config is not a JSON object"]
    try:
        entries = node_entries(config)
    except LaneConfigProblem as exc:
        return [], [str(exc)]
    tunnel = config.get("transport") == "ssh-tunnel"
    try:
        carried = role_binding(config)
        named = [(e, carried.on_node(i) if tunnel else ()) for i, e in enumerate(entries)]
    except LaneConfigProblem:  # minors not as documented: one role per node, as the entries stand (the lane refuses)
        named = [(e, (i,) if tunnel else ()) for i, e in enumerate(entries)]
    nodes: dict[tuple[str, str, str, int], Node] = {}
    problems: list[str] = []
    for entry, roles in named:
        if is_local(entry.get("host")):
            continue
        made = _node(entry, base, home, roles)
        if isinstance(made, str):
            problems.append(made)
            continue
        key = (made.user, made.lane_user, made.address, made.port)
        if key in nodes:  # two roles on one host: one connection observes both
            before = nodes[key]
            made = Node(**{**vars(before), "roles": before.roles + made.roles})
        nodes[key] = made
    return list(nodes.values()), problems

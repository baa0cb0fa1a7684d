"""The one reader of a lane config's nodes: the lane (samples/lane, lanekit.config) and the recorder
(observe.devices.lane_nodes) both take each node's entry from here, so every documented default holds
for both.

A lane config names where its roles run: for ``"transport": "ssh-tunnel"`` one entry per role in
``nodes`` (in role order), each node's ``port``, ``ssh_key``, ``known_hosts``, ``remote_root``,
``python`` and ``observer`` defaulting to the top level's and ``node_env`` merged over the top
level's; otherwise the top level itself is the one node (``host`` absent or ``"local"``: this
machine). ``observer`` (per node over the top level's, key by key) names the node's observer
account and interpreter: ``{"user": "root", "python": "/usr/bin/python3"}`` are the defaults.

A config binds N >= 2 owner roles (``owner-0`` ... ``owner-{N-1}``), one GPU minor each
(:func:`role_binding`): the top level's ``minors`` in role order, or, in ``ssh-tunnel``, each node's
``minors`` (one or more roles per node, ``"minors": [2, 3]``) in node order. A minor bound twice on
one host (one node, or two entries naming one host and port) is refused
(:class:`MinorBoundTwice`): one GPU cannot be two roles'.

Only the standard library is imported, and nothing of the project: the lane imports this file with
no more than the repository's root on ``sys.path``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

__all__ = [
    "INHERITED",
    "LOCAL_HOSTS",
    "MIN_ROLES",
    "OBSERVER_DEFAULTS",
    "LaneConfigProblem",
    "MinorBoundTwice",
    "NodeObserver",
    "RoleBinding",
    "is_local",
    "node_entries",
    "observer_of",
    "role_binding",
]

#: ``host`` values that name this machine (no SSH).
LOCAL_HOSTS = (None, "", "local")
#: What an ``ssh-tunnel`` node takes from the top level when its entry leaves it out.
INHERITED = ("port", "ssh_key", "known_hosts", "remote_root", "python")
#: The observer account and interpreter of a node whose config names none.
OBSERVER_DEFAULTS = {"user": "root", "python": "/usr/bin/python3"}


#: The fewest owner roles (GPUs) a lane config binds.
MIN_ROLES = 2


class LaneConfigProblem(ValueError):
    """The config's nodes are not of the documented shape (the message says how)."""


class MinorBoundTwice(LaneConfigProblem):
    """One GPU minor is bound to two roles on one host (refused as ``minor-bound-twice``)."""


def is_local(host: object) -> bool:
    """Whether a config's ``host`` names this machine."""
    return host in LOCAL_HOSTS or (isinstance(host, str) and host.strip() in ("", "local"))


def _merged(top: Mapping[str, Any], entry: Mapping[str, Any], key: str) -> Any:
    """A node's ``observer`` or ``node_env``: the entry's keys over the top level's (both objects), as written;
    a value that is not an object is the entry's own (its reader names what is wrong with it)."""
    above, own = top.get(key), entry.get(key)
    if entry is top or own is None:
        return above
    if above is None:
        return own
    if isinstance(above, dict) and isinstance(own, dict):
        return {**above, **own}
    return own


def node_entries(config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each node's entry with the top level's defaults applied: the ``ssh-tunnel`` nodes in role order,
    else the top level as the one node. Local entries are included (``is_local`` tells them)."""
    if not isinstance(config, Mapping):
        raise LaneConfigProblem("the lane config is not a JSON object")
    if config.get("transport") != "ssh-tunnel":
        return [dict(config)]
    nodes = config.get("nodes")
    if not isinstance(nodes, list) or not nodes or not all(isinstance(n, dict) for n in nodes):
        raise LaneConfigProblem('transport "ssh-tunnel" needs "nodes": a list of objects, one per role')
    found = []
    for entry in nodes:
        merged = {**{k: config[k] for k in INHERITED if k in config}, **entry}
        for key in ("observer", "node_env"):
            value = _merged(config, entry, key)
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = value
        found.append(merged)
    return found


@dataclass(frozen=True)
class NodeObserver:
    """A node's observer: the account the recorder logs into, and the interpreter it runs there."""

    user: str
    python: str


def observer_of(entry: Mapping[str, Any]) -> NodeObserver:
    """The observer a node's (merged) entry names, defaults filled; LaneConfigProblem when malformed."""
    value = entry.get("observer")
    if value is None:
        value = {}
    if not isinstance(value, dict) or any(k not in OBSERVER_DEFAULTS for k in value):
        raise LaneConfigProblem('observer must be an object {"user": ACCOUNT, "python": ABSOLUTE_PATH}')
    user = value.get("user", OBSERVER_DEFAULTS["user"])
    python = value.get("python", OBSERVER_DEFAULTS["python"])
    if not isinstance(user, str) or not user or user.startswith("-") or any(c in user for c in "@:/ \t\n"):
        raise LaneConfigProblem(f"observer user {user!r} is not an account name")
    if not isinstance(python, str) or not os.path.isabs(python) or any(c.isspace() for c in python):
        raise LaneConfigProblem(f"observer python {python!r} must be an absolute path (no spaces)")
    return NodeObserver(user, python)


@dataclass(frozen=True)
class RoleBinding:
    """Where each owner role runs, in role order: its node (index into :func:`node_entries`) and its minor."""

    nodes: tuple[int, ...]
    minors: tuple[int, ...]

    @property
    def roles(self) -> tuple[str, ...]:
        """The owner roles' names, in role order."""
        return tuple(f"owner-{i}" for i in range(len(self.minors)))

    def on_node(self, node: int) -> tuple[int, ...]:
        """The role indices a node carries."""
        return tuple(i for i, n in enumerate(self.nodes) if n == node)


def _ints(value: Any) -> TypeGuard[list[int]]:
    return isinstance(value, list) and all(isinstance(m, int) and not isinstance(m, bool) for m in value)


def role_binding(config: Mapping[str, Any]) -> RoleBinding:
    """Each role's node and minor (the module's docstring); LaneConfigProblem when the config binds fewer than
    two roles or not as documented, MinorBoundTwice when one host's minor is bound twice."""
    entries = node_entries(config)
    top = config.get("minors")
    own = [e.get("minors") for e in (config.get("nodes") or [])] if config.get("transport") == "ssh-tunnel" else []
    if any(m is not None for m in own):
        if not all(_ints(m) and m for m in own):
            raise LaneConfigProblem("each ssh-tunnel node's minors must be a list of one or more integers (its roles')")
        nodes = tuple(i for i, m in enumerate(own) for _ in m)
        minors = tuple(m for ms in own for m in ms)
        if top is not None and top != list(minors):
            raise LaneConfigProblem(f"minors {top} differ from the nodes' minors {list(minors)}")
    else:
        if not (_ints(top) and len(top) >= MIN_ROLES):
            raise LaneConfigProblem(f"minors must be {MIN_ROLES} or more integers, one per owner role")
        minors = tuple(top)
        if config.get("transport") == "ssh-tunnel":
            if len(entries) != len(minors):
                raise LaneConfigProblem(
                    f"ssh-tunnel needs nodes: {len(minors)} objects, one per role, in role order "
                    "(or minors on each node naming its roles)"
                )
            nodes = tuple(range(len(minors)))
        else:
            nodes = tuple(0 for _ in minors)
    if len(minors) < MIN_ROLES:
        raise LaneConfigProblem(f"minors must be {MIN_ROLES} or more integers, one per owner role")
    _distinct_per_host(entries, nodes, minors)
    return RoleBinding(nodes, minors)


def _distinct_per_host(entries: list[dict[str, Any]], nodes: tuple[int, ...], minors: tuple[int, ...]) -> None:
    """MinorBoundTwice when two roles bind one minor of one host (one entry, or entries naming one host)."""
    seen: dict[tuple[str, object, int], int] = {}
    for role, (node, minor) in enumerate(zip(nodes, minors, strict=True)):
        entry = entries[node]
        host = "local" if is_local(entry.get("host")) else str(entry.get("host")).strip()
        key = (host, entry.get("port") if host != "local" else None, minor)
        if key in seen:
            where = "this machine" if host == "local" else f"{host}" + (f":{key[1]}" if key[1] is not None else "")
            raise MinorBoundTwice(f"minor {minor} of {where} is bound to owner-{seen[key]} and owner-{role}")
        seen[key] = role

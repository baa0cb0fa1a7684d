"""The one reader of a lane config's nodes: the lane (samples/lane, lanekit.config) and the recorder
(observe.devices.lane_nodes) both take each node's entry from here, so every documented default holds
for both.

A lane config names where its roles run: for ``"transport": "ssh-tunnel"`` one entry per role in
``nodes`` (in role order), each node's ``port``, ``ssh_key``, ``known_hosts``, ``remote_root``,
``python`` and ``observer`` defaulting to the top level's and ``node_env`` merged over the top
level's; otherwise the top level itself is the one node (``host`` absent or ``"local"``: this
machine). ``observer`` (per node over the top level's, key by key) names the node's observer
account and interpreter: ``{"user": "root", "python": "/usr/bin/python3"}`` are the defaults.

Only the standard library is imported, and nothing of the project: the lane imports this file with
no more than the repository's root on ``sys.path``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "INHERITED",
    "LOCAL_HOSTS",
    "OBSERVER_DEFAULTS",
    "LaneConfigProblem",
    "NodeObserver",
    "is_local",
    "node_entries",
    "observer_of",
]

#: ``host`` values that name this machine (no SSH).
LOCAL_HOSTS = (None, "", "local")
#: What an ``ssh-tunnel`` node takes from the top level when its entry leaves it out.
INHERITED = ("port", "ssh_key", "known_hosts", "remote_root", "python")
#: The observer account and interpreter of a node whose config names none.
OBSERVER_DEFAULTS = {"user": "root", "python": "/usr/bin/python3"}


class LaneConfigProblem(ValueError):
    """The config's nodes are not of the documented shape (the message says how)."""


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

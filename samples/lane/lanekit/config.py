"""The lane config (the qualification driver's JSON) and the lane's JSON files.

A config names the owner, pods, transport and, per role, a GPU minor; where the
roles run is ``host`` (``"local"`` or none: this machine) for ``loopback``, or
``nodes`` (one per role, in role order) for ``ssh-tunnel``. ``node_env`` and
``python`` say how a node runs the lane's commands (lanekit.placement).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from .build import sha256_file
from .remote import Node, is_local
from .spec import OWNERS

# The one reader of a config's nodes is the recorder's (observe/devices/lane_config.py, standard library
# only): the lane runs from this repository (PYTHONPATH=samples/lane), so its root is made importable.
_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
if os.path.isfile(os.path.join(_REPO, "observe", "devices", "lane_config.py")) and _REPO not in sys.path:
    sys.path.append(_REPO)
from observe.devices import lane_config  # noqa: E402 - after the repository's root is on the path

__all__ = [
    "CONFIG_KEYS",
    "TRANSPORTS",
    "ConfigError",
    "load_config",
    "node_minors",
    "parse_nodes",
    "read_json",
    "write_json",
]

# host, port, ssh_key and known_hosts are optional: no host (or "local") is this machine.
CONFIG_KEYS = ("owner", "pod_ids", "transport")
TRANSPORTS = ("loopback", "ssh-tunnel")


class ConfigError(Exception):
    """The lane config is missing, unreadable or not of the driver's shape."""


def _str_map(value: Any, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ConfigError(f"{what} must map variable names to strings")
    return dict(value)


def _node(index: int, entry: dict[str, Any], top: dict[str, Any]) -> Node:
    """A node of an entry with the top level's defaults applied (lane_config.node_entries)."""
    host = entry.get("host")
    if not isinstance(host, str) or not host or host.startswith("-"):
        raise ConfigError(f"node {index}: host must be a name such as user@address")
    port = entry.get("port")
    if port is not None and not (isinstance(port, int) and 0 < port < 65536):
        raise ConfigError(f"node {index}: port must be an integer 1-65535")
    paths = {}
    for key in ("ssh_key", "known_hosts", "remote_root"):
        value = entry.get(key)
        if value is not None and not (isinstance(value, str) and os.path.isabs(value)):
            raise ConfigError(f"node {index}: {key} must be an absolute path")
        paths[key] = value
    if paths["remote_root"] is None:
        raise ConfigError(f"node {index}: remote_root is missing")
    _str_map(top.get("node_env"), "node_env")
    env = _str_map(entry.get("node_env"), f"node {index}: node_env")
    python = entry.get("python", "python3")
    if not isinstance(python, str) or not python:
        raise ConfigError(f"node {index}: python must name the node's interpreter")
    try:
        observer = lane_config.observer_of(entry)
    except lane_config.LaneConfigProblem as exc:
        raise ConfigError(f"node {index}: {exc}") from None
    return Node(
        index, host, paths["remote_root"], port, paths["ssh_key"], paths["known_hosts"], env, python, observer.user
    )


def parse_nodes(config: dict[str, Any]) -> list[Node]:
    """The nodes a config names, in role order for ``ssh-tunnel``; none when the roles run on this machine."""
    transport = config.get("transport")
    if transport == "ssh-tunnel":
        nodes = config.get("nodes")
        if not (isinstance(nodes, list) and len(nodes) == len(OWNERS) and all(isinstance(n, dict) for n in nodes)):
            raise ConfigError(f"ssh-tunnel needs nodes: {len(OWNERS)} objects, one per role, in role order")
        if any(is_local(n.get("host")) for n in nodes):
            raise ConfigError("ssh-tunnel nodes are SSH hosts (user@address), not this machine")
    if transport != "ssh-tunnel" and is_local(config.get("host")):
        return []
    try:
        entries = lane_config.node_entries(config)
    except lane_config.LaneConfigProblem as exc:
        raise ConfigError(str(exc)) from None
    return [_node(i, n, config) for i, n in enumerate(entries)]


def node_minors(config: dict[str, Any]) -> list[Any] | None:
    """The minors the ssh-tunnel nodes name (``minors: [M]`` each), or None where they name none."""
    nodes = config.get("nodes")
    if config.get("transport") != "ssh-tunnel" or not isinstance(nodes, list):
        return None
    found = [n.get("minors") for n in nodes if isinstance(n, dict)]
    if not any(m is not None for m in found):
        return None
    if not all(isinstance(m, list) and len(m) == 1 and isinstance(m[0], int) for m in found):
        raise ConfigError("each ssh-tunnel node's minors must be a list of one integer (its role's GPU)")
    return [m[0] for m in found]


def load_config(path: str) -> dict[str, Any]:
    """Read and check a lane config (the qualification driver's JSON).

    For ``ssh-tunnel`` the nodes may name each role's minor (``minors: [M]``) and
    ``remote_root``; the returned config then holds the effective ``minors``.
    """
    try:
        with open(path, encoding="utf-8") as fh:
            config = json.load(fh)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read lane config {path}: {exc}") from None
    if not isinstance(config, dict):
        raise ConfigError("lane config is not a JSON object")
    tunnel = node_minors(config)
    if tunnel is not None:
        if "minors" in config and config["minors"] != tunnel:
            raise ConfigError(f"minors {config['minors']} differ from the nodes' minors {tunnel}")
        config["minors"] = tunnel
    per_node = config.get("transport") == "ssh-tunnel" and isinstance(config.get("nodes"), list)
    required = [*CONFIG_KEYS, "minors", *([] if per_node else ["remote_root"])]
    missing = [k for k in required if k not in config]
    if missing:
        raise ConfigError(f"lane config lacks {', '.join(missing)}")
    minors = config["minors"]
    if not (isinstance(minors, list) and len(minors) == len(OWNERS) and all(isinstance(m, int) for m in minors)):
        raise ConfigError(f"minors must be {len(OWNERS)} integers, one per owner role")
    root = config.get("remote_root")
    if (root is not None or not per_node) and not (isinstance(root, str) and os.path.isabs(root)):
        raise ConfigError("remote_root must be an absolute path")
    if config.get("transport") in TRANSPORTS:
        parse_nodes(config)  # every node is of the driver's shape
    return config


def write_json(path: str, value: Any) -> str:
    """Write a JSON file of the lane (indented, sorted); its SHA-256."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(value, fh, indent=2, sort_keys=True)
        fh.write("\n")
    return sha256_file(path)


def read_json(path: str) -> Any:
    """Read a JSON file of the lane."""
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)

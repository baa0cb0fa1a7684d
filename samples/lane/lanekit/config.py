"""The lane config (the qualification driver's JSON) and the lane's JSON files.

A config names the owner, pods, transport and, per role, a GPU minor (N >= 2
roles); where the roles run is ``host`` (``"local"`` or none: this machine) for
``loopback``, or ``nodes`` for ``ssh-tunnel`` (one per role in role order, or
each carrying one or more roles: ``"minors": [2, 3]``). ``node_env`` and
``python`` say how a node runs the lane's commands (lanekit.placement). Which
node and minor each role has is the recorder's reader's
(``lane_config.role_binding``); a minor bound twice on one host is refused as
``minor-bound-twice`` (:class:`lanekit.refusals.MinorBoundTwice`).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from types import ModuleType
from typing import Any

from .build import sha256_file
from .remote import Node, is_local

# The one reader of a config's nodes is the recorder's (observe/devices/lane_config.py, standard library
# only): the lane runs from this repository (PYTHONPATH=samples/lane) and reads that file of its own tree,
# never another copy an interpreter may have installed (a rebuild of a recorded commit runs a python3 whose
# installed alpha-observe can be of another commit).
_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
_READER = os.path.join(_REPO, "observe", "devices", "lane_config.py")


def _reader() -> ModuleType:
    if not os.path.isfile(_READER):
        from observe.devices import lane_config as installed

        return installed
    spec = importlib.util.spec_from_file_location("lanekit._lane_config", _READER)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


lane_config = _reader()

__all__ = [
    "CONFIG_KEYS",
    "TRANSPORTS",
    "ConfigError",
    "load_config",
    "owner_count",
    "parse_nodes",
    "read_json",
    "role_binding",
    "write_json",
]

# host, port, ssh_key and known_hosts are optional: no host (or "local") is this machine.
CONFIG_KEYS = ("owner", "pod_ids", "transport")
TRANSPORTS = ("loopback", "ssh-tunnel")


class ConfigError(Exception):
    """The lane config is missing, unreadable or not of the driver's shape."""


class MinorTwiceError(ConfigError):
    """Two roles bind one minor of one host (the preflight refuses it as ``minor-bound-twice``)."""


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
        if not (isinstance(nodes, list) and nodes and all(isinstance(n, dict) for n in nodes)):
            raise ConfigError("ssh-tunnel needs nodes: objects naming the hosts of the roles, in role order")
        if any(is_local(n.get("host")) for n in nodes):
            raise ConfigError("ssh-tunnel nodes are SSH hosts (user@address), not this machine")
    if transport != "ssh-tunnel" and is_local(config.get("host")):
        return []
    try:
        entries = lane_config.node_entries(config)
    except lane_config.LaneConfigProblem as exc:
        raise ConfigError(str(exc)) from None
    return [_node(i, n, config) for i, n in enumerate(entries)]


def role_binding(config: dict[str, Any]) -> lane_config.RoleBinding:
    """Each role's node and minor (the recorder's reader, ``lane_config.role_binding``); ConfigError when the
    config binds them not as documented, MinorTwiceError when one host's minor is bound twice."""
    try:
        return lane_config.role_binding(config)
    except lane_config.MinorBoundTwice as exc:
        raise MinorTwiceError(str(exc)) from None
    except lane_config.LaneConfigProblem as exc:
        raise ConfigError(str(exc)) from None


def owner_count(path: str | None) -> int:
    """How many owner roles the config at ``path`` binds; 2 (the two-GPU lane) without a config that says."""
    if not path:
        return 2
    try:
        return len(load_config(path)["minors"])
    except ConfigError:
        return 2


def load_config(path: str) -> dict[str, Any]:
    """Read and check a lane config (the qualification driver's JSON).

    For ``ssh-tunnel`` the nodes may name their roles' minors (``minors: [M, ...]``, one
    or more roles per node) and ``remote_root``; the returned config then holds the
    effective ``minors`` (every role's, in role order) and ``role_nodes`` (each
    role's node index).
    """
    try:
        with open(path, encoding="utf-8") as fh:
            config = json.load(fh)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read lane config {path}: {exc}") from None
    if not isinstance(config, dict):
        raise ConfigError("lane config is not a JSON object")
    per_node = config.get("transport") == "ssh-tunnel" and isinstance(config.get("nodes"), list)
    on_nodes = per_node and any(isinstance(n, dict) and n.get("minors") is not None for n in config["nodes"])
    required = [*CONFIG_KEYS, *([] if on_nodes else ["minors"]), *([] if per_node else ["remote_root"])]
    missing = [k for k in required if k not in config]
    if missing:
        raise ConfigError(f"lane config lacks {', '.join(missing)}")
    binding = role_binding(config)
    config["minors"] = list(binding.minors)
    config["role_nodes"] = list(binding.nodes)
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

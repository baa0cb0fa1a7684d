"""The owner roles a lane config binds, as the recorder captured it: how many, and which node carries each.

A lane config binds N >= 2 owner roles (``owner-0`` ... ``owner-{N-1}``): the top
level's ``minors`` in role order, or, with ``"transport": "ssh-tunnel"``, each
node's ``minors`` (a node carries one role per minor it names, ``"minors": [2,
3]``), or, where no node names minors, one role per node in role order
(samples/lane/README.md, "Where the roles run"). The gates read it from the
recorder's own capture of the file (``origin: recorder``, ``env`` = the lane's
config variable); a copy the lane captured does not count. The recorder and the
lane read the same rule from ``observe/devices/lane_config.py``; the gates, which
import nothing of ``observe``, read only the shape here, never refusing: a config
the lane refused never ran a role.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeGuard

from gates.evidence import Evidence

__all__ = ["captured_config", "role_nodes"]


def captured_config(ev: Evidence, config_env: Any) -> Mapping[str, Any] | None:
    """The last lane config the recorder captured for ``config_env`` (any lane config when it names none) that
    reads as a JSON object; None when there is none."""
    wanted = {"origin": "recorder", "env": config_env} if isinstance(config_env, str) and config_env else None
    configs = ev.artifacts_matching("**", wanted or {"origin": "recorder"})
    configs = [a for a in configs if isinstance(a.event.attrs.get("env"), str)]  # a lane config, not a rebuild's
    for art in reversed(configs):
        try:
            doc = art.json()
        except ValueError:
            continue
        if isinstance(doc, dict):
            return doc
    return None


def _ints(value: Any) -> TypeGuard[list[int]]:
    return isinstance(value, list) and all(isinstance(m, int) and not isinstance(m, bool) for m in value)


def role_nodes(doc: Mapping[str, Any]) -> list[int] | None:
    """Each role's node (index into the config's ``nodes``; 0 for one node), in role order; None when the config
    binds no role as documented."""
    nodes = doc.get("nodes")
    if doc.get("transport") == "ssh-tunnel" and isinstance(nodes, list):
        own = [n.get("minors") if isinstance(n, dict) else None for n in nodes]
        if any(m is not None for m in own):
            lists = [m for m in own if _ints(m) and m]
            if len(lists) != len(own):
                return None
            return [i for i, m in enumerate(lists) for _ in m]
        return list(range(len(nodes))) if _ints(doc.get("minors")) and len(doc["minors"]) == len(nodes) else None
    minors = doc.get("minors")
    return [0 for _ in minors] if _ints(minors) and minors else None

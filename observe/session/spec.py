"""A session's expected set: the members (nodes, with their GPUs and roles, and sub-sessions) declared up front.

The spec is a JSON file the coordinating recording reads before its launcher runs::

    {"origin": "example.com/fleet",                       # optional; a fresh id is appended
     "members": [{"name": "node-0", "gpus": 8, "roles": ["owner-0", "owner-1"]},
                 {"name": "rack-1", "session": true}]}

Each member is a node stream (the default) or a sub-session (``"session": true``). At most
``FANOUT`` members: a larger fleet nests sessions, so that no process holds more than its
fan-out of peers (docs/NODES.md, "Fleet sessions").
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aos.proofs import NAME
from observe.refusals import SessionSpec

__all__ = ["DEFAULT_ORIGIN", "FANOUT", "Expected", "Spec", "new_origin", "read_spec"]

#: The most members one session commits to (a rack of 64 nodes; three levels reach 262 144).
FANOUT = 64
#: The origin's prefix when the spec names none.
DEFAULT_ORIGIN = "alpha-observe/session"
#: A spec file is read only up to this.
MAX_SPEC_BYTES = 1 << 20


@dataclass(frozen=True)
class Expected:
    """One expected member: its name, whether it is a sub-session, the GPUs and roles it should run."""

    name: str
    session: bool = False
    gpus: int | None = None
    roles: tuple[str, ...] = ()

    def attrs(self) -> dict[str, Any]:
        """Return the member as ``session.open`` lists it."""
        return {
            "name": self.name,
            "kind": "session" if self.session else "stream",
            "gpus": self.gpus,
            "roles": list(self.roles),
        }


@dataclass(frozen=True)
class Spec:
    """A session's expected set, and the origin prefix its spec names."""

    origin: str
    members: tuple[Expected, ...]


def new_origin(prefix: str) -> str:
    """Return a fresh origin: ``prefix`` and a random 128-bit id (two sessions never share one)."""
    return f"{prefix}/{uuid.uuid4().hex}"


def _member(raw: object, where: str) -> Expected:
    if not isinstance(raw, dict) or not set(raw) <= {"name", "session", "gpus", "roles"}:
        raise SessionSpec(f"{where}: a member is an object of name, session, gpus, roles")
    name = raw.get("name")
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise SessionSpec(f"{where}: name {name!r} is not a member name (letters, digits, '.', '_', '-'; 64 at most)")
    session = raw.get("session", False)
    gpus = raw.get("gpus")
    roles = raw.get("roles", [])
    if not isinstance(session, bool):
        raise SessionSpec(f"{where}: session is true or false")
    if gpus is not None and (type(gpus) is not int or gpus < 0):
        raise SessionSpec(f"{where}: gpus is a count")
    if not isinstance(roles, list) or not all(isinstance(r, str) and r for r in roles):
        raise SessionSpec(f"{where}: roles is a list of names")
    return Expected(name, session, gpus, tuple(roles))


def read_spec(path: str | Path) -> Spec:
    """Return the spec in ``path``; raise ``SessionSpec`` when it cannot be read or is not valid."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_SPEC_BYTES + 1)
    except OSError as exc:
        raise SessionSpec(f"{path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_SPEC_BYTES:
        raise SessionSpec(f"{path}: over {MAX_SPEC_BYTES} bytes")
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise SessionSpec(f"{path}: not JSON: {exc}") from None
    if not isinstance(doc, dict) or not set(doc) <= {"origin", "members"}:
        raise SessionSpec(f"{path}: a spec is an object of origin and members")
    origin = doc.get("origin", DEFAULT_ORIGIN)
    if not isinstance(origin, str) or not origin or any(c.isspace() or c == "+" for c in origin):
        raise SessionSpec(f"{path}: origin {origin!r} is empty or holds a space or a '+'")
    members = doc.get("members")
    if not isinstance(members, list) or not members:
        raise SessionSpec(f"{path}: members is a list of at least one member")
    if len(members) > FANOUT:
        raise SessionSpec(
            f"{path}: {len(members)} members, over the fan-out of {FANOUT}: nest sessions (a sub-session per rack)"
        )
    expected = tuple(_member(m, f"{path}: member {i}") for i, m in enumerate(members))
    names = [m.name for m in expected]
    if len(set(names)) != len(names):
        raise SessionSpec(f"{path}: member names repeat")
    return Spec(origin, expected)

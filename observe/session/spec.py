"""A session's expected set: the members (nodes, with their GPUs and roles, and sub-sessions) declared up front.

The spec is a JSON file the coordinating recording reads before its launcher runs::

    {"origin": "example.com/fleet",                       # optional; a fresh id is appended
     "members": [{"name": "node-0", "gpus": 8, "roles": ["owner-0", "owner-1"], "key": "node-0.pub"},
                 {"name": "rack-1", "session": true, "key": "rack-1.pub"}]}

Each member is a node stream (the default) or a sub-session (``"session": true``). At most
``FANOUT`` members: a larger fleet nests sessions, so that no process holds more than its
fan-out of peers (docs/NODES.md, "Fleet sessions").

Each member names the Ed25519 public key (PEM, a path relative to the spec's folder) its stream must be
signed with: its node recorder's ``--sign-key``, or a sub-session's coordinator's. A member is proven only
by a stream that key signed. A spec that leaves a member without a key is refused (``session-unsigned``)
unless it says ``"unsigned": true``: then such a member is taken on its self-declared labels, and every
verdict over the session names it and is at best inconclusive.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aos.proofs import NAME
from observe.refusals import SessionSpec, SessionUnsigned

__all__ = ["DEFAULT_ORIGIN", "FANOUT", "Expected", "Spec", "new_origin", "read_spec"]

#: The most members one session commits to (a rack of 64 nodes; three levels reach 262 144).
FANOUT = 64
#: The origin's prefix when the spec names none.
DEFAULT_ORIGIN = "alpha-observe/session"
#: A spec file is read only up to this.
MAX_SPEC_BYTES = 1 << 20


@dataclass(frozen=True)
class Expected:
    """One expected member: its name, whether it is a sub-session, the GPUs and roles it should run, and the
    public key its stream must be signed with (raw, 64 hex digits; None: declared unsigned)."""

    name: str
    session: bool = False
    gpus: int | None = None
    roles: tuple[str, ...] = ()
    key: str | None = None

    @property
    def kind(self) -> str:
        """``session`` for a sub-session, else ``stream``."""
        return "session" if self.session else "stream"

    def attrs(self) -> dict[str, Any]:
        """Return the member as ``session.open`` lists it."""
        return {"name": self.name, "kind": self.kind, "gpus": self.gpus, "roles": list(self.roles), "key": self.key}


@dataclass(frozen=True)
class Spec:
    """A session's expected set, the origin prefix its spec names, and whether it opted in to members without a
    key (``"unsigned": true``)."""

    origin: str
    members: tuple[Expected, ...]
    unsigned: bool = False


def new_origin(prefix: str) -> str:
    """Return a fresh origin: ``prefix`` and a random 128-bit id (two sessions never share one)."""
    return f"{prefix}/{uuid.uuid4().hex}"


def _key(value: object, folder: Path, where: str) -> str | None:
    """The raw public key (hex) of the PEM file ``value`` names (relative to ``folder``); None for none."""
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise SessionSpec(f"{where}: key is the path of an Ed25519 public key (PEM)")
    from aos.refusals import Refusal
    from aos.signing import load_public_key, raw_public

    try:
        return raw_public(load_public_key(folder / value).public)
    except Refusal as exc:
        raise SessionSpec(f"{where}: key: {exc}") from None


def _member(raw: object, where: str, folder: Path) -> Expected:
    if not isinstance(raw, dict) or not set(raw) <= {"name", "session", "gpus", "roles", "key"}:
        raise SessionSpec(f"{where}: a member is an object of name, session, gpus, roles, key")
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
    return Expected(name, session, gpus, tuple(roles), _key(raw.get("key"), folder, where))


def read_spec(path: str | Path) -> Spec:
    """Return the spec in ``path``; raise ``SessionSpec`` when it cannot be read or is not valid, and
    ``SessionUnsigned`` when a member has no key and the spec does not say ``"unsigned": true``."""
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
    if not isinstance(doc, dict) or not set(doc) <= {"origin", "members", "unsigned"}:
        raise SessionSpec(f"{path}: a spec is an object of origin, members and unsigned")
    unsigned = doc.get("unsigned", False)
    if not isinstance(unsigned, bool):
        raise SessionSpec(f"{path}: unsigned is true or false")
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
    folder = Path(path).parent
    expected = tuple(_member(m, f"{path}: member {i}", folder) for i, m in enumerate(members))
    names = [m.name for m in expected]
    if len(set(names)) != len(names):
        raise SessionSpec(f"{path}: member names repeat")
    keys = [m.key for m in expected if m.key is not None]
    if len(set(keys)) != len(keys):
        raise SessionSpec(f"{path}: two members declare one key: each member's recorder signs with a key of its own")
    keyless = [m.name for m in expected if m.key is None]
    if keyless and not unsigned:
        raise SessionUnsigned(
            f"{path}: no public key declared for {', '.join(keyless[:10])}"
            f"{f' (and {len(keyless) - 10} more)' if len(keyless) > 10 else ''}: a member's stream is proven only "
            'by the key its recorder signs with (give each member "key": "NAME.pub", from alpha observe keygen NAME); '
            'or say "unsigned": true, and every verdict over the session names them and is at best inconclusive'
        )
    return Spec(origin, expected, unsigned)

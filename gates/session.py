"""A gate over a fleet session: one check per member, joined to its stream by the digest its leaf states.

The caller (observe.session.gating) verifies the session, evaluates the gate
over each proven node stream, one at a time, and hands each member here with
what its recorder observed of the devices (``DeviceTally``, filled while the
same events pass). This module never reads a file. A member that did not run,
or whose stream is not proven, is ``inconclusive`` naming it: a session
establishes nothing about a node it has no proof of.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aos import kinds

if TYPE_CHECKING:
    from aos.event import Event
    from gates.verdict import Check, Verdict

__all__ = ["DeviceTally", "MemberEvidence", "session_verdict"]

#: The check of GPU identities across the session's members.
DISTINCT = "devices-distinct"


@dataclass
class DeviceTally:
    """The GPUs (by UUID) and the observers a node's recorder recorded, gathered as its events pass."""

    uuids: set[str] = field(default_factory=set)
    observers: set[str] = field(default_factory=set)

    def watch(self, events: Iterable[Event]) -> Iterator[Event]:
        """Yield ``events`` unchanged, noting each ``device.observed``'s observer and GPU UUIDs."""
        for ev in events:
            if ev.kind == kinds.DEVICE_OBSERVED and "node" not in ev.attrs:  # the node's own machine
                self.observers.add(str(ev.attrs.get("observer")))
                for gpu in ev.attrs.get("gpus") or []:
                    if isinstance(gpu, dict) and isinstance(gpu.get("uuid"), str):
                        self.uuids.add(gpu["uuid"])
            yield ev


@dataclass(frozen=True)
class MemberEvidence:
    """One member of the session: its path, status and reason as verified, the digest of its stream, the GPUs
    the session expected of it, the gate's verdict over its stream and what its recorder observed."""

    path: str
    kind: str
    status: str
    reason: str | None = None
    digest: str | None = None
    expected_gpus: int | None = None
    verdict: Verdict | None = None
    devices: DeviceTally | None = None


def _member_check(m: MemberEvidence) -> Check | None:
    """The check of one member: inconclusive when not proven; else the gate's verdict over its stream and its
    GPU count against the expected set. A proven sub-session has none (its members are checked)."""
    from gates.verdict import Check

    name = f"member:{m.path}"
    if m.status != "proven":
        return Check(name, "inconclusive", f"{m.status}: {m.reason}")
    if m.kind == "session" or m.verdict is None:
        return None
    digest = (m.digest or "")[:16]
    tally = m.devices or DeviceTally()
    if m.expected_gpus is not None and len(tally.uuids) != m.expected_gpus:
        seen = ", ".join(sorted(tally.uuids)) or "none"
        return Check(
            name,
            "fail",
            f"the session expected {m.expected_gpus} GPUs of it; its recorder observed {len(tally.uuids)} ({seen}) "
            f"in stream {digest}",
        )
    return Check(name, m.verdict.verdict, f"gate {m.verdict.gate} over stream {digest}: {m.verdict.summary}")


def session_verdict(gate: str, scope: str, members: Iterable[MemberEvidence]) -> Verdict:
    """Return the session's verdict: one check per member (a proven sub-session none), and ``devices-distinct``
    (no GPU observed by two members' recorders). Every status combines as ``gates.verdict.combine`` does."""
    from gates.verdict import Check, Verdict

    checks: list[Check] = []
    owner: dict[str, str] = {}  # GPU UUID -> the member whose recorder observed it
    shared: list[str] = []
    for m in members:
        check = _member_check(m)
        if check is not None:
            checks.append(check)
        for uuid in sorted((m.devices or DeviceTally()).uuids):
            first = owner.setdefault(uuid, m.path)
            if first != m.path:
                shared.append(f"{uuid} by {first} and {m.path}")
    if owner:
        if shared:
            checks.append(Check(DISTINCT, "fail", "a GPU was observed by two members: " + "; ".join(shared[:10])))
        else:
            checks.append(Check(DISTINCT, "pass", f"{len(owner)} GPUs, each observed by one member"))
    v = Verdict.of(gate, scope, checks)
    named = [c.name.removeprefix("member:") for c in checks if c.status != "pass"]
    summary = f"{v.verdict} (scope {scope}): {len(checks) - len(named)}/{len(checks)} checks passed"
    return Verdict.of(gate, scope, checks, summary + (f"; not passed: {', '.join(named[:20])}" if named else ""))

"""A gate over a fleet session: one check per member, joined to its stream by the digest its leaf states.

The caller (observe.session.gating) verifies the session, evaluates the gate
over each proven node stream, one at a time, and hands each member here with
what its recorder observed of the devices (``DeviceTally``, filled while the
same events pass). This module never reads a file. A member that did not run,
or whose stream is not proven, is ``inconclusive`` naming it: a session
establishes nothing about a node it has no proof of. A member proven on its
self-declared labels alone (the session declared no key for it: its spec's
``"unsigned": true``) is ``inconclusive`` too, naming it: nothing shows its
stream came from its node's recorder.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aos import kinds

if TYPE_CHECKING:
    from aos.event import Event
    from gates.verdict import Check, Verdict

__all__ = ["DeviceTally", "Entry", "LevelCheck", "MemberEvidence", "distinct_check", "merge_level", "session_verdict"]

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
    the session expected of it, the gate's verdict over its stream and what its recorder observed; ``unsigned``
    when the session declared no key for it (proven on its labels alone)."""

    path: str
    kind: str
    status: str
    reason: str | None = None
    digest: str | None = None
    expected_gpus: int | None = None
    verdict: Verdict | None = None
    devices: DeviceTally | None = None
    unsigned: bool = False


#: One line of a GPU list: a GPU's UUID and the path of the member whose recorder observed it.
Entry = tuple[str, str]
#: How many GPUs seen twice a check names (the count is exact).
NAMED = 10


@dataclass
class LevelCheck:
    """One session level's GPUs, merged from its members' sorted lists: how many distinct GPUs, those seen by two
    members (named, at most ``NAMED``, with the exact count), and where its committed list differs from them."""

    where: str
    gpus: int = 0
    shared: list[str] = field(default_factory=list)
    shared_count: int = 0
    differs: str | None = None


def merge_level(where: str, cursors: Iterable[Iterator[Entry]], committed: Iterator[Entry] | None) -> LevelCheck:
    """Merge one level's members' GPU lists, each sorted by (UUID, path), one cursor per member (memory: the
    fan-out, never the fleet); a GPU listed by two cursors is shared (one listed twice inside one cursor was named
    at that member's own level). ``committed``, when given, is the level's own sealed list: it must be exactly the
    merge (the first difference is named)."""
    out = LevelCheck(where)
    at = f"{where}/" if where else ""
    tagged = [_tagged(c, i) for i, c in enumerate(cursors)]
    first: tuple[str, str, int] | None = None
    for line, (uuid, path, child) in enumerate(heapq.merge(*tagged), 1):
        if first is None or first[0] != uuid:
            first = (uuid, path, child)
            out.gpus += 1
        elif child != first[2]:
            out.shared_count += 1
            if len(out.shared) < NAMED:
                out.shared.append(f"{uuid} by {at}{first[1]} and {at}{path}")
        if committed is not None and out.differs is None:
            sealed = next(committed, None)
            if sealed != (uuid, path):
                out.differs = f"line {line} lists {sealed!r}, its members' streams {(uuid, path)!r}"
    if committed is not None and out.differs is None:
        extra = next(committed, None)
        if extra is not None:
            out.differs = f"it lists {extra!r} after every GPU its members' streams observed"
    return out


def _tagged(cursor: Iterator[Entry], child: int) -> Iterator[tuple[str, str, int]]:
    for uuid, path in cursor:
        yield uuid, path, child


def distinct_check(levels: Iterable[LevelCheck]) -> Check | None:
    """``devices-distinct`` from every level's merge (the top level first): fail when a committed list differs from
    its members' streams or a GPU was observed by two members; None when no GPU was observed at all."""
    from gates.verdict import Check

    levels = list(levels)  # one small record per session level
    differs = [f"{lv.where or 'the session'}: {lv.differs}" for lv in levels if lv.differs]
    shared = [s for lv in levels for s in lv.shared]
    count = sum(lv.shared_count for lv in levels)
    if differs:
        return Check(
            DISTINCT,
            "fail",
            "a session's GPU list is not what its members' streams observed: " + "; ".join(differs[:NAMED]),
        )
    if count:
        more = f" (and {count - len(shared[:NAMED])} more)" if count > len(shared[:NAMED]) else ""
        return Check(DISTINCT, "fail", "a GPU was observed by two members: " + "; ".join(shared[:NAMED]) + more)
    top = levels[0].gpus if levels else 0
    if not top:
        return None
    return Check(DISTINCT, "pass", f"{top} GPUs, each observed by one member")


def _member_check(m: MemberEvidence) -> Check | None:
    """The check of one member: inconclusive when not proven, or proven without a declared key; else the gate's
    verdict over its stream and its GPU count against the expected set. A proven sub-session signed by its
    declared key has none (its members are checked)."""
    from gates.verdict import Check

    name = f"member:{m.path}"
    if m.status != "proven":
        return Check(name, "inconclusive", f"{m.status}: {m.reason}")
    if m.unsigned:
        return Check(
            name,
            "inconclusive",
            "unsigned: the session declared no key for it (its spec's unsigned: true), so its stream names this "
            "session and member by its own labels only: nothing shows it came from its recorder",
        )
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


def session_verdict(
    gate: str,
    scope: str,
    members: Iterable[MemberEvidence],
    levels: Callable[[], Iterable[LevelCheck]] | None = None,
) -> Verdict:
    """Return the session's verdict: one check per member (a proven sub-session none), and ``devices-distinct``
    (no GPU observed by two members' recorders). Every status combines as ``gates.verdict.combine`` does.

    ``levels``, called once every member has passed, gives each session level's merge (``merge_level``: the
    caller's cursors over the sealed GPU lists, memory bounded by the fan-out); without it the members' tallies
    are merged here as one level (memory: the members given)."""
    from gates.verdict import Verdict

    checks: list[Check] = []
    tallies: list[Iterator[Entry]] = []
    for m in members:
        check = _member_check(m)
        if check is not None:
            checks.append(check)
        if levels is None and m.devices is not None and m.devices.uuids:
            tallies.append(iter([(uuid, m.path) for uuid in sorted(m.devices.uuids)]))
    distinct = distinct_check(levels() if levels is not None else [merge_level("", tallies, None)])
    if distinct is not None:
        checks.append(distinct)
    v = Verdict.of(gate, scope, checks)
    named = [c.name.removeprefix("member:") for c in checks if c.status != "pass"]
    summary = f"{v.verdict} (scope {scope}): {len(checks) - len(named)}/{len(checks)} checks passed"
    return Verdict.of(gate, scope, checks, summary + (f"; not passed: {', '.join(named[:20])}" if named else ""))

"""A gate over a session, from its folder: ``alpha observe session gate DIR --gate NAME``.

The session is verified first (observe.session.verify: every member proven,
did not run, or not proven, each proven stream matching its leaf and signed by
the key the session declared for it; one declared without a key is named
unsigned and inconclusive); then the
gate is evaluated over each proven node stream, one stream at a time, its
devices tallied in the same pass, and gates.session composes the members into
one verdict. ``devices-distinct`` is checked level by level: each session
level's members' sorted GPU lists (a node's from its stream, a sub-session's
its sealed ``gpus`` file) merged with one cursor per member, and the level's
own sealed list checked against the merge (observe.session.gpus). Memory holds
one node stream's evidence at a time, the members' short results and, on each
level of the current path, its nodes' GPU entries: the fan-out, not the fleet.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aos.signing import Verifier
    from gates.language import Gate
    from gates.session import LevelCheck, MemberEvidence
    from gates.verdict import Verdict
    from observe.session.verify import MemberReport

__all__ = ["gate_session"]


def gate_session(directory: Path, gate: Gate, key: Verifier | None = None) -> Verdict:
    """Return ``gate``'s verdict over the session in ``directory``; raise the session's own ``Refusal``."""
    from gates.session import session_verdict
    from observe.session.verify import verify_session

    report = verify_session(directory, key)
    levels = _Levels(directory)

    def members() -> Iterator[MemberEvidence]:
        for m in report.members:
            ev = _evidence(m, gate)
            levels.add(m, ev)
            yield ev

    return session_verdict(gate.name, gate.scope, members(), levels.finish)


@dataclass
class _Level:
    """One session level while its members pass: its folder, each proven member's GPU source (a node's sorted
    entries, or a sub-session's name: its sealed list), and whether every member it sealed as proven still is."""

    path: str
    directory: Path
    sources: list[tuple[str, Any]] = field(default_factory=list)
    whole: bool = True


class _Levels:
    """The session levels on the current path (members arrive depth first); each is merged when it ends, by
    ``gates.session.merge_level``: one cursor per member, its own sealed list checked against the merge. Memory:
    the fan-out's node entries on each level of the path."""

    def __init__(self, directory: Path) -> None:
        self.stack = [_Level("", directory)]
        self.done: list[LevelCheck] = []

    def add(self, m: MemberReport, ev: MemberEvidence) -> None:
        from observe.session import layout

        parent, _, name = m.path.rpartition("/")
        while len(self.stack) > 1 and self.stack[-1].path != parent:
            self._close(self.stack.pop())
        level = self.stack[-1]
        if m.status != "proven":
            level.whole = level.whole and m.sealed
        elif m.kind == "session":
            level.sources.append(("session", name))
            self.stack.append(_Level(m.path, layout.sub_session(level.directory, name)))
        else:
            uuids = sorted(ev.devices.uuids) if ev.devices is not None else []
            level.sources.append(("stream", [(uuid, name) for uuid in uuids]))

    def finish(self) -> list[LevelCheck]:
        """Merge the levels still open; return every level's check, the top one first."""
        while self.stack:
            self._close(self.stack.pop())
        return [self.done[-1], *self.done[:-1]]

    def _close(self, level: _Level) -> None:
        from gates.session import merge_level
        from observe.session import layout
        from observe.session.gpus import lines, sub_entries

        cursors = [
            sub_entries(level.directory, source) if kind == "session" else iter(source)
            for kind, source in level.sources
        ]
        sealed = layout.gpus(level.directory)
        committed = lines(sealed) if level.whole and sealed.exists() else None
        self.done.append(merge_level(level.path, cursors, committed))


def _evidence(m: MemberReport, gate: Gate) -> MemberEvidence:
    """One member's evidence: for a proven node stream, the gate over its events and its devices."""
    from aos.reader import StreamFile
    from gates.evaluation import evaluate_with_evidence, with_damage
    from gates.session import DeviceTally, MemberEvidence

    base = MemberEvidence(m.path, m.kind, m.status, m.reason, m.digest, m.gpus, unsigned=m.unsigned)
    if m.status != "proven" or m.kind != "stream" or m.stream is None:
        return base
    tally = DeviceTally()
    with StreamFile(m.stream) as f:
        events: Iterator = tally.watch(f.events())  # type: ignore[type-arg]
        v, ev = evaluate_with_evidence(gate, events)
        for _ in events:  # an evaluation that stopped early: the tally sees every event
            pass
        verdict = v if ev is None else with_damage(v, f.damage)
    return MemberEvidence(m.path, m.kind, m.status, m.reason, m.digest, m.gpus, verdict, tally, m.unsigned)

"""A gate over a session, from its folder: ``alpha observe session gate DIR --gate NAME``.

The session is verified first (observe.session.verify: every member proven,
did not run, or not proven, each proven stream matching its leaf); then the
gate is evaluated over each proven node stream, one stream at a time, its
devices tallied in the same pass, and gates.session composes the members into
one verdict. Memory holds one node stream's evidence at a time, the members'
short results and the GPU identities seen (for ``devices-distinct``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aos.signing import Verifier
    from gates.language import Gate
    from gates.session import MemberEvidence
    from gates.verdict import Verdict
    from observe.session.verify import MemberReport

__all__ = ["gate_session"]


def gate_session(directory: Path, gate: Gate, key: Verifier | None = None) -> Verdict:
    """Return ``gate``'s verdict over the session in ``directory``; raise the session's own ``Refusal``."""
    from gates.session import session_verdict
    from observe.session.verify import verify_session

    report = verify_session(directory, key)
    return session_verdict(gate.name, gate.scope, (_evidence(m, gate) for m in report.members))


def _evidence(m: MemberReport, gate: Gate) -> MemberEvidence:
    """One member's evidence: for a proven node stream, the gate over its events and its devices."""
    from aos.reader import StreamFile
    from gates.evaluation import evaluate_with_evidence, with_damage
    from gates.session import DeviceTally, MemberEvidence

    base = MemberEvidence(m.path, m.kind, m.status, m.reason, m.digest, m.gpus)
    if m.status != "proven" or m.kind != "stream" or m.stream is None:
        return base
    tally = DeviceTally()
    with StreamFile(m.stream) as f:
        events: Iterator = tally.watch(f.events())  # type: ignore[type-arg]
        v, ev = evaluate_with_evidence(gate, events)
        for _ in events:  # an evaluation that stopped early: the tally sees every event
            pass
        verdict = v if ev is None else with_damage(v, f.damage)
    return MemberEvidence(m.path, m.kind, m.status, m.reason, m.digest, m.gpus, verdict, tally)
